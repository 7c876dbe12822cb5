"""`--distribution reuse-distance`: temporal locality from an LRU stack-distance model.

DLRM's synthetic generator (dlrm_data_pytorch `trace_generate_lru`) draws each access's LRU
stack distance from a profile and reads the row at that depth of an LRU stack, but restarts
the stack for every bag. Here the stack spans the table's whole stream (all bags, all
batches), so reuse across samples and mini-batches — what a cache sees — is modelled.

Each access is new (a row never used before, with probability `new_fraction`) or a reuse at
depth d >= 1 (1 = the most recently used row). Depths come from either

* a power law over the current stack 1..S (`alpha`): a continuous density ∝ x^-alpha on
  [1, S+1) floored, i.e. P(d) ∝ ∫_d^{d+1} x^-alpha dx (inverse CDF in closed form), or
* a measured profile: `profile=TRACE` replays the stack-distance distribution of any trace
  the project reads (measured over its linearized id stream, first uses as new).

A depth beyond the current stack (early in the stream) becomes a new row; once every row
of the table has been used, a new access reuses the oldest row instead. New rows are the
table's ids in a seeded random order (the generators' `Permutation`).

The stack lives in a Fenwick tree over access-time slots (a slot is marked while it holds
some row's latest access); the d-th most recent mark is found by a descending search, so an
access costs O(log slots) in Numba. Slots are compacted when they run out.
"""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety.paths import input_kind
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.generators import Permutation, register_distribution
from scratchpipe_sim.traces.stats import stack_distances

_MIN_SLOTS = 1 << 16


@njit(cache=True)
def _add(tree, i, v):
    n = len(tree) - 1
    i += 1
    while i <= n:
        tree[i] += v
        i += i & -i


@njit(cache=True)
def _kth(tree, k, top):
    """0-based slot of the k-th mark (k >= 1) in slot order."""
    n = len(tree) - 1
    pos = 0
    step = top
    while step > 0:
        nxt = pos + step
        if nxt <= n and tree[nxt] < k:
            pos = nxt
            k -= tree[nxt]
        step //= 2
    return pos


@njit(cache=True)
def _run(depths, u, alpha, out, start, tree, slot_row, row_slot, state, rows):
    """Fill out[start:] until done or slots run out; state = [next_slot, stack, fresh].

    depths[k] >= 1: that depth; 0: new row; -1: draw the depth from the power law with u[k].
    Returns the next position of `out` to fill.
    """
    cap = len(slot_row)
    top = 1
    while top * 2 <= cap:
        top *= 2
    k = start
    while k < len(out):
        if state[0] >= cap:
            return k
        S = state[1]
        d = depths[k]
        if d < 0:
            if u[k] < 0.0:  # marks a new access in parametric mode
                d = 0
            elif S == 0:
                d = 0
            else:
                x = 1.0
                if abs(alpha - 1.0) < 1e-12:
                    x = (S + 1.0) ** u[k]
                else:
                    e = 1.0 - alpha
                    x = (1.0 + u[k] * ((S + 1.0) ** e - 1.0)) ** (1.0 / e)
                d = int(x)
                if d < 1:
                    d = 1
                if d > S:
                    d = S
        if d > S:
            d = 0
        if d == 0 and state[2] >= rows:  # every row used: reuse the oldest
            d = S
        if d == 0:
            r = state[2]
            state[2] += 1
            state[1] += 1
        else:
            s = _kth(tree, S - d + 1, top)
            r = slot_row[s]
            _add(tree, s, -1)
        t = state[0]
        state[0] += 1
        slot_row[t] = r
        row_slot[r] = t
        _add(tree, t, 1)
        out[k] = r
        k += 1
    return k


