"""Per-batch counts that the designs price.

The engine (`policies/engine.py:replay_columns`) gives accesses, unique rows, hits, misses,
fills, evictions, write-backs, unplaced accesses and unique unplaced rows per batch, plus
the policy's own per-batch columns; samples per batch come from the trace's bags. Designs
without a cache get the same columns from one pass over the trace (`uncached_counts`, with
the engine's unique-row set: `engine.access_unique`);
`first_touches`, `cold_touches` and `warmup_length` serve the cache warm-up.
"""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from scratchpipe_sim.policies.engine import (
    SeenSet,
    access_unique,
    make_policy,
    replay_columns,
    row_bits,
    seen_batch,
    seen_first,
)
from scratchpipe_sim.policies.time_ranges import RangeSetting
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch
from scratchpipe_sim.traces.csr_trace import ChunkBuffers, Trace


class Where(str, enum.Enum):
    """Where a design without a cache keeps every row: host memory or HBM. A str enum, so
    its value is the same text wherever it is written."""

    HOST = "host"
    DEVICE = "device"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Workload:
    """Per-batch counts (`cols[name][b]`, int64) for one policy (or none) over one trace."""

    policy: str
    capacity: int
    cols: dict[str, np.ndarray]
    extra: dict[str, int]

    @property
    def num_batches(self) -> int:
        return len(self.cols["accesses"])

    def total(self, name: str, lo: int = 0) -> int:
        return int(self.cols[name][lo:].sum())

    def tail(self, skip: int) -> Workload:
        """The batches after the first `skip` (the cache warm-up replayed without timing)."""
        if skip == 0:
            return self
        return Workload(self.policy, self.capacity,
                        {k: v[skip:].copy() for k, v in self.cols.items()}, self.extra)

    def with_columns(self, cols: dict[str, np.ndarray]) -> Workload:
        return Workload(self.policy, self.capacity, {**self.cols, **cols}, self.extra)

    def scaled(self, factor: float) -> Workload:
        """The counts `factor` times as large (a sampled run's estimate of the full run:
        factor = 1/R), rounded to whole counts; what is not a count of accesses or rows
        (samples per batch, mean row sizes, a cache's ways) is kept as it is."""
        def scale(v: np.ndarray) -> np.ndarray:
            if np.issubdtype(v.dtype, np.integer):
                return np.rint(v * factor).astype(v.dtype)
            return v * factor

        cols = {k: v if k in UNSCALED_COLUMNS else scale(v) for k, v in self.cols.items()}
        extra = {k: v if k in UNSCALED_EXTRAS else int(round(v * factor))
                 for k, v in self.extra.items()}
        return Workload(self.policy, self.capacity, cols, extra)


#: per-batch columns that are not counts (samples, mean row bytes): `Workload.scaled` keeps them
UNSCALED_COLUMNS = frozenset({"samples", "fill_row_bytes", "unplaced_lookup_bytes",
                              "unplaced_row_bytes"})
#: policy totals that are not counts of accesses or rows (a set-associative cache's ways)
UNSCALED_EXTRAS = frozenset({"ways"})


def policy_counts(trace: Trace, policy: str, capacity: int, *, replay_cache: bool = True,
                  ranges: RangeSetting | None = None, **params: Any) -> Workload:
    """Run `policy` (a POLICIES name) over `trace`; per-batch counts for the timing model:
    the engine's counters, the policy's own per-batch columns (e.g. refetch distances) and
    samples per batch. Replays come from the on-disk replay cache when it has them (keyed
    by the trace's content, the policy, its capacity and parameters). `ranges`: made as
    time ranges where that is proven exact (the same columns, so the same cache entry)."""
    from scratchpipe_sim.policies.replay_cache import cached_columns, policy_key

    def compute() -> tuple[dict[str, np.ndarray], dict[str, int]]:
        if ranges is not None and ranges.applies(policy):
            return ranges.columns(trace, policy, capacity, **params)
        return replay_columns(trace, make_policy(policy, capacity, trace.total_rows, **params))

    if replay_cache:
        cols, extra = cached_columns(policy_key(trace, policy, capacity, params), compute,
                                     True)
    else:
        cols, extra = compute()
    cols = dict(cols)
    cols["samples"] = trace.samples_per_batch()
    return Workload(policy, capacity, cols, extra)


