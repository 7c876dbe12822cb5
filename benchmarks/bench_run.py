"""End-to-end CLI benchmark (issue 15): start-up, `run` lookups/s and SimPy share, fig2's
sweep against one of its points. Every figure is the wall time of a fresh
`scratchpipe-sim` process, with its peer measured in the same run.

    python benchmarks/bench_run.py                  # everything (~10 min on 2 loaded cores)
    python benchmarks/bench_run.py --only startup   # or: run, fig2
    python benchmarks/bench_run.py --repeat 3       # best of 3 per figure
    python benchmarks/bench_run.py --clock cpu      # CPU seconds of each command instead
    python benchmarks/bench_run.py --tree /tmp/old  # time another checkout's package

- startup: `scratchpipe-sim --help` and `cache` over a 200k-access trace, against the peer
  `build_parser()` with every subcommand imported (what every command paid before the CLI
  imported only the chosen one).
- run: `run configs/quickstart.yaml` with an empty replay/trace cache and `--no-cache`
  (cold: generate the trace, replay every policy), then twice with a warm cache (the
  second run is the figure). Lookups/s = every design's lookups (batches x lookups per
  batch, timed batches) added up / the command's wall time (target >= 20M/s); SimPy
  share = the designs' `simpy_wall_s` added up / wall (target < 10%).
- jobs: `run configs/quickstart.yaml --no-cache --no-timeline` with `--jobs 1` against
  `--jobs N` (N = the usable cores), interleaved pairs, median of each; design-lookups/s =
  the timed lookups of every design / wall (issue 26's figure; target >= 30M/s on 2 cores).
- fig2: `sweep experiments/fig2_gpu_memory_speed.yaml` (12 points) against the same
  experiment cut to its first point, each with an empty then a warm cache folder (target:
  12 points <= 2x one point).

The compile cache is warm throughout: NUMBA_CACHE_DIR stays the user's (a first pass
fills it); each measurement gets its own SCRATCHPIPE_CACHE_DIR below a temporary folder.

`--clock cpu` reports each command's CPU seconds (user + system of the child process)
instead of wall seconds: on a core shared with other jobs, wall time measures the
neighbours too, CPU time much less. `--tree DIR` puts DIR first on PYTHONPATH (an older
checkout from `git archive`) for before/after figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "import sys; from scratchpipe_sim.cli import main; "
       "sys.exit(main(sys.argv[1:]))"]
FULL_PARSER = [sys.executable, "-c", "from scratchpipe_sim.cli import build_parser; "
               "build_parser()"]


#: "wall" or "cpu" (set from --clock); TREE: a checkout to import the package from, or None
CLOCK = "wall"
TREE: str | None = None


def _child_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], cache: Path | None, repeat: int = 1) -> float:
    """Best wall (or CPU, `--clock cpu`) seconds of `repeat` runs of `cmd` (stdout
    discarded; fails loudly)."""
    env = dict(os.environ)
    if cache is not None:
        env["SCRATCHPIPE_CACHE_DIR"] = str(cache)
    if TREE:
        env["PYTHONPATH"] = TREE + os.pathsep + env.get("PYTHONPATH", "")
    best = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), _child_cpu_s()
        # cwd is sys.path[0] of `python -c`: the tree's root, so its package is imported
        p = subprocess.run(cmd, cwd=TREE or ROOT, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        spent = time.perf_counter() - t0 if CLOCK == "wall" else _child_cpu_s() - c0
        best = min(best, spent)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return best


def startup(tmp: Path, repeat: int) -> dict:
    ids = tmp / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(0, 100_000, 200_000))
    cache = [*CLI, "cache", "--trace", str(ids), "--policy", "lru", "--capacity", "1000",
             "--batch-size", "64"]
    timed(cache, None)  # compile cache warm (twice: a policy edited meanwhile recompiles)
    timed(cache, None)
    out = {"help_s": timed([*CLI, "--help"], None, repeat),
           "version_s": timed([*CLI, "--version"], None, repeat),
           "all_subcommands_imported_s": timed(FULL_PARSER, None, repeat),
           "cache_cmd_s": timed(cache, None, repeat)}
    out["help_vs_all_imported"] = out["help_s"] / out["all_subcommands_imported_s"]
    return out


def quickstart_lookups(config: Path) -> int:
    from scratchpipe_sim.config import load_config

    cfg = load_config(config)
    m = cfg.model
    return len(cfg.designs) * m.num_batches * m.batch_size * sum(m.poolings)


def run_bench(tmp: Path, repeat: int) -> dict:
    config = ROOT / "configs" / "quickstart.yaml"
    lookups = quickstart_lookups(config)
    best: dict[str, float] = {}
    # compile cache warm (not timed)
    timed([*CLI, "run", str(config), "--out", str(tmp / "run-warmup"), "-q", "--no-timeline"],
          tmp / "run-cache-warmup")
    for k in range(repeat):
        cache = tmp / f"run-cache-{k}"
        for tag, extra in (("cold_no_cache", ["--no-cache"]), ("first_fills_cache", []),
                           ("warm", [])):
            out = tmp / f"run-{tag}-{k}"
            t = timed([*CLI, "run", str(config), "--out", str(out), "-q", *extra], cache)
            rows = json.loads((out / "results.json").read_text())
            simpy = sum(r["simpy_wall_s"] for r in rows)
            if t < best.get(f"{tag}_wall_s", float("inf")):
                best[f"{tag}_wall_s"] = t
                best[f"{tag}_simpy_share"] = simpy / t
    res = {"lookups": lookups, **best}
    for tag in ("cold_no_cache", "first_fills_cache", "warm"):
        res[f"{tag}_Mlookups_per_s"] = lookups / best[f"{tag}_wall_s"] / 1e6
    res["warm_vs_cold"] = best["cold_no_cache_wall_s"] / best["warm_wall_s"]
    return res


def jobs_bench(tmp: Path, repeat: int) -> dict:
    from scratchpipe_sim.traces.forked import usable_cores

    config = ROOT / "configs" / "quickstart.yaml"
    lookups = quickstart_lookups(config)
    n = usable_cores()
    base = [*CLI, "run", str(config), "-q", "--no-timeline", "--no-cache"]
    timed([*base, "--out", str(tmp / "jobs-warmup")], tmp / "jobs-cache")  # compile cache
    times: dict[int, list[float]] = {1: [], n: []}
    for k in range(max(repeat, 3)):  # interleaved pairs: the load hits both sides alike
        for j in ((1, n) if k % 2 == 0 else (n, 1)):
            times[j].append(timed([*base, "--jobs", str(j), "--out",
                                   str(tmp / f"jobs-{j}-{k}")], tmp / "jobs-cache"))
    one, many = float(np.median(times[1])), float(np.median(times[n]))
    return {"lookups": lookups, "cores": n, "jobs_1_s": one, f"jobs_{n}_s": many,
            "speedup": one / many, "jobs_1_Mlookups_per_s": lookups / one / 1e6,
            f"jobs_{n}_Mlookups_per_s": lookups / many / 1e6}


def one_point(exp: Path, tmp: Path) -> tuple[Path, Path]:
    """fig2 with absolute includes, and the same cut to its first point."""
    doc = yaml.safe_load(exp.read_text())
    doc["include"] = str((exp.parent / doc["include"]).resolve())
    full = tmp / exp.name
    full.write_text(yaml.safe_dump(doc))
    one = dict(doc, name=doc["name"] + "_one_point")
    one["sweep"] = {mode: {k: v[:1] for k, v in axes.items()}
                    for mode, axes in doc["sweep"].items()}
    single = tmp / ("one_" + exp.name)
    single.write_text(yaml.safe_dump(one))
    return full, single


def fig2_bench(tmp: Path, repeat: int) -> dict:
    full, single = one_point(ROOT / "experiments" / "fig2_gpu_memory_speed.yaml", tmp)
    res: dict[str, float] = {}
    # compile cache warm for every kernel the sweep uses (not timed)
    timed([*CLI, "sweep", str(single), "--out", str(tmp / "fig2-warmup"), "-q"],
          tmp / "fig2-cache-warmup")
    for k in range(repeat):
        for tag, exp in (("one_point", single), ("twelve_points", full)):
            cache = tmp / f"fig2-cache-{tag}-{k}"
            for state in ("empty", "warm"):
                t = timed([*CLI, "sweep", str(exp), "--out", str(tmp / f"{tag}-{state}-{k}"),
                           "-q"], cache)
                key = f"{tag}_{state}_s"
                res[key] = min(res.get(key, float("inf")), t)
    for state in ("empty", "warm"):
        res[f"ratio_{state}"] = res[f"twelve_points_{state}_s"] / res[f"one_point_{state}_s"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("startup", "run", "jobs", "fig2"), action="append")
    ap.add_argument("--repeat", type=int, default=1, help="best of N per figure")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall seconds, or CPU seconds of each command (shared cores)")
    ap.add_argument("--tree", help="a source tree to import scratchpipe_sim from instead")
    args = ap.parse_args()
    global CLOCK, TREE
    CLOCK, TREE = args.clock, (str(Path(args.tree).resolve()) if args.tree else None)
    parts = args.only or ["startup", "run", "jobs", "fig2"]
    load0 = os.getloadavg()[0]
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench_run_") as d:
        tmp = Path(d)
        for name, fn in (("startup", startup), ("run", run_bench), ("jobs", jobs_bench),
                         ("fig2", fig2_bench)):
            if name in parts:
                out[name] = fn(tmp, args.repeat)
    out["load_average"] = {"start": load0, "end": os.getloadavg()[0]}
    out["clock"], out["tree"] = CLOCK, TREE or str(ROOT)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f}; best of {args.repeat}; "
          f"{CLOCK} seconds; package from {TREE or ROOT}")
    if "startup" in out:
        s = out["startup"]
        print(f"startup: --help {s['help_s']:.2f} s, --version {s['version_s']:.2f} s, "
              f"cache (200k accesses) {s['cache_cmd_s']:.2f} s; every subcommand imported "
              f"(peer) {s['all_subcommands_imported_s']:.2f} s -> --help at "
              f"{s['help_vs_all_imported']:.2f}x of it")
    if "run" in out:
        r = out["run"]
        print(f"run quickstart ({r['lookups'] / 1e6:.1f}M lookups, all designs):")
        for tag in ("cold_no_cache", "first_fills_cache", "warm"):
            print(f"  {tag:18s} {r[f'{tag}_wall_s']:6.2f} s  "
                  f"{r[f'{tag}_Mlookups_per_s']:5.1f} M lookups/s  SimPy "
                  f"{100 * r[f'{tag}_simpy_share']:.1f}% of wall")
        print(f"  warm is {r['warm_vs_cold']:.1f}x faster than --no-cache "
              f"(targets: >= 20 M lookups/s, SimPy < 10%)")
    if "jobs" in out:
        j, n = out["jobs"], out["jobs"]["cores"]
        print(f"run quickstart --no-cache ({j['lookups'] / 1e6:.1f}M design-lookups): "
              f"--jobs 1 {j['jobs_1_s']:.2f} s ({j['jobs_1_Mlookups_per_s']:.1f} M/s), "
              f"--jobs {n} {j[f'jobs_{n}_s']:.2f} s ({j[f'jobs_{n}_Mlookups_per_s']:.1f} M/s)"
              f" -> {j['speedup']:.2f}x (median of interleaved runs)")
    if "fig2" in out:
        f = out["fig2"]
        for state in ("empty", "warm"):
            print(f"fig2 ({state} cache): 12 points {f[f'twelve_points_{state}_s']:.1f} s, "
                  f"one point {f[f'one_point_{state}_s']:.1f} s -> ratio "
                  f"{f[f'ratio_{state}']:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
