"""`lru`: fully associative, exact textbook LRU, processed access by access.

Why this shape: a hash map row -> stamp of the row's last access (key and stamp side by
side: one cache line per lookup, sized to the capacity) plus a queue of (row, stamp), one
entry pushed per access, oldest first. The least recently used row is the oldest queue
entry that is still *current* (its stamp is the row's stamp in the map); entries made stale
by a later access to their row are skipped when the front is popped, and the whole queue is
compacted to its current entries (at most `capacity`) when it fills. A hit therefore writes
only the map line it has just read and appends to the queue (sequential), where a linked
list relinks three random list nodes; each entry is checked about once (a map probe the
kernel prefetches, the queue being known ahead), and memory grows with the cache, not with
the rows or the trace (`QUEUE_PER_SLOT` entries of 16 B per slot, at most twice that).

Accesses are served in stream order; inside a mini-batch the first access of a missing row
is a MISS (a fill) and later ones hit while the row stays resident. Every eviction writes
the row back. The stamps also give each batch's unique rows (`counts_unique`): a hit is the
row's first access in the batch when its old stamp precedes the batch, a miss always is,
unless the batch evicted a row it had itself used (then the engine counts that batch).
"""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.policies._hashmap import (
    erase_pair,
    home,
    new_pair_map,
    pair_map_keys,
    probe_pair,
)
from scratchpipe_sim.policies._prefetch import PF_FAR, PF_QUEUE, prefetch
from scratchpipe_sim.policies.base import HIT, MISS, POLICIES, UNIQUE, Policy
from scratchpipe_sim.traces._jit import njit

#: queue entries per cache slot (rounded up to a power of two): with q entries per slot a
#: compaction re-checks at most one slot's worth of current entries per (q - 1) pushes, so
#: an entry is checked 1 + 1/(q - 1) times on average (q = 2 made the kernel 1.5x slower at
#: 10% of 10M rows, 4 and 8 were equal; docs/performance.md)
QUEUE_PER_SLOT = 4

_SIZE, _CLOCK, _FRONT, _BACK = 0, 1, 2, 3


@POLICIES.register("lru")
class LRU(Policy):

    counts_unique = True

    def __init__(self, capacity: int, num_rows: int, **params):
        super().__init__(capacity, num_rows, **params)
        self.slots = min(self.capacity, self.num_rows)
        self.table, self.mask, self.shift = new_pair_map(self.slots)  # row -> last stamp
        entries = 1 << max(3, (QUEUE_PER_SLOT * self.slots - 1).bit_length())
        self.queue = np.zeros((entries, 2), np.int64)  # (row, stamp), a ring
        self.state = np.zeros(4, np.int64)  # size, clock, front, back

    def process(self, chunk, next_use, outcome, events):
        _lru_chunk(chunk.ids, chunk.batch_ptr, self.table, self.mask, self.shift, self.queue,
                   self.slots, self.state, outcome, events)

    def resident(self) -> np.ndarray:
        return pair_map_keys(self.table)


@njit(cache=True)
def _is_current(table, mask, shift, row, stamp):
    """Map position of `row` if `stamp` is its last access (a current queue entry), else -1."""
    q = probe_pair(table, mask, shift, row)
    if table[q, 0] == row and table[q, 1] == stamp:
        return q
    return -1


@njit(cache=True)
def _compact(queue, front, back, table, mask, shift):
    """Keep only the current entries of queue[front:back] (in order); returns the new back."""
    qmask = len(queue) - 1
    w = front
    for i in range(front, back):
        if i + PF_QUEUE < back:
            prefetch(table, 2 * home(queue[(i + PF_QUEUE) & qmask, 0], shift))
        e = i & qmask
        row = queue[e, 0]
        stamp = queue[e, 1]
        if _is_current(table, mask, shift, row, stamp) >= 0:
            d = w & qmask
            queue[d, 0] = row
            queue[d, 1] = stamp
            w += 1
    return w


@njit(cache=True)
def _lru_chunk(ids, batch_ptr, table, mask, shift, queue, cap, state, outcome, events):
    qmask = len(queue) - 1
    size = state[_SIZE]
    clock = state[_CLOCK]
    front = state[_FRONT]
    back = state[_BACK]
    n = len(ids)
    for b in range(len(batch_ptr) - 1):
        first = clock  # stamp of the batch's first access
        fills = 0
        evictions = 0
        uniq = 0
        self_evicted = False
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            if j + PF_FAR < n:  # a hint only (see _prefetch.py): the map bucket ahead
                prefetch(table, 2 * home(ids[j + PF_FAR], shift))
            r = ids[j]
            t = clock
            clock += 1
            p = probe_pair(table, mask, shift, r)
            if table[p, 0] == r:
                outcome[j] = HIT
                uniq += table[p, 1] < first
                table[p, 1] = t
            else:
                outcome[j] = MISS
                fills += 1
                uniq += 1
                if size < cap:
                    size += 1
                else:  # evict the least recently used row: the oldest current entry
                    while True:
                        f = front & qmask
                        front += 1
                        if front + PF_QUEUE < back:
                            prefetch(table, 2 * home(queue[(front + PF_QUEUE) & qmask, 0],
                                                     shift))
                        q = _is_current(table, mask, shift, queue[f, 0], queue[f, 1])
                        if q >= 0:
                            break
                    self_evicted |= table[q, 1] >= first
                    evictions += 1
                    freed = erase_pair(table, mask, shift, q)
                    # r's insert position: the first free one from its home, which the
                    # erase changed only if it freed a position in [home(r), p)
                    h = home(r, shift)
                    if (freed - h) & mask < (p - h) & mask:
                        p = freed
                table[p, 0] = r
                table[p, 1] = t
            if back - front > qmask:  # full: only current entries (<= cap) stay
                back = _compact(queue, front, back, table, mask, shift)
            e = back & qmask
            queue[e, 0] = r
            queue[e, 1] = t
            back += 1
        events[b, 0] += fills
        events[b, 1] += evictions
        events[b, 2] += evictions
        events[b, UNIQUE] = -1 if self_evicted else uniq
    state[_SIZE] = size
    state[_CLOCK] = clock
    state[_FRONT] = front
    state[_BACK] = back
