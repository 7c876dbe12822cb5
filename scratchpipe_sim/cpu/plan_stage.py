"""The real `scratchpipe` policy kernel, timed per batch, with the rows it fills.

The policy engine replays a trace chunk by chunk; with one batch per chunk, the time spent
in the policy's `process` is the planner's work for that batch (placement and victim
choice), and the accesses whose outcome is MISS are the rows it fills. The next-use pass
(the planner's knowledge of the window) is timed once and spread over the accesses.
The policy runs on the calling thread: timed by that thread's CPU time (cpu/measure.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from scratchpipe_sim.policies.base import MISS, Policy
from scratchpipe_sim.policies.engine import compute_next_use, iter_cache, make_policy
from scratchpipe_sim.traces.csr_trace import Trace


@dataclass
class PlanRun:
    """Per batch: planner seconds, accesses, fill rows (linearized ids) and counters."""

    seconds: np.ndarray
    accesses: np.ndarray
    next_use_s: float
    fills: list[np.ndarray] = field(default_factory=list)
    counts: np.ndarray | None = None  # engine counters (num_batches, len(COUNTERS))

    def ns_per_id(self, lo: int = 0) -> float:
        """Planner ns per looked-up id over batches lo.. (next-use pass included)."""
        acc = float(self.accesses[lo:].sum())
        share = self.next_use_s * acc / max(float(self.accesses.sum()), 1.0)
        return (float(self.seconds[lo:].sum()) + share) / max(acc, 1.0) * 1e9


class _Timed(Policy):
    """Delegates to `inner`; times each `process` call and keeps each batch's fill rows."""

    name = "timed"

    def __init__(self, inner: Policy, num_batches: int, keep_fills: bool):  # noqa: D107
        self.inner = inner
        self.capacity = inner.capacity
        self.num_rows = inner.num_rows
        self.needs_next_use = inner.needs_next_use
        self.counts_unique = inner.counts_unique
        self.seconds = np.zeros(num_batches)
        self.fills: list[np.ndarray] = [np.zeros(0, np.int64)] * num_batches
        self.keep_fills = keep_fills

    def prepare(self, trace) -> None:
        self.inner.prepare(trace)

    def process(self, chunk, next_use, outcome, events) -> None:
        t0 = time.thread_time()  # one thread: its CPU time (see cpu/measure.py)
        self.inner.process(chunk, next_use, outcome, events)
        dt = time.thread_time() - t0
        nb_ = chunk.num_batches
        acc = np.diff(chunk.batch_ptr).astype(float)
        self.seconds[chunk.first_batch : chunk.first_batch + nb_] += dt * acc / max(
            acc.sum(), 1.0)
        if self.keep_fills:
            for k in range(nb_):
                lo, hi = int(chunk.batch_ptr[k]), int(chunk.batch_ptr[k + 1])
                self.fills[chunk.first_batch + k] = chunk.ids[lo:hi][outcome[lo:hi] == MISS]

    def finish(self) -> None:
        self.inner.finish()

    def resident(self) -> np.ndarray:
        return self.inner.resident()

    def extra_totals(self) -> dict[str, int]:
        return self.inner.extra_totals()


def run_planner(trace: Trace, capacity: int, lookahead: int, keep_fills: bool = False,
                **params) -> PlanRun:
    """Replay `trace` through the `scratchpipe` policy one batch per chunk, timed."""
    nbat = trace.num_batches
    inner = make_policy("scratchpipe", capacity, trace.total_rows, lookahead=lookahead,
                        **params)
    timed = _Timed(inner, nbat, keep_fills)
    ptr = trace.batch_access_ptr()
    per_batch = int(np.diff(ptr).max()) if nbat else 1
    t0 = time.thread_time()
    compute_next_use(trace)  # the engine repeats it below; timed apart here
    next_use_s = time.thread_time() - t0
    counts = np.zeros((nbat, 0), np.int64)
    rows = []
    for bc in iter_cache(trace, timed, chunk_accesses=max(per_batch, 1)):
        rows.append((bc.first_batch, bc.counts))
    if rows:
        counts = np.zeros((nbat, rows[0][1].shape[1]), np.int64)
        for first, c in rows:
            counts[first : first + len(c)] = c
    return PlanRun(timed.seconds, np.diff(ptr).astype(np.int64), next_use_s,
                   timed.fills if keep_fills else [], counts)
