"""ScratchPipe's lookahead scratchpad (Kwon & Rhu, ISCA'22): a cache that sees the future.

Why it never misses in training: batches are *planned* W-1 batches ahead of training.
plan(j) runs beside train(j-W+1); at plan(j) the rows of batches j-W+1..j are pinned (in
flight or being planned). Rows of batch j that are not resident are filled (the first access
MISS, later ones HIT), evicting only unpinned rows:

1. rows with no use in the window j+1..j+W, least recently used first;
2. otherwise the row whose next use is farthest (by access position).

After plan(j), train(j-W+1) runs and we *check* that all its rows are resident
(`train_misses`, which must stay 0); the last W-1 batches are trained in `finish()`.
If the pinned set exceeds the capacity, `on_overflow="error"` raises a UserError naming the
minimum capacity (`min_scratchpipe_capacity`); `on_overflow="stall"` serves the surplus rows
of that batch from host memory (UNPLACED, never cached) and counts the batch in `stalls`.

Data structures, all O(capacity + window): a hash map row -> slot, a FIFO of unpinned rows
in last-use order (rows are unpinned batch by batch, so the order is already sorted: a heap
is not needed), a lazy-deletion max-heap of unpinned rows by next-use position, and the ids
of the last W batches (to unpin them and to check training).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numba as nb
import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies._hashmap import EMPTY, erase, new_map, probe
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
from scratchpipe_sim.traces.trace import DEFAULT_CHUNK_ACCESSES, Chunk, Trace

ON_OVERFLOW = ("error", "stall")
# indices into the int64 `st` state vector of the kernel
_USED, _QHEAD, _QTAIL, _HSIZE, _TRAIN_MISSES, _STALLS = range(6)


# -- minimum capacity ---------------------------------------------------------------------------
def min_scratchpipe_capacity(trace: Trace, lookahead: int,
                             chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> int:
    """max over j of |union of the rows of batches j-W+1..j|: the smallest capacity that works.

    One pass; keeps the last batch each row was seen in (O(rows), a one-off scan) and a
    ring of W+1 per-batch counts.
    """
    w = _check_lookahead(lookahead)
    last = np.full(trace.total_rows, -1, np.int64)
    hist = np.zeros(w + 1, np.int64)
    st = np.zeros(2, np.int64)  # current union size, best so far
    for chunk in trace.iter_chunks(chunk_accesses):
        _min_cap_chunk(chunk.ids, chunk.batch_ptr, chunk.first_batch, w, last, hist, st)
    return int(st[1])


@nb.njit(cache=True)
def _min_cap_chunk(ids, batch_ptr, first_batch, w, last, hist, st):
    ring = w + 1
    for b in range(len(batch_ptr) - 1):
        j = first_batch + b
        if j - w >= 0:
            st[0] -= hist[(j - w) % ring]  # rows last seen in j-W leave the window
        hist[j % ring] = 0
        for p in range(batch_ptr[b], batch_ptr[b + 1]):
            r = ids[p]
            prev = last[r]
            if prev == j:
                continue
            if prev >= 0 and prev >= j - w + 1:
                hist[prev % ring] -= 1
            else:
                st[0] += 1
            hist[j % ring] += 1
            last[r] = j
        if st[0] > st[1]:
            st[1] = st[0]


def _check_lookahead(lookahead: Any) -> int:
    if isinstance(lookahead, bool) or int(lookahead) != lookahead or lookahead < 1:
        raise UserError(f"lookahead must be a whole number of batches >= 1, got {lookahead}",
                        field="lookahead")
    return int(lookahead)


# -- the kernel ---------------------------------------------------------------------------------
@nb.njit(cache=True)
def _lookup(keys, vals, mask, shift, r):
    i = probe(keys, mask, shift, r)
    return vals[i] if keys[i] == r else -1


@nb.njit(cache=True)
def _heap_push(hk, hr, hl, n, key, row, lastp):
    i = n
    while i > 0:
        par = (i - 1) >> 1
        if hk[par] >= key:
            break
        hk[i], hr[i], hl[i] = hk[par], hr[par], hl[par]
        i = par
    hk[i], hr[i], hl[i] = key, row, lastp


@nb.njit(cache=True)
def _heap_pop(hk, hr, hl, n):
    """Remove the root of a max-heap of n entries (returns nothing; caller read it)."""
    n -= 1
    key, row, lastp = hk[n], hr[n], hl[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and hk[c + 1] > hk[c]:
            c += 1
        if hk[c] <= key:
            break
        hk[i], hr[i], hl[i] = hk[c], hr[c], hl[c]
        i = c
    if n > 0:
        hk[i], hr[i], hl[i] = key, row, lastp


@nb.njit(cache=True)
def _unpin(s, p, su, qs, ql, st):
    """The row in slot s was last used at position p, in a batch that just left the window:
    queue it as evictable. Entries are (slot, last-use position); one is stale once the
    slot's last use changed (the row was used again, or evicted and the slot refilled)."""
    if s < 0 or su[s, 0] != p:
        return
    n = len(qs)
    if st[_QTAIL] - st[_QHEAD] == n:  # ring full of mostly stale pairs: keep the valid ones
        ts, tl = np.empty(n, np.int64), np.empty(n, np.int64)
        k = 0
        for i in range(st[_QHEAD], st[_QTAIL]):
            a, b = qs[i % n], ql[i % n]
            if su[a, 0] == b:
                ts[k], tl[k] = a, b
                k += 1
        qs[:k] = ts[:k]
        ql[:k] = tl[:k]
        st[_QHEAD], st[_QTAIL] = 0, k
    qs[st[_QTAIL] % n], ql[st[_QTAIL] % n] = s, p
    st[_QTAIL] += 1


