"""Runs a policy over a trace, chunk by chunk, and counts what happened.

The engine is the only caller of `Policy.process`. It linearizes ids (via the trace), gives
future-aware policies their next-use positions, and turns per-access outcomes into per-batch
and per-table counters. Memory is bounded by the chunk size plus policy state; only the
next-use array (one int64 per access, for `belady` and `scratchpipe`) grows with the trace,
and it lives in a temporary memory-mapped file when large.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numba as nb
import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import (
    EVICTIONS,
    FILLS,
    HIT,
    NO_NEXT_USE,
    NUM_EVENTS,
    POLICIES,
    UNPLACED,
    WRITEBACKS,
    Policy,
)
from scratchpipe_sim.traces.trace import DEFAULT_CHUNK_ACCESSES, Trace

#: Columns of `BatchCounts.counts`, in order.
COUNTERS = ("accesses", "unique", "hits", "misses", "fills", "evictions", "writebacks",
            "unplaced")
A_ACC, A_UNIQ, A_HIT, A_MISS, A_FILL, A_EVICT, A_WB, A_UNPL = range(len(COUNTERS))
_IN_MEMORY_NEXT_USE = 1 << 26


@dataclass(frozen=True)
class BatchCounts:
    """Counters of consecutive mini-batches: `counts[b, COUNTERS.index(name)]`."""

    first_batch: int
    counts: np.ndarray  # int64 (num_batches, len(COUNTERS))


@dataclass
class CacheResult:
    policy: str
    capacity: int
    num_rows: int
    accesses: int = 0
    unique: int = 0
    hits: int = 0
    misses: int = 0
    fills: int = 0
    evictions: int = 0
    writebacks: int = 0
    unplaced: int = 0
    wall_s: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)
    per_table: list[dict[str, int]] = field(default_factory=list)

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    @property
    def accesses_per_s(self) -> float:
        return self.accesses / self.wall_s if self.wall_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        d["hit_ratio"] = self.hit_ratio
        d["accesses_per_s"] = self.accesses_per_s
        return d


def make_policy(name: str, capacity: int, num_rows: int, **params: Any) -> Policy:
    return POLICIES.get(name, field="policy")(capacity, num_rows, **params)


def iter_cache(trace: Trace, policy: Policy, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES,
               per_table: np.ndarray | None = None) -> Iterator[BatchCounts]:
    """Run `policy` over `trace`, yielding per-batch counters chunk by chunk.

    `per_table`, if given, is an int64 array (num_tables, 4) accumulated in place with
    accesses, hits, misses, unplaced per table.
    """
    if policy.num_rows < trace.total_rows:
        raise UserError(f"policy built for {policy.num_rows} rows but the trace has "
                        f"{trace.total_rows}", source=trace.source)
    policy.prepare(trace)
    next_use = compute_next_use(trace, chunk_accesses) if policy.needs_next_use else None
    seen = np.full(trace.total_rows, -1, np.int32)  # batch stamps; int32 halves the random traffic
    for chunk in trace.iter_chunks(chunk_accesses):
        n = len(chunk.ids)
        outcome = np.empty(n, np.uint8)
        events = np.zeros((chunk.num_batches, NUM_EVENTS), np.int64)
        nu = None
        if next_use is not None:
            nu = np.asarray(next_use[chunk.first_access : chunk.first_access + n])
        policy.process(chunk, nu, outcome, events)
        counts = np.zeros((chunk.num_batches, len(COUNTERS)), np.int64)
        _count_batches(chunk.ids, chunk.batch_ptr, chunk.first_batch, outcome, seen, counts)
        counts[:, A_FILL] = events[:, FILLS]
        counts[:, A_EVICT] = events[:, EVICTIONS]
        counts[:, A_WB] = events[:, WRITEBACKS]
        if per_table is not None:
            _count_tables(chunk.tables, outcome, per_table)
        yield BatchCounts(chunk.first_batch, counts)
    policy.finish()


def run_cache(trace: Trace, policy: str | Policy, capacity: int | None = None,
              chunk_accesses: int = DEFAULT_CHUNK_ACCESSES, **params: Any) -> CacheResult:
    """Totals (and per-table counts) of one policy over one trace."""
    if isinstance(policy, str):
        if capacity is None:
            raise UserError("a capacity is needed", field="capacity")
        policy = make_policy(policy, capacity, trace.total_rows, **params)
    start = time.perf_counter()
    tables = np.zeros((trace.num_tables, 4), np.int64)
    totals = np.zeros(len(COUNTERS), np.int64)
    for bc in iter_cache(trace, policy, chunk_accesses, tables):
        totals += bc.counts.sum(axis=0)
    wall = time.perf_counter() - start
    res = CacheResult(policy.name, policy.capacity, policy.num_rows,
                      **{name: int(totals[i]) for i, name in enumerate(COUNTERS)},
                      wall_s=wall, extra=policy.extra_totals())
    res.per_table = [
        {"table": t, "accesses": int(a), "hits": int(h), "misses": int(m), "unplaced": int(u)}
        for t, (a, h, m, u) in enumerate(tables)
    ]
    return res


def compute_next_use(trace: Trace, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> np.ndarray:
    """For every access, the global position of the next access to the same linearized id.

    One backward pass over the chunks; `NO_NEXT_USE` where the id is never seen again.
    Large traces get a temporary memory-mapped array (deleted when unreferenced).
    """
    n = trace.num_accesses
    if n <= _IN_MEMORY_NEXT_USE:
        out = np.empty(n, np.int64)
    else:
        tmp = tempfile.TemporaryFile(prefix="scratchpipe-next-use-")
        out = np.memmap(tmp, dtype=np.int64, mode="w+", shape=(n,))
    last = np.full(trace.total_rows, NO_NEXT_USE, np.int64)
    ptr = trace.batch_access_ptr()
    starts = trace.chunk_starts(chunk_accesses, ptr=ptr)
    for k, end in reversed(list(zip(starts[:-1], starts[1:], strict=True))):
        chunk = trace.chunk(k, end, ptr)
        view = out[chunk.first_access : chunk.first_access + len(chunk.ids)]
        _next_use_backward(chunk.ids, chunk.first_access, last, view)
    return out


@nb.njit(cache=True)
def _next_use_backward(ids, base, last, out):
    for j in range(len(ids) - 1, -1, -1):
        r = ids[j]
        out[j] = last[r]
        last[r] = base + j


@nb.njit(cache=True)
def _count_batches(ids, batch_ptr, first_batch, outcome, seen, counts):
    for b in range(len(batch_ptr) - 1):
        stamp = first_batch + b
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            r = ids[j]
            counts[b, 0] += 1
            if seen[r] != stamp:
                seen[r] = stamp
                counts[b, 1] += 1
            o = outcome[j]
            if o == 0:
                counts[b, 2] += 1
            else:
                counts[b, 3] += 1
                if o == 2:
                    counts[b, 7] += 1


@nb.njit(cache=True)
def _count_tables(tables, outcome, acc):
    for j in range(len(tables)):
        t = tables[j]
        acc[t, 0] += 1
        if outcome[j] == 0:
            acc[t, 1] += 1
        else:
            acc[t, 2] += 1
            if outcome[j] == 2:
                acc[t, 3] += 1


assert (A_HIT, A_MISS, A_UNPL) == (2, 3, 7) and HIT == 0 and UNPLACED == 2
