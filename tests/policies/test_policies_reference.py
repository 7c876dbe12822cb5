"""lru, lfu, static, belady, belady-bypass against obviously-correct Python references.

The references below follow docs/policies.md word for word with dicts and lists (no
cleverness, O(capacity) per access). Hypothesis draws multi-table traces with batches > 1;
the engine runs with tiny chunks so state must survive chunk boundaries; every per-batch
counter must match, and resident sets must match (or, for MIN, have the same size) at
every chunk boundary.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scratchpipe_sim.policies import POLICIES
from scratchpipe_sim.policies.engine import iter_cache, make_policy, run_cache
from scratchpipe_sim.policies.static import top_k
from scratchpipe_sim.traces.csr_trace import Trace

INF = float("inf")
HIT, MISS, UNPLACED = 0, 1, 2


class Ref:
    """Per-access outcome plus per-batch fills and evictions; `resident` is a set."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.fills = 0
        self.evictions = 0

    def access(self, pos: int, row: int, nxt: float) -> int:
        raise NotImplementedError


class RefLRU(Ref):
    def __init__(self, capacity):
        super().__init__(capacity)
        self.od: OrderedDict[int, None] = OrderedDict()

    def access(self, pos, row, nxt):
        if row in self.od:
            self.od.move_to_end(row)
            return HIT
        if len(self.od) == self.capacity:
            self.od.popitem(last=False)
            self.evictions += 1
        self.od[row] = None
        self.fills += 1
        return MISS

    @property
    def resident(self):
        return set(self.od)


class RefLFU(Ref):
    """Victim: smallest (frequency since insertion, time of last access)."""

    def __init__(self, capacity):
        super().__init__(capacity)
        self.freq: dict[int, int] = {}
        self.last: dict[int, int] = {}

    def access(self, pos, row, nxt):
        if row in self.freq:
            self.freq[row] += 1
            self.last[row] = pos
            return HIT
        if len(self.freq) == self.capacity:
            victim = min(self.freq, key=lambda r: (self.freq[r], self.last[r]))
            del self.freq[victim], self.last[victim]
            self.evictions += 1
        self.freq[row] = 1
        self.last[row] = pos
        self.fills += 1
        return MISS

    @property
    def resident(self):
        return set(self.freq)


class RefMIN(Ref):
    def __init__(self, capacity, bypass):
        super().__init__(capacity)
        self.bypass = bypass
        self.next: dict[int, float] = {}

    def access(self, pos, row, nxt):
        if row in self.next:
            self.next[row] = nxt
            return HIT
        if len(self.next) == self.capacity:
            victim = max(self.next, key=self.next.get)
            if self.bypass and nxt >= self.next[victim]:
                return UNPLACED
            del self.next[victim]
            self.evictions += 1
        self.next[row] = nxt
        self.fills += 1
        return MISS

    @property
    def resident(self):
        return set(self.next)


class RefStatic(Ref):
    def __init__(self, capacity, stream, ptr, fraction, preload):
        super().__init__(capacity)
        nbatch = max(1, math.ceil(fraction * (len(ptr) - 1)))
        counts: dict[int, int] = {}
        for row in stream[: ptr[nbatch]]:
            counts[row] = counts.get(row, 0) + 1
        rows = sorted(range(NUM_ROWS[0]), key=lambda r: (-counts.get(r, 0), r))
        self.pinned = set(rows[:capacity])
        self.loaded = set(self.pinned) if preload else set()

    def access(self, pos, row, nxt):
        if row in self.loaded:
            return HIT
        if row in self.pinned:
            self.loaded.add(row)
            self.fills += 1
            return MISS
        return UNPLACED

    @property
    def resident(self):
        return set(self.loaded)


NUM_ROWS = [0]  # set per example, read by RefStatic


def reference(name, capacity, stream, ptr, params):
    """Per-batch rows (hits, misses, fills, evictions, writebacks, unplaced) + residents."""
    nxt = [INF] * len(stream)
    seen: dict[int, int] = {}
    for j in range(len(stream) - 1, -1, -1):
        nxt[j] = seen.get(stream[j], INF)
        seen[stream[j]] = j
    ref = {"lru": lambda: RefLRU(capacity), "lfu": lambda: RefLFU(capacity),
           "belady": lambda: RefMIN(capacity, False),
           "belady-bypass": lambda: RefMIN(capacity, True),
           "static": lambda: RefStatic(capacity, stream, ptr,
                                       params.get("profile_fraction", 1.0),
                                       params.get("preload", False))}[name]()
    rows, residents = [], []
    for b in range(len(ptr) - 1):
        f0, e0 = ref.fills, ref.evictions
        out = [ref.access(j, stream[j], nxt[j]) for j in range(ptr[b], ptr[b + 1])]
        ev = ref.evictions - e0
        rows.append((out.count(HIT), out.count(MISS) + out.count(UNPLACED), ref.fills - f0,
                     ev, ev, out.count(UNPLACED)))
        residents.append(ref.resident)
    return rows, residents


@st.composite
def traces(draw):
    """1-3 tables, 1-12 batches of 1-9 samples, pooling 0-3, few rows (many collisions)."""
    num_tables = draw(st.integers(1, 3))
    table_rows = [draw(st.integers(1, 12)) for _ in range(num_tables)]
    batches, lengths = [], []
    for _ in range(draw(st.integers(1, 12))):
        b = draw(st.integers(1, 9))
        per_t, len_t = [], []
        for t in range(num_tables):
            lens = draw(st.lists(st.integers(0, 3), min_size=b, max_size=b))
            ids = draw(st.lists(st.integers(0, table_rows[t] - 1), min_size=sum(lens),
                                max_size=sum(lens)))
            per_t.append(np.array(ids, np.int64))
            len_t.append(np.array(lens, np.int64))
        batches.append(per_t)
        lengths.append(len_t)
    trace = Trace.from_batches(batches, table_rows, lengths)
    capacity = draw(st.integers(1, sum(table_rows) + 2))
    chunk = draw(st.integers(1, 40))
    return trace, capacity, chunk