def _compact(row_slot: np.ndarray, used: int, new_cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Renumber the live slots 0..S-1 in time order (every used row is on the stack, so the
    live slots are exactly row_slot[:used]); returns the new tree and slot -> row."""
    order = np.argsort(row_slot[:used], kind="stable")  # rows, oldest first
    slot_row = np.zeros(new_cap, np.int64)
    slot_row[:used] = order
    row_slot[order] = np.arange(used, dtype=np.int64)
    marks = np.zeros(new_cap + 1, np.int64)
    marks[1: used + 1] = 1
    return _fenwick_from(marks), slot_row


@njit(cache=True)
def _fenwick_from(a):
    """Fenwick tree (1-based, a[0] unused) of the 0/1 array a[1:], in O(n)."""
    tree = a.copy()
    n = len(a) - 1
    for i in range(1, n + 1):
        j = i + (i & -i)
        if j <= n:
            tree[j] += tree[i]
    return tree


class ReuseDistanceSampler:
    """A continuous LRU-stack stream over one table's rows."""

    def __init__(self, rows: int, seed: np.random.SeedSequence, new_fraction: float,
                 alpha: float, profile: tuple[np.ndarray, np.ndarray] | None):
        perm_seed, draw_seed = seed.spawn(2)
        self.rows = int(rows)
        self.new_fraction, self.alpha, self.profile = new_fraction, alpha, profile
        self.perm = Permutation(self.rows, perm_seed)
        self._rng = np.random.Generator(np.random.PCG64(draw_seed))
        if self.rows > 1 << 28:
            raise UserError(f"reuse-distance keeps 8 bytes per row; {rows} rows is too many "
                            "(expected at most 2^28)", field="table_rows")
        cap = _MIN_SLOTS
        self.tree = np.zeros(cap + 1, np.int64)
        self.slot_row = np.zeros(cap, np.int64)
        self.row_slot = np.zeros(self.rows, np.int64)
        self.state = np.zeros(3, np.int64)  # next slot, stack size, fresh rows used

    def _depths(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        u = self._rng.random(n)
        if self.profile is None:
            new = self._rng.random(n) < self.new_fraction
            u[new] = -1.0
            return np.full(n, -1, np.int64), u
        values, cdf = self.profile
        return values[np.searchsorted(cdf, u, side="right")], u

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        depths, u = self._depths(n)
        out = np.empty(n, np.int64)
        k = 0
        while k < n:
            k = _run(depths, u, self.alpha, out, k, self.tree, self.slot_row, self.row_slot,
                     self.state, self.rows)
            if k < n:  # out of slots: compact, doubling while over half full
                S = int(self.state[1])
                cap = len(self.slot_row)
                new_cap = cap * 2 if S > cap // 2 else cap
                self.tree, self.slot_row = _compact(self.row_slot, S, new_cap)
                self.state[0] = S
        return self.perm(out)


def profile_of(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(depth values, cumulative probability) of a trace's stack distances (0 = new)."""
    from scratchpipe_sim.traces.io import open_trace

    trace = open_trace(path)
    ids = trace.linear_ids()
    d = stack_distances(ids, trace.total_rows)
    hist = np.bincount(d)
    values = np.flatnonzero(hist)
    cdf = np.cumsum(hist[values]) / len(d)
    cdf[-1] = 1.0
    return values.astype(np.int64), cdf


@register_distribution("reuse-distance", {"new_fraction": 0.1, "alpha": 1.0, "profile": ""})
def reuse_distance(rows: int, seed: np.random.SeedSequence, new_fraction: float = 0.1,
                   alpha: float = 1.0, profile: str = "") -> ReuseDistanceSampler:
    """LRU stack-distance stream: new rows with `new_fraction`, else depth ∝ d^-alpha; or
    the measured depths of the trace `profile`."""
    if not 0.0 <= new_fraction <= 1.0:
        raise UserError(f"expected a fraction in [0, 1], got {new_fraction}",
                        field="new_fraction")
    if not alpha > 0:
        raise UserError(f"alpha must be > 0, got {alpha}", field="alpha")
    prof = None
    if profile:
        input_kind(str(profile), "trace for the reuse-distance profile", "profile")
        prof = profile_of(str(profile))
    return ReuseDistanceSampler(rows, seed, new_fraction, alpha, prof)
