"""Throughput of every registered cache policy beside libCacheSim's LRU and Belady.

Not a test: run it by hand and record the output in docs/performance.md.

    python benchmarks/bench_policies.py                  # 10M accesses, 10M rows, 1% and 10%
    python benchmarks/bench_policies.py --accesses 1000000   # quick run
    python benchmarks/bench_policies.py --repeat 3       # best of 3 on a busy machine
    python benchmarks/bench_policies.py --batch-sizes 1  # as cache researchers compare

Workload: bounded Zipf(alpha) over `rows` ranks (P(k) ~ 1/k^alpha, sampled exactly by
inverse CDF), ranks randomly permuted onto ids, as FBGEMM's TBE benchmark does; one table,
pooling 1, mini-batches of each of `--batch-sizes` ids (4096 and 1 by default; libCacheSim
has no batches, so its figures are shared). libCacheSim runs `process_trace` over the
same ids written in its oracleGeneral format (its next-access times come precomputed in
the file). For each policy two figures:

Times are process CPU seconds by default (`--clock cpu`): on a machine shared with other
jobs, elapsed time mostly measures the neighbours; `--clock wall` gives elapsed time.

* e2e    - `run_cache` time (what `scratchpipe-sim cache` reports): the policy kernel
           plus the engine (chunking, per-batch counters, next-use pass for MIN/scratchpipe).
* kernel - `Policy.prepare` + `Policy.process` over pre-built chunks and next uses: the
           policy's own cost, comparable to libCacheSim's `process_trace`.

`--rss` adds, per policy and batch size, the peak RSS of a fresh process that builds the
trace and runs `run_cache` (VmHWM: whole process, and its growth during `run_cache`).

JIT compile time is excluded (every policy is warmed up on a tiny trace first; numba's
cache=True keeps the compiled code across runs). Peak RSS growth is VmHWM after the e2e run
minus VmRSS before it (VmHWM is reset through /proc/self/clear_refs), Linux only: it
includes the engine's chunk buffers and its per-row `seen` array, not only policy state.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from scratchpipe_sim.policies import POLICIES, engine
from scratchpipe_sim.policies.base import NUM_EVENTS
from scratchpipe_sim.policies.engine import compute_next_use, make_policy, run_cache
from scratchpipe_sim.policies.oracle_general import write_oracle_general
from scratchpipe_sim.traces.csr_trace import Trace


def bounded_zipf(n: int, rows: int, alpha: float, seed: int) -> np.ndarray:
    """n ids: rank k in 1..rows with P ~ k^-alpha (exact inverse CDF), ranks permuted."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    np.minimum(ranks, rows - 1, out=ranks)
    return rng.permutation(rows)[ranks].astype(np.int64)


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def _reset_peak() -> int:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_kib("VmRSS:")


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
clock = time.process_time


def e2e_seconds(trace: Trace, name: str, capacity: int):
    start = clock()
    res = run_cache(trace, name, capacity)
    return clock() - start, res


def kernel_seconds(trace: Trace, name: str, capacity: int, chunks, next_use) -> float:
    """`prepare` + `process` of every chunk + `finish`. The outcome and events buffers are
    reused across chunks, as the engine does (fresh zeroed events per chunk cost page faults:
    ~1.5 ns an access at batch size 1, charged to the policy before 2026-12-03 18:00)."""
    policy = make_policy(name, capacity, trace.total_rows)
    out_buf = np.empty(max(len(c.ids) for c in chunks), np.uint8)
    events_buf = np.zeros((max(c.num_batches for c in chunks), NUM_EVENTS), np.int64)
    start = clock()
    policy.prepare(trace)
    for c in chunks:
        n = len(c.ids)
        events = events_buf[: c.num_batches]
        events.fill(0)
        nu = next_use[c.first_access : c.first_access + n] if policy.needs_next_use else None
        policy.process(c, nu, out_buf[:n], events)
    policy.finish()
    return clock() - start