@nb.njit(cache=True)
def _heap_add(su, hk, hs, hl, st, s, p):
    if st[_HSIZE] == len(hk):  # compact the heap and rebuild it
        n = st[_HSIZE]
        k = 0
        for i in range(n):
            if su[hs[i], 0] == hl[i]:
                hk[k], hs[k], hl[k] = hk[i], hs[i], hl[i]
                k += 1
        st[_HSIZE] = 0
        for i in range(k):
            _heap_push(hk, hs, hl, st[_HSIZE], hk[i], hs[i], hl[i])
            st[_HSIZE] += 1
    _heap_push(hk, hs, hl, st[_HSIZE], su[s, 1], s, p)
    st[_HSIZE] += 1


@nb.njit(cache=True)
def _victim(su, limit, qs, ql, hk, hs, hl, st):
    """Slot to evict, or -1 when every resident row is pinned.

    The FIFO holds every unpinned row in last-use order. Popping it, a row with no use in
    the window is the victim; a row used inside the window moves to the next-use heap (it
    stays in that class until it is used again, which makes its entry stale). The heap is
    consulted only once the FIFO is empty, so it then holds every unpinned row.
    """
    n = len(qs)
    while st[_QHEAD] < st[_QTAIL]:
        s, p = qs[st[_QHEAD] % n], ql[st[_QHEAD] % n]
        st[_QHEAD] += 1
        if su[s, 0] != p:
            continue  # stale: used again (pinned; it will be queued again) or evicted
        if su[s, 1] >= limit:
            return s  # no use in the window: least recently used first
        _heap_add(su, hk, hs, hl, st, s, p)
    while st[_HSIZE] > 0:
        s, p = hs[0], hl[0]
        _heap_pop(hk, hs, hl, st[_HSIZE])
        st[_HSIZE] -= 1
        if su[s, 0] == p:
            return s  # farthest next use
    return -1


