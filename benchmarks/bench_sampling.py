"""Sampled runs against the exact run (issue 41; docs/sampling.md): per design, the worst
salt's error of the hit ratio (points) and of PCIe bytes per sample (H2D and D2H, % of
exact), at R = 1% and 10%, three salts, with the wall time of each run.

    python benchmarks/bench_sampling.py                       # ~50M lookups, zipf + meta-2022
    python benchmarks/bench_sampling.py --lookups 100e6 --rates 0.01 0.1 --salts 3
    python benchmarks/bench_sampling.py --json out.json       # the figures as JSON too
    python benchmarks/bench_sampling.py --trace Z.sptrace --rates 0.01 --no-exact --jobs 2

`--trace`: a `.sptrace` of the quickstart's tables (e.g. `trace gen --rows 1000000 --tables
8 --batch-size 2048 --pooling 20 --batches 1525 --distribution zipf --seed 1`: 499.7M
lookups), its batches all used (a third of them the cache's warm-up), memory-mapped;
`--no-exact`: the sampled run only (no errors: its figures and times). `--jobs N`: the
salts as tasks of N forked processes, as `run --sample` makes them (default 1: one after
the other here). Each run's CPU seconds (this process's and its workers', user + system)
are printed beside its wall: on a VM shared with other jobs the wall measures the load.

Each trace kind runs the quickstart's model (8 x 1M-row tables, batch 2048, pooling 20,
cache 5% of the rows) with a fixed warm-up (a third of the batches) so that the trace has
about `--lookups` lookups: zipf alpha 1.05, and the `calibrated` generator at Meta 2022's
locality (configs/traces/meta-2022.yaml); the designs: hybrid, uvm, static-cache,
lru-cache, scratchpipe (its lookahead window), bagpipe, and lru-cache over the 32-way
set-associative fbgemm-lru (set associativity). The worst salt's error is
|mean - exact| + spread (the mean +- half the range over the salts is [min, max]).
Wall times: the exact run replays every policy once (the trace already built), the
sampled run samples the trace once per salt and replays the samples (no cache read or
written: `replay_cache=False`, so each figure is a cold run's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGNS = ["hybrid", "uvm", "static-cache", "lru-cache", "scratchpipe", "bagpipe"]
FIGURES = ("hit_ratio", "pcie_h2d_bytes_per_sample", "pcie_d2h_bytes_per_sample")


def quickstart_over(batches: int, load_factor: float | None) -> dict:
    """The quickstart's config over `batches` batches, a third of them the cache's warm-up;
    `load_factor` (None: the quickstart's) the cache's share of the rows."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    warm = batches // 3
    cfg["model"].update(num_batches=batches - warm, warmup_batches=min(8, batches // 6))
    cfg["cache"]["warmup_batches"] = warm
    if load_factor is not None:
        cfg["cache"]["load_factor"] = load_factor
    cfg["designs"] = DESIGNS
    return cfg


def config(kind: str, lookups: float, load_factor: float | None = None) -> dict:
    """The quickstart with `lookups` lookups (warm-up a third of the batches); `load_factor`:
    the cache's share of the rows instead of the quickstart's 5% (meta-2022's 3-batch
    window pins more than 5% of the rows past ~50M lookups: scratchpipe then refuses)."""
    per_batch = 2048 * 20 * 8
    cfg = quickstart_over(max(6, int(lookups // per_batch)), load_factor)
    if kind == "meta-2022":
        cfg["trace"] = {"preset": "meta-2022"}
    if kind == "zipf-fbgemm-lru":
        cfg["cache"]["policy"] = "fbgemm-lru"
        cfg["designs"] = ["lru-cache"]
    return cfg


def trace_config(trace: Path, load_factor: float | None = None) -> dict:
    """The quickstart's model on every batch of `trace` (a third of them the warm-up)."""
    batches = int(json.loads((trace / "manifest.json").read_text())["num_batches"])
    cfg = quickstart_over(batches, load_factor)
    cfg["trace"] = {"path": str(trace.resolve())}
    return cfg


def cpu_s() -> float:
    """User + system seconds of this process and its waited-for children (forked salts)."""
    import resource

    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def errors(exact: dict, sampled: dict) -> dict:
    """Worst salt's error: hit ratio in points, PCIe bytes per sample in % of exact."""
    out = {}
    for f in FIGURES:
        worst = abs(sampled[f] - exact[f]) + sampled[f"{f}_spread"]
        out[f] = 100 * worst if f == "hit_ratio" else (
            100 * worst / exact[f] if exact[f] else 0.0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lookups", type=float, default=50e6)
    ap.add_argument("--rates", type=float, nargs="+", default=[0.01, 0.1])
    ap.add_argument("--salts", type=int, default=3)
    ap.add_argument("--kinds", nargs="+", default=["zipf", "meta-2022", "zipf-fbgemm-lru"])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--load-factor", type=float, default=None,
                    help="cache share of the rows (default: the quickstart's 0.05)")
    ap.add_argument("--trace", type=Path, default=None,
                    help="a .sptrace of the quickstart's tables (instead of --kinds)")
    ap.add_argument("--no-exact", action="store_true", help="the sampled runs only")
    ap.add_argument("--jobs", type=int, default=1,
                    help="salts as tasks of N forked processes (run --sample's executor)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.policies.time_ranges import forked_mapper
    from scratchpipe_sim.timing.runner import simulate
    from scratchpipe_sim.timing.trace_setup import build_trace

    mapper = forked_mapper(args.jobs) if args.jobs > 1 else None
    results = []
    kinds = [str(args.trace)] if args.trace is not None else args.kinds
    for kind in kinds:
        cfg = load_config(config(kind, args.lookups, args.load_factor) if args.trace is None
                          else trace_config(args.trace, args.load_factor))
        t0 = time.perf_counter()
        trace = build_trace(cfg, cache=False)
        build_s = time.perf_counter() - t0
        if args.no_exact:
            exact, exact_s = None, float("nan")
        else:
            t0, c0 = time.perf_counter(), cpu_s()
            exact = simulate(cfg, trace=trace, replay_cache=False, jobs=args.jobs)
            exact_s = time.perf_counter() - t0
            print(f"exact run: wall {exact_s:.1f} s, CPU {cpu_s() - c0:.1f} s", flush=True)
        print(f"{kind}: {trace.num_accesses / 1e6:.1f}M lookups, built in {build_s:.1f} s",
              flush=True)
        for rate in args.rates:
            t0, c0 = time.perf_counter(), cpu_s()
            sampled = simulate(cfg, trace=trace, sample=rate, replay_cache=False,
                               jobs=args.jobs, salt_mapper=mapper)
            wall = time.perf_counter() - t0
            print(f"  R={rate:g}, {args.salts} salts: wall {wall:.1f} s, CPU "
                  f"{cpu_s() - c0:.1f} s", flush=True)
            if exact is None:
                for s in sampled:
                    print(f"  {s['design']:13s} hit {s['hit_ratio']:.4f}+-"
                          f"{s['hit_ratio_spread']:.4f}  H2D/sample "
                          f"{s['pcie_h2d_bytes_per_sample']:.1f}", flush=True)
                continue
            for e, s in zip(exact, sampled, strict=True):
                err = errors(e, s)
                results.append({"trace": kind, "lookups": trace.num_accesses, "rate": rate,
                                "salts": args.salts, "design": e["design"],
                                "policy": e["policy"], "exact_s": exact_s, "sampled_s": wall,
                                **{f"exact_{f}": e[f] for f in FIGURES},
                                **{f"err_{f}": v for f, v in err.items()}})
                print(f"  R={rate:<5g} {e['design']:13s} hit {e['hit_ratio']:.4f} -> "
                      f"{s['hit_ratio']:.4f}+-{s['hit_ratio_spread']:.4f}  worst: hit "
                      f"{err['hit_ratio']:.3f} pt, H2D {err['pcie_h2d_bytes_per_sample']:.2f}"
                      f"%, D2H {err['pcie_d2h_bytes_per_sample']:.2f}%  ({wall:.1f} s)",
                      flush=True)
    print("\n| trace | lookups | R | design | exact hit | worst hit err (pt) | worst H2D err "
          "(%) | worst D2H err (%) | exact s | sampled s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['trace']} | {r['lookups'] / 1e6:.0f}M | {r['rate']:g} | {r['design']} | "
              f"{r['exact_hit_ratio']:.3f} | {r['err_hit_ratio']:.2f} | "
              f"{r['err_pcie_h2d_bytes_per_sample']:.2f} | "
              f"{r['err_pcie_d2h_bytes_per_sample']:.2f} | {r['exact_s']:.0f} | "
              f"{r['sampled_s']:.1f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
