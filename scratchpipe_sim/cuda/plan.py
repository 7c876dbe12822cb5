"""ScratchPipe's `plan` stage: hits, misses, slots and victims for one mini-batch.

The planner keeps, per row, the last batch known to need it (`need_until`). Batches are
registered as soon as the data loader can see them — up to `future` batches past the one
being planned — so a row is evictable at plan(k) only when no batch in
[evictable_before, k + future] needs it. The pipeline picks `evictable_before` and `future`
(see pipeline.py); naive settings exist only so tests can show what they break.

Victim choice: a free slot first, then the resident row whose last need is oldest (LRU over
batches), ties by slot index — deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np


@dataclass(frozen=True)
class Plan:
    """Result of planning batch `k` (host arrays)."""

    k: int
    uniq: np.ndarray  # unique linearized ids of the batch, sorted
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

    def register(self, uniq: np.ndarray, k: int) -> None:
        """Batch k needs these rows (called in batch order, so k is the latest need)."""
        self.need_until[uniq] = k

    def plan(self, k: int, uniq: np.ndarray, inv: np.ndarray,
             evictable_before: int) -> Plan | None:
        """Plan batch k, or None when the scratchpad cannot hold the rows still needed."""
        ok, uslots, mrows, mslots, vrows, vslots = _plan(
            uniq, evictable_before, self.slot_of, self.row_in, self.need_until)
        if not ok:
            return None
        return Plan(k, uniq, inv, uslots, mrows, mslots, vrows, vslots)

    def resident(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, slots) currently in the scratchpad."""
        slots = np.flatnonzero(self.row_in >= 0).astype(np.int64)
        return self.row_in[slots].copy(), slots


@nb.njit(cache=True)
def _plan(uniq, evictable_before, slot_of, row_in, need_until):
    n = len(uniq)
    uslots = np.empty(n, np.int64)
    n_miss = 0
    for i in range(n):
        s = slot_of[uniq[i]]
        uslots[i] = s
        if s < 0:
            n_miss += 1
    cap = len(row_in)
    keys = np.empty(cap, np.int64)
    n_cand = 0
    cand = np.empty(cap, np.int64)
    for s in range(cap):
        r = row_in[s]
        if r < 0:
            cand[n_cand] = s
            keys[n_cand] = -1
            n_cand += 1
        elif need_until[r] < evictable_before:
            cand[n_cand] = s
            keys[n_cand] = need_until[r]
            n_cand += 1
    if n_cand < n_miss:
        e = np.empty(0, np.int64)
        return False, e, e, e, e, e
    order = np.argsort(keys[:n_cand], kind="mergesort")
    mrows = np.empty(n_miss, np.int64)
    mslots = np.empty(n_miss, np.int64)
    vrows = np.empty(n_miss, np.int64)
    vslots = np.empty(n_miss, np.int64)
    m = 0
    v = 0
    for i in range(n):
        if uslots[i] >= 0:
            continue
        s = cand[order[m]]
        old = row_in[s]
        if old >= 0:
            slot_of[old] = -1
            vrows[v] = old
            vslots[v] = s
            v += 1
        row_in[s] = uniq[i]
        slot_of[uniq[i]] = s
        uslots[i] = s
        mrows[m] = uniq[i]
        mslots[m] = s
        m += 1
    return True, uslots, mrows, mslots, vrows[:v], vslots[:v]