@nb.njit(cache=True)
def _scratchpipe_chunk(ext_ids, ext_ptr, ext_first_batch, first_new, ext_base, next_use, gptr,
                       num_batches, w, stall, keys, vals, mask, shift, slot_row, su, free,
                       qs, ql, hk, hs, hl, st, ext_out, ext_slot, events):
    """Plan every new batch of the chunk, then train the one W-1 batches behind it.

    `ext_*` = the last W batches of earlier chunks followed by this chunk's; positions are
    local to `ext_ids` (global = ext_base + local). `ext_slot[q]` is the slot that access q
    was planned into (-1: unplaced) - what the trainer reads. Returns -1, or the global
    index of the batch whose pinned set overflowed (on_overflow=error).
    """
    cap = len(slot_row)
    carry = ext_ptr[first_new]
    nb_ext = len(ext_ptr) - 1
    for lb in range(first_new, nb_ext):
        j = ext_first_batch + lb
        lo, hi = ext_ptr[lb], ext_ptr[lb + 1]
        # batch j-W leaves the pinned window
        ub = lb - w
        if ub >= 0:
            for q in range(ext_ptr[ub], ext_ptr[ub + 1]):
                _unpin(ext_slot[q], ext_base + q, su, qs, ql, st)
        limit = gptr[min(j + w + 1, num_batches)]
        # pass 1: resident rows hit and are pinned before any victim is chosen
        for q in range(lo, hi):
            s = _lookup(keys, vals, mask, shift, ext_ids[q])
            ext_slot[q] = s
            if s >= 0:
                ext_out[q] = HIT
                su[s, 0] = ext_base + q
                su[s, 1] = next_use[q - carry]
            else:
                ext_out[q] = MISS
        # pass 2: fill the missing rows
        stalled = False
        for q in range(lo, hi):
            if ext_out[q] != MISS:
                continue
            r = ext_ids[q]
            i = probe(keys, mask, shift, r)
            if keys[i] == r:
                ext_out[q] = HIT  # filled earlier in this batch
                s = vals[i]
            else:
                if st[_USED] < cap:
                    s = free[st[_USED]]
                    st[_USED] += 1
                else:
                    s = _victim(su, limit, qs, ql, hk, hs, hl, st)
                    if s < 0:
                        if not stall:
                            return j
                        ext_out[q] = UNPLACED
                        stalled = True
                        continue
                    erase(keys, vals, mask, shift, probe(keys, mask, shift, slot_row[s]))
                    events[lb - first_new, EVICTIONS] += 1
                    events[lb - first_new, WRITEBACKS] += 1
                    i = probe(keys, mask, shift, r)
                keys[i] = r
                vals[i] = s
                slot_row[s] = r
                events[lb - first_new, FILLS] += 1
            ext_slot[q] = s
            su[s, 0] = ext_base + q
            su[s, 1] = next_use[q - carry]
        if stalled:
            st[_STALLS] += 1
        # train(j-W+1): every row it reads must be in the slot it was planned into
        tb = lb - w + 1
        if tb >= 0:
            _train_check(ext_ids, ext_ptr, tb, ext_out, ext_slot, slot_row, st)
    return -1


@nb.njit(cache=True)
def _train_check(ext_ids, ext_ptr, tb, ext_out, ext_slot, slot_row, st):
    for q in range(ext_ptr[tb], ext_ptr[tb + 1]):
        if ext_out[q] == UNPLACED:
            continue  # served from host memory (stall mode), by design
        s = ext_slot[q]
        if s < 0 or slot_row[s] != ext_ids[q]:
            st[_TRAIN_MISSES] += 1


