"""ScratchPipe's `plan` stage for the reference pipeline: the simulator's own policy.

One planner for the model and the GPU: `ScratchpadState.plan(k)` runs batch k through the
`scratchpipe` policy (`policies/scratchpipe.py`, lookahead W) as a one-batch chunk and reads
back what it decided — hits, the slot of every row, the rows to fetch and the victims they
replace. The rules are therefore exactly the simulator's: at plan(k) the rows of batches
k-W+1..k are pinned; a missing row takes a free slot, else the unpinned row with no use in
batches k+1..k+W that was used least recently, else the unpinned row used farthest in the
future. Like the simulator, the planner knows the whole trace's future (next-use positions,
computed once: the data loader has the ids of upcoming batches).

The pipeline (pipeline.py) maps its lookahead L (batches planned ahead of training) to
W = L + 1, so the pinned set is what it has planned and not trained. The refetch hazard (a
row evicted by plan(j) and fetched again for a batch b > j before plan(j)'s write-back has
reached the CPU table) is not avoided by the planner: `Plan.evicted_by` names, per fetched
row, the plan that evicted it, and the pipeline orders the fetch after that write-back, as
the timing model does (`cache.refetch: wait`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import EVICTIONS, MISS, NUM_EVENTS
from scratchpipe_sim.policies.engine import compute_next_use
from scratchpipe_sim.policies.scratchpipe import ScratchPipe, min_scratchpipe_capacity
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.csr_trace import Trace


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
    #: per miss row: the batch whose plan evicted it most recently (-1: never); the pipeline
    #: gathers it again after that batch's write-back when it has not landed yet
    evicted_by: np.ndarray

    @property
    def hits(self) -> int:
        return len(self.uniq) - len(self.miss_rows)


class ScratchpadState:
    """Host-side directory of the GPU scratchpad, planned by the `scratchpipe` policy.

    `lookahead` is the policy's window W (>= 1). Batches must be planned in order 0, 1, ...
    """

    def __init__(self, trace: Trace, capacity_rows: int, lookahead: int) -> None:
        self.trace = trace
        self.capacity = capacity_rows
        self.lookahead = lookahead
        self.policy = ScratchPipe(capacity_rows, trace.total_rows, lookahead=lookahead)
        self.policy.keep_slots = True
        self.policy.prepare(trace)
        self.next_use = compute_next_use(trace)
        self.ptr = trace.batch_access_ptr()
        slots = min(capacity_rows, trace.total_rows)
        self.row_in = np.full(slots, -1, np.int64)
        #: batch that last evicted each row (-1: never)
        self.evicted_at = np.full(trace.total_rows, -1, np.int64)
        self._stamp = np.full(trace.total_rows, -1, np.int64)
        self._pos = np.zeros(trace.total_rows, np.int64)
        self.planned = 0

    def unique(self, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Unique ids of batch k in first-access order and each access's index among them."""
        return _unique(np.asarray(ids, np.int64), k, self._stamp, self._pos)

    def plan(self, k: int) -> Plan:
        """Plan batch k (the next one); a UserError when the window's rows do not fit."""
        if k != self.planned:
            raise ValueError(f"batches are planned in order: expected {self.planned}, got {k}")
        chunk = self.trace.chunk(k, k + 1, self.ptr)
        lo, hi = int(self.ptr[k]), int(self.ptr[k + 1])
        outcome = np.empty(hi - lo, np.uint8)
        events = np.zeros((1, NUM_EVENTS), np.int64)
        try:
            self.policy.process(chunk, self.next_use[lo:hi], outcome, events)
        except UserError:
            w = self.lookahead
            need = min_scratchpipe_capacity(self.trace, w)
            raise UserError(
                f"batch {k}: the scratchpad ({self.capacity} rows) cannot hold the rows of "
                f"batches {max(0, k - w + 1)}..{k} (its window, W = {w}); expected "
                f"capacity >= {need} rows or a smaller lookahead",
                field="cache.capacity_rows") from None
        self.planned += 1
        if self.planned == self.trace.num_batches:
            self.policy.finish()
        uniq, inv = self.unique(chunk.ids, k)
        uslots, mrows, mslots, vrows, vslots, evby = _read_plan(
            chunk.ids, outcome, self.policy.chunk_slots, uniq, inv, self.row_in,
            self.evicted_at, k, MISS)
        if len(vrows) != events[0, EVICTIONS]:
            raise AssertionError("planner: victims read back disagree with the policy's count")
        return Plan(k, uniq, inv, uslots, mrows, mslots, vrows, vslots, evby)

    @property
    def train_misses(self) -> int:
        """The policy's own check that trained rows were where it planned them (0)."""
        return self.policy.extra_totals()["train_misses"]

    def resident(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, slots) currently in the scratchpad."""
        slots = np.flatnonzero(self.row_in >= 0).astype(np.int64)
        return self.row_in[slots].copy(), slots


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def _read_plan(ids, outcome, slots, uniq, inv, row_in, evicted_at, k, miss):
    """Turn the policy's per-access outcome and slot into the pipeline's arrays.

    A fill is the first access of a row with outcome MISS; the row it replaces is whoever
    held its slot before (`row_in`), so victims pair with the fills that needed a slot.
    """
    nu = len(uniq)
    uslots = np.full(nu, -1, np.int64)
    first = np.full(nu, -1, np.int64)
    for j in range(len(ids)):
        u = inv[j]
        if first[u] < 0:
            first[u] = j
            uslots[u] = slots[j]
    n_miss = 0
    for u in range(nu):
        if outcome[first[u]] == miss:
            n_miss += 1
    mrows = np.empty(n_miss, np.int64)
    mslots = np.empty(n_miss, np.int64)
    evby = np.empty(n_miss, np.int64)
    vrows = np.empty(n_miss, np.int64)
    vslots = np.empty(n_miss, np.int64)
    m = 0
    v = 0
    for u in range(nu):
        if outcome[first[u]] != miss:
            continue
        r, s = uniq[u], uslots[u]
        mrows[m], mslots[m], evby[m] = r, s, evicted_at[r]
        m += 1
        old = row_in[s]
        if old >= 0:
            vrows[v], vslots[v] = old, s
            evicted_at[old] = k
            v += 1
        row_in[s] = r
    return uslots, mrows, mslots, vrows[:v].copy(), vslots[:v].copy(), evby
