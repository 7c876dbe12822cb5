"""`lfu`: fully associative, textbook in-cache LFU, processed access by access.

Frequency is the number of accesses since the row was inserted (reset to 1 when a row is
(re)inserted after an eviction). The victim is the least-frequent resident row; ties go to
the least recently used of them. Why O(1) frequency buckets (Shah, Mitra, Matani 2010): a
doubly linked list of buckets in increasing frequency, each holding its rows in recency
order (least recent first), so a hit moves one row to the next bucket and a miss evicts the
head of the first bucket, each in constant time. A row enters bucket f at its f-th access,
so recency inside a bucket is the time of the last access. Memory grows with capacity.
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
from scratchpipe_sim.policies.base import HIT, MISS, POLICIES, Policy
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch

# state: resident rows, first (least-frequent) bucket, free-bucket stack depth
_SIZE, _FIRST, _NFREE = 0, 1, 2


@POLICIES.register("lfu")
class LFU(Policy):

    def __init__(self, capacity: int, num_rows: int, **params):
        super().__init__(capacity, num_rows, **params)
        slots = min(self.capacity, self.num_rows)
        self.keys, self.vals, self.mask, self.shift = new_map(slots)
        self.slot_id = np.full(slots, -1, np.int64)
        # per slot: previous / next row in its bucket, and its bucket (side by side, padded
        # to 16 bytes: one cache line per slot)
        self.items = np.full((slots, 4), -1, np.int32)
        nbuckets = slots + 1  # <= slots non-empty buckets plus one being created
        self.bfreq = np.zeros(nbuckets, np.int64)
        # per bucket: previous / next bucket, first (LRU) / last (MRU) row (side by side)
        self.blinks = np.full((nbuckets, 4), -1, np.int32)
        self.free = np.arange(nbuckets - 1, -1, -1, dtype=np.int32)
        self.state = np.array([0, -1, nbuckets], np.int64)

    def process(self, chunk, next_use, outcome, events):
        _lfu_chunk(chunk.ids, chunk.batch_ptr, self.keys, self.vals, self.mask, self.shift,
                   self.slot_id, self.items, self.bfreq, self.blinks, self.free, self.state,
                   outcome, events)

    def resident(self) -> np.ndarray:
        return map_keys(self.keys)

    def frequencies(self) -> dict[int, int]:
        """Resident row -> in-cache frequency (for tests)."""
        size = int(self.state[_SIZE])
        return {int(self.slot_id[s]): int(self.bfreq[self.items[s, 2]]) for s in range(size)}


_IP, _IN, _IB = 0, 1, 2  # item columns
_BP, _BN, _BH, _BT = 0, 1, 2, 3  # bucket columns


@njit(cache=True)
def _item_remove(items, blinks, s):
    """Unlink slot s from its bucket's row list; True when the bucket became empty."""
    b = items[s, _IB]
    p = items[s, _IP]
    n = items[s, _IN]
    if p >= 0:
        items[p, _IN] = n
    else:
        blinks[b, _BH] = n
    if n >= 0:
        items[n, _IP] = p
    else:
        blinks[b, _BT] = p
    return blinks[b, _BH] < 0


@njit(cache=True)
def _item_append(items, blinks, s, b):
    """Append slot s as the most recent row of bucket b."""
    t = blinks[b, _BT]
    items[s, _IP] = t
    items[s, _IN] = -1
    items[s, _IB] = b
    if t >= 0:
        items[t, _IN] = s
    else:
        blinks[b, _BH] = s
    blinks[b, _BT] = s


@njit(cache=True)
def _lfu_chunk(ids, batch_ptr, keys, vals, mask, shift, slot_id, items, bfreq, blinks, free,
               state, outcome, events):
    cap = len(slot_id)
    size = state[_SIZE]
    first = state[_FIRST]
    nfree = state[_NFREE]
    n = len(ids)
    for b in range(len(batch_ptr) - 1):
        fills = 0
        evictions = 0
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            # hints only (see _prefetch.py): map bucket, then the slot's item, then its
            # list neighbours and bucket
            if j + PF_FAR < n:
                prefetch_home(keys, vals, shift, ids[j + PF_FAR])
            if j + PF_MID < n:
                s = home_slot(keys, vals, shift, ids[j + PF_MID])
                if s >= 0:
                    prefetch(items, 4 * s)
            if j + PF_NEAR < n:
                s = home_slot(keys, vals, shift, ids[j + PF_NEAR])
                if s >= 0:
                    if items[s, _IP] >= 0:
                        prefetch(items, 4 * items[s, _IP])
                    if items[s, _IN] >= 0:
                        prefetch(items, 4 * items[s, _IN])
                    q = items[s, _IB]
                    if q >= 0:
                        prefetch(blinks, 4 * q)
                        prefetch(bfreq, q)
            r = ids[j]
            p = probe(keys, mask, shift, r)
            if keys[p] == r:
                outcome[j] = HIT
                s = vals[p]
                bk = items[s, _IB]
                f = bfreq[bk]
                nb_ = blinks[bk, _BN]
                if nb_ < 0 or bfreq[nb_] != f + 1:  # create bucket f+1 after bk
                    nfree -= 1
                    nb_ = free[nfree]
                    bfreq[nb_] = f + 1
                    blinks[nb_, _BH] = -1
                    blinks[nb_, _BT] = -1
                    blinks[nb_, _BP] = bk
                    nn = blinks[bk, _BN]
                    blinks[nb_, _BN] = nn
                    if nn >= 0:
                        blinks[nn, _BP] = nb_
                    blinks[bk, _BN] = nb_
                if _item_remove(items, blinks, s):  # drop the empty bucket
                    pb = blinks[bk, _BP]
                    if pb >= 0:
                        blinks[pb, _BN] = nb_
                    else:
                        first = nb_
                    blinks[nb_, _BP] = pb
                    free[nfree] = bk
                    nfree += 1
                _item_append(items, blinks, s, nb_)
                continue
            outcome[j] = MISS
            fills += 1
            if size < cap:
                s = size
                size += 1
            else:  # evict the least recent row of the least-frequent bucket
                bk = first
                s = blinks[bk, _BH]
                erase(keys, vals, mask, shift, probe(keys, mask, shift, slot_id[s]))
                evictions += 1
                p = probe(keys, mask, shift, r)
                if _item_remove(items, blinks, s):
                    first = blinks[bk, _BN]
                    if first >= 0:
                        blinks[first, _BP] = -1
                    free[nfree] = bk
                    nfree += 1
            if first < 0 or bfreq[first] != 1:  # a bucket of frequency 1 at the front
                nfree -= 1
                nb_ = free[nfree]
                bfreq[nb_] = 1
                blinks[nb_, _BH] = -1
                blinks[nb_, _BT] = -1
                blinks[nb_, _BP] = -1
                blinks[nb_, _BN] = first
                if first >= 0:
                    blinks[first, _BP] = nb_
                first = nb_
            _item_append(items, blinks, s, first)
            keys[p] = r
            vals[p] = s
            slot_id[s] = r
            if size == cap:  # the next victim (a hint): its row, then that row's bucket
                v = blinks[first, _BH]
                prefetch(items, 4 * v)
                prefetch_home(keys, vals, shift, slot_id[v])
        events[b, 0] += fills
        events[b, 1] += evictions
        events[b, 2] += evictions
    state[_SIZE] = size
    state[_FIRST] = first
    state[_NFREE] = nfree
