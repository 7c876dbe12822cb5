"""`lru`'s queue of rows + map of positions: exact LRU through its compactions, the unique
rows it counts per batch (or -1 where it cannot tell), and the map's erase that returns
the position it freed."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scratchpipe_sim.policies._hashmap import (
    EMPTY,
    erase_pair,
    home,
    new_pair_map,
    probe_pair,
)
from scratchpipe_sim.policies.base import EVICTIONS, FILLS, HIT, MISS, NUM_EVENTS, UNIQUE
from scratchpipe_sim.policies.engine import make_policy, run_cache
from scratchpipe_sim.traces.csr_trace import Chunk, Trace


def _reference(ids: np.ndarray, ptr: np.ndarray, capacity: int):
    """Outcomes, and per batch (unique rows, evictions, whether it evicted a row it used)."""
    cache: OrderedDict[int, None] = OrderedDict()
    outcome, batches = [], []
    for b in range(len(ptr) - 1):
        used: set[int] = set()
        evictions = 0
        self_evicted = False
        for r in map(int, ids[ptr[b]:ptr[b + 1]]):
            if r in cache:
                cache.move_to_end(r)
                outcome.append(HIT)
            else:
                outcome.append(MISS)
                if len(cache) == capacity:
                    victim, _ = cache.popitem(last=False)
                    evictions += 1
                    self_evicted |= victim in used
                cache[r] = None
            used.add(r)
        batches.append((len(used), evictions, self_evicted))
    return np.array(outcome, np.uint8), batches, sorted(cache)


def _run_kernel(ids: np.ndarray, ptr: np.ndarray, capacity: int, rows: int, chunk: int):
    """The policy fed by hand, `chunk` whole batches at a time (no engine in between)."""
    pol = make_policy("lru", capacity, rows)
    outcome = np.empty(len(ids), np.uint8)
    events = np.zeros((len(ptr) - 1, NUM_EVENTS), np.int64)
    for k in range(0, len(ptr) - 1, chunk):
        end = min(k + chunk, len(ptr) - 1)
        lo, hi = int(ptr[k]), int(ptr[end])
        c = Chunk(k, lo, ids[lo:hi], np.zeros(hi - lo, np.int32), ptr[k:end + 1] - lo)
        pol.process(c, None, outcome[lo:hi], events[k:end])
    return pol, outcome, events


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(1, 40), capacity=st.integers(1, 12), n=st.integers(1, 400),
       batch=st.integers(1, 9), chunk=st.sampled_from([1, 3, 1000]), seed=st.integers(0, 99))
def test_lru_matches_an_ordered_dict_and_counts_unique_rows(rows, capacity, n, batch, chunk,
                                                            seed):
    """Outcomes and events equal a textbook LRU's (the queue is compacted many times: it
    holds 8 entries per slot at most, the traces are up to 400 accesses); a batch's unique
    rows are exact, or -1, always when the batch evicted a row it had itself used, otherwise
    only when it compacted the queue."""
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.3, n) - 1) % rows
    ptr = np.append(np.arange(0, n, batch), n).astype(np.int64)
    want_out, want_batches, want_resident = _reference(ids, ptr, capacity)
    pol, outcome, events = _run_kernel(ids, ptr, capacity, rows, chunk)
    np.testing.assert_array_equal(outcome, want_out)
    entries = len(pol.queue)
    for b, (uniq, evictions, self_evicted) in enumerate(want_batches):
        fills = int((outcome[ptr[b]:ptr[b + 1]] == MISS).sum())
        assert (events[b, FILLS], events[b, EVICTIONS]) == (fills, evictions)
        if self_evicted:
            assert events[b, UNIQUE] == -1
        elif events[b, UNIQUE] == -1:
            assert int(ptr[b + 1]) > entries  # the queue was full: a compaction
        else:
            assert events[b, UNIQUE] == uniq
    np.testing.assert_array_equal(pol.resident(), want_resident)


def test_wide_row_ids_use_an_int64_queue():
    """Ids past int32 (a table of 2^31 rows or more) keep their queue in int64, same counts."""
    rng = np.random.default_rng(3)
    ids = (rng.zipf(1.2, 3000) - 1) % 50
    ptr = np.append(np.arange(0, 3000, 7), 3000).astype(np.int64)
    narrow, out_narrow, ev_narrow = _run_kernel(ids, ptr, 9, 50, 100)
    wide, out_wide, ev_wide = _run_kernel(ids + 2**31, ptr, 9, 2**31 + 50, 100)
    assert narrow.queue.dtype == np.int32 and wide.queue.dtype == np.int64
    np.testing.assert_array_equal(out_narrow, out_wide)
    np.testing.assert_array_equal(ev_narrow, ev_wide)
    np.testing.assert_array_equal(wide.resident(), narrow.resident() + 2**31)


def test_queue_stays_bounded_under_a_hot_row():
    """One hot row hit a million times: the queue is compacted, never grown (its entries
    are fixed at construction) and the counts stay those of LRU."""
    ids = np.zeros(1_000_000, np.int64)
    ids[::1000] = np.arange(1000) + 1  # a cold row every 1000 accesses
    pol = make_policy("lru", 4, 1001)
    entries = len(pol.queue)
    res = run_cache(Trace.single_table(ids, 1001, 64), pol)
    assert len(pol.queue) == entries == 16
    assert (res.misses, res.evictions) == (1001, 1001 - 4)


def test_erase_returns_the_position_it_freed():
    """The only position an erase frees is the one it returns, and a key's insert position
    after it is that one when it lies in [home, old insert position), else the old one."""
    rng = np.random.default_rng(5)
    table, mask, shift = new_pair_map(300)
    keys = rng.choice(10_000, 300, replace=False)
    for k in keys:
        p = probe_pair(table, mask, shift, k)
        table[p] = (k, 0)
    for k in rng.choice(keys, 200, replace=False):
        r = int(rng.integers(10_000, 20_000))  # a key not in the map
        p = probe_pair(table, mask, shift, r)
        empty_before = set(np.flatnonzero(table[:, 0] == EMPTY))
        freed = erase_pair(table, mask, shift, probe_pair(table, mask, shift, k))
        assert set(np.flatnonzero(table[:, 0] == EMPTY)) == empty_before | {freed}
        h = home(r, shift)
        want = freed if (freed - h) & mask < (p - h) & mask else p
        assert probe_pair(table, mask, shift, r) == want


def test_batch_size_one_kernel_decides_as_the_batch_kernel():
    """`_lru_singles` (chunks of one-access batches) against `_lru_chunk` on the same
    batches: outcomes, every event column (-1 unique rows where it compacted), the queue, the
    map and the state bit for bit, through many compactions, and against the OrderedDict."""
    from scratchpipe_sim.policies import lru

    rng = np.random.default_rng(4)
    rows, capacity = 300, 20
    # all hits (the queue fills and is compacted), then misses and evictions
    ids = np.concatenate((rng.integers(0, capacity, 2500),
                          (rng.zipf(1.2, 2500) - 1) % rows)).astype(np.int64)
    n = len(ids)
    ptr = np.arange(n + 1, dtype=np.int64)
    runs = []
    for kernel in ("singles", "chunk"):
        pol = make_policy("lru", capacity, rows)
        outcome = np.empty(n, np.uint8)
        events = np.zeros((n, NUM_EVENTS), np.int64)
        for lo in range(0, n, 777):
            hi = min(lo + 777, n)
            args = (pol.table, pol.mask, pol.shift, pol.queue, pol.slots, pol.state,
                    outcome[lo:hi], events[lo:hi])
            if kernel == "singles":
                lru._lru_singles(ids[lo:hi], *args)
            else:
                lru._lru_chunk(ids[lo:hi], ptr[lo:hi + 1] - lo, *args)
        runs.append((outcome, events, pol.queue.copy(), pol.table.copy(), pol.state.copy()))
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)
    outcome, events = runs[0][:2]
    np.testing.assert_array_equal(outcome, _reference(ids, ptr, capacity)[0])
    assert (events[:, UNIQUE] == -1).sum() > 10  # compactions happened
    assert events[:, EVICTIONS].sum() > 100
