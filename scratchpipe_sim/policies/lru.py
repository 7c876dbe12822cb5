"""`lru`: fully associative, exact textbook LRU, processed access by access.

Why this shape: a queue of rows, one pushed per access (oldest first), and a hash map
row -> position in the queue of the row's last access (key and position side by side: one
cache line per lookup, sized to the capacity). The least recently used row is the oldest
queue entry that is still *current* (the map holds its position); entries made stale by a
later access to their row are skipped when the front is popped, and a full queue is
compacted: its current entries (at most `capacity`) are pushed again behind it, in order. A
hit therefore writes only the map line it has just read and appends to the queue
(sequential), where a linked list relinks three random list nodes; each entry is checked
about once (a map probe that the kernel prefetches: the queue is known ahead). Memory grows
with the cache, not with the rows or the trace: `QUEUE_PER_SLOT` entries per slot (int32
rows when the ids fit, else int64), rounded up to a power of two.

Accesses are served in stream order; inside a mini-batch the first access of a missing row
is a MISS (a fill) and later ones hit while the row stays resident. Every eviction writes
the row back. Positions grow with every access, so they also give each batch's unique rows
(`counts_unique`): a hit is the row's first access in the batch when its old position
precedes the batch, a miss always is; a batch that evicted a row it had itself used, or
compacted the queue (which renumbers), leaves its count to the engine.
"""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.policies._hashmap import (
    PF_FAR,
    PF_QUEUE,
    erase_pair,
    home,
    new_pair_map,
    pair_map_keys,
    probe_pair,
)
from scratchpipe_sim.policies.base import HIT, MISS, POLICIES, UNIQUE, Policy
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch
from scratchpipe_sim.traces.csr_trace import all_single

#: queue entries per cache slot (rounded up to a power of two): with q entries per slot a
#: compaction re-checks at most one slot's worth of current entries per (q - 1) pushes, so
#: an entry is checked 1 + 1/(q - 1) times on average (q = 2 made the kernel 1.5x slower at
#: 10% of 10M rows, 4 and 8 were equal: docs/performance.md)
QUEUE_PER_SLOT = 4

_SIZE, _FRONT, _BACK = 0, 1, 2


@POLICIES.register("lru")
class LRU(Policy):

    counts_unique = True
    stack_property = True

    def __init__(self, capacity: int, num_rows: int, **params):
        super().__init__(capacity, num_rows, **params)
        self.slots = min(self.capacity, self.num_rows)
        # row -> queue position of its last access
        self.table, self.mask, self.shift = new_pair_map(self.slots)
        entries = 1 << max(3, (QUEUE_PER_SLOT * self.slots - 1).bit_length())
        narrow = self.num_rows <= np.iinfo(np.int32).max
        self.queue = np.zeros(entries, np.int32 if narrow else np.int64)  # rows, a ring
        self.state = np.zeros(3, np.int64)  # size, front, back

    def process(self, chunk, next_use, outcome, events):
        if all_single(chunk.batch_ptr):  # batch size 1: no batch loop
            _lru_singles(chunk.ids, self.table, self.mask, self.shift, self.queue, self.slots,
                         self.state, outcome, events)
            return
        _lru_chunk(chunk.ids, chunk.batch_ptr, self.table, self.mask, self.shift, self.queue,
                   self.slots, self.state, outcome, events)

    def resident(self) -> np.ndarray:
        return pair_map_keys(self.table)


@njit(cache=True)
def _compact(queue, front, back, table, mask, shift):
    """Re-push the current entries of a full queue[front:back] after it, in order, each row's
    map entry taking its new position; returns the new back (the new front is `back`)."""
    qmask = len(queue) - 1
    w = back
    for i in range(front, back):
        if i + PF_QUEUE < back:
            prefetch(table, 2 * home(queue[(i + PF_QUEUE) & qmask], shift))
        row = queue[i & qmask]
        q = probe_pair(table, mask, shift, row)
        if table[q, 1] == i and table[q, 0] == row:
            table[q, 1] = w
            queue[w & qmask] = row
            w += 1
    return w


