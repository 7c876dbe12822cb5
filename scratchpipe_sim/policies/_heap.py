"""An indexed binary max-heap of cache slots keyed by int64, for the Numba MIN kernels.

Why indexed (each slot knows its heap position) rather than lazy deletion: Belady updates a
resident row's next use on every hit, and the new next use is always later than the old one
(the old one was this very access), so a hit is an increase-key: a sift-up from the slot's
own position. An eviction replaces the top with the incoming row's key and sifts it down,
one pass instead of a pop plus a push. The heap always holds exactly one entry per occupied
slot: no stale entries, no rebuilds, memory 2 arrays of capacity entries.

Arrays: `hk[i]` key and `hs[i]` slot at heap position i; `pos[slot]` = its position.
"""

from __future__ import annotations

from scratchpipe_sim.traces._jit import njit


@njit(cache=True)
def sift_up(hk, hs, pos, i):
    k = hk[i]
    s = hs[i]
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] >= k:
            break
        hk[i] = hk[parent]
        hs[i] = hs[parent]
        pos[hs[i]] = i
        i = parent
    hk[i] = k
    hs[i] = s
    pos[s] = i


@njit(cache=True)
def sift_down(hk, hs, pos, i, n):
    k = hk[i]
    s = hs[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and hk[c + 1] > hk[c]:
            c += 1
        if hk[c] <= k:
            break
        hk[i] = hk[c]
        hs[i] = hs[c]
        pos[hs[i]] = i
        i = c
    hk[i] = k
    hs[i] = s
    pos[s] = i


@njit(cache=True)
def insert(hk, hs, pos, n, key, slot):
    """Add `slot` with `key` to a heap of n entries (n < len(hk))."""
    hk[n] = key
    hs[n] = slot
    sift_up(hk, hs, pos, n)


@njit(cache=True)
def increase_key(hk, hs, pos, slot, key):
    """Raise `slot`'s key to `key` (>= its current key)."""
    i = pos[slot]
    hk[i] = key
    sift_up(hk, hs, pos, i)


@njit(cache=True)
def replace_top(hk, hs, pos, n, key):
    """Give the top slot (the victim, reused by the incoming row) a new key."""
    hk[0] = key
    sift_down(hk, hs, pos, 0, n)
