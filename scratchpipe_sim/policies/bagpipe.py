"""`bagpipe`: Bagpipe's oracle cacher (Agarwal et al., SOSP'23), replayed batch by batch.

Why it differs from `scratchpipe`: Bagpipe decides *at each use* whether a row stays,
looking `lookahead` batches ahead (default 200, far beyond ScratchPipe's few batches in
flight), and evicts by time-to-live rather than by a replacement search:

* every row of batch g is resident while g trains: a missing row is filled (the first
  access MISS, later ones HIT);
* after batch g, each row it used gets a time-to-live: if its next use is at batch n with
  n - g <= window, it stays until n (where it is decided again); otherwise it leaves
  after g (evicted and written back). window = lookahead, or min(lookahead, ttl_batches)
  when `ttl_batches` caps how long a row may live past its use;
* Bagpipe sizes its cache to what the window keeps. With a fixed `capacity` smaller than
  that, a fill into a full cache evicts the kept row whose next use is farthest (largest
  (expiry, row id)), never a row of the current batch; when every resident row belongs to
  the current batch, the row is served from host memory (UNPLACED) for this batch.

State: one int32 expiry (batch of the next use, -1 = not resident) and one int64 stamp per
row (12 B a row: the next-use decision needs no hash map), and a lazy-deletion max-heap of
kept rows keyed by (expiry, row) (stale entries dropped when popped; compacted when full).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import HIT, MISS, POLICIES, UNPLACED, Policy
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch

_SIZE, _HN, _CAP_EVICT, _PEAK = range(4)
_PF = 16  # prefetch distance in accesses


def _whole(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < low:
        raise UserError(f"{name} must be a whole number of batches >= {low}, got {value}",
                        field=name)
    return int(value)


@dataclass(frozen=True)
class BagpipeParams:
    """The bagpipe policy's knobs (also `design_params.bagpipe`'s, with its oracle's cost)."""

    lookahead: int = field(default=200, metadata={
        "help": "batches its oracle cacher looks ahead (Bagpipe's default 200)", "min": 1})
    ttl_batches: int | None = field(default=None, metadata={
        "help": "batches a cached row lives past its last use in the window (null or -1: "
                "until its next use leaves the window)", "min": -1})


@POLICIES.register("bagpipe")
class Bagpipe(Policy):
    needs_next_use = True
    Params = BagpipeParams

    def __init__(self, capacity: int, num_rows: int, **params: Any):
        super().__init__(capacity, num_rows, **params)
        lookahead = _whole("lookahead", self.p["lookahead"], 1)
        ttl = self.p["ttl_batches"]
        ttl = -1 if ttl is None else _whole("ttl_batches", ttl, -1)
        self.window = lookahead if ttl < 0 else min(lookahead, ttl)
        self.expiry = np.full(self.num_rows, -1, np.int32)
        self.stamp = np.full(self.num_rows, -1, np.int64)
        slots = min(self.capacity, self.num_rows)
        self.heap = np.zeros(2 * slots + 1024, np.int64)
        self.state = np.zeros(4, np.int64)
        self.ptr = np.zeros(1, np.int64)

    def range_tail_batches(self) -> int:
        """A use's decision looks `window` batches ahead."""
        return self.window

    def prepare(self, trace) -> None:
        self.ptr = trace.batch_access_ptr()

    def process(self, chunk, next_use, outcome, events):
        _bagpipe_chunk(chunk.ids, chunk.batch_ptr, chunk.first_batch, chunk.first_access,
                       next_use, self.ptr, self.window, min(self.capacity, self.num_rows),
                       self.num_rows, self.expiry, self.stamp, self.heap, self.state,
                       outcome, events)

    def resident(self) -> np.ndarray:
        return np.flatnonzero(self.expiry >= 0).astype(np.int64)

    def extra_totals(self) -> dict[str, int]:
        return {"capacity_evictions": int(self.state[_CAP_EVICT]),
                "peak_resident": int(self.state[_PEAK])}


@njit(cache=True)
def _push(heap, n, key):
    i = n
    while i > 0:
        par = (i - 1) >> 1
        if heap[par] >= key:
            break
        heap[i] = heap[par]
        i = par
    heap[i] = key


