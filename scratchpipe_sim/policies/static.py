"""`static`: the K most-accessed rows of a profiling prefix, pinned for the whole run.

K = capacity. Rows are ranked by access count over the first `profile_fraction` of the
mini-batches (at least one batch; 1.0 = the whole trace, an offline oracle of frequency);
ties go to the smaller linearized id. Pinned rows are never evicted; every access to any
other row is UNPLACED (served from host memory), so there are no evictions or write-backs.

Why `preload` (default False): every other policy starts with an empty cache and pays a
compulsory miss per row it caches; with preload=False the static cache does the same (the
first access to a pinned row is a MISS and a fill), which keeps `belady-bypass <= static`
and comparisons fair. preload=True models rows copied to the GPU before training: all
accesses to pinned rows hit and there are no fills at all.

One int32 per row holds the row's state (low bits) and the last batch that touched it
(above them, relative to an epoch): the one random access a lookup makes also tells whether
it is the row's first in its batch, so the kernel counts each batch's unique rows and
unique unplaced rows itself (`counts_unique`) instead of the engine probing its own
unique-row set once per access (half of this policy's replay before).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import (
    HIT,
    MISS,
    POLICIES,
    UNIQUE,
    UNIQUE_UNPLACED,
    UNPLACED,
    Policy,
)
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch

_NOT_PINNED, _PINNED, _LOADED = 0, 1, 2
_STATE_BITS = 2  # a row's state in the low bits of its int32, its batch tag above
_STATE_MASK = (1 << _STATE_BITS) - 1
#: batches per epoch of the tags (they fit the int32 above the state bits); the tags are
#: cleared when a batch is that far past the epoch's first
TAG_LIMIT = (1 << (31 - _STATE_BITS)) - 1
_PF = 64  # prefetch distance in accesses


@dataclass(frozen=True)
class StaticParams:
    profile_fraction: float = field(default=1.0, metadata={
        "help": "leading share of the trace's batches whose counts pick the hot rows",
        "gt": 0, "max": 1})
    preload: bool = field(default=False, metadata={
        "help": "the hot rows are in the cache before the first batch (no first-touch fill)"})
    skip_batches: int = field(default=0, metadata={
        "help": "leading batches not replayed (their counts 0; profiled all the same): with "
                "preload nothing a batch does changes what a later batch sees, so a caller "
                "that keeps only later batches skips the rest", "min": 0})


@POLICIES.register("static")
class Static(Policy):
    Params = StaticParams
    counts_unique = True

    def __init__(self, capacity: int, num_rows: int, **params):
        super().__init__(capacity, num_rows, **params)
        f = self.p["profile_fraction"]
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 < f <= 1.0:
            raise UserError(f"expected a fraction in (0, 1], got {f!r}",
                            field="profile_fraction")
        if not isinstance(self.p["preload"], bool):
            raise UserError(f"expected true or false, got {self.p['preload']!r}",
                            field="preload")
        skip = self.p["skip_batches"]
        if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
            raise UserError(f"expected a whole number of batches >= 0, got {skip!r}",
                            field="skip_batches")
        if skip and not self.p["preload"]:
            raise UserError("skip_batches needs preload: without it the skipped batches' "
                            "first touches fill the pinned rows", field="skip_batches")
        # int32 per row: tag << _STATE_BITS | _NOT_PINNED/_PINNED/_LOADED
        self.rowstate: np.ndarray | None = None
        self.epoch = np.zeros(1, np.int64)  # the global batch of tag 1
        self.tag_limit = TAG_LIMIT

    def prepare(self, trace) -> None:
        nbatch = max(1, math.ceil(self.p["profile_fraction"] * trace.num_batches))
        # the profiled batches alone (a chunk past them was linearized for nothing)
        profiled = trace if nbatch >= trace.num_batches else trace.slice(0, nbatch)
        # int32 while no count can pass it: half the random traffic of the profile
        counts = np.zeros(self.num_rows, np.int32 if profiled.num_accesses < 2**31 else np.int64)
        for chunk in profiled.iter_chunks(reuse_buffers=True):
            _count(chunk.ids, chunk.batch_ptr, nbatch - chunk.first_batch, counts)
        top = top_k(counts, self.capacity)
        # the counts (4 B a row) freed before the row states (4 B a row) are made: the two
        # per-row arrays are never alive at once (9 -> 4 B a row at the pass's peak, with
        # `top_k`'s flag a row and its temporary gone)
        del counts
        self.rowstate = np.zeros(self.num_rows, np.int32)
        self.rowstate[top] = _LOADED if self.p["preload"] else _PINNED

    def first_replayed_batch(self) -> int:
        return int(self.p["skip_batches"])

    def process(self, chunk, next_use, outcome, events):
        if self.rowstate is None:
            raise RuntimeError("static policy used before prepare(trace)")
        _static_chunk(chunk.ids, chunk.batch_ptr, chunk.first_batch, self.rowstate,
                      self.epoch, self.tag_limit, outcome, events)

    def resident(self) -> np.ndarray:
        if self.rowstate is None:
            return np.zeros(0, np.int64)
        return np.flatnonzero(self.rowstate & _STATE_MASK == _LOADED).astype(np.int64)

    def chosen(self) -> np.ndarray:
        """The pinned rows, sorted (for tests and reports)."""
        return np.flatnonzero(self.rowstate & _STATE_MASK != _NOT_PINNED).astype(np.int64)


def top_k(counts: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest counts, ties to the smaller index.

    The k-th largest count comes from a histogram of the counts (one sequential pass:
    access counts are small integers), not a sort of all rows (0.7 s for 10M rows); only
    the rows counted at least `_HIST_CAP` times, if the k-th lies among them, are sorted.
    np.partition is no alternative: with the heavy ties of access counts (most rows 0 or
    1) numpy's introselect degrades badly (2.7 s for 10M rows).
    """
    n = len(counts)
    if k >= n:
        return np.arange(n, dtype=np.int64)
    kth = _kth_largest(counts, k, np.zeros(_HIST_CAP + 1, np.int64))
    if kth < 0:  # the k-th largest is >= the cap: sort the (few) rows counted that often
        big = np.sort(counts[counts >= _HIST_CAP])
        kth = big[len(big) - k]
    # the indices themselves (8 B each of k), not a flag a row and its `flatnonzero`, nor
    # a `counts > kth` temporary: nothing per row beside the counts (issue 41)
    out = np.empty(k, np.int64)
    return out[: _pick_top(counts, kth, k - _count_above(counts, kth), out)]


