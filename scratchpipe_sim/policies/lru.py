"""`lru`: fully associative, exact textbook LRU, processed access by access.

Why this shape: the cache is a doubly linked list over `capacity` slots (most recent at the
head) plus a hash map row -> slot sized to the capacity (key and slot side by side: one
cache line per lookup), so every access is O(1) and memory
grows with the cache, not with the number of rows or the trace length. Accesses are served
in stream order; inside a mini-batch the first access of a missing row is a MISS (a fill)
and later ones hit while the row stays resident. Every eviction writes the row back.
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
from scratchpipe_sim.policies._prefetch import PF_FAR, PF_MID, PF_NEAR, prefetch
from scratchpipe_sim.policies.base import HIT, MISS, POLICIES, Policy
from scratchpipe_sim.traces._jit import njit

_SIZE, _HEAD, _TAIL = 0, 1, 2


@POLICIES.register("lru")
class LRU(Policy):

    def __init__(self, capacity: int, num_rows: int, **params):
        super().__init__(capacity, num_rows, **params)
        slots = min(self.capacity, self.num_rows)
        self.table, self.mask, self.shift = new_pair_map(slots)  # row -> slot
        self.slot_id = np.full(slots, -1, np.int64)
        # prev / next slot side by side: one cache line per slot update
        self.links = np.full((slots, 2), -1, np.int32)
        self.state = np.array([0, -1, -1], np.int64)

    def process(self, chunk, next_use, outcome, events):
        _lru_chunk(chunk.ids, chunk.batch_ptr, self.table, self.mask, self.shift,
                   self.slot_id, self.links, self.state, outcome, events)

    def resident(self) -> np.ndarray:
        return pair_map_keys(self.table)


@njit(cache=True)
def _lru_chunk(ids, batch_ptr, table, mask, shift, slot_id, links, state, outcome, events):
    cap = len(slot_id)
    size = state[_SIZE]
    head = state[_HEAD]
    tail = state[_TAIL]
    n = len(ids)
    for b in range(len(batch_ptr) - 1):
        fills = 0
        evictions = 0
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            # hints only (see _prefetch.py): the map bucket, the slot's links, then the
            # links of its list neighbours (a hit unlinks the slot between them)
            if j + PF_FAR < n:
                prefetch(table, 2 * home(ids[j + PF_FAR], shift))
            if j + PF_MID < n:
                q = home(ids[j + PF_MID], shift)
                if table[q, 0] == ids[j + PF_MID]:
                    prefetch(links, 2 * table[q, 1])
            if j + PF_NEAR < n:
                q = home(ids[j + PF_NEAR], shift)
                if table[q, 0] == ids[j + PF_NEAR]:
                    q = table[q, 1]
                    if links[q, 0] >= 0:
                        prefetch(links, 2 * links[q, 0])
                    if links[q, 1] >= 0:
                        prefetch(links, 2 * links[q, 1])
            r = ids[j]
            p = probe_pair(table, mask, shift, r)
            if table[p, 0] == r:
                outcome[j] = HIT
                s = table[p, 1]
                if s != head:  # unlink s, then push it at the head
                    pv = links[s, 0]
                    nx = links[s, 1]
                    links[pv, 1] = nx
                    if nx >= 0:
                        links[nx, 0] = pv
                    else:
                        tail = pv
                    links[s, 0] = -1
                    links[s, 1] = head
                    links[head, 0] = s
                    head = s
                continue
            outcome[j] = MISS
            fills += 1
            if size < cap:
                s = size
                size += 1
                if head >= 0:
                    links[head, 0] = s
                else:
                    tail = s
                links[s, 0] = -1
                links[s, 1] = head
                head = s
            else:  # reuse the least recently used slot
                s = tail
                erase_pair(table, mask, shift, probe_pair(table, mask, shift, slot_id[s]))
                evictions += 1
                p = probe_pair(table, mask, shift, r)  # the erase may have moved entries
                if s != head:
                    tail = links[s, 0]
                    # the next victims: the new tail's bucket, its predecessor's slot
                    prefetch(table, 2 * home(slot_id[tail], shift))
                    q = links[tail, 0]
                    if q >= 0:
                        prefetch(slot_id, q)
                        prefetch(links, 2 * q)
                    links[tail, 1] = -1
                    links[s, 0] = -1
                    links[s, 1] = head
                    links[head, 0] = s
                    head = s
            table[p, 0] = r
            table[p, 1] = s
            slot_id[s] = r
        events[b, 0] += fills
        events[b, 1] += evictions
        events[b, 2] += evictions
    state[_SIZE] = size
    state[_HEAD] = head
    state[_TAIL] = tail
