"""ScratchPipe's `plan` stage: hits, misses, slots and victims for one mini-batch.

The planner keeps, per row, the last batch known to need it (`need_until`). Batches are
registered as soon as the data loader can see them — up to `future` batches past the one
being planned — so a row is evictable at plan(k) only when no batch in
[evictable_before, k + future] needs it. The pipeline picks `evictable_before` and `future`
(see pipeline.py); naive settings exist only so tests can show what they break.

Victim choice: a free slot first, then the resident row whose last need is oldest (LRU over
batches), ties in registration order — deterministic. Cost is O(accesses + misses) per
batch, not O(capacity): registrations are appended in batch order to one log, which is
also the eviction queue (an entry is stale once its row was re-registered or left).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np


@dataclass(frozen=True)
class Plan:
    """Result of planning batch `k` (host arrays)."""

    k: int
    uniq: np.ndarray  # unique linearized ids of the batch, in first-access order
    inv: np.ndarray  # per access: index into uniq
    uslots: np.ndarray  # scratchpad slot of each unique id once inserted
    miss_rows: np.ndarray  # ids fetched from the CPU table
    miss_slots: np.ndarray  # their slots
    victim_rows: np.ndarray  # ids evicted (written back to the CPU table)
    victim_slots: np.ndarray  # the slots they left

    @property
    def hits(self) -> int:
        return len(self.uniq) - len(self.miss_rows)


class ScratchpadState:
    """Host-side directory of the GPU scratchpad (which row is in which slot)."""

    def __init__(self, total_rows: int, capacity_rows: int) -> None:
        self.capacity = capacity_rows
        self.slot_of = np.full(total_rows, -1, np.int64)
        self.row_in = np.full(capacity_rows, -1, np.int64)
        self.need_until = np.full(total_rows, -1, np.int64)
        self._stamp = np.full(total_rows, -1, np.int64)
        self._pos = np.zeros(total_rows, np.int64)
        # registration log = eviction queue: rows and the batch they were registered for
        self._log_rows = np.zeros(1024, np.int64)
        self._log_batch = np.zeros(1024, np.int64)
        # [log length, queue cursor, free slots left (slots >= capacity - free are unused)]
        self._ctr = np.array([0, 0, capacity_rows], np.int64)

    def unique(self, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Unique ids of batch k in first-access order and each access's index among them."""
        return _unique(np.asarray(ids, np.int64), k, self._stamp, self._pos)

    def register(self, uniq: np.ndarray, k: int) -> None:
        """Batch k needs these rows (called in batch order, so k is the latest need)."""
        n, m = int(self._ctr[0]), len(uniq)
        if n + m > len(self._log_rows):
            size = max(2 * len(self._log_rows), n + m)
            self._log_rows = np.resize(self._log_rows, size)
            self._log_batch = np.resize(self._log_batch, size)
        _register(np.asarray(uniq, np.int64), k, self.need_until, self._log_rows,
                  self._log_batch, self._ctr)

    def plan(self, k: int, uniq: np.ndarray, inv: np.ndarray,
             evictable_before: int) -> Plan | None:
        """Plan batch k, or None when the scratchpad cannot hold the rows still needed."""
        ok, uslots, mrows, mslots, vrows, vslots = _plan(
            np.asarray(uniq, np.int64), evictable_before, self.slot_of, self.row_in,
            self.need_until, self._log_rows, self._log_batch, self._ctr)
        if not ok:
            return None
        return Plan(k, uniq, inv, uslots, mrows, mslots, vrows, vslots)

    def resident(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, slots) currently in the scratchpad."""
        slots = np.flatnonzero(self.row_in >= 0).astype(np.int64)
        return self.row_in[slots].copy(), slots


@nb.njit(cache=True, nogil=True)
def _unique(ids, k, stamp, pos):
    n = len(ids)
    uniq = np.empty(n, np.int64)
    inv = np.empty(n, np.int64)
    u = 0
    for j in range(n):
        r = ids[j]
        if stamp[r] != k:
            stamp[r] = k
            pos[r] = u
            uniq[u] = r
            u += 1
        inv[j] = pos[r]
    return uniq[:u].copy(), inv


@nb.njit(cache=True, nogil=True)
def _register(uniq, k, need_until, log_rows, log_batch, ctr):
    n = ctr[0]
    for i in range(len(uniq)):
        need_until[uniq[i]] = k
        log_rows[n] = uniq[i]
        log_batch[n] = k
        n += 1
    ctr[0] = n


@nb.njit(cache=True, nogil=True)
def _plan(uniq, evictable_before, slot_of, row_in, need_until, log_rows, log_batch, ctr):
    n = len(uniq)
    e = np.empty(0, np.int64)
    uslots = np.empty(n, np.int64)
    n_miss = 0
    for i in range(n):
        s = slot_of[uniq[i]]
        uslots[i] = s
        if s < 0:
            n_miss += 1
    # choose victims first (no state change until we know there are enough)
    cap = len(row_in)
    free = ctr[2]
    take_free = min(free, n_miss)
    need = n_miss - take_free
    vrows = np.empty(need, np.int64)
    vslots = np.empty(need, np.int64)
    cur = ctr[1]
    v = 0
    while v < need and cur < ctr[0]:
        b = log_batch[cur]
        if b >= evictable_before:
            break
        r = log_rows[cur]
        if need_until[r] == b and slot_of[r] >= 0:
            vrows[v] = r
            vslots[v] = slot_of[r]
            slot_of[r] = -2  # tentatively taken (restored below on failure)
            v += 1
        cur += 1
    if v < need:
        for i in range(v):
            slot_of[vrows[i]] = vslots[i]
        return False, e, e, e, e, e
    ctr[1] = cur
    ctr[2] = free - take_free
    for i in range(v):
        slot_of[vrows[i]] = -1
    mrows = np.empty(n_miss, np.int64)
    mslots = np.empty(n_miss, np.int64)
    m = 0
    for i in range(n):
        if uslots[i] >= 0:
            continue
        if m < take_free:
            s = cap - free + m
        else:
            s = vslots[m - take_free]
        row_in[s] = uniq[i]
        slot_of[uniq[i]] = s
        uslots[i] = s
        mrows[m] = uniq[i]
        mslots[m] = s
        m += 1
    return True, uslots, mrows, mslots, vrows, vslots
