"""`scratchpipe-sim run CONFIG`: every design on one trace, side by side.

Prints the comparison table and writes, into a fresh results folder: results.csv (one row
per design, config values as `cfg.*` columns), results.json, resolved_config.yaml,
trace.sha256, metadata.json and timeline_<design>.json (Chrome Trace Event, for Perfetto).
A results folder is never overwritten: when `--out DIR` exists, DIR-1, DIR-2, ... is used
and the folder actually written is printed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from scratchpipe_sim import __version__, jsonout, memory_guard
from scratchpipe_sim.cli import COMMANDS
from scratchpipe_sim.config import dump_yaml, flatten, load_config
from scratchpipe_sim.errors import UserError, os_reason
from scratchpipe_sim.experiments.progress import Progress
from scratchpipe_sim.replay_cache import trace_sha256
from scratchpipe_sim.timing import DESIGNS, build_trace, simulate
from scratchpipe_sim.timing.designs import baseline_design
from scratchpipe_sim.timing.runner import check_designs

DEFAULT_OUT = Path("results")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help=COMMANDS["run"],
        description="Run each design on the same trace and print iteration time, "
                    "throughput, hit ratio, bytes moved, resource utilisation and stage "
                    "times; write CSV, JSON, timelines and the resolved config.")
    p.add_argument("config", metavar="CONFIG", help="YAML config (see configs/)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a config value by dotted path "
                   "(repeatable), e.g. --set hardware.pcie.h2d_GBps=22")
    p.add_argument("--design", dest="designs", action="append", metavar="NAME",
                   help="run only this design (repeatable, each name once; default: the "
                        f"config's designs): {', '.join(DESIGNS.names())}")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="results folder (default results/<config name>; never overwritten: "
                        "a numbered sibling is used when it exists)")
    p.add_argument("--no-timeline", action="store_true",
                   help="skip the per-design timeline JSON files")
    p.add_argument("--no-cache", action="store_true",
                   help="recompute every policy replay (and generate the trace) instead of "
                        "reading the on-disk replay and trace caches "
                        "(scratchpipe_sim.replay_cache; results are identical)")
    p.add_argument("--json", action="store_true",
                   help="print the result rows as one JSON array instead of tables")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress on stderr (default: a bar on a terminal, else a line "
                        "every $SCRATCHPIPE_PROGRESS_S seconds, 30 by default)")
    p.set_defaults(func=handle)


def fresh_dir(path: Path) -> Path:
    """`path` if it does not exist, else the first free `path-1`, `path-2`, ..."""
    if not path.exists():
        return path
    k = 1
    while (cand := path.with_name(f"{path.name}-{k}")).exists():
        k += 1
    return cand


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return str(v)
        if abs(v) >= 1e5:
            return f"{v:.4g}"
        return f"{v:.{digits}f}".rstrip("0").rstrip(".") if v else "0"
    return str(v)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                             strict=True)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


#: what each column of the main table means (printed under it).
LEGEND = (
    "iter_us, p50_us, p99_us: time per training iteration (mean, median, 99th percentile), "
    "microseconds",
    "samples/s: training samples per second",
    "speedup_vs_hybrid: hybrid's mean iteration time / this design's (higher is faster)",
    "hit: fraction of embedding lookups served from GPU memory (gpu-only 1, hybrid 0)",
    "H2D_B/smp, D2H_B/smp: PCIe bytes per sample, host-to-device and device-to-host",
    "DRAM_MB_tot, HBM_MB_tot: MB moved in CPU DRAM and GPU HBM, totals over the measured "
    "batches (not per sample)",
)


def render(results: list[dict]) -> str:
    main = [[r["design"], _fmt(r["iter_ns_mean"] / 1e3, 1), _fmt(r["iter_ns_p50"] / 1e3, 1),
             _fmt(r["iter_ns_p99"] / 1e3, 1), _fmt(r["samples_per_s"], 0),
             _fmt(r["speedup_vs_hybrid"], 2), _fmt(r["hit_ratio"], 3),
             _fmt(r["pcie_h2d_bytes_per_sample"], 1), _fmt(r["pcie_d2h_bytes_per_sample"], 1),
             _fmt(r["dram_bytes"] / 1e6, 1), _fmt(r["hbm_bytes"] / 1e6, 1)]
            for r in results]
    out = [table(main, ["design", "iter_us", "p50_us", "p99_us", "samples/s",
                        "speedup_vs_hybrid", "hit", "H2D_B/smp", "D2H_B/smp", "DRAM_MB_tot",
                        "HBM_MB_tot"])]
    measured = {r.get("measured_batches") for r in results} - {None}
    legend = list(LEGEND)
    if len(measured) == 1:
        legend[-1] += f"; {measured.pop()} measured batches"
    base = baseline_design()
    if not any(r["design"] == base for r in results):
        legend[2] = (f"speedup_vs_hybrid: '-' because {base} did not run (add --design "
                     f"{base} for speedups)")
    out[0] += "\n" + "\n".join(f"  {line}" for line in legend)
    busy_keys = sorted({k for r in results for k in r if k.startswith("busy_")})
    busy = [[r["design"]] + [_fmt(r.get(k, 0.0), 3) for k in busy_keys] for r in results]
    out.append("busy fraction: share of the measured time each resource was serving work "
               "(0 = idle, 1 = always busy)\n"
               + table(busy, ["design"] + [k[5:] for k in busy_keys]))
    stages = []
    for r in results:
        for k, v in r.items():
            if k.startswith("stage_"):
                stages.append([r["design"], k[6:-3], _fmt(v / 1e3, 2)])
    out.append("mean stage time per batch (stages overlap in pipelined designs)\n"
               + table(stages, ["design", "stage", "us"]))
    return "\n\n".join(out)


def write_results(out: Path, results: list[dict], resolved: dict, checksum: str,
                  argv_config: str, overrides: list[str]) -> None:
    flat_cfg = {f"cfg.{k}": (json.dumps(v) if isinstance(v, (list, dict)) else v)
                for k, v in flatten(resolved).items()}
    keys: list[str] = []
    for r in results:
        keys += [k for k in r if k not in keys]
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys + list(flat_cfg))
        w.writeheader()
        for r in results:
            w.writerow({**r, **flat_cfg})
    (out / "results.json").write_text(jsonout.dumps(results, indent=1))
    (out / "resolved_config.yaml").write_text(dump_yaml(resolved))
    (out / "trace.sha256").write_text(checksum + "\n")
    meta = {"config": argv_config, "overrides": overrides, "trace_sha256": checksum,
            "scratchpipe_sim": __version__, "python": platform.python_version(),
            "designs": [r["design"] for r in results]}
    (out / "metadata.json").write_text(jsonout.dumps(meta, indent=1))


def _check_unique(names: list[str], source: str | None, field: str) -> None:
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserError(f"design '{dup[0]}' given twice; expected each design once",
                        source=source, field=field)


def _make_out(path: Path) -> Path:
    """A fresh results folder (a numbered sibling when `path` exists); an unwritable place
    is a UserError before anything is simulated."""
    out = fresh_dir(path)
    try:
        out.mkdir(parents=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot create the results folder: {os_reason(e)}; expected a "
                        "writable folder path", source=str(out), field="--out") from None
    return out


def progress_callback(bar: Progress):
    """simulate()'s progress(event, design, done, total) -> the bar."""
    def cb(event: str, design: str, done: int, total: int) -> None:
        if event == "policy":
            bar.status(f"replaying the cache for {design}")
        elif event == "design":
            bar.update(1, note=f"{design} done")
    return cb