# -- the policy ---------------------------------------------------------------------------------
@POLICIES.register("scratchpipe")
class ScratchPipe(Policy):
    """Lookahead scratchpad: pins the in-flight window, evicts by the known future."""

    name = "scratchpipe"
    needs_next_use = True
    params: ClassVar[dict[str, Any]] = {"lookahead": 2, "on_overflow": "error"}

    def __init__(self, capacity: int, num_rows: int, **params: Any):
        super().__init__(capacity, num_rows, **params)
        self.lookahead = _check_lookahead(self.p["lookahead"])
        self.on_overflow = self.p["on_overflow"]
        if self.on_overflow not in ON_OVERFLOW:
            raise UserError(f"on_overflow must be one of {', '.join(ON_OVERFLOW)}, got "
                            f"'{self.on_overflow}'", field="on_overflow")
        cap = min(self.capacity, self.num_rows)  # more slots than rows are never used
        self.keys, self.vals, self.mask, self.shift = new_map(cap)
        self.slot_row = np.full(cap, EMPTY, np.int64)
        # per slot: last-use position, next-use position (one cache line for both)
        self.slot_use = np.zeros((cap, 2), np.int64)
        self.slot_use[:, 0] = -1
        self.free = np.arange(cap, dtype=np.int64)
        q = 2 * cap + 2
        self.qs, self.ql = np.zeros(q, np.int64), np.zeros(q, np.int64)
        self.hk, self.hs, self.hl = (np.zeros(q, np.int64), np.zeros(q, np.int64),
                                     np.zeros(q, np.int64))
        self.st = np.zeros(6, np.int64)
        self._trace: Trace | None = None
        self._reset_window(0, 0)

    def _reset_window(self, first_batch: int, first_access: int) -> None:
        self.win_ids = np.zeros(0, np.int64)
        self.win_out = np.zeros(0, np.uint8)
        self.win_slot = np.zeros(0, np.int64)
        self.win_ptr = np.zeros(1, np.int64)
        self.win_first_batch = first_batch
        self.win_first_access = first_access

    def prepare(self, trace: Trace) -> None:
        self._trace = trace
        self.gptr = trace.batch_access_ptr()
        self.num_batches = trace.num_batches

    def process(self, chunk: Chunk, next_use: np.ndarray | None, outcome: np.ndarray,
                events: np.ndarray) -> None:
        if self._trace is None or next_use is None:
            raise RuntimeError("scratchpipe needs prepare(trace) and next-use positions")
        ncar = len(self.win_ids)
        ext_ids = np.concatenate((self.win_ids, chunk.ids))
        ext_out = np.concatenate((self.win_out, np.zeros(len(chunk.ids), np.uint8)))
        ext_slot = np.concatenate((self.win_slot, np.full(len(chunk.ids), -1, np.int64)))
        ext_ptr = np.concatenate((self.win_ptr, chunk.batch_ptr[1:] + ncar))
        first_new = len(self.win_ptr) - 1
        ext_base = chunk.first_access - ncar
        bad = _scratchpipe_chunk(
            ext_ids, ext_ptr, chunk.first_batch - first_new, first_new, ext_base,
            np.asarray(next_use, np.int64), self.gptr, self.num_batches, self.lookahead,
            self.on_overflow == "stall", self.keys, self.vals, self.mask, self.shift,
            self.slot_row, self.slot_use, self.free, self.qs, self.ql,
            self.hk, self.hs, self.hl, self.st, ext_out, ext_slot, events)
        if bad >= 0:
            need = min_scratchpipe_capacity(self._trace, self.lookahead)
            raise UserError(
                f"scratchpipe needs capacity >= {need} rows for lookahead {self.lookahead} "
                f"(got {self.capacity}): the rows pinned while batch {bad} is planned (batches "
                f"{max(0, bad - self.lookahead + 1)}..{bad}) do not fit; raise the capacity or "
                f"use on_overflow=stall (cache.on_overflow in a run config)",
                source=self._trace.source, field="capacity")
        outcome[:] = ext_out[ncar:]
        # keep the last W batches: they are unpinned and trained by later plans
        nbat = len(ext_ptr) - 1
        keep = min(self.lookahead, nbat)
        cut = int(ext_ptr[nbat - keep])
        self.win_ids = ext_ids[cut:].copy()
        self.win_out = ext_out[cut:].copy()
        self.win_slot = ext_slot[cut:].copy()
        self.win_ptr = ext_ptr[nbat - keep:] - cut
        self.win_first_batch = chunk.first_batch - first_new + nbat - keep

    def finish(self) -> None:
        """Train the last W-1 batches (no more plans run beside them)."""
        nbat = len(self.win_ptr) - 1
        last_batch = self.win_first_batch + nbat - 1
        first_untrained = max(0, last_batch - self.lookahead + 2)
        for lb in range(first_untrained - self.win_first_batch, nbat):
            _train_check(self.win_ids, self.win_ptr, lb, self.win_out, self.win_slot,
                         self.slot_row, self.st)
        self._reset_window(last_batch + 1, 0)

    def resident(self) -> np.ndarray:
        return np.sort(self.keys[self.keys != EMPTY])

    def extra_totals(self) -> dict[str, int]:
        return {"train_misses": int(self.st[_TRAIN_MISSES]), "stalls": int(self.st[_STALLS])}
