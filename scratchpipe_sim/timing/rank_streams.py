"""One global trace in, per-rank lookup streams out: which rank serves each lookup of a
sharded cluster (pure numpy, no SimPy), for the `cluster` design.

The global mini-batch of B samples is split data-parallel over n ranks in contiguous local
batches (sample i on rank floor(i x n / B)). Tables are sharded inside shard groups of L
consecutive ranks (2D sparse parallelism: groups data-parallel; L = n is plain model
parallelism): a table-wise table lives on one rank of each group (`owner`), a row-wise
table's rows are cut into L contiguous blocks of ceil(rows / L) (TorchRec's RW). A lookup
of sample i goes to the rank of its group that holds its row. With `dedup` (ids
deduplicated before the all-to-all, as TorchRec's / dynamicemb's input dist), a source rank
sends each distinct id once per destination, and the destination looks each up once.

Per batch and rank (`RankCounts`, arrays [batch, rank]):

    routed     lookups the rank serves before dedup (their sum over ranks is every lookup)
    lookups    lookups it serves (deduplicated per source when dedup is on)
    unique     distinct rows it updates in the backward (rows of its group's replica)
    ids_send   ids it sends to other ranks (dedup: distinct per destination)
    ids_recv   ids it receives from other ranks
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scratchpipe_sim.traces.csr_trace import Trace


@dataclass(frozen=True)
class RankPlan:
    """Where each table's rows live: n ranks in groups of `group` ranks; per table the local
    rank that owns it (`owner[t]`, table-wise) or -1 (row-wise: blocks over the group)."""

    ranks: int
    group: int
    owner: tuple[int, ...]

    def block_rows(self, table_rows: np.ndarray) -> np.ndarray:
        """Rows per block of each row-wise table (ceil(rows / group); 0 for table-wise)."""
        return np.array([math.ceil(int(r) / self.group) if o < 0 else 0
                         for r, o in zip(table_rows, self.owner, strict=True)], np.int64)


@dataclass(frozen=True)
class RankCounts:
    routed: np.ndarray
    lookups: np.ndarray
    unique: np.ndarray
    ids_send: np.ndarray
    ids_recv: np.ndarray

    def max_per_batch(self) -> dict[str, np.ndarray]:
        """The largest rank's count of each kind per batch: what a collective (which waits
        for the slowest rank) and the critical rank are priced from."""
        return {f"rank_{k}": getattr(self, k).max(axis=1) for k in
                ("routed", "lookups", "unique", "ids_send", "ids_recv")}


def batch_routes(trace: Trace, b: int, plan: RankPlan) -> tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray]:
    """Batch b's (linear ids, source rank, destination rank) of every lookup."""
    batch = trace.batch(b)
    T, B = trace.num_tables, batch.batch_size
    offs = np.asarray(batch.offsets, np.int64)
    lengths = np.diff(offs)
    bag = np.repeat(np.arange(T * B, dtype=np.int64), lengths)
    table = bag // B
    sample = bag % B
    rows = np.asarray(batch.indices, np.int64)
    ids = rows + trace.table_offsets[table]
    src = sample * plan.ranks // B
    dst = dst_of(trace, plan, src, ids)
    return ids, src, dst


def rank_counts(trace: Trace, plan: RankPlan, dedup: bool) -> RankCounts:
    """Every batch's per-rank counts (see the module docstring)."""
    n, nb = plan.ranks, trace.num_batches
    out = {k: np.zeros((nb, n), np.int64)
           for k in ("routed", "lookups", "unique", "ids_send", "ids_recv")}
    total = max(trace.total_rows, 1)
    for b in range(nb):
        ids, src, dst = batch_routes(trace, b, plan)
        out["routed"][b] = np.bincount(dst, minlength=n)
        if dedup:  # one (source, id) pair per distinct id a source asks for
            pair = np.unique(src * total + ids)
            s, i = pair // total, pair % total
            d = dst_of(trace, plan, s, i)
        else:
            s, i, d = src, ids, dst
        out["lookups"][b] = np.bincount(d, minlength=n)
        off = s != d
        out["ids_send"][b] = np.bincount(s[off], minlength=n)
        out["ids_recv"][b] = np.bincount(d[off], minlength=n)
        rows = np.unique(dst * total + ids)  # a row of rank d's replica
        out["unique"][b] = np.bincount(rows // total, minlength=n)
    return RankCounts(**out)


def dst_of(trace: Trace, plan: RankPlan, src: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The rank serving linear id `ids` asked for by rank `src`."""
    toff = trace.table_offsets
    table = np.searchsorted(toff, ids, side="right") - 1
    rows = ids - toff[table]
    owner = np.asarray(plan.owner, np.int64)
    block = plan.block_rows(trace.table_rows)
    local = np.where(owner[table] >= 0, owner[table], rows // np.maximum(block[table], 1))
    return (src // plan.group) * plan.group + local
