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
a lookup is served by the rank that asks, no exchange; HugeCTR's small tables). With
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
samples come in order, so a sample's source rank and its replica never decrease: "this
(source, id) pair / this (replica, row) was seen already" is a stamp per row holding the
last (batch, table, source) key that touched it (two int64 arrays the size of the largest
table, reused for every table and batch), exact and linear in the lookups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.csr_trace import Trace

KINDS = ("routed", "lookups", "unique", "ids_send", "ids_recv", "ids_recv_all")


@dataclass(frozen=True)
class RankPlan:
    """Where each table's rows live: n ranks in groups of `group` ranks; per table the first
    local rank of its span (`start[t]`) and the span's width (`span[t]`; 0: data-parallel)."""

    ranks: int
    group: int
    start: tuple[int, ...]
    span: tuple[int, ...]

    @classmethod
    def of_owner(cls, ranks: int, group: int, owner: tuple[int, ...]) -> RankPlan:
        """Table-wise on local rank `owner[t]`, or row-wise over the group where it is -1."""
        return cls(ranks, group, tuple(max(o, 0) for o in owner),
                   tuple(group if o < 0 else 1 for o in owner))

    def block_rows(self, table_rows: np.ndarray) -> np.ndarray:
        """Rows per block of each table (ceil(rows / span); 0 for a data-parallel table)."""
        return np.array([math.ceil(int(r) / k) if k > 0 else 0
                         for r, k in zip(table_rows, self.span, strict=True)], np.int64)


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
    n, nb, T = plan.ranks, trace.num_batches, trace.num_tables
    out = np.zeros((len(KINDS), nb, n), np.int64)
    rows = np.asarray(trace.table_rows, np.int64)
    size = int(rows.max()) if len(rows) else 0
    pair_seen = np.full(max(size, 1), -1, np.int64)
    row_seen = np.full(max(size, 1), -1, np.int64)
    start = np.asarray(plan.start, np.int64)
    span = np.asarray(plan.span, np.int64)
    block = plan.block_rows(rows)
    for b in range(nb):
        batch = trace.batch(b)
        _batch_counts(np.asarray(batch.indices), np.asarray(batch.offsets, np.int64),
                      batch.batch_size, T, n, plan.group, start, span, block, dedup,
                      b, pair_seen, row_seen, out[:, b, :])
    return RankCounts(*out)


@njit(cache=True)
def _batch_counts(indices, offsets, B, T, n, L, start, span, block, dedup, b,
                  pair_seen, row_seen, out):
    """One batch's counts into out[kind, rank] (KINDS' order)."""
    for t in range(T):
        base = (b * T + t) * n
        k = span[t]
        for s in range(B):
            src = s * n // B
            lo, hi = offsets[t * B + s], offsets[t * B + s + 1]
            for j in range(lo, hi):
                row = indices[j]
                if k == 0:  # data-parallel: served where it is asked
                    dst = src
                    rep = src
                else:
                    rep = src // L
                    dst = rep * L + start[t] + (row // block[t] if k > 1 else 0)
                out[0, dst] += 1
                if dst != src:
                    out[5, dst] += 1
                key = base + rep
                if row_seen[row] != key:
                    row_seen[row] = key
                    out[2, dst] += 1
                if dedup and k > 0:
                    key = base + src
                    if pair_seen[row] == key:
                        continue
                    pair_seen[row] = key
                out[1, dst] += 1
                if dst != src:
                    out[3, src] += 1
                    out[4, dst] += 1
