"""An open-addressing hash map from row id to cache slot, for the Numba policy kernels.

Why: a fully associative cache over millions of rows must find a row's slot in O(1) without
an array indexed by row (memory would grow with the table, not the cache). The map is sized
to a power of two >= 2x the cache capacity (load factor <= 1/2), uses Fibonacci hashing and
linear probing, and deletes by backward shift, so there are no tombstones and probe lengths
stay short for the whole run.

Keys are int64 row ids (>= 0); `EMPTY` (-1) marks a free position. Values are int32 slots.
"""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch

EMPTY = -1
#: prefetch distances in accesses used by the map-based kernels (lru, belady, lfu): the map
#: bucket of access j + PF_FAR, then (read from the bucket, by then in cache) the slot's own
#: data at j + PF_MID, then what a hit on it will touch next at j + PF_NEAR
PF_FAR, PF_MID, PF_NEAR = 24, 12, 4
#: how far ahead of a queue's front (in entries) `lru` prefetches the map bucket an entry's
#: check will probe: pops come in bursts at misses, so the distance is counted in pops
PF_QUEUE = 16
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def map_bits(capacity: int) -> int:
    """log2 of the table size: the smallest power of two >= 2 * capacity (at least 8)."""
    return max(3, int(2 * max(int(capacity), 1) - 1).bit_length())


def new_map(capacity: int) -> tuple[np.ndarray, np.ndarray, int, np.uint64]:
    """(keys, vals, mask, shift) of an empty map able to hold `capacity` entries."""
    bits = map_bits(capacity)
    size = 1 << bits
    return (np.full(size, EMPTY, np.int64), np.zeros(size, np.int32), size - 1,
            np.uint64(64 - bits))


@njit(cache=True)
def home(key, shift):
    """Home position of `key`: the top bits of key * 2^64/phi."""
    return np.int64((np.uint64(key) * _GOLDEN) >> shift)


@njit(cache=True)
def prefetch_home(keys, vals, shift, key):
    """Hint (see _prefetch.py): bring `key`'s home position, key and value, into cache."""
    i = home(key, shift)
    prefetch(keys, i)
    prefetch(vals, i)


@njit(cache=True)
def home_slot(keys, vals, shift, key):
    """`key`'s value when it sits at its home position, else -1: a guess that costs no
    probe loop, for prefetch hints in maps whose values are slots (>= 0)."""
    i = home(key, shift)
    return vals[i] if keys[i] == key else -1


@njit(cache=True)
def probe(keys, mask, shift, key):
    """Position holding `key`, or the free position where it would be inserted."""
    i = home(key, shift)
    while True:
        k = keys[i]
        if k == key or k == EMPTY:
            return i
        i = (i + 1) & mask


@njit(cache=True)
def erase(keys, vals, mask, shift, i):
    """Delete the entry at position `i` by shifting later entries of its run back."""
    j = i
    while True:
        j = (j + 1) & mask
        k = keys[j]
        if k == EMPTY:
            break
        h = home(k, shift)
        # The entry at j stays when its home lies cyclically in (i, j].
        if i <= j:
            if i < h <= j:
                continue
        elif h > i or h <= j:
            continue
        keys[i] = k
        vals[i] = vals[j]
        i = j
    keys[i] = EMPTY


def map_keys(keys: np.ndarray) -> np.ndarray:
    """Sorted ids stored in the map (for `Policy.resident`)."""
    return np.sort(keys[keys != EMPTY])


# -- the same map with key and value side by side ----------------------------------------------
# `table[i, 0]` key, `table[i, 1]` value: a probe that finds its key has the value in the same
# cache line (one memory access instead of two once the map outgrows the caches).


def new_pair_map(capacity: int) -> tuple[np.ndarray, int, np.uint64]:
    """(table, mask, shift) of an empty side-by-side map able to hold `capacity` entries."""
    bits = map_bits(capacity)
    size = 1 << bits
    table = np.full((size, 2), EMPTY, np.int64)
    return table, size - 1, np.uint64(64 - bits)


@njit(cache=True)
def probe_pair(table, mask, shift, key):
    """Position holding `key`, or the free position where it would be inserted."""
    i = home(key, shift)
    while True:
        k = table[i, 0]
        if k == key or k == EMPTY:
            return i
        i = (i + 1) & mask


@njit(cache=True)
def erase_pair(table, mask, shift, i):
    """Delete the entry at position `i` by backward shift (see `erase`). Returns the position
    it left free: the only position the erase frees
    (the shift moves entries back within their run and stops at the run's free end), so a
    caller holding an insert position p for a key with home h knows the new one without a
    second probe: the freed position if it lies cyclically in [h, p), else p."""
    j = i
    while True:
        j = (j + 1) & mask
        k = table[j, 0]
        if k == EMPTY:
            break
        h = home(k, shift)
        if i <= j:
            if i < h <= j:
                continue
        elif h > i or h <= j:
            continue
        table[i, 0] = k
        table[i, 1] = table[j, 1]
        i = j
    table[i, 0] = EMPTY
    return i


def pair_map_keys(table: np.ndarray) -> np.ndarray:
    """Sorted ids stored in a side-by-side map."""
    return map_keys(table[:, 0])
