"""Wall time of one lru replay as K time ranges (forked processes, a Dask LocalCluster)
against the full replay, on a memory-mapped `.sptrace`. Not a test: run it by hand and
record the output in docs/performance.md ("Time ranges").

    python benchmarks/bench_time_ranges.py                       # 64M lookups, K = 2 and 4
    python benchmarks/bench_time_ranges.py --accesses 8000000    # quick run
    python benchmarks/bench_time_ranges.py --dask                # also a LocalCluster

Workload: bounded Zipf(alpha) ranks permuted onto ids of one table, pooling 1, batches of
`--batch-size`; the cache holds `--capacity` of the rows. Every ranged replay is checked
bit for bit against the full one (each range proven exact by its overlap). Wall times
(the machine is shared: `--repeat` keeps the best); the full replay runs in this process,
the ranges in `--jobs` forked processes (or Dask workers), the overlap plan in this
process (its time is in the ranged figure).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from scratchpipe_sim.policies.engine import make_policy, replay_columns
from scratchpipe_sim.policies.time_ranges import forked_mapper, plan_ranges, replay_ranges
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.io import open_trace
from scratchpipe_sim.traces.store import write_trace


def zipf_ids(n: int, rows: int, alpha: float, seed: int) -> np.ndarray:
    """Bounded Zipf ranks by inverse CDF, permuted onto ids (int32), in blocks."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, rows + 1) ** alpha)
    cdf /= cdf[-1]
    perm = rng.permutation(rows).astype(np.int32)
    out = np.empty(n, np.int32)
    step = 1 << 22
    for i in range(0, n, step):
        m = min(step, n - i)
        out[i:i + m] = perm[np.searchsorted(cdf, rng.random(m))]
    return out


def best(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accesses", type=int, default=64_000_000)
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--capacity", type=float, default=0.05, help="fraction of the rows")
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--ranges", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dask", action="store_true", help="also a Dask LocalCluster")
    ap.add_argument("--folder", type=Path, default=None, help="where the .sptrace goes")
    args = ap.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="bench-ranges-"))
    path = folder / f"zipf_{args.accesses}.sptrace"
    if not path.exists():
        t0 = time.perf_counter()
        ids = zipf_ids(args.accesses, args.rows, args.alpha, 1)
        write_trace(Trace.single_table(ids, args.rows, args.batch_size), path)
        del ids
        print(f"trace written in {time.perf_counter() - t0:.1f} s: {path}")
    trace = open_trace(path)
    cap = max(1, int(args.capacity * args.rows))
    print(f"{trace.num_accesses / 1e6:.1f} M lookups, {trace.num_batches} batches of "
          f"{trace.batch_size}, {args.rows} rows, lru capacity {cap} "
          f"(cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    replay_ranges(Trace.single_table(np.arange(100, dtype=np.int64), 100, 10), "lru", 10, 2)
    full_s, (full, _) = best(lambda: replay_columns(trace, make_policy("lru", cap,
                                                                       trace.total_rows)),
                             args.repeat)
    print(f"full replay              {full_s:7.2f} s  "
          f"{trace.num_accesses / full_s / 1e6:6.1f} M lookups/s")
    mappers = [("process", forked_mapper(args.jobs))]
    if args.dask:
        from scratchpipe_sim.experiments.range_tasks import dask_mapper

        mappers.append(("dask", dask_mapper(args.jobs)))
    for k in args.ranges:
        plan_s, plan = best(lambda k=k: plan_ranges(trace, "lru", cap, k), 1)
        over = sum(r.overlap_batches for r in plan) / max(1, trace.num_batches)
        for name, mapper in mappers:
            s, got = best(lambda k=k, m=mapper: replay_ranges(trace, "lru", cap, k,
                                                              mapper=m), args.repeat)
            same = got.proven and all(np.array_equal(got.cols[c], full[c]) for c in full)
            print(f"K={k} {name:<8} x{args.jobs}     {s:7.2f} s  speedup {full_s / s:4.2f}x  "
                  f"(overlap {100 * over:.1f}% of the batches, plan {plan_s:.2f} s, "
                  f"equal to the full replay: {same})")


if __name__ == "__main__":
    main()