_HIST_CAP = 1 << 16


@njit(cache=True)
def _kth_largest(counts, k, hist):
    """The k-th largest of the non-negative `counts` (1 <= k <= len), or -1 when it is at
    least cap = len(hist) - 1 (at least k rows are counted `cap` times or more). `hist`:
    zeros (allocated by the caller: no array construction to compile here)."""
    cap = len(hist) - 1
    for c in counts:
        hist[c if c < cap else cap] += 1
    if hist[cap] >= k:
        return -1
    seen = hist[cap]
    for v in range(cap - 1, -1, -1):
        seen += hist[v]
        if seen >= k:
            return v
    return 0


@njit(cache=True)
def _count_above(counts, kth):
    """Rows counted more than `kth`."""
    n = 0
    for c in counts:
        n += c > kth
    return n


@njit(cache=True)
def _pick_top(counts, kth, ties, out):
    """Write to `out`, in increasing order, the rows counted more than `kth` and the first
    `ties` counted exactly `kth`; returns how many (the caller sizes `out` to hold them)."""
    m = 0
    for i in range(len(counts)):
        c = counts[i]
        if c > kth or (c == kth and ties > 0):
            if c == kth:
                ties -= 1
            out[m] = i
            m += 1
    return m


@njit(cache=True)
def _count(ids, batch_ptr, max_batches, counts):
    nb_ = len(batch_ptr) - 1 if len(batch_ptr) - 1 < max_batches else max_batches
    end = batch_ptr[nb_]
    for j in range(end):
        if j + _PF < end:  # a hint (see _prefetch.py): `counts` is one entry per row
            prefetch(counts, ids[j + _PF])
        counts[ids[j]] += 1


@njit(cache=True)
def _static_chunk(ids, batch_ptr, first_batch, rowstate, epoch, tag_limit, outcome, events):
    n = len(ids)
    for b in range(len(batch_ptr) - 1):
        stamp = first_batch + b - epoch[0] + 1
        if stamp > tag_limit:  # tags would not fit: forget them (keep every state)
            for i in range(len(rowstate)):
                rowstate[i] &= _STATE_MASK
            epoch[0] = first_batch + b
            stamp = 1
        tag = np.int32(stamp << _STATE_BITS)
        fills = 0
        uniq = 0
        uniq_unplaced = 0
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            if j + _PF < n:
                prefetch(rowstate, ids[j + _PF])
            r = ids[j]
            v = rowstate[r]
            m = v & _STATE_MASK
            first = (v & ~_STATE_MASK) != tag  # the row's first access in this batch
            uniq += first
            if m == _LOADED:
                outcome[j] = HIT
            elif m == _PINNED:
                outcome[j] = MISS
                m = _LOADED
                fills += 1
            else:
                outcome[j] = UNPLACED
                uniq_unplaced += first
            rowstate[r] = tag | m
        events[b, 0] += fills
        events[b, UNIQUE] = uniq
        events[b, UNIQUE_UNPLACED] = uniq_unplaced
