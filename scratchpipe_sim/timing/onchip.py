"""On-chip caches (CPU LLC, GPU L2): which embedding-row accesses never reach DRAM/HBM.

Why: only misses of the on-chip cache cost DRAM/HBM bandwidth. The hot rows of a Zipf trace
sit in the CPU's last-level cache or the GPU's L2 (tens of MiB hold the top 10^5 rows), so
charging every lookup as a DRAM/HBM gather overprices the designs that gather a skewed stream
(`hybrid` on the CPU, `gpu-only` on HBM). The timing model charges on-chip hits to an
on-chip bandwidth (`hardware.cpu.llc_GBps`, `hardware.gpu.l2_GBps`) and only the rest to
DRAM/HBM.

Model: a set-associative LRU cache of `capacity_rows` entries, one entry per embedding row
(a row spanning several cache lines is one entry: its lines are fetched and evicted
together), `ways` ways, `sets = max(1, capacity_rows // ways)` (fewer rows than ways: one
fully associative set of `capacity_rows` entries; a remainder of `capacity_rows % ways` rows is
dropped). Set index = MurmurHash3 fmix64(linearized row id) mod sets, as in
`policies.fbgemm`; LRU within a set by a per-access timestamp. Every access (forward lookup)
touches its row; the backward's row update is counted, not replayed: it finds on chip the
rows of the batch still resident after the batch's whole access stream (writes are treated
like reads: no write-allocate or dirty-line traffic is modelled).

Memory: the cache only (two int64 per entry, 16 B; nothing per row of the tables): a row's
timestamp tells whether the current batch touched it already. Per-access work is one compiled
kernel per trace chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratchpipe_sim.policies.fbgemm import cache_set
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch
from scratchpipe_sim.traces.csr_trace import Trace

EMPTY = -1
#: accesses ahead whose set the walk hashes and prefetches (the sets, 16 B a way, outgrow
#: the core's L2: 3.75 MiB for a 40 MiB LLC of 256 B rows); each set index is hashed once,
#: kept in a ring of _PF_RING entries until its access comes. 8 was the fastest of 8, 16, 32,
#: 64 on the quickstart's LLC and L2 walks (docs/performance.md)
_PF_ONCHIP = 8
_PF_RING = 16  # a power of two > _PF_ONCHIP


@dataclass(frozen=True)
class OnChipCounts:
    """Per-batch on-chip hits (int64 arrays, one entry per batch of the trace).

    `lookup_hits[b]`: accesses of batch b whose row was resident when accessed.
    `update_hits[b]`: unique rows of batch b still resident right after batch b's accesses
    (what the backward's row update finds on chip).
    `sets * ways` is the number of entries actually modelled (<= the capacity asked for).
    """

    lookup_hits: np.ndarray
    update_hits: np.ndarray
    sets: int
    ways: int


def geometry(capacity_rows: int, ways: int) -> tuple[int, int]:
    """(sets, ways) of a cache of `capacity_rows` entries: (0, 0) when there is none."""
    if capacity_rows < 0:
        raise ValueError(f"capacity_rows must be >= 0, got {capacity_rows}")
    if ways < 1:
        raise ValueError(f"ways must be >= 1, got {ways}")
    if capacity_rows == 0:
        return 0, 0
    if capacity_rows < ways:
        return 1, capacity_rows
    return capacity_rows // ways, ways


def onchip_hits(trace: Trace, capacity_rows: int, ways: int,
                chunk_accesses: int | None = None) -> OnChipCounts:
    """Replay `trace` through a set-associative LRU on-chip cache; per-batch hits.

    Deterministic: the result depends only on the trace, `capacity_rows` and `ways` (not on
    `chunk_accesses`, which only bounds the memory of one chunk).
    """
    sets, w = geometry(int(capacity_rows), int(ways))
    nbat = trace.num_batches
    lookup = np.zeros(nbat, np.int64)
    update = np.zeros(nbat, np.int64)
    if sets == 0:
        return OnChipCounts(lookup, update, 0, 0)
    # (row, timestamp) per way, interleaved: a set's ways share cache lines (1.5x faster
    # than two arrays on a 10M-access Zipf trace)
    slots = np.full((sets * w, 2), EMPTY, np.int64)
    ring = np.zeros(_PF_RING, np.int64)
    for chunk in trace.iter_chunks(chunk_accesses, reuse_buffers=True):
        lo = chunk.first_batch
        _onchip_chunk(chunk.ids, chunk.batch_ptr, chunk.first_access, sets, w, slots,
                      lookup[lo : lo + chunk.num_batches], update[lo : lo + chunk.num_batches],
                      ring)
    return OnChipCounts(lookup, update, sets, w)


@njit(cache=True)
def _set_base(r, sets, ways):
    """First slot of row r's set."""
    return cache_set(r, sets) * ways if sets > 1 else 0


@njit(cache=True)
def _onchip_chunk(ids, batch_ptr, first_access, sets, ways, slots, lookup, update, ring):
    """One chunk of whole batches. `resident` counts the batch's unique rows now on chip:
    +1 when a row enters (a miss) or is hit for the first time in the batch, -1 when a row the
    batch touched is evicted. "Touched in this batch" = timestamp at or after the batch's first
    access (every access restamps its row, a re-inserted row included), so no per-row state.
    Empty ways carry timestamp -1, so they are the first victims. The set of access j + _PF_ONCHIP
    is hashed and prefetched (a hint: no result depends on it) at access j; `ring` (_PF_RING
    int64) keeps each hashed set base until its access."""
    n = len(ids)
    mask = _PF_RING - 1
    for a in range(min(_PF_ONCHIP, n)):
        ring[a] = _set_base(ids[a], sets, ways)
    for b in range(len(batch_ptr) - 1):
        lo, hi = batch_ptr[b], batch_ptr[b + 1]
        batch_start = first_access + lo
        hits = 0
        resident = 0
        for j in range(lo, hi):
            ahead = j + _PF_ONCHIP
            if ahead < n:
                pb = _set_base(ids[ahead], sets, ways)
                ring[ahead & mask] = pb
                prefetch(slots, 2 * pb)
                prefetch(slots, 2 * (pb + ways) - 1)
            r = ids[j]
            base = ring[j & mask]
            found = -1
            victim = base
            oldest = slots[base, 1]
            for k in range(base, base + ways):
                if slots[k, 0] == r:
                    found = k
                    break
                if slots[k, 1] < oldest:
                    oldest = slots[k, 1]
                    victim = k
            if found >= 0:
                hits += 1
                if slots[found, 1] < batch_start:
                    resident += 1
            else:
                if slots[victim, 0] != EMPTY and slots[victim, 1] >= batch_start:
                    resident -= 1
                slots[victim, 0] = r
                found = victim
                resident += 1
            slots[found, 1] = first_access + j
        lookup[b] = hits
        update[b] = resident
