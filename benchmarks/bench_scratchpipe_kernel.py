"""The scratchpipe policy kernel on a config's trace (the quickstart's by default):
`prepare` + `process` of every chunk + `finish`, as bench_policies.py's `kernel` figure,
process CPU seconds of each of --repeat passes in one process (JIT compile excluded: one
untimed pass first). Not a test: run it by hand and record the output in
docs/performance.md.

    python benchmarks/bench_scratchpipe_kernel.py [CONFIG] [--repeat 3]

A/B of two source trees (e.g. a change of the kernel's signature): run it alternately with
`PYTHONPATH=TREE_A` and `PYTHONPATH=TREE_B`, A/B/A/B, and compare the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from scratchpipe_sim.config import load_config
from scratchpipe_sim.policies.base import NUM_EVENTS
from scratchpipe_sim.policies.engine import compute_next_use, make_policy
from scratchpipe_sim.timing.designs import design_params
from scratchpipe_sim.timing.trace_setup import build_trace


def kernel_pass(trace, capacity: int, params: dict, chunks, next_use) -> float:
    policy = make_policy("scratchpipe", capacity, trace.total_rows, **params)
    out_buf = np.empty(max(len(c.ids) for c in chunks), np.uint8)
    events_buf = np.zeros((max(c.num_batches for c in chunks), NUM_EVENTS), np.int64)
    start = time.process_time()
    policy.prepare(trace)
    for c in chunks:
        n = len(c.ids)
        events = events_buf[: c.num_batches]
        events.fill(0)
        policy.process(c, next_use[c.first_access : c.first_access + n], out_buf[:n], events)
    policy.finish()
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="configs/quickstart.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    cfg = load_config(a.config)
    trace = build_trace(cfg)
    p = design_params(cfg, "scratchpipe").policy_params()
    params = {"lookahead": p.lookahead, "on_overflow": p.on_overflow}
    chunks = list(trace.iter_chunks())
    next_use = compute_next_use(trace)
    capacity = cfg.capacity_rows()
    kernel_pass(trace, capacity, params, chunks, next_use)  # compile or load, untimed
    times = [kernel_pass(trace, capacity, params, chunks, next_use) for _ in range(a.repeat)]
    print(json.dumps({"accesses": int(trace.num_accesses), "capacity": capacity,
                      "seconds": times, "median_s": statistics.median(times)}))


if __name__ == "__main__":
    main()
