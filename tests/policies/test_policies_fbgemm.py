"""fbgemm-lru / fbgemm-lfu: FBGEMM TBE MANAGED_CACHING, checked against a pure-Python model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_policies_b import (
    HIT,
    UNPLACED,
    build_trace,
    fmix64,
    multi_table_batches,
    ref_fbgemm,
    ref_lru,
)

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.engine import COUNTERS, iter_cache, make_policy, run_cache
from scratchpipe_sim.policies.fbgemm import cache_set
from scratchpipe_sim.policies.fbgemm import fmix64 as nb_fmix64
from scratchpipe_sim.traces.csr_trace import Trace


def run_per_batch(trace, name, capacity, chunk, **params):
    """Per-batch (hits, misses, unplaced) and totals; checks capacity after every chunk."""
    pol = make_policy(name, capacity, trace.total_rows, **params)
    rows, tot = [], np.zeros(len(COUNTERS), np.int64)
    for bc in iter_cache(trace, pol, chunk):
        assert len(pol.resident()) <= pol.capacity
        assert len(set(pol.resident().tolist())) == len(pol.resident())
        for c in bc.counts:
            rows.append((int(c[COUNTERS.index("hits")]), int(c[COUNTERS.index("misses")]),
                         int(c[COUNTERS.index("unplaced")])))
        tot += bc.counts.sum(axis=0)
    return pol, rows, {n: int(tot[i]) for i, n in enumerate(COUNTERS)}


def ref_per_batch(ref, ptr):
    out = []
    for k in range(len(ptr) - 1):
        o = ref.outcome[ptr[k]:ptr[k + 1]]
        out.append((o.count(HIT), len(o) - o.count(HIT), o.count(UNPLACED)))
    return out


def test_fmix64_matches_python_reference():
    for k in [0, 1, 2, 3, 12345, 2**31 - 1, 2**32, 2**40 + 7, 2**62 + 12345, 2**63 - 1]:
        assert int(nb_fmix64(k)) == fmix64(k)
    assert fmix64(0) == 0  # the finalizer maps 0 to 0 (a property of xor-shift-multiply)
    assert cache_set(12345, 7) == fmix64(12345) % 7


def test_effective_capacity_rounds_up_to_whole_sets():
    pol = make_policy("fbgemm-lru", 100, 1000)
    assert (pol.sets, pol.ways, pol.capacity) == (4, 32, 128)
    pol = make_policy("fbgemm-lfu", 5, 1000, ways=2)
    assert (pol.sets, pol.capacity) == (3, 6)
    t = Trace.single_table(np.arange(10), 10, 1)
    res = run_cache(t, "fbgemm-lru", 100)
    assert res.capacity == 128 and res.extra == {"sets": 4, "ways": 32}


def test_conflict_misses_when_a_batch_overfills_a_set():
    # one set of 2 ways; batch 0 = [5, 3, 9, 5] needs 3 distinct rows: 3 (way 0) and 5
    # (way 1), the lowest ids, are placed (MISS, MISS, then 5 HIT); 9 is a conflict miss.
    # Batch 1 = [9, 3, 5, 9] hits 3 and 5, and 9 again finds no free way (2 unplaced).
    t = Trace.single_table(np.array([5, 3, 9, 5, 9, 3, 5, 9]), 10, 4)
    res = run_cache(t, "fbgemm-lru", 2, ways=2)
    assert (res.hits, res.misses, res.unplaced, res.fills, res.evictions) == (3, 5, 3, 2, 0)
    # batch 2 = [9]: both ways are stamped 1, the tie goes to way 0, so 3 is evicted
    t = Trace.single_table(np.array([5, 3, 9, 5, 9, 3, 5, 9, 9]), 10, 4)
    pol = make_policy("fbgemm-lru", 2, 10, ways=2)
    res = run_cache(t, pol)
    assert (res.fills, res.evictions, res.writebacks, res.unplaced) == (3, 1, 1, 3)
    assert pol.resident().tolist() == [5, 9]


def test_lfu_admits_only_more_frequent_rows():
    # one set, one way. Batch 0: [1, 1] fills 1 (count 2). Batch 1: [2] has count 1 <= 2:
    # not admitted. Batch 2: [2, 2] -> count 3 > 2: admitted, evicting 1.
    t = Trace.from_batches([[np.array([1, 1])], [np.array([2])], [np.array([2, 2])]], [4])
    pol = make_policy("fbgemm-lfu", 1, 4, ways=1)
    res = run_cache(t, pol)
    assert (res.fills, res.evictions, res.unplaced, res.hits) == (2, 1, 1, 2)
    assert pol.resident().tolist() == [2]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), lfu=st.booleans())
def test_matches_reference_count_for_count(data, lfu):
    per_batch, rows = multi_table_batches(data.draw, st)
    cap = data.draw(st.integers(1, 16))
    ways = data.draw(st.integers(1, 6))
    chunk = data.draw(st.integers(1, 40))
    trace, ids, ptr = build_trace(per_batch, rows)
    name = "fbgemm-lfu" if lfu else "fbgemm-lru"
    pol, got, tot = run_per_batch(trace, name, cap, chunk, ways=ways)
    ref = ref_fbgemm(ids, ptr, cap, ways, lfu)
    assert got == ref_per_batch(ref, ptr)
    want = ref.counts()
    for k in ("accesses", "hits", "misses", "unplaced", "fills", "evictions", "writebacks"):
        assert tot[k] == want[k], k
    assert set(pol.resident().tolist()) == ref.resident
    assert tot["evictions"] == tot["writebacks"]  # no dirty bit: every eviction writes back


@settings(max_examples=80, deadline=None)
@given(ids=st.lists(st.integers(0, 30), min_size=1, max_size=200), cap=st.integers(1, 12))
def test_one_set_batch_one_equals_lru(ids, cap):
    trace = Trace.single_table(np.array(ids), 31, 1)
    res = run_cache(trace, "fbgemm-lru", cap, ways=cap, chunk_accesses=17)
    ref = ref_lru(ids, cap)
    want = ref.counts()
    assert (res.hits, res.misses, res.fills, res.evictions, res.unplaced) == (
        want["hits"], want["misses"], want["fills"], want["evictions"], 0)
    lru = run_cache(trace, "lru", cap)
    assert (lru.hits, lru.misses, lru.evictions) == (res.hits, res.misses, res.evictions)


def test_belady_lower_bound_at_batch_one():
    rng = np.random.default_rng(7)
    ids = (rng.zipf(1.1, 4000) % 300).astype(np.int64)
    trace = Trace.single_table(ids, 300, 1)
    for cap in (8, 32, 96):
        for ways in (4, 32):
            fb = run_cache(trace, "fbgemm-lru", cap, ways=ways)
            lfu = run_cache(trace, "fbgemm-lfu", cap, ways=ways)
            eff = fb.capacity  # rounded up to whole sets: compare at the same size
            bel = run_cache(trace, "belady", eff)
            assert bel.misses <= fb.misses
            # MIN that may bypass bounds admission-filtered LFU too
            bypass = run_cache(trace, "belady-bypass", eff)
            assert bypass.misses <= min(lfu.misses, fb.misses, bel.misses)


def test_zipf_trace_with_large_batches_matches_reference():
    rng = np.random.default_rng(3)
    ids = rng.permutation(2000)[rng.zipf(1.15, 6000) % 2000]
    trace = Trace.single_table(ids, 2000, 256)
    ptr = trace.batch_access_ptr().tolist()
    for lfu in (False, True):
        name = "fbgemm-lfu" if lfu else "fbgemm-lru"
        res = run_cache(trace, name, 64, ways=8, chunk_accesses=1000)
        want = ref_fbgemm(ids.tolist(), ptr, 64, 8, lfu).counts()
        assert (res.hits, res.unplaced, res.fills, res.evictions) == (
            want["hits"], want["unplaced"], want["fills"], want["evictions"])
        assert res.unplaced > 0  # 256-id batches overfill 8-way sets: conflict misses occur


@pytest.mark.parametrize("params, field", [({"ways": 0}, "ways"), ({"ways": 2.5}, "ways"),
                                           ({"way": 4}, "way")])
def test_bad_parameters_are_user_errors(params, field):
    with pytest.raises(UserError) as e:
        make_policy("fbgemm-lru", 10, 100, **params)
    assert e.value.field == field


def test_cli_cache_fbgemm_json(tmp_path, capsys):
    from scratchpipe_sim.cli import main

    rng = np.random.default_rng(5)
    ids = rng.zipf(1.2, 3000) % 500
    path = tmp_path / "ids.npy"
    np.save(path, ids.astype(np.int64))
    rc = main(["cache", "--trace", str(path), "--policy", "fbgemm-lru", "--capacity", "40",
               "--ways", "8", "--batch-size", "64", "--json"])
    assert rc in (0, None)
    got = json.loads(capsys.readouterr().out)
    trace = Trace.single_table(ids, None, 64)
    want = ref_fbgemm(ids.tolist(), trace.batch_access_ptr().tolist(), 40, 8, False).counts()
    assert got["hits"] == want["hits"] and got["misses"] == want["misses"]
    assert got["evictions"] == got["writebacks"] == want["evictions"]
    rc = main(["cache", "--trace", str(path), "--policy", "fbgemm-lru", "--capacity", "40",
               "--ways", "0"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "ways" in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", ["fbgemm-lru", "fbgemm-lfu"])
def test_unpacked_sort_path_gives_the_same_counts(zipf_ids, name):
    """Row ids too wide to pack with the miss index take the heap-sort path: same counts."""
    trace = Trace.single_table(zipf_ids(6000, 500, 1.05, 4), 500, 64)
    packed = make_policy(name, 64, 500, ways=4)
    wide = make_policy(name, 64, 500, ways=4)
    wide.row_bits = 60  # as if ids needed 60 bits: (row << idx_bits) would overflow
    a = np.concatenate([bc.counts for bc in iter_cache(trace, packed, 1000)])
    b = np.concatenate([bc.counts for bc in iter_cache(trace, wide, 1000)])
    np.testing.assert_array_equal(a, b)
    assert a[:, COUNTERS.index("unplaced")].sum() > 0 or name == "fbgemm-lru"
    assert packed.resident().tolist() == wide.resident().tolist()


@settings(max_examples=60, deadline=None)
@given(bits=st.integers(1, 62), data=st.data())
def test_radix_sort_matches_numpy(bits, data):
    from scratchpipe_sim.policies.fbgemm import _radix_sort

    keys = data.draw(st.lists(st.integers(0, 2**bits - 1), min_size=1, max_size=300))
    a = np.array(keys, np.int64)
    got = a.copy()
    _radix_sort(got, np.empty(len(a), np.int64), np.empty(256, np.int64), bits)
    np.testing.assert_array_equal(got, np.sort(a))


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 3000), min_size=1, max_size=300),
       ways=st.sampled_from([8, 16, 24, 64]), sets=st.integers(1, 3),
       batch=st.sampled_from([1, 2, 7, 64]), lfu=st.booleans())
def test_tag_mask_geometries_match_reference(ids, ways, sets, batch, lfu):
    """Ways a multiple of 8 up to 64 take the branch-free tag-mask lookup (and batches of one
    access the no-sort path): the same counts as the reference, chunk by chunk."""
    trace = Trace.single_table(np.array(ids), 3001, batch)
    ptr = trace.batch_access_ptr().tolist()
    name = "fbgemm-lfu" if lfu else "fbgemm-lru"
    pol, got, tot = run_per_batch(trace, name, sets * ways, 29, ways=ways)
    ref = ref_fbgemm(ids, ptr, sets * ways, ways, lfu)
    assert got == ref_per_batch(ref, ptr)
    want = ref.counts()
    for k in ("hits", "misses", "unplaced", "fills", "evictions"):
        assert tot[k] == want[k], k
    assert set(pol.resident().tolist()) == ref.resident


@pytest.mark.parametrize("batch", [1, 256])
def test_one_byte_tag_collisions_are_resolved_by_the_row(zipf_ids, batch):
    """One set of 64 ways over 4000 rows: rows sharing a one-byte tag sit in the set at once
    (a tag match that is another row must not count as a hit); counts equal the reference."""
    ids = zipf_ids(6000, 4000, 1.05, 11)
    trace = Trace.single_table(ids, 4000, batch)
    ptr = trace.batch_access_ptr().tolist()
    for lfu in (False, True):
        pol = make_policy("fbgemm-lfu" if lfu else "fbgemm-lru", 64, 4000, ways=64)
        res = run_cache(trace, pol, chunk_accesses=1000)
        want = ref_fbgemm(ids.tolist(), ptr, 64, 64, lfu).counts()
        assert (res.hits, res.misses, res.unplaced, res.fills, res.evictions) == (
            want["hits"], want["misses"], want["unplaced"], want["fills"], want["evictions"])
        tags = [(fmix64(int(r)) >> 56) or 1 for r in pol.resident()]  # as `_tag`
        assert len(set(tags)) < len(tags)  # the final set holds two rows with one tag


def test_lfu_counts_widen_to_int64_exactly(zipf_ids):
    """LFU counts are int32 until 2^31 accesses, then int64 (`_widen`): widening in the
    middle of a replay changes no count."""
    trace = Trace.single_table(zipf_ids(8000, 600, 1.05, 9), 600, 32)
    narrow = make_policy("fbgemm-lfu", 96, 600, ways=8)
    mixed = make_policy("fbgemm-lfu", 96, 600, ways=8)
    assert narrow.counts.dtype == np.int32
    a, b = [], []
    for k, bc in enumerate(iter_cache(trace, mixed, 1000)):
        b.append(bc.counts)
        if k == 3:
            mixed._widen()
    a = [bc.counts for bc in iter_cache(trace, narrow, 1000)]
    assert mixed.counts.dtype == np.int64 and mixed.slot_cnt.dtype == np.int64
    np.testing.assert_array_equal(np.concatenate(a), np.concatenate(b))
    assert narrow.resident().tolist() == mixed.resident().tolist()
    np.testing.assert_array_equal(narrow.counts, mixed.counts)


@pytest.mark.parametrize("ways", [63, 72, 128])
def test_tag_collisions_in_sets_the_tag_mask_does_not_cover(zipf_ids, ways):
    """Geometries outside `_tag_mask` (ways not a multiple of 8: the way-by-way scan; a
    multiple of 8 above 64: the SWAR scan of `_find`, since a 64-bit mask cannot hold the
    set), one set over 4000 rows, so rows sharing a one-byte tag sit in it at once: a tag
    match on another row (larger or smaller id) is no hit; counts equal the reference."""
    ids = zipf_ids(5000, 4000, 1.05, 12)
    for batch in (1, 64):
        trace = Trace.single_table(ids, 4000, batch)
        ptr = trace.batch_access_ptr().tolist()
        for lfu in (False, True):
            pol = make_policy("fbgemm-lfu" if lfu else "fbgemm-lru", ways, 4000, ways=ways)
            res = run_cache(trace, pol, chunk_accesses=1000)
            want = ref_fbgemm(ids.tolist(), ptr, ways, ways, lfu).counts()
            assert (res.hits, res.misses, res.unplaced, res.fills, res.evictions) == (
                want["hits"], want["misses"], want["unplaced"], want["fills"],
                want["evictions"])
            tags = [(fmix64(int(r)) >> 56) or 1 for r in pol.resident()]
            assert len(set(tags)) < len(tags)  # two rows with one tag in the set
