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

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies._hashmap import EMPTY, erase_pair, home, new_pair_map, probe_pair
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
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch
from scratchpipe_sim.traces.csr_trace import DEFAULT_CHUNK_ACCESSES, Chunk, Trace

ON_OVERFLOW = ("error", "stall")
# indices into the int64 `st` state vector of the kernel
_USED, _QHEAD, _QTAIL, _HSIZE, _TRAIN_MISSES, _STALLS, _VHEAD, _VTAIL = range(8)
_PF = 32  # prefetch distance in accesses
_PF_Q = 4  # prefetch distance in victims
_PF_FILL = 32  # prefetch distance of pass 2 (fills), in accesses
_PF_CHECK = 32  # prefetch distance of a retired batch's check, in accesses
_PF_EXPIRE = 16  # prefetch distance of the ghosts' expiry, in victims
_PF_RETIRE = 64  # most slots of the next retired batch prefetched


# -- minimum capacity ---------------------------------------------------------------------------
def min_scratchpipe_capacity(trace: Trace, lookahead: int,
                             chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> int:
    """max over j of |union of the rows of batches j-W+1..j|: the smallest capacity that works.

    One pass; keeps the last batch each row was seen in (O(rows), a one-off scan) and a
    ring of W+1 per-batch counts.
    """
    return int(_window_pass(trace, lookahead, chunk_accesses)[1])


def mean_window_rows(trace: Trace, lookahead: int,
                     chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> float:
    """Mean over j >= W-1 of |union of the rows of batches j-W+1..j|: the rows a
    scratchpad of W batches holds pinned on average (0.0 for fewer than W batches). A
    sampled run sizes its miniature scratchpad with it (`timing.sampled_run`)."""
    st = _window_pass(trace, lookahead, chunk_accesses)
    return float(st[2]) / float(st[3]) if st[3] else 0.0


def _window_pass(trace: Trace, lookahead: int, chunk_accesses: int) -> np.ndarray:
    """One pass of `_min_cap_chunk`: [current union, largest union, sum of the unions of
    full windows, their number]. The last batch of each row is int32 (a batch index)."""
    w = _check_lookahead(lookahead)
    last = np.full(trace.total_rows, -1, np.int32)
    hist = np.zeros(w + 1, np.int64)
    st = np.zeros(4, np.int64)
    for chunk in trace.iter_chunks(chunk_accesses, reuse_buffers=True):
        _min_cap_chunk(chunk.ids, chunk.batch_ptr, chunk.first_batch, w, last, hist, st)
    return st


@njit(cache=True)
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
        if j >= w - 1:
            st[2] += st[0]
            st[3] += 1


def _pow2(n: int) -> int:
    """The smallest power of two >= n."""
    return 1 << max(0, int(n) - 1).bit_length()


def _check_lookahead(lookahead: Any) -> int:
    if isinstance(lookahead, bool) or int(lookahead) != lookahead or lookahead < 1:
        raise UserError(f"lookahead must be a whole number of batches >= 1, got {lookahead}",
                        field="lookahead")
    return int(lookahead)


# -- the kernel ---------------------------------------------------------------------------------
@njit(cache=True)
def _heap_push(h, n, key, slot):
    """Insert (key, slot) into a max-heap of n entries (rows of `h`: one cache line a level)."""
    i = n
    while i > 0:
        par = (i - 1) >> 1
        if h[par, 0] >= key:
            break
        h[i, 0], h[i, 1] = h[par, 0], h[par, 1]
        i = par
    h[i, 0], h[i, 1] = key, slot


@njit(cache=True)
def _heap_pop(h, n):
    """Remove the root of a max-heap of n entries (returns nothing; caller read it)."""
    n -= 1
    key, slot = h[n, 0], h[n, 1]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and h[c + 1, 0] > h[c, 0]:
            c += 1
        if h[c, 0] <= key:
            break
        h[i, 0], h[i, 1] = h[c, 0], h[c, 1]
        i = c
    if n > 0:
        h[i, 0], h[i, 1] = key, slot


@njit(cache=True, inline="always")
def _push_fifo(s, nu, now, fq, st):
    """Queue slot s as evictable; `nu` is the row's next use. An entry (slot, next use) is
    valid while that next use lies in the future (>= `now`, the first position not yet
    planned): once the row is used again it is pinned (and queued again later), and a row
    leaves the scratchpad only through its own valid entry, so no per-slot stamp is needed.

    A full ring (mostly stale pairs) keeps its valid pairs, in order, from the head on: one
    branch-free pass in ring order (the write position never passes the read position),
    where a rotation by three reversals and a slide took four (20 -> 7 ms for a ring of 4M
    pairs; at 10% of 10M rows it fills every ~1.5M accesses at batch size 1). Written here,
    not in a called function: that call made Numba keep ~8 NRT increfs an access."""
    n = len(fq)
    if st[_QTAIL] - st[_QHEAD] == n:
        m = n - 1
        head = st[_QHEAD]
        k = 0
        for i in range(n):
            e = (head + i) & m
            d = (head + k) & m
            fs, fnu = fq[e, 0], fq[e, 1]
            fq[d, 0] = fs
            fq[d, 1] = fnu
            k += fnu >= now
        st[_QTAIL] = head + k
    t = st[_QTAIL] & (n - 1)
    fq[t, 0], fq[t, 1] = s, nu
    st[_QTAIL] += 1


@njit(cache=True, inline="always")  # inlined: at batch size 1, calls cost more than work
def _retire(ext_ids, ext_ptr, ext_nu, ext_slot, ext_base, tb, unpin_before, slot_row, fq, st):
    """Batch tb has been trained: check its rows and, if `unpin_before` >= 0, unpin them.

    Only the last access of each row in the batch is looked at (an earlier one has its next
    use inside the batch), so the check costs one slot read per (row, batch), not per access;
    every access of a row in one batch was planned into the same slot. The training check
    counts (row, batch) pairs whose slot no longer holds the row (`train_misses`, 0 by
    construction). A row is queued as evictable when this was its last use before the batch
    now being planned (its next use >= `unpin_before`, the first position of that batch).
    """
    bend = ext_base + ext_ptr[tb + 1]
    hi = ext_ptr[tb + 1]
    for q in range(ext_ptr[tb], hi):
        if q + _PF_CHECK < hi:  # a hint: the slot a later last access checks
            later = ext_slot[q + _PF_CHECK]
            if later >= 0 and ext_nu[q + _PF_CHECK] >= bend:
                prefetch(slot_row, later)
        nu = ext_nu[q]
        s = ext_slot[q]
        if s < 0 or nu < bend:
            continue  # served from host memory (stall mode), or not the row's last access
        if slot_row[s] != ext_ids[q]:
            st[_TRAIN_MISSES] += 1
        if unpin_before >= 0 and nu >= unpin_before:
            _push_fifo(s, nu, unpin_before, fq, st)


@njit(cache=True)
def _retire_window(w_ids, w_ptr, w_nu, w_slot, w_base, tb, unpin_before, slot_row, fq, st):
    """`_retire` of a batch before the chunk (the first W batches of a chunk): a compiled
    call, so the kernel inlines `_retire` at one place only (two inlined call sites with
    different arrays made Numba keep ~6 NRT increfs an access)."""
    _retire(w_ids, w_ptr, w_nu, w_slot, w_base, tb, unpin_before, slot_row, fq, st)


@njit(cache=True)
def _compact_heap(h, st, now):
    """The heap is full: keep its valid entries (next use >= `now`) and rebuild it."""
    k = 0
    for e in range(st[_HSIZE]):
        if h[e, 0] >= now:
            h[k, 0], h[k, 1] = h[e, 0], h[e, 1]
            k += 1
    st[_HSIZE] = 0
    for e in range(k):
        _heap_push(h, st[_HSIZE], h[e, 0], h[e, 1])
        st[_HSIZE] += 1


@njit(cache=True)
def _heap_victim(h, st, now):
    """The valid heap entry of farthest next use (stale ones popped on the way), or -1."""
    while st[_HSIZE] > 0:
        nu, s = h[0, 0], h[0, 1]
        _heap_pop(h, st[_HSIZE])
        st[_HSIZE] -= 1
        if nu >= now:
            return s  # farthest next use
    return -1


@njit(cache=True, inline="always")
def _expire_victims(j, w, table, mask, shift, vring, vstart, st):
    """Batch j is about to be planned: drop the ghosts of batch j-W's victims (a refetch at
    distance >= W cannot meet its write-back in flight) and mark where batch j's begin."""
    ring = len(vstart) - 1  # rings are powers of two: masks, not divisions
    if j - w >= 0:
        n = len(vring) - 1
        end = vstart[(j - w + 1) & ring]
        for i in range(vstart[(j - w) & ring], end):
            if i + _PF_EXPIRE < end:  # a hint: the bucket of a later victim
                prefetch(table, 2 * home(vring[(i + _PF_EXPIRE) & n], shift))
            v = vring[i & n]
            g = probe_pair(table, mask, shift, v)
            if table[g, 0] == v and table[g, 1] == -1 - (j - w):  # still that ghost
                erase_pair(table, mask, shift, g)
        st[_VHEAD] = end
        # hints: the buckets of the victims that expire next (batch j-W+1's, all known)
        stop = end + _PF_Q if end + _PF_Q < st[_VTAIL] else st[_VTAIL]
        for i in range(end, stop):
            prefetch(table, 2 * home(vring[i & n], shift))
    vstart[j & ring] = st[_VTAIL]


# -- the kernel's arguments, grouped by lifetime (Numba takes named tuples of arrays) -------
class _ChunkIn(NamedTuple):
    """One call's input: the chunk's ids, batch pointers (relative) and next-use positions
    (local to the chunk: global = `base` + local), its first batch, and `tail`, the global
    starts of the W+1 batches after it (clamped to the trace's end)."""

    ids: np.ndarray
    ptr: np.ndarray
    nus: np.ndarray
    first_batch: int
    base: int
    tail: np.ndarray


class _WindowIn(NamedTuple):
    """The last W batches before the chunk (fewer at the trace's start), planned by earlier
    calls and only retired by this one; global position of `ids[0]` = `base`."""

    ids: np.ndarray
    ptr: np.ndarray
    nu: np.ndarray
    slot: np.ndarray
    base: int


class _PlanState(NamedTuple):
    """What lives for the whole replay: the knobs (`w` the lookahead, `stall` on overflow),
    the row -> slot map (`table`, `mask`, `shift`), each slot's row, the victim FIFO `fq`
    and heap `h`, the counters `st`, and the ghosts' ring (`vring`, `vstart`)."""

    w: int
    stall: bool
    table: np.ndarray
    mask: int
    shift: int
    slot_row: np.ndarray
    fq: np.ndarray
    h: np.ndarray
    st: np.ndarray
    vring: np.ndarray
    vstart: np.ndarray


class _PlanOut(NamedTuple):
    """What a call writes: each access's outcome and slot, each batch's events, and the
    replay's per-batch refetch counts (at the chunk's batches)."""

    outc: np.ndarray
    slots: np.ndarray
    events: np.ndarray
    refetch: np.ndarray


@njit(cache=True)
def _scratchpipe_chunk(chunk, window, state, out):
    """Plan every batch of the chunk; retire (check and unpin) the batch leaving the window
    first.

    The arguments are the four records above; the body names their fields as locals.
    `w_*`: the window's arrays, global position of `w_ids[0]` = `w_base`: they are only
    retired here. Why two sets of arrays, not the window copied in
    front of the chunk: that copy (ids, next uses, pointers, outcomes) cost ~3-5 ns an access.
    `slots[q]` is the slot that access q was planned into (-1: unplaced) - what the trainer
    reads. With W >= 2, refetches are counted: `refetch[j, d-1]` = rows filled at plan(j)
    that plan(j-d) evicted, d = 1..W-1. A victim stays in the row -> slot map `table` (key
    and slot side by side: one cache line a probe) as a *ghost* (slot -1 - eviction batch)
    for W-1 batches, so the fill's own probe finds it for free; a ring `vring` lists the
    victims for expiry. Returns -1, or the global index of the batch whose pinned set
    overflowed (on_overflow=error).
    """
    ids, ptr, nus, first_batch, base, tail = chunk
    w_ids, w_ptr, w_nu, w_slot, w_base = window
    w, stall, table, mask, shift, slot_row, fq, h, st, vring, vstart = state
    outc, slots, events, refetch = out
    track = w >= 2
    nring = len(vring) - 1
    nfq = len(fq) - 1
    nq = len(ids)
    nwin = len(w_ptr) - 1
    for lb in range(len(ptr) - 1):
        j = first_batch + lb
        lo, hi = ptr[lb], ptr[lb + 1]
        glo, ghi = base + lo, base + hi
        ev = lb
        # batch j-W was trained after plan(j-1): check it and unpin its rows
        if lb - w >= 0:
            _retire(ids, ptr, nus, slots, base, lb - w, glo, slot_row, fq, st)
        elif lb - w + nwin >= 0:
            _retire_window(w_ids, w_ptr, w_nu, w_slot, w_base, lb - w + nwin, glo, slot_row,
                           fq, st)
        if w >= 2 and lb - w + 1 >= 0 and hi - lo > 1:  # hints: the slots the next retire
            q0 = ptr[lb - w + 1]  # checks (single-access batches: hinted when planned)
            q1 = ptr[lb - w + 2]
            for q in range(q0, q1 if q1 < q0 + _PF_RETIRE else q0 + _PF_RETIRE):
                if slots[q] >= 0:
                    prefetch(slot_row, slots[q])
        if track:
            _expire_victims(j, w, table, mask, shift, vring, vstart, st)
        # the first position after the window: inside the chunk, or one of the next W+1
        # batches' global starts (`tail`, clamped to the trace's end)
        k = lb + w + 1
        limit = base + ptr[k] if k < len(ptr) else tail[k - len(ptr) + 1]
        # pass 1: resident rows hit (and are pinned: their queue entries are stale from
        # now, their next use being this batch). A miss keeps its probe position (as
        # -2 - position) for pass 2.
        for q in range(lo, hi):
            if q + _PF < nq:  # a hint (see _prefetch.py), across batch bounds
                prefetch(table, 2 * home(ids[q + _PF], shift))
            i = probe_pair(table, mask, shift, ids[q])
            if table[i, 0] == ids[q] and table[i, 1] >= 0:
                slots[q] = table[i, 1]
                outc[q] = HIT
            else:
                slots[q] = -2 - i
                outc[q] = MISS
        if hi - lo == 1 and outc[lo] == HIT:  # batch size 1: a hit needs no pass 2
            prefetch(slot_row, slots[lo])  # what its retire reads, W batches on
            continue
        # pass 2: fill the missing rows (written out here, not in a helper: an inlined
        # helper taking arrays costs an NRT incref/decref per array and call)
        stalled = False
        for q in range(lo, hi):
            # a hint: pass 1's probe position of the miss _PF_FILL accesses on (a batch
            # later, its map line has left the cache: this load was the kernel's costliest)
            if q + _PF_FILL < hi and outc[q + _PF_FILL] == MISS:
                prefetch(table, 2 * (-2 - slots[q + _PF_FILL]))
            if outc[q] != MISS:
                continue
            r = ids[q]
            if track:
                # nothing is erased while a batch is planned (victims become ghosts), so
                # the probe can resume where pass 1 stopped: keys were only added since
                i = -2 - slots[q]
                while table[i, 0] != r and table[i, 0] != EMPTY:
                    i = (i + 1) & mask
            else:
                i = probe_pair(table, mask, shift, r)
            if table[i, 0] == r and table[i, 1] >= 0:
                outc[q] = HIT  # filled earlier in this batch
                s = table[i, 1]
            else:
                if st[_USED] < len(slot_row):
                    s = st[_USED]
                    st[_USED] += 1
                else:
                    # the victim: the FIFO holds every unpinned row in last-use order.
                    # Popping it, a row with no use in the window (next use >= `limit`) is
                    # the victim; a row used inside the window moves to the next-use heap (it
                    # stays in that class until it is used again, which makes its entry
                    # stale: next use < `ghi`). The heap is consulted only once the FIFO is
                    # empty, so it then holds every unpinned row. Written out here, not in an
                    # inlined helper: Numba kept an NRT incref/decref of each of the helper's
                    # array arguments on every call (5 per eviction).
                    s = -1
                    while st[_QHEAD] < st[_QTAIL]:
                        e = st[_QHEAD] & nfq
                        fs, nu = fq[e, 0], fq[e, 1]
                        st[_QHEAD] += 1
                        # hints for the next victims (see _prefetch.py): the slot's row of
                        # the entry 2 * _PF_Q ahead, and that row's map bucket for the entry
                        # _PF_Q ahead; only for entries not stale already (most are: hot
                        # rows are queued again and again)
                        if st[_QHEAD] + 2 * _PF_Q < st[_QTAIL]:
                            e = (st[_QHEAD] + 2 * _PF_Q) & nfq
                            if fq[e, 1] >= ghi:
                                prefetch(slot_row, fq[e, 0])
                        if st[_QHEAD] + _PF_Q < st[_QTAIL]:
                            e = (st[_QHEAD] + _PF_Q) & nfq
                            if fq[e, 1] >= ghi:
                                prefetch(table, 2 * home(slot_row[fq[e, 0]], shift))
                        if nu < ghi:
                            continue  # stale: used again (pinned; queued again later)
                        if nu >= limit:
                            s = fs  # no use in the window: least recently used first
                            break
                        if st[_HSIZE] == len(h):
                            _compact_heap(h, st, ghi)
                        _heap_push(h, st[_HSIZE], nu, fs)
                        st[_HSIZE] += 1
                    if s < 0:
                        s = _heap_victim(h, st, ghi)  # farthest next use
                    if s < 0:
                        if not stall:
                            return j
                        outc[q] = UNPLACED
                        slots[q] = -1
                        stalled = True
                        continue
                    v = slot_row[s]
                    g = probe_pair(table, mask, shift, v)
                    events[ev, EVICTIONS] += 1
                    events[ev, WRITEBACKS] += 1
                    if track:  # v becomes a ghost: its entry stays, no probe moves
                        table[g, 1] = -1 - j
                        vring[st[_VTAIL] & nring] = v
                        st[_VTAIL] += 1
                    else:
                        erase_pair(table, mask, shift, g)
                        i = probe_pair(table, mask, shift, r)
                if table[i, 0] == r:  # a ghost: refetched d = j - eviction batch later
                    refetch[j, j + table[i, 1]] += 1
                table[i, 0] = r
                table[i, 1] = s
                slot_row[s] = r
                events[ev, FILLS] += 1
            slots[q] = s
        if stalled:
            st[_STALLS] += 1
    return -1


class PinnedOverflow(UserError):
    """The rows pinned while a batch is planned do not fit the capacity. `shortfall` is the
    message without its advice (raise the capacity or set on_overflow), for a caller whose
    own key sets the capacity and that takes no on_overflow (the cluster's rank caches)."""

    shortfall: str = ""


# -- the policy ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScratchpipeParams:
    """The policy's knobs; the scratchpipe design's params extend this class, so each has
    one default (`design_params.scratchpipe.lookahead` is this field)."""

    lookahead: int = field(default=5, metadata={
        "help": "window W: batches in flight from plan to train", "min": 1})
    on_overflow: str = field(default="error", metadata={
        "help": "when the window's rows exceed the capacity: error (name the minimum "
                "capacity) or stall (surplus rows served from host memory over UVM)",
        "choices": ON_OVERFLOW})


@POLICIES.register("scratchpipe")
class ScratchPipe(Policy):
    """Lookahead scratchpad: pins the in-flight window, evicts by the known future."""

    needs_next_use = True
    Params = ScratchpipeParams

    def __init__(self, capacity: int, num_rows: int, **params: Any):
        super().__init__(capacity, num_rows, **params)
        self.lookahead = _check_lookahead(self.p["lookahead"])
        self.on_overflow = self.p["on_overflow"]
        if self.on_overflow not in ON_OVERFLOW:
            raise UserError(f"on_overflow must be one of {', '.join(ON_OVERFLOW)}, got "
                            f"'{self.on_overflow}'", field="on_overflow")
        # the slots' state is made by `prepare`, not here: the engine makes the next uses
        # between the two, and their backward pass's per-row array (4 B a row; 204M rows in
        # a Criteo day) is then freed before the map (16 B an entry, 4 entries a slot with
        # refetch tracking, written at once) exists (issue 41: the two were alive together)
        self._state_made = False
        self.table = np.full((0, 2), EMPTY, np.int64)
        self.st = np.zeros(8, np.int64)
        self.vstart = np.zeros(_pow2(self.lookahead + 1), np.int64)
        self.refetch = np.zeros((0, max(self.lookahead - 1, 1)), np.int64)
        self._trace: Trace | None = None
        #: set True to read `chunk_slots` (the slot of each access of the last chunk, -1:
        #: unplaced) after `process`, as the reference path's planner does
        self.keep_slots = False
        self.chunk_slots = np.zeros(0, np.int64)
        self._b_slot = np.zeros(0, np.int64)  # slots of the chunk's accesses, reused
        self._reset_window(0)

    def _reset_window(self, first_batch: int, base: int = 0) -> None:
        """No batches before the next chunk's: `win_*` are the last W planned batches (ids,
        slots, next uses, relative pointers), `win_base` the global position of the first
        access, `win_first_batch` the global index of the first batch."""
        self.win_ids = np.zeros(0, np.int64)
        self.win_slot = np.zeros(0, np.int64)
        self.win_nu = np.zeros(0, np.int64)
        self.win_ptr = np.zeros(1, np.int64)
        self.win_base = base
        self.win_first_batch = first_batch

    def _batch_starts(self, batches: np.ndarray) -> np.ndarray:
        """Global first access of each of `batches` (as `Trace.batch_access_ptr`, for a few
        batches: the whole array is one int64 per access at batch size 1)."""
        t = self._trace
        return np.asarray(t.offsets[np.asarray(t.batch_bounds[batches])], np.int64)

    def _tail(self, chunk: Chunk) -> np.ndarray:
        """Global starts of the W+1 batches after `chunk` (clamped to the end of the trace):
        the window limits of its last batches."""
        end = chunk.first_batch + chunk.num_batches
        return self._batch_starts(np.minimum(np.arange(end, end + self.lookahead + 1),
                                             self.num_batches))

    def range_tail_batches(self) -> int:
        """Plan(j) sees batches up to j + W."""
        return self.lookahead

    def _make_state(self) -> None:
        """The slots' map, rows, queues and victim ring (once: later `prepare`s keep them)."""
        cap = min(self.capacity, self.num_rows)  # more slots than rows are never used
        track = self.lookahead >= 2
        # refetch tracking (W >= 2): victims of the last W-1 batches stay in the map as
        # ghosts. Rows filled in batches j-W+1..j are distinct and resident, so those batches
        # have at most `cap` victims: the map holds <= 2 cap keys, the ring <= cap victims.
        self.table, self.mask, self.shift = new_pair_map(2 * cap if track else cap)
        # the row in each slot; slots are handed out in order 0, 1, ... until all are used
        self.slot_row = np.full(cap, EMPTY, np.int64)
        q = _pow2(2 * cap + 2)  # ring sizes: powers of two (index by mask)
        self.fifo = np.zeros((q, 2), np.int64)  # (slot, next use) of unpinned rows
        self.heap = np.zeros((q, 2), np.int64)  # (next use, slot), max-heap
        self.vring = np.zeros(_pow2(cap + 1) if track else 1, np.int64)
        self._state_made = True

    def prepare(self, trace: Trace) -> None:
        if not self._state_made:
            self._make_state()
        self._trace = trace
        self.num_batches = trace.num_batches
        self.refetch = np.zeros((trace.num_batches, max(self.lookahead - 1, 1)), np.int64)

    def process(self, chunk: Chunk, next_use: np.ndarray | None, outcome: np.ndarray,
                events: np.ndarray) -> None:
        if self._trace is None or next_use is None:
            raise RuntimeError("scratchpipe needs prepare(trace) and next-use positions")
        n = len(chunk.ids)
        if len(self._b_slot) < n:
            self._b_slot = np.empty(n, np.int64)
        slots = self._b_slot[:n]
        nu = next_use  # int32 or int64 (`compute_next_use`): the window keeps that type
        if self.win_nu.dtype != nu.dtype:  # (one compiled kernel, not one per mix)
            self.win_nu = self.win_nu.astype(nu.dtype)
        bad = _scratchpipe_chunk(
            _ChunkIn(chunk.ids, chunk.batch_ptr, nu, chunk.first_batch, chunk.first_access,
                     self._tail(chunk)),
            _WindowIn(self.win_ids, self.win_ptr, self.win_nu, self.win_slot, self.win_base),
            _PlanState(self.lookahead, self.on_overflow == "stall", self.table, self.mask,
                       self.shift, self.slot_row, self.fifo, self.heap, self.st, self.vring,
                       self.vstart),
            _PlanOut(outcome, slots, events, self.refetch))
        if bad >= 0:
            need = min_scratchpipe_capacity(self._trace, self.lookahead)
            shortfall = (
                f"scratchpipe needs capacity >= {need} rows for lookahead {self.lookahead} "
                f"(got {self.capacity}): the rows pinned while batch {bad} is planned (batches "
                f"{max(0, bad - self.lookahead + 1)}..{bad}) do not fit")
            err = PinnedOverflow(
                f"{shortfall}; raise the capacity or use on_overflow=stall "
                "(design_params.scratchpipe.on_overflow in a run config)",
                source=self._trace.source, field="capacity")
            err.shortfall = shortfall  # an attribute: kept when pickled from a worker
            raise err
        if self.keep_slots:
            self.chunk_slots = slots.copy()  # the buffer is reused next chunk
        self._keep_window(chunk, nu, slots)

    def _keep_window(self, chunk: Chunk, nu: np.ndarray, slots: np.ndarray) -> None:
        """Keep the last W planned batches: later plans retire (check, unpin) them."""
        w = self.lookahead
        nbat = chunk.num_batches
        ptr = chunk.batch_ptr
        if nbat >= w:
            cut = int(ptr[nbat - w])
            self.win_ids = chunk.ids[cut:].copy()
            self.win_slot = slots[cut:].copy()
            self.win_nu = nu[cut:].copy()
            self.win_ptr = ptr[nbat - w:] - cut
            self.win_base = chunk.first_access + cut
            self.win_first_batch = chunk.first_batch + nbat - w
            return
        # a chunk of fewer batches than the window: the last W - nbat earlier ones too
        nwin = len(self.win_ptr) - 1
        keep = min(w - nbat, nwin)
        wcut = int(self.win_ptr[nwin - keep])
        carried = len(self.win_ids) - wcut
        self.win_ids = np.concatenate((self.win_ids[wcut:], chunk.ids))
        self.win_slot = np.concatenate((self.win_slot[wcut:], slots))
        self.win_nu = np.concatenate((self.win_nu[wcut:], nu))
        self.win_ptr = np.concatenate((self.win_ptr[nwin - keep:] - wcut, ptr[1:] + carried))
        self.win_base = chunk.first_access - carried
        self.win_first_batch = chunk.first_batch - keep

    def finish(self) -> None:
        """Check the batches trained after the last plan (no later plan retires them)."""
        nbat = len(self.win_ptr) - 1
        if nbat and self._trace is not None:
            for lb in range(nbat):
                _retire(self.win_ids, self.win_ptr, self.win_nu, self.win_slot, self.win_base,
                        lb, -1, self.slot_row, self.fifo, self.st)
        self._reset_window(self.win_first_batch + nbat, self.win_base + len(self.win_ids))

    def resident(self) -> np.ndarray:
        t = self.table
        return np.sort(t[(t[:, 0] != EMPTY) & (t[:, 1] >= 0), 0])

    def extra_totals(self) -> dict[str, int]:
        return {"train_misses": int(self.st[_TRAIN_MISSES]), "stalls": int(self.st[_STALLS])}

    def batch_columns(self) -> dict[str, np.ndarray]:
        """`refetch_d{d}`[b], d = 1..W-1: rows filled at plan(b) that plan(b-d) evicted.

        These are the only refetches whose write-back can still be in flight: plan(b) starts
        after train(b-W), which follows insert(b-W). Distances, not source batches, so the
        columns stay right when the timing model drops a warm-up prefix; a design derives
        the source of batch b's newest refetch as b - (smallest d with a nonzero count).
        """
        return {f"refetch_d{d}": self.refetch[:, d - 1].copy()
                for d in range(1, self.lookahead)}