@njit(cache=True, inline="always")
def _evict(queue, front, back, table, mask, shift, r, p):
    """Evict the least recently used row (the oldest current queue entry; stale ones are
    popped on the way) to make room for row r, whose insert position was p: returns the new
    front (one past the victim's entry) and r's insert position after the erase. Inlined
    (Numba IR) into both kernels: as a call it cost 4% of `_lru_chunk` at batch 4096."""
    qmask = len(queue) - 1
    while True:
        i = front
        front += 1
        if front + PF_QUEUE < back:  # a hint: the bucket a later pop will probe
            prefetch(table, 2 * home(queue[(front + PF_QUEUE) & qmask], shift))
        row = queue[i & qmask]
        q = probe_pair(table, mask, shift, row)
        if table[q, 1] == i and table[q, 0] == row:
            break
    freed = erase_pair(table, mask, shift, q)
    h = home(r, shift)
    if (freed - h) & mask < (p - h) & mask:
        p = freed
    return front, p


@njit(cache=True)
def _lru_chunk(ids, batch_ptr, table, mask, shift, queue, cap, state, outcome, events):
    qmask = len(queue) - 1
    size = state[_SIZE]
    front = state[_FRONT]
    back = state[_BACK]
    n = len(ids)
    for b in range(len(batch_ptr) - 1):
        first = back  # position of the batch's first access
        fills = 0
        evictions = 0
        uniq = 0
        unknown = False
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            if j + PF_FAR < n:  # a hint only (see _prefetch.py): the map bucket ahead
                prefetch(table, 2 * home(ids[j + PF_FAR], shift))
            r = ids[j]
            if back - front > qmask:  # full: only current entries (<= cap) stay
                front, back = back, _compact(queue, front, back, table, mask, shift)
                unknown = True
            p = probe_pair(table, mask, shift, r)
            if table[p, 0] == r:
                outcome[j] = HIT
                uniq += table[p, 1] < first
                table[p, 1] = back
            else:
                outcome[j] = MISS
                fills += 1
                uniq += 1
                if size < cap:
                    size += 1
                else:  # evict the least recently used row: the oldest current entry
                    front, p = _evict(queue, front, back, table, mask, shift, r, p)
                    unknown |= front - 1 >= first
                    evictions += 1
                table[p, 0] = r
                table[p, 1] = back
            queue[back & qmask] = r
            back += 1
        events[b, 0] += fills
        events[b, 1] += evictions
        events[b, 2] += evictions
        events[b, UNIQUE] = -1 if unknown else uniq
    state[_SIZE] = size
    state[_FRONT] = front
    state[_BACK] = back


@njit(cache=True)
def _lru_singles(ids, table, mask, shift, queue, cap, state, outcome, events):
    """`_lru_chunk` for a chunk whose every batch is one access (batch size 1): the same
    decisions and events, without the batch loop and its bookkeeping (a batch's row is
    unique; only a compaction leaves the count to the engine). Why a second kernel: at batch
    size 1 that bookkeeping was ~12% of the kernel (10M Zipf accesses, 1% of 10M rows:
    0.298 -> 0.262 s), and the lead over libCacheSim's LRU there is the issue's figure.
    Both kernels evict through `_evict`, inlined: called, it cost 4% at batch 4096 and half
    this gain (Numba counts references to its arrays on every call)."""
    qmask = len(queue) - 1
    size = state[_SIZE]
    front = state[_FRONT]
    back = state[_BACK]
    n = len(ids)
    for j in range(n):
        if j + PF_FAR < n:  # a hint only (see _prefetch.py): the map bucket ahead
            prefetch(table, 2 * home(ids[j + PF_FAR], shift))
        r = ids[j]
        events[j, UNIQUE] = 1
        if back - front > qmask:  # full: only current entries (<= cap) stay
            front, back = back, _compact(queue, front, back, table, mask, shift)
            events[j, UNIQUE] = -1
        p = probe_pair(table, mask, shift, r)
        if table[p, 0] == r:
            outcome[j] = HIT
        else:
            outcome[j] = MISS
            events[j, 0] += 1
            if size < cap:
                size += 1
            else:  # evict the least recently used row: the oldest current entry
                front, p = _evict(queue, front, back, table, mask, shift, r, p)
                events[j, 1] += 1
                events[j, 2] += 1
            table[p, 0] = r
        table[p, 1] = back
        queue[back & qmask] = r
        back += 1
    state[_SIZE] = size
    state[_FRONT] = front
    state[_BACK] = back