def handle(args: argparse.Namespace) -> int:
    if args.designs:
        _check_unique(list(args.designs), None, "--design")
    cfg = load_config(args.config, args.overrides)
    names = check_designs(cfg, args.designs)
    if not args.designs:
        _check_unique(names, cfg.source, "designs")
    memory_guard.check_config(cfg, source=cfg.source)  # a trace file: checked once read
    out = _make_out(args.out if args.out is not None
                    else DEFAULT_OUT / Path(args.config).stem)
    try:
        trace = build_trace(cfg, cache=not args.no_cache)
        memory_guard.check_run(trace.total_rows, trace.num_accesses, source=cfg.source,
                               field="trace.path")
        with Progress(len(names), "run", "design", quiet=args.quiet) as bar:
            results = simulate(cfg, names, timeline_dir=None if args.no_timeline else out,
                               trace=trace, progress=progress_callback(bar),
                               replay_cache=not args.no_cache)
        write_results(out, results, cfg.to_dict(), trace_sha256(trace), str(args.config),
                      list(args.overrides))
    except OSError as e:
        shutil.rmtree(out, ignore_errors=True)
        if not str(getattr(e, "filename", "") or "").startswith(str(out)):
            raise  # not our output (a bug, or an input reader's unexpected failure)
        raise UserError(f"cannot write results: {os_reason(e)}", source=str(out),
                        field="--out") from None
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # ours, just made: leave no half result
        raise
    if args.json:
        print(jsonout.dumps(results))
    else:
        print(render(results))
        print(f"\nresults: {out}", file=sys.stdout)
    return 0
