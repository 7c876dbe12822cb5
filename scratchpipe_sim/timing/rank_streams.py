"""One global trace in, per-rank lookup streams out: which rank serves each lookup of a
sharded cluster, for the `cluster` design (a compiled pass per batch, no SimPy, never
Python per lookup).

The global mini-batch of B samples is split data-parallel over n ranks in contiguous local
batches (sample i on rank floor(i x n / B)). Tables are placed inside shard groups of L
consecutive ranks (2D sparse parallelism: groups data-parallel; L = n is plain model
parallelism). Each table t has a span of `span[t]` ranks of the group starting at local
rank `start[t]`: span 1 is table-wise (the table on one rank), span k > 1 row-wise over k
ranks (rows cut into k contiguous blocks of ceil(rows / k): TorchRec's RW for k = L, its
TWRW for the k GPUs of one node), span 0 data-parallel (the table replicated on every rank:
a lookup is served by the rank that asks, no exchange; HugeCTR's small tables). A table of
`cols[t]` = c > 1 column slices (TorchRec's column-wise, c = span; grid, span = c x j; the
slices on consecutive runs, or from the ranks `at[t]` names, repeats allowed) is
priced as TorchRec runs it, as c tables of its own (its CW sharding is its table-wise
sharding of the slices: cw_sharding.py's input dist is TwSparseFeaturesDist): `split_columns`
turns the trace and plan into one with a table per slice, row-wise over its j ranks, so every
lookup of the table lands on every slice's rank. With
`dedup` (ids deduplicated before the all-to-all, as TorchRec's / dynamicemb's input dist),
a source rank sends each distinct id of a model-parallel table once per destination, and
the destination looks each up once.

Per batch and rank (`RankCounts`, arrays [batch, rank]):

    routed        lookups the rank serves before dedup (their sum over ranks is every lookup)
    lookups       lookups it serves (deduplicated per source when dedup is on)
    unique        distinct rows it updates in the backward (rows of its replica)
    ids_send      ids it sends to other ranks (dedup: distinct per destination)
    ids_recv      ids it receives from other ranks
    ids_recv_all  ids it would receive without dedup (what scales unpooled outputs)

How: one pass over a batch's bags in FBGEMM's table-major order. Within a table the
samples come in order, so a sample's source rank and its replica never decrease: the
lookups of one (table, source) are a contiguous run of the batch's ids, and those of one
(table, replica) a run of such runs. "This (source, id) pair / this (replica, row) was seen
already" is a bit per row, set as the run is walked and cleared when it ends by walking its
ids again (two bitmaps of one bit per row of the largest table, reused for every table and
batch): exact and linear in the lookups. Why bits: a stamp per row (int64, the previous
kernel) is 8 B a row, 320 MB for MLPerf's 40M-row table, and every lookup was a DRAM miss
(~100 ns an id); the bitmap is 5 MB, inside the last-level cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scratchpipe_sim.policies.engine import row_bits
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch
from scratchpipe_sim.traces.csr_trace import Trace

KINDS = ("routed", "lookups", "unique", "ids_send", "ids_recv", "ids_recv_all")
#: tables of more rows than this get per-batch dense keys for the bitmaps (np.unique of
#: their ids), so the two bitmaps stay at 2 x this / 8 B at most (1 GiB)
STAMP_ROWS = 1 << 32
#: ids ahead whose bitmap word `_batch_counts` prefetches: the 5 MB bitmap of a 40M-row
#: table is in the last-level cache, not the core's; 32 took the kernel from 19.6 to 7.8 ns
#: an id (CPU time, a batch of the 1,024-GPU MLPerf point, docs/performance.md)
_PF_BITS = 32


def _stamp_keys(trace: Trace, batch, ind: np.ndarray) -> tuple[np.ndarray, int]:
    """The batch's ids as stamp keys: a table of at most STAMP_ROWS rows keeps its rows, a
    larger one is renumbered densely per batch (equal ids, equal keys); and the stamp
    arrays' size."""
    rows = np.asarray(trace.table_rows, np.int64)
    big = np.flatnonzero(rows > STAMP_ROWS)
    size = int(rows[rows <= STAMP_ROWS].max()) if (rows <= STAMP_ROWS).any() else 1
    if not len(big):
        return ind, size
    keys = np.asarray(ind, np.int64).copy()
    B = batch.batch_size
    offs = np.asarray(batch.offsets, np.int64)
    for t in big:
        lo, hi = offs[t * B], offs[(t + 1) * B]
        _, inv = np.unique(keys[lo:hi], return_inverse=True)
        keys[lo:hi] = inv
        size = max(size, hi - lo)
    return keys, size


