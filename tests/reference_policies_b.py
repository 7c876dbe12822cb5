"""Obviously-correct pure-Python references for fbgemm-lru, fbgemm-lfu and scratchpipe.

Written straight from the rules in docs/policies.md, with sets and dicts and no cleverness,
so that the Numba kernels can be checked count for count. Inputs are the linearized access
stream and the per-batch start positions (`ptr`, num_batches + 1 entries).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field

HIT, MISS, UNPLACED = 0, 1, 2
M64 = (1 << 64) - 1


def fmix64(k: int) -> int:
    k &= M64
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    k ^= k >> 33
    return k


@dataclass
class RefResult:
    outcome: list[int] = field(default_factory=list)
    fills: int = 0
    evictions: int = 0
    writebacks: int = 0
    resident: set[int] = field(default_factory=set)
    train_misses: int = 0
    stalls: int = 0
    max_resident: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "accesses": len(self.outcome),
            "hits": self.outcome.count(HIT),
            "misses": len(self.outcome) - self.outcome.count(HIT),
            "unplaced": self.outcome.count(UNPLACED),
            "fills": self.fills,
            "evictions": self.evictions,
            "writebacks": self.writebacks,
        }


def batches_of(ids: list[int], ptr: list[int]) -> list[list[int]]:
    return [list(ids[ptr[k]:ptr[k + 1]]) for k in range(len(ptr) - 1)]


def ref_fbgemm(ids: list[int], ptr: list[int], capacity: int, ways: int,
               lfu: bool) -> RefResult:
    sets = -(-capacity // ways)
    row = [[None] * ways for _ in range(sets)]
    ts = [[-1] * ways for _ in range(sets)]
    count: dict[int, int] = defaultdict(int)
    res = RefResult()
    for t, batch in enumerate(batches_of(ids, ptr)):
        if lfu:
            for r in batch:
                count[r] += 1
        where = {row[s][w]: (s, w) for s in range(sets) for w in range(ways)
                 if row[s][w] is not None}
        resident_before = {r for r in batch if r in where}
        for r in resident_before:
            s, w = where[r]
            ts[s][w] = t
        placed = set()
        for r in sorted(set(batch) - resident_before):
            s = fmix64(r) % sets
            free = [w for w in range(ways) if ts[s][w] != t]
            if not free:
                continue  # conflict miss
            if lfu:
                def cnt(w, s=s):
                    return -1 if row[s][w] is None else count[row[s][w]]
                w = min(free, key=lambda w: (cnt(w), w))
                if row[s][w] is not None and count[r] <= cnt(w):
                    continue  # not admitted
            else:
                w = min(free, key=lambda w: (ts[s][w], w))
            if row[s][w] is not None:
                res.evictions += 1
                res.writebacks += 1
            row[s][w] = r
            ts[s][w] = t
            res.fills += 1
            placed.add(r)
        seen = set()
        for r in batch:
            if r in resident_before:
                res.outcome.append(HIT)
            elif r in placed:
                res.outcome.append(HIT if r in seen else MISS)
                seen.add(r)
            else:
                res.outcome.append(UNPLACED)
    res.resident = {row[s][w] for s in range(sets) for w in range(ways)
                    if row[s][w] is not None}
    return res


def ref_lru(ids: list[int], capacity: int) -> RefResult:
    """Textbook LRU, one access at a time (every access is its own batch)."""
    res = RefResult()
    order: dict[int, None] = {}
    for r in ids:
        if r in order:
            del order[r]
            res.outcome.append(HIT)
        else:
            if len(order) == capacity:
                del order[next(iter(order))]
                res.evictions += 1
                res.writebacks += 1
            res.fills += 1
            res.outcome.append(MISS)
        order[r] = None
    res.resident = set(order)
    return res


class Overflow(Exception):
    def __init__(self, batch: int):
        super().__init__(batch)
        self.batch = batch


def min_capacity(ids: list[int], ptr: list[int], w: int) -> int:
    b = batches_of(ids, ptr)
    return max(len(set().union(*b[max(0, j - w + 1):j + 1])) for j in range(len(b)))


def ref_scratchpipe(ids: list[int], ptr: list[int], capacity: int, w: int,
                    stall: bool = False) -> RefResult:
    batches = batches_of(ids, ptr)
    nb = len(batches)
    positions: dict[int, list[int]] = defaultdict(list)
    for p, r in enumerate(ids):
        positions[r].append(p)

    def next_use(r: int, p: int) -> float:
        ps = positions[r]
        i = bisect_right(ps, p)
        return ps[i] if i < len(ps) else float("inf")

    def used_in(r: int, lo: int, hi: int) -> bool:
        return any(r in batches[k] for k in range(lo, min(hi, nb - 1) + 1))

    res = RefResult()
    resident: set[int] = set()
    last: dict[int, int] = {}
    unplaced_at: set[int] = set()  # positions served unplaced

    def train(k: int) -> None:
        for p in range(ptr[k], ptr[k + 1]):
            if p not in unplaced_at and ids[p] not in resident:
                res.train_misses += 1

    for j, batch in enumerate(batches):
        pinned = set().union(*batches[max(0, j - w + 1):j + 1])
        before = set(resident)
        stalled = False
        for i, r in enumerate(batch):
            p = ptr[j] + i
            if r in before or r in resident:
                res.outcome.append(HIT)
                last[r] = p
                continue
            if len(resident) == capacity:
                cand = resident - pinned
                if not cand:
                    if not stall:
                        raise Overflow(j)
                    res.outcome.append(UNPLACED)
                    unplaced_at.add(p)
                    stalled = True
                    continue
                cold = [c for c in cand if not used_in(c, j + 1, j + w)]
                if cold:
                    victim = min(cold, key=lambda c: last[c])
                else:
                    victim = max(cand, key=lambda c: next_use(c, last[c]))
                resident.remove(victim)
                res.evictions += 1
                res.writebacks += 1
            resident.add(r)
            res.fills += 1
            res.outcome.append(MISS)
            last[r] = p
        res.stalls += stalled
        res.max_resident = max(res.max_resident, len(resident))
        if j - w + 1 >= 0:
            train(j - w + 1)
    for k in range(max(0, nb - w + 1), nb):
        train(k)
    res.resident = resident
    return res


def build_trace(per_batch: list[list[list[int]]], table_rows: list[int]):
    """(Trace, linear ids, batch ptr) from `per_batch[k][t]` = ids of table t in batch k.

    The linear stream is computed here independently of the trace layer: batch-major, then
    table-major, id + sum of the earlier tables' rows.
    """
    import numpy as np

    from scratchpipe_sim.traces.csr_trace import Trace

    offs = [sum(table_rows[:t]) for t in range(len(table_rows))]
    ids: list[int] = []
    ptr = [0]
    for batch in per_batch:
        for t, rows in enumerate(batch):
            ids.extend(r + offs[t] for r in rows)
        ptr.append(len(ids))
    trace = Trace.from_batches([[np.asarray(r, np.int64) for r in b] for b in per_batch],
                               table_rows)
    return trace, ids, ptr


def multi_table_batches(draw, st, max_batches: int = 25, max_b: int = 6):
    """A hypothesis draw: 1-2 tables of 1-20 rows, 1-25 batches of 1-6 samples (pooling 1)."""
    ntab = draw(st.integers(1, 2))
    rows = [draw(st.integers(1, 20)) for _ in range(ntab)]
    nbat = draw(st.integers(1, max_batches))
    per_batch = []
    for _ in range(nbat):
        b = draw(st.integers(1, max_b))
        per_batch.append([draw(st.lists(st.integers(0, rows[t] - 1), min_size=b, max_size=b))
                          for t in range(ntab)])
    return per_batch, rows
