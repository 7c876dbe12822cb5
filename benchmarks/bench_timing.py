"""Timing-model benchmark: SimPy share of wall time, end-to-end lookups/s vs the bare engine.

    python benchmarks/bench_timing.py                 # quickstart x10 (400 batches)
    python benchmarks/bench_timing.py --scale 2       # shorter
    python benchmarks/bench_timing.py --replay-cache  # also: replay vs replay-cache read

For each design: the wall time of the policy pass it is priced from (run once and shared
by designs with the same policy; each design's rate counts it in full), of its SimPy run,
the SimPy share, and end-to-end lookups simulated per second (trace accesses / (policy +
SimPy time)). The bare engine is `run_cache` of the
same policy over the same trace. Targets (issue 4): SimPy under 10% of wall time; the
end-to-end rate within 2x of the bare engine.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from scratchpipe_sim.config import load_config
from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.timing import build_trace, simulate
from scratchpipe_sim.timing.designs import design_params

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    ap.add_argument("--scale", type=float, default=10.0, help="x the config's num_batches")
    ap.add_argument("--design", action="append", dest="designs")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--replay-cache", action="store_true",
                    help="time each policy's replay, then reading it from the replay cache")
    args = ap.parse_args()
    base = load_config(args.config)
    n = int(round(base.model.num_batches * args.scale))
    cfg = load_config(args.config, [f"model.num_batches={n}"])
    t0 = time.perf_counter()
    trace = build_trace(cfg)
    gen_s = time.perf_counter() - t0
    # warm the JIT caches on a tiny run so compile time is not measured
    simulate(load_config(args.config, ["model.num_batches=12", "model.warmup_batches=2",
                                       "model.batch_size=64"]), args.designs)
    t0 = time.perf_counter()
    rows = simulate(cfg, args.designs, trace=trace)
    total_s = time.perf_counter() - t0
    bare: dict[str, float] = {}
    out = []
    for r in rows:
        pol = r["policy"]
        if pol not in ("none", "all-resident") and pol not in bare:
            params = ({"lookahead": design_params(cfg, "scratchpipe").lookahead}
                      if pol == "scratchpipe" else {})
            res = run_cache(trace, pol, r["capacity_rows"], **params)
            bare[pol] = trace.num_accesses / res.wall_s
        wall = r["policy_wall_s"] + r["simpy_wall_s"]
        out.append({
            "design": r["design"], "policy": pol, "policy_s": round(r["policy_wall_s"], 3),
            "simpy_s": round(r["simpy_wall_s"], 4),
            "simpy_share": round(r["simpy_wall_s"] / wall, 4) if wall else 0.0,
            "e2e_lookups_per_s": trace.num_accesses / wall if wall else float("inf"),
            "bare_lookups_per_s": bare.get(pol),
        })
    summary = {"batches": n, "accesses": trace.num_accesses, "trace_gen_s": round(gen_s, 2),
               "simulate_s": round(total_s, 2),
               "simpy_share_total": round(sum(r["simpy_wall_s"] for r in rows) / total_s, 4),
               "designs": out}
    if args.replay_cache:
        summary["replay_cache"] = replay_cache_times(trace, rows, cfg)
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    for pol, (replay_s, read_s, size) in summary.get("replay_cache", {}).items():
        print(f"replay cache {pol:12s} replay {replay_s:7.2f} s  read {read_s:7.4f} s  "
              f"entry {size / 1e6:6.2f} MB")
    print(f"{n} batches, {trace.num_accesses:,} lookups; trace generated in {gen_s:.1f} s; "
          f"simulate() {total_s:.1f} s, SimPy share {summary['simpy_share_total']:.2%}")
    print(f"{'design':14s} {'policy':12s} {'policy_s':>9s} {'simpy_s':>8s} {'simpy%':>7s} "
          f"{'e2e Mlookups/s':>15s} {'bare Mlookups/s':>16s}")
    for r in out:
        bare_s = f"{r['bare_lookups_per_s'] / 1e6:16.1f}" if r["bare_lookups_per_s"] else \
            f"{'-':>16s}"
        print(f"{r['design']:14s} {r['policy']:12s} {r['policy_s']:9.2f} {r['simpy_s']:8.3f} "
              f"{r['simpy_share']:7.2%} {r['e2e_lookups_per_s'] / 1e6:15.1f} {bare_s}")


def replay_cache_times(trace, rows, cfg) -> dict[str, tuple[float, float, int]]:
    """(replay s, cached read s, entry bytes) of each policy, in a private cache folder."""
    from scratchpipe_sim.policies import replay_cache as rc

    out = {}
    t0 = time.perf_counter()
    trace.fingerprint()  # once per trace (remembered), not counted per policy
    print(f"trace fingerprint (sha256 of the trace arrays): {time.perf_counter() - t0:.3f} s")
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        os.environ["SCRATCHPIPE_CACHE_DIR"] = tmp
        for r in rows:
            pol = r["policy"]
            if pol in ("none", "all-resident") or pol in out:
                continue
            params = ({"lookahead": design_params(cfg, "scratchpipe").lookahead}
                      if pol == "scratchpipe" else {})
            t0 = time.perf_counter()
            rc.policy_columns(trace, pol, r["capacity_rows"], **params)
            t1 = time.perf_counter()
            rc.policy_columns(trace, pol, r["capacity_rows"], **params)
            t2 = time.perf_counter()
            size = sum(p.stat().st_size for p in rc.cache_folder().glob("*" + rc.SUFFIX))
            out[pol] = (t1 - t0, t2 - t1, size - sum(v[2] for v in out.values()))
    return out


if __name__ == "__main__":
    main()