@njit(cache=True)
def _pop(heap, n):
    """Remove the root of a max-heap of n entries; returns the new size."""
    n -= 1
    if n > 0:
        heap[0] = heap[n]
        _sift_down(heap, 0, n)
    return n


@njit(cache=True)
def _compact(heap, n, expiry, num_rows):
    """Keep the live entries only (at most the cache's rows) and rebuild the heap in place
    (bottom-up heapify, O(n)). Live keys are distinct (one per row), so pops come in the
    same order whatever the layout. No sort and no array slicing: both cost seconds of
    compile time."""
    k = 0
    for i in range(n):
        key = heap[i]
        r = key % num_rows
        if expiry[r] == key // num_rows:
            heap[k] = key
            k += 1
    for i in range(k // 2 - 1, -1, -1):
        _sift_down(heap, i, k)
    return k


@njit(cache=True)
def _sift_down(heap, i, n):
    key = heap[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and heap[c + 1] > heap[c]:
            c += 1
        if heap[c] <= key:
            break
        heap[i] = heap[c]
        i = c
    heap[i] = key


@njit(cache=True)
def _use_batch(ptr, nu, g, window):
    """The batch of stream position `nu` (> the positions of batch g) when it lies within
    `window` batches after g, else -1. Why not a search of all of `ptr`: at batch size 1
    that is ~23 random probes of a one-int64-per-access array; the window bounds it first."""
    last = len(ptr) - 1  # batches
    hi = g + window if g + window < last - 1 else last - 1  # the latest batch holding nu
    if nu >= ptr[hi + 1]:
        return -1
    lo = g  # invariant: ptr[lo] <= nu < ptr[hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if ptr[mid] <= nu:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True)
def _bagpipe_chunk(ids, batch_ptr, first_batch, first_access, next_use, ptr, window, cap,
                   num_rows, expiry, stamp, heap, state, outcome, events):
    size = state[_SIZE]
    hn = state[_HN]
    n = len(ids)
    for b in range(len(batch_ptr) - 1):
        g = first_batch + b
        fills = 0
        evictions = 0
        lo, hi = batch_ptr[b], batch_ptr[b + 1]
        for j in range(lo, hi):
            if j + _PF < n:  # hints (see _prefetch.py): both arrays are one entry per row
                prefetch(stamp, ids[j + _PF])
                prefetch(expiry, ids[j + _PF])
            r = ids[j]
            if (stamp[r] >> 1) == g:  # seen earlier in this batch
                outcome[j] = UNPLACED if (stamp[r] & 1) else HIT
                continue
            if expiry[r] >= 0:
                stamp[r] = 2 * g
                outcome[j] = HIT
                continue
            if size >= cap:  # evict the kept row used farthest ahead (not this batch's)
                victim = -1
                while hn > 0:
                    key = heap[0]
                    hn = _pop(heap, hn)
                    v = key % num_rows
                    if expiry[v] == key // num_rows and (stamp[v] >> 1) != g:
                        victim = v
                        break
                if victim < 0:
                    stamp[r] = 2 * g + 1
                    outcome[j] = UNPLACED
                    continue
                expiry[victim] = -1
                size -= 1
                evictions += 1
                state[_CAP_EVICT] += 1
            stamp[r] = 2 * g
            expiry[r] = g
            size += 1
            fills += 1
            outcome[j] = MISS
        if size > state[_PEAK]:
            state[_PEAK] = size
        # time-to-live: each placed row's last access in the batch decides whether it stays
        end = first_access + hi
        for j in range(lo, hi):
            nu = next_use[j]
            if nu < end:
                continue  # used again in this batch
            r = ids[j]
            if stamp[r] & 1:
                continue  # served from host memory this batch
            nbatch = _use_batch(ptr, nu, g, window)
            if nbatch >= 0:
                expiry[r] = nbatch
                if hn >= len(heap):
                    hn = _compact(heap, hn, expiry, num_rows)
                _push(heap, hn, np.int64(nbatch) * num_rows + r)
                hn += 1
            else:
                expiry[r] = -1
                size -= 1
                evictions += 1
        events[b, 0] += fills
        events[b, 1] += evictions
        events[b, 2] += evictions
    state[_SIZE] = size
    state[_HN] = hn