def _independent_stream(trace: Trace) -> tuple[list[int], list[int]]:
    """Linearized ids and batch starts, computed here from the CSR layout (not the engine)."""
    base = [0]
    for r in trace.table_rows[:-1]:
        base.append(base[-1] + int(r))
    stream, ptr = [], [0]
    T = trace.num_tables
    for k in range(trace.num_batches):
        lo, hi = int(trace.batch_bounds[k]), int(trace.batch_bounds[k + 1])
        bsz = (hi - lo) // T
        for bag in range(lo, hi):
            t = (bag - lo) // bsz
            for j in range(int(trace.offsets[bag]), int(trace.offsets[bag + 1])):
                stream.append(int(trace.indices[j]) + base[t])
        ptr.append(len(stream))
    return stream, ptr


CASES = [("lru", {}), ("lfu", {}), ("belady", {}), ("belady-bypass", {}), ("static", {}),
         ("static", {"preload": True}), ("static", {"profile_fraction": 0.3})]


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}{p or ''}" for n, p in CASES])
@settings(max_examples=80, deadline=None)
@given(case=traces())
def test_matches_reference(name, params, case):
    trace, capacity, chunk = case
    NUM_ROWS[0] = trace.total_rows
    stream, ptr = _independent_stream(trace)
    want, want_res = reference(name, capacity, stream, ptr, params)
    policy = make_policy(name, capacity, trace.total_rows, **params)
    got = []
    cols = [2, 3, 4, 5, 6, 7]  # hits, misses, fills, evictions, writebacks, unplaced
    for bc in iter_cache(trace, policy, chunk_accesses=chunk):
        got.extend(tuple(int(x) for x in row[cols]) for row in bc.counts)
        res = policy.resident()
        end = bc.first_batch + len(bc.counts) - 1
        assert len(res) <= capacity
        assert len(set(res.tolist())) == len(res)
        if name.startswith("belady"):
            assert len(res) == len(want_res[end])  # which never-used row goes is a free tie
        else:
            assert set(res.tolist()) == want_res[end]
    assert got == want


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_min_bounds_at_batch_size_one(zipf_ids, seed):
    """belady <= every always-admitting policy; belady-bypass <= every policy, static too."""
    rows = 4000
    ids = zipf_ids(20000, rows, 1.1, seed)
    trace = Trace.single_table(ids, rows, 1)
    for capacity in (40, 400):
        misses = {}
        for name in POLICIES.names():
            try:
                misses[name] = run_cache(trace, name, capacity, chunk_accesses=5000).misses
            except Exception as e:  # noqa: BLE001 - a policy that cannot run this case
                pytest.fail(f"{name} failed at capacity {capacity}: {e}")
        for name in ("lru", "lfu", "fbgemm-lru", "scratchpipe"):
            if name in misses:
                assert misses["belady"] <= misses[name], (name, capacity)
        assert all(misses["belady-bypass"] <= m for m in misses.values()), misses
        assert misses["belady-bypass"] < misses["static"]


def test_lfu_tie_break_is_least_recently_used():
    # capacity 2: rows 1 and 2 both have frequency 1; 1 was used less recently -> evicted.
    trace = Trace.single_table(np.array([1, 2, 3, 2, 1, 2]), 5, 1)
    policy = make_policy("lfu", 2, 5)
    list(iter_cache(trace, policy))
    # 1 M, 2 M, 3 M(evict 1), 2 H(f=2), 1 M(evict 3: f=1 < 2), 2 H
    assert sorted(policy.resident().tolist()) == [1, 2]
    assert policy.frequencies() == {1: 1, 2: 3}
    r = run_cache(trace, "lfu", 2)
    assert (r.hits, r.misses, r.evictions) == (2, 4, 2)


def test_static_top_k_ties_to_smaller_id():
    counts = np.array([3, 5, 3, 0, 5, 3, 1])
    assert top_k(counts, 3).tolist() == [0, 1, 4]
    assert top_k(counts, 4).tolist() == [0, 1, 2, 4]
    assert top_k(counts, 10).tolist() == list(range(7))
    trace = Trace.single_table(np.array([4, 4, 1, 2, 1, 2, 0, 3]), 5, 2)
    p = make_policy("static", 2, 5, profile_fraction=0.5)  # profiles batches 0-1
    r = run_cache(trace, p)
    assert p.chosen().tolist() == [1, 4]
    assert (r.hits, r.misses, r.fills, r.unplaced, r.evictions) == (2, 6, 2, 4, 0)


@pytest.mark.parametrize("bad", [0, 1.5, -0.1, "x", True])
def test_static_rejects_bad_fraction(bad):
    from scratchpipe_sim.errors import UserError
    with pytest.raises(UserError, match="profile_fraction"):
        make_policy("static", 2, 5, profile_fraction=bad)


def test_memory_grows_with_capacity_not_rows():
    small = make_policy("lru", 1000, 10**9)
    arrays = [a for a in vars(small).values() if isinstance(a, np.ndarray)]
    assert sum(a.nbytes for a in arrays) < 100 * 1000
    big = make_policy("belady", 1000, 10**9)
    arrays = [a for a in vars(big).values() if isinstance(a, np.ndarray)]
    assert sum(a.nbytes for a in arrays) < 100 * 1000
