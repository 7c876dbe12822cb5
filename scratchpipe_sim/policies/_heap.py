"""A binary max-heap of (key, slot) pairs in flat numpy arrays, for the Numba kernels.

Why lazy deletion: Belady updates a resident row's next use on every hit; instead of a
decrease-key, the new (key, slot) is pushed and the old pair goes stale. A pair is valid
when `slot_key[slot] == key`; stale pairs are discarded when they reach the top. When the
arrays are full the heap is rebuilt from the slots (one pair each), so memory stays
~3x capacity and the rebuild costs O(capacity) per ~capacity pushes: O(1) amortized.
"""

from __future__ import annotations

import numba as nb


@nb.njit(cache=True)
def sift_up(hk, hv, i):
    k = hk[i]
    v = hv[i]
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] >= k:
            break
        hk[i] = hk[parent]
        hv[i] = hv[parent]
        i = parent
    hk[i] = k
    hv[i] = v


@nb.njit(cache=True)
def sift_down(hk, hv, i, n):
    k = hk[i]
    v = hv[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and hk[c + 1] > hk[c]:
            c += 1
        if hk[c] <= k:
            break
        hk[i] = hk[c]
        hv[i] = hv[c]
        i = c
    hk[i] = k
    hv[i] = v


@nb.njit(cache=True)
def rebuild(hk, hv, slot_key, nslots):
    """Heap of exactly one pair per slot 0..nslots-1; returns its size."""
    for s in range(nslots):
        hk[s] = slot_key[s]
        hv[s] = s
    for i in range(nslots // 2 - 1, -1, -1):
        sift_down(hk, hv, i, nslots)
    return nslots


@nb.njit(cache=True)
def push(hk, hv, n, key, slot, slot_key, nslots):
    """Push (key, slot) (slot_key[slot] must already be key); returns the new size."""
    if n == len(hk):
        return rebuild(hk, hv, slot_key, nslots)
    hk[n] = key
    hv[n] = slot
    sift_up(hk, hv, n)
    return n + 1


@nb.njit(cache=True)
def drop_stale(hk, hv, n, slot_key):
    """Pop stale pairs off the top; returns the new size (the top is then valid)."""
    while n > 0 and slot_key[hv[0]] != hk[0]:
        n -= 1
        hk[0] = hk[n]
        hv[0] = hv[n]
        if n > 0:
            sift_down(hk, hv, 0, n)
    return n


@nb.njit(cache=True)
def pop_top(hk, hv, n):
    """Remove the top pair; returns the new size."""
    n -= 1
    hk[0] = hk[n]
    hv[0] = hv[n]
    if n > 0:
        sift_down(hk, hv, 0, n)
    return n