def uncached_counts(trace: Trace, where: Where,
                    au: tuple[np.ndarray, np.ndarray] | None = None) -> Workload:
    """No cache: every row in host memory (`Where.HOST`) or every row in HBM (`DEVICE`).

    `au` = `access_unique(trace)` when already computed (hybrid and gpu-only share it).
    """
    if not isinstance(where, Where):
        raise TypeError(f"where: expected a Where ({', '.join(w.name for w in Where)}), "
                        f"got {where!r}")
    nbat = trace.num_batches
    acc, uniq = access_unique(trace) if au is None else au
    zero = np.zeros(nbat, np.int64)
    host = where is Where.HOST
    cols = {"accesses": acc, "unique": uniq, "hits": zero if host else acc.copy(),
            "misses": acc.copy() if host else zero, "fills": zero, "evictions": zero,
            "writebacks": zero, "unplaced": acc.copy() if host else zero,
            "unique_unplaced": uniq.copy() if host else zero,
            "samples": trace.samples_per_batch()}
    cols = {k: v.copy() for k, v in cols.items()}
    return Workload("none" if host else "all-resident", 0 if host else trace.total_rows,
                    cols, {})


#: accesses ahead whose row `_new_rows` prefetches (its bit a row outgrows the core's caches:
#: 25 MB for a Criteo day's 204M rows); 64-256 were the fastest of 16-256 with a byte a row
_PF_NEW_ROWS = 64


@njit(cache=True)
def _new_rows(ids, batch_ptr, seen, out, first_batch):
    """Per batch, add to `out` the rows whose bit in `seen` (`engine.row_bits`) was clear, and
    set the bits of every row of the batch."""
    n_ids = len(ids)
    one = np.uint64(1)
    for b in range(len(batch_ptr) - 1):
        n = 0
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            if j + _PF_NEW_ROWS < n_ids:  # a hint: no result depends on it
                prefetch(seen, ids[j + _PF_NEW_ROWS] >> 6)
            r = ids[j]
            w = seen[r >> 6]
            m = one << np.uint64(r & 63)
            n += (w & m) == 0  # branch free: whether a row is new is unpredictable
            seen[r >> 6] = w | m
        out[first_batch + b] += n


#: first_touches per trace content, keyed by the ids of its arrays (a trace re-made with
#: new meta, as `auto_warmup_trace` returns it, shares them); the entry holds the small
#: arrays (so their ids stay theirs) and is dropped when the indices array is freed
_FIRST_TOUCHES: dict[tuple[int, ...], tuple[tuple[np.ndarray, ...], np.ndarray]] = {}


def first_touches(trace: Trace) -> np.ndarray:
    """Per batch, rows never accessed in an earlier batch of `trace` (compulsory misses of
    any cache that starts empty at the trace's first batch). Read-only: made once per trace
    content in a process (the auto warm-up and the run's replays both ask)."""
    small = (trace.offsets, trace.batch_bounds, trace.table_rows)
    key = (id(trace.indices), *map(id, small))
    hit = _FIRST_TOUCHES.get(key)
    if hit is not None:
        return hit[1]
    out = np.zeros(trace.num_batches, np.int64)
    seen = row_bits(trace.total_rows)
    for chunk in trace.iter_chunks(reuse_buffers=True):
        _new_rows(chunk.ids, chunk.batch_ptr, seen, out, chunk.first_batch)
    out.setflags(write=False)
    try:
        weakref.finalize(trace.indices, _FIRST_TOUCHES.pop, key, None)
    except TypeError:  # an array type without weak references: not remembered
        return out
    _FIRST_TOUCHES[key] = (small, out)
    return out


