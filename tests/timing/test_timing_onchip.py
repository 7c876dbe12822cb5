"""The on-chip (LLC / L2) cache model against an independent pure-Python LRU, closed forms
and LRU inclusion."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_policies_b import fmix64 as py_fmix64  # pure Python, independent of Numba's

from scratchpipe_sim.timing.onchip import geometry, onchip_hits
from scratchpipe_sim.traces.csr_trace import Trace


def reference(trace: Trace, capacity: int, ways: int) -> tuple[list[int], list[int]]:
    """Set-associative LRU, one OrderedDict per set; update hits by membership after the
    batch."""
    if capacity == 0:
        return [0] * trace.num_batches, [0] * trace.num_batches
    sets, w = (1, capacity) if capacity < ways else (capacity // ways, ways)
    cache = [OrderedDict() for _ in range(sets)]
    ids = trace.linear_ids().tolist()
    ptr = trace.batch_access_ptr().tolist()
    lookup, update = [], []
    for b in range(trace.num_batches):
        hits = 0
        batch = ids[ptr[b] : ptr[b + 1]]
        for r in batch:
            s = cache[py_fmix64(r) % sets]
            if r in s:
                hits += 1
                s.move_to_end(r)
            else:
                if len(s) == w:
                    s.popitem(last=False)
                s[r] = True
        lookup.append(hits)
        update.append(sum(1 for r in set(batch) if r in cache[py_fmix64(r) % sets]))
    return lookup, update


@st.composite
def traces(draw):
    """Small multi-table traces with uneven bags (some empty) over few rows."""
    num_tables = draw(st.integers(1, 3))
    table_rows = [draw(st.integers(1, 12)) for _ in range(num_tables)]
    num_batches = draw(st.integers(1, 6))
    batches, lengths = [], []
    for _ in range(num_batches):
        bags = draw(st.integers(1, 4))
        per_t, len_t = [], []
        for t in range(num_tables):
            lens = draw(st.lists(st.integers(0, 3), min_size=bags, max_size=bags))
            per_t.append(np.array(draw(st.lists(st.integers(0, table_rows[t] - 1),
                                                min_size=sum(lens), max_size=sum(lens))),
                                  np.int64))
            len_t.append(np.array(lens, np.int64))
        batches.append(per_t)
        lengths.append(len_t)
    trace = Trace.from_batches(batches, table_rows, lengths)
    if trace.num_accesses == 0:  # at least one access
        batches[0][0] = np.array([0], np.int64)
        lengths[0][0] = lengths[0][0].copy()
        lengths[0][0][0] += 1
        trace = Trace.from_batches(batches, table_rows, lengths)
    return trace


@settings(max_examples=150, deadline=None)
@given(trace=traces(), capacity=st.integers(0, 24), ways=st.integers(1, 8),
       chunk=st.integers(1, 40))
def test_matches_python_reference(trace, capacity, ways, chunk):
    got = onchip_hits(trace, capacity, ways, chunk_accesses=chunk)
    lookup, update = reference(trace, capacity, ways)
    assert got.lookup_hits.dtype == np.int64 and got.update_hits.dtype == np.int64
    assert got.lookup_hits.tolist() == lookup
    assert got.update_hits.tolist() == update


def test_hand_example_eviction_inside_batch():
    # fully associative, 2 entries. batch 0: 0 1 0 -> 1 hit, {0, 1} resident.
    # batch 1: 2 evicts 1, 0 hits, 1 evicts 2 -> 1 hit; of {0, 1, 2} only 0 and 1 remain.
    trace = Trace.single_table(np.array([0, 1, 0, 2, 0, 1]), 3, 3)
    got = onchip_hits(trace, 2, 2)
    assert got.lookup_hits.tolist() == [1, 1]
    assert got.update_hits.tolist() == [2, 2]
    assert (got.sets, got.ways) == (1, 2)


def _zipf_trace(n=6000, rows=900, batch=250, seed=3):
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.1, n) - 1, rows - 1)
    return Trace.single_table(rng.permutation(rows)[ranks], rows, batch)


@pytest.mark.parametrize("chunk", [1, 97, 1 << 20])
def test_working_set_that_fits_only_misses_first_touches(chunk):
    trace = _zipf_trace()
    ids = trace.linear_ids()
    ptr = trace.batch_access_ptr()
    distinct = len(np.unique(ids))
    got = onchip_hits(trace, distinct, distinct, chunk_accesses=chunk)
    first = np.zeros(len(ids), bool)
    first[np.unique(ids, return_index=True)[1]] = True
    for b in range(trace.num_batches):
        lo, hi = ptr[b], ptr[b + 1]
        assert got.lookup_hits[b] == (hi - lo) - first[lo:hi].sum()
        assert got.update_hits[b] == len(np.unique(ids[lo:hi]))


def test_capacity_zero_is_all_zeros():
    got = onchip_hits(_zipf_trace(), 0, 16)
    assert not got.lookup_hits.any() and not got.update_hits.any()
    assert len(got.lookup_hits) == len(got.update_hits) == 24
    assert (got.sets, got.ways) == (0, 0)


def test_larger_lru_never_hits_less():
    """LRU inclusion: a fully associative LRU's contents are a subset of a larger one's at
    every moment, so per batch neither lookup nor update hits can drop."""
    trace = _zipf_trace(seed=5)
    distinct = len(np.unique(trace.linear_ids()))
    prev_l = prev_u = None
    for cap in (1, 2, 5, 20, 64, 200, 500, 900):
        got = onchip_hits(trace, cap, cap, chunk_accesses=333)
        if prev_l is not None:
            assert np.all(got.lookup_hits >= prev_l) and np.all(got.update_hits >= prev_u)
            # more room keeps more rows while the working set does not fit yet
            assert got.lookup_hits.sum() > prev_l.sum() or cap > distinct
        prev_l, prev_u = got.lookup_hits, got.update_hits


def test_geometry():
    assert geometry(0, 16) == (0, 0)
    assert geometry(5, 16) == (1, 5)
    assert geometry(100, 16) == (6, 16)
    with pytest.raises(ValueError, match="capacity_rows"):
        geometry(-1, 4)
    with pytest.raises(ValueError, match="ways"):
        geometry(10, 0)
