"""`belady` and `belady-bypass`: offline MIN, the bound every online policy is judged by.

`belady` admits every missing row (forced admission, as libCacheSim's Belady): with a full
cache it evicts the resident row whose next use is farthest, never-used-again rows first.
`belady-bypass` may refuse admission: the incoming row is itself a candidate victim, and if
its next use is at least as far as every resident's, it is served from host memory
(UNPLACED) and the cache is unchanged. With free space both admit. Next uses are global
stream positions from the engine (`needs_next_use`), unique per access, so the only ties are
between never-used-again rows, and which of those goes does not change any count.
An indexed max-heap on next use (`_heap.py`) finds the victim in O(log capacity).
"""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.policies._hashmap import (
    PF_FAR,
    PF_MID,
    PF_NEAR,
    erase,
    home_slot,
    map_keys,
    new_map,
    prefetch_home,
    probe,
)
from scratchpipe_sim.policies._heap import increase_key, insert, replace_top
from scratchpipe_sim.policies.base import HIT, MISS, POLICIES, UNPLACED, Policy
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch

_SIZE, _HEAP = 0, 1


class _MIN(Policy):
    needs_next_use = True
    bypass = False

    def __init__(self, capacity: int, num_rows: int, **params):
        super().__init__(capacity, num_rows, **params)
        slots = min(self.capacity, self.num_rows)
        self.keys, self.vals, self.mask, self.shift = new_map(slots)
        self.slot_id = np.full(slots, -1, np.int64)
        self.hk = np.zeros(slots, np.int64)  # heap: next use, slot; pos: slot -> heap index
        self.hs = np.zeros(slots, np.int32)
        self.pos = np.zeros(slots, np.int32)
        self.state = np.zeros(1, np.int64)

    def process(self, chunk, next_use, outcome, events):
        _min_chunk(chunk.ids, chunk.batch_ptr, next_use, self.bypass, self.keys, self.vals,
                   self.mask, self.shift, self.slot_id, self.hk, self.hs, self.pos,
                   self.state, outcome, events)

    def resident(self) -> np.ndarray:
        return map_keys(self.keys)


@POLICIES.register("belady")
class Belady(_MIN):
    """Belady's MIN: evict the row reused furthest in the future."""


@POLICIES.register("belady-bypass")
class BeladyBypass(_MIN):
    bypass = True


@njit(cache=True)
def _min_chunk(ids, batch_ptr, next_use, bypass, keys, vals, mask, shift, slot_id, hk, hs,
               pos, state, outcome, events):
    cap = len(slot_id)
    size = state[0]
    n = len(ids)
    for b in range(len(batch_ptr) - 1):
        fills = 0
        evictions = 0
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            # hints only (see _prefetch.py): the map bucket, the slot's heap position, the
            # heap entry
            if j + PF_FAR < n:
                prefetch_home(keys, vals, shift, ids[j + PF_FAR])
            if j + PF_MID < n:
                s = home_slot(keys, vals, shift, ids[j + PF_MID])
                if s >= 0:
                    prefetch(pos, s)
            if j + PF_NEAR < n:
                s = home_slot(keys, vals, shift, ids[j + PF_NEAR])
                if s >= 0:
                    prefetch(hk, pos[s])
                    prefetch(hs, pos[s])
            r = ids[j]
            nu = next_use[j]
            p = probe(keys, mask, shift, r)
            if keys[p] == r:
                outcome[j] = HIT
                increase_key(hk, hs, pos, vals[p], nu)
                continue
            if size < cap:
                s = size
                insert(hk, hs, pos, size, nu, s)
                size += 1
            else:
                if bypass and nu >= hk[0]:
                    outcome[j] = UNPLACED
                    continue
                s = hs[0]  # the farthest next use: evict it, reuse its slot
                erase(keys, vals, mask, shift, probe(keys, mask, shift, slot_id[s]))
                evictions += 1
                p = probe(keys, mask, shift, r)
                replace_top(hk, hs, pos, size, nu)
            outcome[j] = MISS
            fills += 1
            keys[p] = r
            vals[p] = s
            slot_id[s] = r
        events[b, 0] += fills
        events[b, 1] += evictions
        events[b, 2] += evictions
    state[0] = size