def cold_touches(first: np.ndarray, capacity: int) -> np.ndarray:
    """Per batch, the first touches (`first_touches` of a whole trace) made while fewer
    than `capacity` distinct rows had been seen: the misses only a cold start makes. A later
    first touch comes after at least `capacity` distinct rows, so an LRU cache of
    `capacity` rows misses it whatever preceded the trace (its reuse distance exceeds the
    cache): a miss of steady state too (for other policies, nearly so). Exact per access:
    a batch's k-th new row follows (rows seen before the batch) + k - 1 distinct rows."""
    first = np.asarray(first, np.int64)
    before = np.cumsum(first) - first
    return np.minimum(np.maximum(int(capacity) - before, 0), first)


def warmup_length(trace: Trace, prefix: int, capacity: int) -> int:
    """Fewest batches k <= prefix such that batches prefix-k..prefix-1 touch at least
    `capacity` distinct rows (so an LRU-like cache replaying them starts the timed batches
    full); `prefix` when even the whole prefix touches fewer."""
    seen = row_bits(trace.total_rows)
    count = np.zeros(1, np.int64)
    ptr = trace.batch_access_ptr()
    buffers = ChunkBuffers()
    for k in range(1, prefix + 1):
        chunk = trace.chunk(prefix - k, prefix - k + 1, ptr, buffers)
        _new_rows(chunk.ids, chunk.batch_ptr, seen, count, 0)
        if count[0] >= capacity:
            return k
    return prefix


@njit(cache=True)
def _table_bytes(ids, tables, batch_ptr, first_batch, slots, shift, epoch, r_t, R_t,
                 lookup_out, unique_out):
    mask = len(slots) - 1
    for b in range(len(batch_ptr) - 1):
        stamp = first_batch + b
        tag = seen_batch(slots, epoch, stamp)
        lookup = 0.0  # sums in locals, in access order (the same floats as in place)
        unique = 0.0
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            t = tables[j]
            lookup += r_t[t]
            # branch free (+ 0.0 for a repeat changes no sum): repeats are unpredictable
            unique += seen_first(slots, shift, mask, tag, ids[j]) * R_t[t]
        lookup_out[stamp] += lookup
        unique_out[stamp] += unique


def table_bytes(trace: Trace, r_t: tuple[int, ...], R_t: tuple[int, ...]
                ) -> dict[str, np.ndarray]:
    """Per batch, bytes the lookups read (sum of their tables' row bytes) and bytes of the
    unique rows updated (with state): exact byte accounting for tables of different dims."""
    n = trace.num_batches
    lookup = np.zeros(n, np.float64)
    unique = np.zeros(n, np.float64)
    ptr = trace.batch_access_ptr()
    seen = SeenSet(trace, ptr)  # the engine's unique-row set (`access_unique`'s too)
    r_arr, R_arr = np.asarray(r_t, np.float64), np.asarray(R_t, np.float64)
    for chunk in trace.iter_chunks(ptr=ptr, reuse_buffers=True):
        _table_bytes(chunk.ids, chunk.tables, chunk.batch_ptr, chunk.first_batch, seen.slots,
                     seen.shift, seen.epoch, r_arr, R_arr, lookup, unique)
    return {"lookup_bytes": lookup, "unique_bytes": unique}


def policy_mix(trace: Trace, policy: str, capacity: int, r_t: tuple[int, ...],
               R_t: tuple[int, ...], **params: Any) -> tuple[Workload, dict[str, float]]:
    """`policy_counts` plus the mean row bytes of what the policy moves, from its per-table
    totals: fills (and, in steady state, the victims they displace) and unplaced rows."""
    per = np.zeros((trace.num_tables, 4), np.int64)  # accesses, hits, misses, unplaced
    cols, extra = replay_columns(trace, make_policy(policy, capacity, trace.total_rows,
                                                    **params), per_table=per)
    cols["samples"] = trace.samples_per_batch()
    r, R = np.asarray(r_t, float), np.asarray(R_t, float)
    filled, unplaced = per[:, 2] - per[:, 3], per[:, 3]

    def mean(weights: np.ndarray, sizes: np.ndarray) -> float:
        tot = weights.sum()
        return float((weights * sizes).sum() / tot) if tot else float(sizes.mean())

    mix = {"fill_row_bytes": mean(filled, R), "unplaced_lookup_bytes": mean(unplaced, r),
           "unplaced_row_bytes": mean(unplaced, R)}
    return Workload(policy, capacity, cols, extra), mix