@dataclass(frozen=True)
class RankPlan:
    """Where each table's rows live: n ranks in groups of `group` ranks; per table the first
    local rank of its span (`start[t]`) and the span's width (`span[t]`; 0: data-parallel)."""

    ranks: int
    group: int
    start: tuple[int, ...]
    span: tuple[int, ...]
    #: column slices per table (empty: none split; see `split_columns`)
    cols: tuple[int, ...] = ()
    #: per table the first local rank of each column slice, any ranks, repeats allowed
    #: (TorchRec's column_wise(ranks=[...]) "can reuse ranks"); empty: slice i at
    #: start + i x span / c, consecutive runs
    at: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of_owner(cls, ranks: int, group: int, owner: tuple[int, ...]) -> RankPlan:
        """Table-wise on local rank `owner[t]`, or row-wise over the group where it is -1."""
        return cls(ranks, group, tuple(max(o, 0) for o in owner),
                   tuple(group if o < 0 else 1 for o in owner))

    def block_rows(self, table_rows: np.ndarray) -> np.ndarray:
        """Rows per block of each table (ceil(rows / span); 0 for a data-parallel table)."""
        return np.array([math.ceil(int(r) / k) if k > 0 else 0
                         for r, k in zip(table_rows, self.span, strict=True)], np.int64)


    def slices(self) -> list[tuple[int, int, int]]:
        """(table, first local rank, ranks) of each slice table, table-major: a table of c
        column slices becomes c tables, slice i row-wise over j = span / c ranks from
        `at[t][i]` (else the span's i-th run of j); any other table is itself. Two slices
        of a table on one rank are two tables there, as TorchRec's CW shards them (each
        shard a table of the rank, the feature's ids sent once per shard)."""
        out = []
        for t, (s0, k) in enumerate(zip(self.start, self.span, strict=True)):
            c = self.cols[t] if self.cols else 1
            firsts = self.at[t] if self.at else tuple(s0 + i * (k // c) for i in range(c))
            out.extend((t, a, k // c) for a in firsts)
        return out

    def split(self) -> RankPlan:
        """The plan over `slices()`' tables (itself when no table is column-split)."""
        if not self.cols:
            return self
        sl = self.slices()
        return RankPlan(self.ranks, self.group, tuple(s for _, s, _ in sl),
                        tuple(k for _, _, k in sl))


def table_trace(trace: Trace, tables: list[int]) -> Trace:
    """A trace whose table i is the trace's table `tables[i]` (repeats allowed: its bags
    copied, ids as they are), batch by batch; the trace itself when `tables` is every table
    in order."""
    T = trace.num_tables
    if list(tables) == list(range(T)):
        return trace
    offs = np.asarray(trace.offsets, np.int64)
    bounds = np.asarray(trace.batch_bounds, np.int64)
    ind = np.asarray(trace.indices)
    parts, lens, new_bounds = [], [], [0]
    for b in range(trace.num_batches):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        B = (hi - lo) // T
        for t in tables:
            first = lo + t * B
            parts.append(ind[offs[first]:offs[first + B]])
            lens.append(np.diff(offs[first:first + B + 1]))
        new_bounds.append(new_bounds[-1] + B * len(tables))
    indices = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    lengths = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    rows = np.asarray(trace.table_rows, np.int64)[list(tables)]
    return Trace(rows, indices.astype(np.int64), offsets, np.array(new_bounds, np.int64),
                 trace.batch_size, dict(trace.meta), trace.source)


def split_columns(trace: Trace, plan: RankPlan) -> tuple[Trace, RankPlan]:
    """(trace, plan) with a table per column slice (`RankPlan.slices`): what `rank_counts`
    and `rank_stream` of a column-split plan are computed on; themselves when none is."""
    if not plan.cols:
        return trace, plan
    return table_trace(trace, [t for t, _, _ in plan.slices()]), plan.split()


@dataclass(frozen=True)
class RankCounts:
    routed: np.ndarray
    lookups: np.ndarray
    unique: np.ndarray
    ids_send: np.ndarray
    ids_recv: np.ndarray
    ids_recv_all: np.ndarray

    def max_per_batch(self) -> dict[str, np.ndarray]:
        """The largest rank's count of each kind per batch: what a collective (which waits
        for the slowest rank) and the critical rank are priced from."""
        return {f"rank_{k}": getattr(self, k).max(axis=1) for k in KINDS}


def rank_counts(trace: Trace, plan: RankPlan, dedup: bool) -> RankCounts:
    """Every batch's per-rank counts (see the module docstring)."""
    trace, plan = split_columns(trace, plan)  # a table per column slice
    n, nb, T = plan.ranks, trace.num_batches, trace.num_tables
    out = np.zeros((len(KINDS), nb, n), np.int64)
    rows = np.asarray(trace.table_rows, np.int64)
    pair_seen = row_seen = np.zeros(0, np.uint64)
    start = np.asarray(plan.start, np.int64)
    span = np.asarray(plan.span, np.int64)
    block = plan.block_rows(rows)
    for b in range(nb):
        batch = trace.batch(b)
        ind = np.asarray(batch.indices)
        keys, size = _stamp_keys(trace, batch, ind)
        if len(pair_seen) << 6 < size:
            pair_seen = row_bits(size)
            row_seen = row_bits(size)
        _batch_counts(ind, keys, np.asarray(batch.offsets, np.int64),
                      batch.batch_size, T, n, plan.group, start, span, block, dedup,
                      pair_seen, row_seen, out[:, b, :])
    return RankCounts(*out)


@njit(cache=True)
def _run_end(s, B, n):
    """The first sample after s whose source rank (sample i on rank i x n // B) differs."""
    return ((s * n // B + 1) * B + n - 1) // n


@njit(cache=True)
def _clear(bits, keys, lo, hi):
    """Clear the words of the bitmap that keys[lo:hi] set (only they are set in it)."""
    for j in range(lo, hi):
        bits[keys[j] >> 6] = 0


@njit(cache=True)
def _test_and_set(bits, key):
    """Was `key`'s bit clear? Sets it."""
    w = key >> 6
    m = np.uint64(1) << np.uint64(key & 63)
    old = bits[w]
    bits[w] = old | m
    return (old & m) == 0


@njit(cache=True)
def _batch_counts(indices, keys, offsets, B, T, n, L, start, span, block, dedup,
                  pair_seen, row_seen, out):
    """One batch's counts into out[kind, rank] (KINDS' order); `keys[j]` stands for row
    indices[j] in the bitmaps, which are clear on entry and on return. Per table, the
    lookups of one source rank (samples s..e) are one run of ids: the pair bitmap is
    cleared after each run, the row bitmap after each replica's runs (after each run for a
    data-parallel table, whose rows are counted per asking rank)."""
    for t in range(T):
        k = span[t]
        rep_lo = offsets[t * B]  # first id of the current replica's runs
        s = 0
        while s < B:
            e = min(_run_end(s, B, n), B)
            src = s * n // B
            rep = src if k == 0 else src // L
            lo, hi = offsets[t * B + s], offsets[t * B + e]
            for j in range(lo, hi):
                if j + _PF_BITS < hi:  # a hint: no count depends on it
                    prefetch(row_seen, keys[j + _PF_BITS] >> 6)
                    if dedup:
                        prefetch(pair_seen, keys[j + _PF_BITS] >> 6)
                row = indices[j]
                if k == 0:  # data-parallel: served where it is asked
                    dst = src
                else:
                    dst = rep * L + start[t] + (row // block[t] if k > 1 else 0)
                out[0, dst] += 1
                if dst != src:
                    out[5, dst] += 1
                kj = keys[j]
                if _test_and_set(row_seen, kj):
                    out[2, dst] += 1
                if dedup and k > 0:
                    if not _test_and_set(pair_seen, kj):
                        continue
                out[1, dst] += 1
                if dst != src:
                    out[3, src] += 1
                    out[4, dst] += 1
            if dedup and k > 0:
                _clear(pair_seen, keys, lo, hi)
            if k == 0 or e == B or (e * n // B) // L != rep:
                _clear(row_seen, keys, rep_lo, hi)
                rep_lo = hi
            s = e


def rank_stream(trace: Trace, plan: RankPlan, rank: int, dedup: bool) -> Trace:
    """The lookups of model-parallel tables that `rank` serves (deduplicated per source with
    `dedup`), as a trace of its own: per batch one bag per table (batch size 1), ids as in
    the global trace. What a per-rank cache over host memory sees; data-parallel tables
    (small, replicated in HBM) are left out; a column-split table is a table per slice."""
    trace, plan = split_columns(trace, plan)
    nb, T, n = trace.num_batches, trace.num_tables, plan.ranks
    rows = np.asarray(trace.table_rows, np.int64)
    pair_seen = np.zeros(0, np.uint64)
    start = np.asarray(plan.start, np.int64)
    span = np.asarray(plan.span, np.int64)
    block = plan.block_rows(rows)
    parts, offsets = [], [np.zeros(1, np.int64)]
    total = 0
    for b in range(nb):
        batch = trace.batch(b)
        ind = np.asarray(batch.indices)
        offs = np.asarray(batch.offsets, np.int64)
        mask = np.zeros(len(ind), np.bool_)
        keys, size = _stamp_keys(trace, batch, ind)
        if len(pair_seen) << 6 < size:
            pair_seen = row_bits(size)
        _served(ind, keys, offs, batch.batch_size, T, n, plan.group, start, span, block, dedup,
                pair_seen, rank, mask)
        kept = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
        ends = kept[offs[batch.batch_size::batch.batch_size]]  # kept up to each table's end
        parts.append(ind[mask].astype(np.int64))
        offsets.append(total + ends)
        total += int(kept[-1])
    indices = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    bounds = np.arange(nb + 1, dtype=np.int64) * T
    return Trace(rows, indices, np.concatenate(offsets), bounds, 1,
                 {"rank_stream": rank}, f"{trace.source} (rank {rank})")


@njit(cache=True)
def _served(indices, keys, offsets, B, T, n, L, start, span, block, dedup, pair_seen, rank,
            mask):
    """mask[j]: lookup j of a model-parallel table is served by `rank` (its first from
    its source when dedup is on). Only the runs of `rank`'s replica are walked; the pair
    bitmap (clear on entry and on return) is cleared after each source's run."""
    for t in range(T):
        k = span[t]
        if k == 0:
            continue
        s = 0
        while s < B:
            e = min(_run_end(s, B, n), B)
            src = s * n // B
            rep = src // L
            if rep != rank // L:
                s = e
                continue
            lo, hi = offsets[t * B + s], offsets[t * B + e]
            for j in range(lo, hi):
                row = indices[j]
                dst = rep * L + start[t] + (row // block[t] if k > 1 else 0)
                if dst != rank:
                    continue
                if dedup:
                    if not _test_and_set(pair_seen, keys[j]):
                        continue
                mask[j] = True
            if dedup:
                _clear(pair_seen, keys, lo, hi)
            s = e
