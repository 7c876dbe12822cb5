"""FBGEMM TBE `MANAGED_CACHING`: a set-associative embedding cache with per-batch state.

Why a policy of its own: FBGEMM's cache is not a textbook LRU/LFU. It works on whole
mini-batches: every resident row of batch t is stamped t first, then each missing row takes
a way of its set that batch t does not use (a row needed by the current batch is never
evicted). When every way of the set is used by batch t the row is a *conflict miss*: it is
served from host memory (UVM) and not cached (`UNPLACED`). Every eviction writes the row back.

Geometry: `sets = ceil(capacity / ways)`, so the effective capacity is `sets * ways` (reported
as the policy's capacity). Set index = MurmurHash3 fmix64(linearized row id) mod sets.

`fbgemm-lfu` keeps a global access count per row (O(rows) memory, as FBGEMM does), updates
the counts for the whole batch first (`lfu_update_counts`), and admits a missing row only if
its count beats the least-frequent evictable way of its set (empty ways always admit).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numba as nb
import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import (
    EVICTIONS,
    FILLS,
    HIT,
    MISS,
    POLICIES,
    UNPLACED,
    WRITEBACKS,
    Policy,
)
from scratchpipe_sim.traces.trace import Chunk

_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
EMPTY = -1


@nb.njit(cache=True)
def fmix64(key):
    """MurmurHash3's 64-bit finalizer (FBGEMM's cache-set hash), wrapping mod 2^64."""
    k = np.uint64(key)
    k ^= k >> _S33
    k *= _C1
    k ^= k >> _S33
    k *= _C2
    k ^= k >> _S33
    return k


@nb.njit(cache=True)
def cache_set(row, sets):
    """Set index of a linearized row id."""
    return np.int64(fmix64(row) % np.uint64(sets))


@nb.njit(cache=True)
def _find(slot_row, base, ways, r):
    for w in range(ways):
        if slot_row[base + w] == r:
            return base + w
    return -1


@nb.njit(cache=True)
def _fbgemm_chunk(ids, batch_ptr, first_batch, sets, ways, lfu, slot_row, slot_ts, served,
                  counts, slot_cnt, outcome, events):
    n = len(ids)
    set_of = np.empty(n, np.int64)
    miss_idx = np.empty(n, np.int64)
    rows = np.empty(n, np.int64)
    for b in range(len(batch_ptr) - 1):
        t = first_batch + b
        lo, hi = batch_ptr[b], batch_ptr[b + 1]
        if lfu:
            for j in range(lo, hi):
                counts[ids[j]] += 1
        # 1) every resident row of the batch is a hit and is stamped t (locked for batch t).
        nmiss = 0
        for j in range(lo, hi):
            r = ids[j]
            s = cache_set(r, sets)
            set_of[j] = s
            f = _find(slot_row, s * ways, ways, r)
            if f >= 0:
                slot_ts[f] = t
                if lfu:  # a resident row's count changes only in batches that hit it
                    slot_cnt[f] = counts[r]
                outcome[j] = HIT
            else:
                miss_idx[nmiss] = j
                rows[nmiss] = r
                nmiss += 1
        if nmiss == 0:
            continue
        # 2) unique missing rows in ascending id order. Sets are independent, so this is
        #    FBGEMM's order (grouped by set, ascending id inside a set).
        miss_rows = rows[:nmiss]
        miss_rows.sort()
        prev = -1
        for m in range(nmiss):
            r = miss_rows[m]
            if r == prev:
                continue
            prev = r
            base = cache_set(r, sets) * ways
            best = -1
            best_c = np.int64(0)
            for w in range(ways):
                k = base + w
                if slot_ts[k] == t:
                    continue  # used by this batch: locked
                if lfu:  # least frequent way; empty ways count -1 and always admit
                    c = np.int64(-1) if slot_row[k] == EMPTY else slot_cnt[k]
                else:  # oldest timestamp; empty ways carry -1
                    c = np.int64(slot_ts[k])
                if best < 0 or c < best_c:
                    best, best_c = k, c
            if best < 0:
                continue  # conflict miss: every way is used by batch t
            if lfu and slot_row[best] != EMPTY and counts[r] <= best_c:
                continue  # not admitted
            _place(slot_row, slot_ts, best, r, t, events, b)
            if lfu:
                slot_cnt[best] = counts[r]
        # 3) outcomes of the missing accesses: first access of a filled row MISS, later HIT.
        for m in range(nmiss):
            j = miss_idx[m]
            f = _find(slot_row, set_of[j] * ways, ways, ids[j])
            if f < 0:
                outcome[j] = UNPLACED
            elif served[f] != t:
                served[f] = t
                outcome[j] = MISS
            else:
                outcome[j] = HIT


@nb.njit(cache=True)
def _place(slot_row, slot_ts, k, r, t, events, b):
    if slot_row[k] != EMPTY:
        events[b, EVICTIONS] += 1
        events[b, WRITEBACKS] += 1
    slot_row[k] = r
    slot_ts[k] = t
    events[b, FILLS] += 1


class _FbgemmCache(Policy):
    """Shared state of both FBGEMM variants: `sets * ways` slots, a timestamp per way."""

    params: ClassVar[dict[str, Any]] = {"ways": 32}
    lfu: ClassVar[bool] = False

    def __init__(self, capacity: int, num_rows: int, **params: Any):
        super().__init__(capacity, num_rows, **params)
        ways = self.p["ways"]
        if isinstance(ways, bool) or int(ways) != ways or ways < 1:
            raise UserError(f"ways must be a whole number >= 1, got {ways}", field="ways")
        self.ways = int(ways)
        self.requested_capacity = self.capacity
        self.sets = -(-self.capacity // self.ways)
        self.capacity = self.sets * self.ways  # effective: FBGEMM rounds up to whole sets
        self.slot_row = np.full(self.capacity, EMPTY, np.int64)
        # batch stamps (int32: 2^31 mini-batches is far beyond any trace)
        self.slot_ts = np.full(self.capacity, -1, np.int32)
        self.served = np.full(self.capacity, -1, np.int32)
        self.counts = np.zeros(self.num_rows if self.lfu else 1, np.int64)
        # the count of the row in each way, so a miss compares its set without touching
        # the O(rows) `counts` array 32 times
        self.slot_cnt = np.zeros(self.capacity if self.lfu else 1, np.int64)

    def process(self, chunk: Chunk, next_use: np.ndarray | None, outcome: np.ndarray,
                events: np.ndarray) -> None:
        _fbgemm_chunk(chunk.ids, chunk.batch_ptr, chunk.first_batch, self.sets, self.ways,
                      self.lfu, self.slot_row, self.slot_ts, self.served, self.counts,
                      self.slot_cnt, outcome, events)

    def resident(self) -> np.ndarray:
        return np.sort(self.slot_row[self.slot_row != EMPTY])

    def extra_totals(self) -> dict[str, int]:
        return {"sets": self.sets, "ways": self.ways}


@POLICIES.register("fbgemm-lru")
class FbgemmLRU(_FbgemmCache):
    """FBGEMM `CacheAlgorithm.LRU`: the oldest way not used by the current batch is replaced."""

    name = "fbgemm-lru"
    lfu = False


@POLICIES.register("fbgemm-lfu")
class FbgemmLFU(_FbgemmCache):
    """FBGEMM `CacheAlgorithm.LFU`: admit only rows more frequent than the set's weakest way."""

    name = "fbgemm-lfu"
    lfu = True