def lcs_run(path: Path, cls_name: str, capacity: int, n: int) -> tuple[float, float]:
    import libcachesim as lcs

    reader = lcs.TraceReader(trace=str(path), trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = getattr(lcs, cls_name)(cache_size=capacity)
    start = clock()
    miss_ratio, _ = cache.process_trace(reader)
    return clock() - start, 1.0 - miss_ratio


def warm_up(names: list[str]) -> None:
    ids = bounded_zipf(5000, 500, 1.0, 0)
    for bs in (1, 64):
        trace = Trace.single_table(ids, 500, bs)
        for name in names:
            run_cache(trace, name, 400, chunk_accesses=1000)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--accesses", type=int, default=10_000_000)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--batch-sizes", default="4096,1")
    ap.add_argument("--capacity-fractions", default="0.01,0.1")
    ap.add_argument("--policies", default=",".join(POLICIES.names()))
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--repeat", type=int, default=1,
                    help="best of N timings for every figure (for a busy machine)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                    help="cpu: process CPU time (robust on a shared machine); wall: elapsed")
    ap.add_argument("--rss", action="store_true",
                    help="also peak RSS per policy and batch size, each in a fresh process")
    ap.add_argument("--rss-only", action="store_true", help="only the peak RSS table")
    ap.add_argument("--rss-child", nargs=3, metavar=("POLICY", "CAPACITY", "BATCH"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_child:
        return rss_child(args)
    global clock
    clock = CLOCKS[args.clock]
    names = [p for p in args.policies.split(",") if p]
    for p in names:
        POLICIES.get(p)

    if args.rss_only:
        for frac in (float(x) for x in args.capacity_fractions.split(",")):
            cap = max(1, int(round(frac * args.rows)))
            print(f"\ncapacity {cap} rows ({100 * frac:g}% of rows)")
            rss_table(args, names, cap, [int(x) for x in args.batch_sizes.split(",") if x])
        return 0
    t0 = time.perf_counter()
    warm_up(names)
    print(f"warm-up (compile or load cached JIT): {time.perf_counter() - t0:.1f} s")
    ids = bounded_zipf(args.accesses, args.rows, args.alpha, args.seed)
    batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    print(f"workload: {args.accesses} accesses, Zipf({args.alpha}) over {args.rows} rows "
          f"(permuted), batch sizes {batch_sizes}, seed {args.seed}; "
          f"{os.cpu_count()} CPUs; clock {args.clock}, best of {args.repeat}")
    with tempfile.TemporaryDirectory(prefix="bench-policies-") as tmp:
        og = write_oracle_general(ids, Path(tmp) / "trace.oracleGeneral")
        for frac in (float(x) for x in args.capacity_fractions.split(",")):
            cap = max(1, int(round(frac * args.rows)))
            print(f"\ncapacity {cap} rows ({100 * frac:g}% of rows)")
            base = {}
            for cls_name in ("LRU", "Belady"):
                runs = [lcs_run(og, cls_name, cap, args.accesses) for _ in range(args.repeat)]
                secs, hit = min(runs)
                base[cls_name] = args.accesses / secs
                print(f"  libCacheSim {cls_name:<14} hit {hit:.4f}  "
                      f"{base[cls_name] / 1e6:6.2f} M/s")
            for bs in batch_sizes:
                bench_batch_size(ids, args, names, cap, bs, base)
            if args.rss:
                rss_table(args, names, cap, batch_sizes)
    return 0


def rss_child(args) -> int:
    """Build the trace, run one policy, print peak RSS (MiB): process, and growth in run."""
    name, cap, bs = args.rss_child[0], int(args.rss_child[1]), int(args.rss_child[2])
    ids = bounded_zipf(args.accesses, args.rows, args.alpha, args.seed)
    trace = Trace.single_table(ids, args.rows, bs)
    del ids
    before = _reset_peak()
    run_cache(trace, name, cap)
    peak = _status_kib("VmHWM:")
    print(f"{peak / 1024:.1f} {(peak - before) / 1024:.1f}")
    return 0


def rss_table(args, names: list[str], cap: int, batch_sizes: list[int]) -> None:
    print("  peak RSS MiB, fresh process per run (whole process / growth during run_cache)")
    print(f"  {'policy':<26}" + "".join(f" {'batch ' + str(b):>20}" for b in batch_sizes))
    for name in names:
        cells = []
        for bs in batch_sizes:
            cmd = [sys.executable, __file__, "--accesses", str(args.accesses), "--rows",
                   str(args.rows), "--alpha", str(args.alpha), "--seed", str(args.seed),
                   "--rss-child", name, str(cap), str(bs)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                cells.append("failed")
                continue
            total, grow = out.stdout.split()[-2:]
            cells.append(f"{total} / {grow}")
        print(f"  {name:<26}" + "".join(f" {c:>20}" for c in cells))
        sys.stdout.flush()


def bench_batch_size(ids: np.ndarray, args, names: list[str], cap: int, bs: int,
                     base: dict[str, float]) -> None:
    trace = Trace.single_table(ids, args.rows, bs)
    chunks = list(trace.iter_chunks(max_batches=engine.MAX_CHUNK_BATCHES))
    next_use = compute_next_use(trace)
    print(f"  batch size {bs}")
    print(f"  {'policy':<26} {'hit':>6}  {'e2e M/s':>8} {'kernel M/s':>10}  "
          f"{'e2e/lcsLRU':>10} {'e2e/lcsBel':>10} {'kern/lcsLRU':>11} "
          f"{'kern/lcsBel':>11}  {'RSS +MiB':>8}")
    for name in names:
        try:
            before = _reset_peak()
            es, res = e2e_seconds(trace, name, cap)
            rss = (_status_kib("VmHWM:") - before) / 1024
            for _ in range(args.repeat - 1):
                es = min(es, e2e_seconds(trace, name, cap)[0])
            ks = min(kernel_seconds(trace, name, cap, chunks, next_use)
                     for _ in range(args.repeat))
        except Exception as e:  # noqa: BLE001 - one broken policy must not stop the run
            print(f"  {name:<26} failed: {type(e).__name__}: {e}")
            continue
        e2e = args.accesses / es
        kern = args.accesses / ks
        print(f"  {name:<26} {res.hit_ratio:.4f}  {e2e / 1e6:8.2f} {kern / 1e6:10.2f}"
              f"  {e2e / base['LRU']:10.2f} {e2e / base['Belady']:10.2f} "
              f"{kern / base['LRU']:11.2f} {kern / base['Belady']:11.2f}  "
              f"{rss:8.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
