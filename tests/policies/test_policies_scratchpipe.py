"""scratchpipe: the lookahead scratchpad, checked against a pure-Python model of its rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_policies_b import (
    HIT,
    UNPLACED,
    Overflow,
    build_trace,
    min_capacity,
    multi_table_batches,
    ref_scratchpipe,
)
from reference_scratchpipe_plans import ref_plans, ref_refetch

from scratchpipe_sim.cli import main
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.engine import COUNTERS, iter_cache, make_policy, run_cache
from scratchpipe_sim.policies.scratchpipe import min_scratchpipe_capacity
from scratchpipe_sim.traces.csr_trace import Trace


def run_checked(trace, capacity, chunk, **params):
    """Totals, per-batch (hits, misses, unplaced), the policy; capacity checked per chunk."""
    pol = make_policy("scratchpipe", capacity, trace.total_rows, **params)
    rows, tot = [], np.zeros(len(COUNTERS), np.int64)
    for bc in iter_cache(trace, pol, chunk):
        assert len(pol.resident()) <= capacity
        for c in bc.counts:
            rows.append((int(c[COUNTERS.index("hits")]), int(c[COUNTERS.index("misses")]),
                         int(c[COUNTERS.index("unplaced")])))
        tot += bc.counts.sum(axis=0)
    return {n: int(tot[i]) for i, n in enumerate(COUNTERS)}, rows, pol


def ref_rows(ref, ptr):
    out = []
    for k in range(len(ptr) - 1):
        o = ref.outcome[ptr[k]:ptr[k + 1]]
        out.append((o.count(HIT), len(o) - o.count(HIT), o.count(UNPLACED)))
    return out


def assert_matches(tot, rows, pol, ref, ptr):
    assert rows == ref_rows(ref, ptr)
    want = ref.counts()
    for k in ("accesses", "hits", "misses", "unplaced", "fills", "evictions", "writebacks"):
        assert tot[k] == want[k], k
    assert set(pol.resident().tolist()) == ref.resident
    extra = pol.extra_totals()
    assert extra["train_misses"] == ref.train_misses == 0
    assert extra["stalls"] == ref.stalls


def test_cold_rows_go_first_least_recently_used():
    # W=1, capacity 2, batches [1,2] [3] [1] [2]. plan(1): 1 is used in the window (batch 2),
    # 2 is not -> evict 2. plan(3): neither 1 nor 3 is used later -> LRU: 3 (used at batch 1).
    t = Trace.from_batches([[np.array(b)] for b in ([1, 2], [3], [1], [2])], [6])
    pol = make_policy("scratchpipe", 2, 6, lookahead=1)
    res = run_cache(t, pol)
    assert (res.fills, res.evictions, res.writebacks, res.hits) == (4, 2, 2, 1)
    assert pol.resident().tolist() == [1, 2]
    assert res.extra == {"train_misses": 0, "stalls": 0}


def test_farthest_next_use_inside_the_window():
    # W=2, capacity 3, batches [1] [2] [3] [4] [2] [1]. plan(3) pins {3,4}; 1 and 2 are both
    # used in batches 4..5: evict 1 (next use farther). plan(5) pins {2,1}: 3 and 4 have no
    # future use: LRU evicts 3.
    t = Trace.from_batches([[np.array([r])] for r in (1, 2, 3, 4, 2, 1)], [6])
    pol = make_policy("scratchpipe", 3, 6, lookahead=2)
    res = run_cache(t, pol)
    assert (res.fills, res.evictions, res.hits) == (5, 2, 1)
    assert pol.resident().tolist() == [1, 2, 4]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_matches_reference_with_enough_capacity(data):
    per_batch, rows = multi_table_batches(data.draw, st)
    w = data.draw(st.integers(1, 4))
    chunk = data.draw(st.integers(1, 40))
    trace, ids, ptr = build_trace(per_batch, rows)
    need = min_capacity(ids, ptr, w)
    assert min_scratchpipe_capacity(trace, w, chunk_accesses=chunk) == need
    cap = need + data.draw(st.integers(0, 6))
    tot, got, pol = run_checked(trace, cap, chunk, lookahead=w)
    ref = ref_scratchpipe(ids, ptr, cap, w)
    assert_matches(tot, got, pol, ref, ptr)
    assert ref.max_resident <= cap


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_stall_mode_matches_reference_at_any_capacity(data):
    per_batch, rows = multi_table_batches(data.draw, st)
    w = data.draw(st.integers(1, 4))
    cap = data.draw(st.integers(1, 12))
    chunk = data.draw(st.integers(1, 40))
    trace, ids, ptr = build_trace(per_batch, rows)
    tot, got, pol = run_checked(trace, cap, chunk, lookahead=w, on_overflow="stall")
    ref = ref_scratchpipe(ids, ptr, cap, w, stall=True)
    assert_matches(tot, got, pol, ref, ptr)
    assert (pol.extra_totals()["stalls"] > 0) == (cap < min_capacity(ids, ptr, w))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_overflow_error_names_the_minimum_capacity(data):
    per_batch, rows = multi_table_batches(data.draw, st)
    w = data.draw(st.integers(1, 4))
    trace, ids, ptr = build_trace(per_batch, rows)
    need = min_capacity(ids, ptr, w)
    if need < 2:
        return
    with pytest.raises(UserError) as e:
        run_cache(trace, "scratchpipe", need - 1, chunk_accesses=7, lookahead=w)
    assert (f"scratchpipe needs capacity >= {need} rows for lookahead {w} (got {need - 1})"
            in e.value.message)
    with pytest.raises(Overflow):
        ref_scratchpipe(ids, ptr, need - 1, w)
    run_cache(trace, "scratchpipe", need, chunk_accesses=7, lookahead=w)  # fits exactly


def zipf_trace(seed: int, n: int, rows: int, batch: int, alpha: float = 1.1) -> Trace:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(rows)[(rng.zipf(alpha, n) - 1) % rows]
    return Trace.single_table(ids, rows, batch)


def test_zipf_batches_match_reference_and_never_miss_in_training():
    trace = zipf_trace(11, 8000, 3000, 200)
    ids, ptr = trace.linear_ids().tolist(), trace.batch_access_ptr().tolist()
    for w in (1, 3):
        need = min_scratchpipe_capacity(trace, w)
        for cap in (need, need + 150):
            tot, got, pol = run_checked(trace, cap, 900, lookahead=w)
            assert_matches(tot, got, pol, ref_scratchpipe(ids, ptr, cap, w), ptr)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), w=st.integers(1, 4), extra=st.integers(0, 20),
       chunk=st.integers(1, 50), stall=st.booleans())
def test_batch_size_one_matches_reference(seed, w, extra, chunk, stall):
    # batch size 1 takes the kernel's single-access path (a hit skips pass 2), and with
    # short chunks most window limits lie past the chunk's end (`_tail`)
    trace = zipf_trace(seed, 600, 80, 1)
    ids, ptr = trace.linear_ids().tolist(), trace.batch_access_ptr().tolist()
    need = min_scratchpipe_capacity(trace, w)
    cap = max(1, need - 2 + extra) if stall else need + extra
    params = {"lookahead": w, "on_overflow": "stall"} if stall else {"lookahead": w}
    tot, got, pol = run_checked(trace, cap, chunk, **params)
    assert_matches(tot, got, pol, ref_scratchpipe(ids, ptr, cap, w, stall=stall), ptr)
    if not stall:  # every row is resident at its first access: more rows than slots evict
        assert (tot["evictions"] > 0) == (cap < len(set(ids)))


def test_more_capacity_never_more_fills_on_these_traces():
    for seed, batch in ((1, 1), (2, 16), (3, 128)):
        trace = zipf_trace(seed, 20000, 5000, batch)
        for w in (1, 2, 4):
            need = min_scratchpipe_capacity(trace, w)
            fills = [run_cache(trace, "scratchpipe", cap, lookahead=w).fills
                     for cap in sorted({need, need + 10, 2 * need, 4 * need, 16 * need})]
            assert fills == sorted(fills, reverse=True), (seed, w, fills)
            assert fills[0] > fills[-1]


def test_belady_lower_bound_at_batch_one():
    trace = zipf_trace(5, 6000, 400, 1)
    for cap in (8, 40, 120):
        bel = run_cache(trace, "belady", cap)
        for w in (1, 2, 8):
            sp = run_cache(trace, "scratchpipe", cap, lookahead=w)
            assert bel.misses <= sp.misses
            assert sp.extra["train_misses"] == 0


def test_memory_grows_with_capacity_not_rows():
    pol = make_policy("scratchpipe", 100, 10**9)
    size = sum(a.nbytes for a in vars(pol).values() if isinstance(a, np.ndarray))
    assert size < 100 * 200


@pytest.mark.parametrize("params, field", [({"lookahead": 0}, "lookahead"),
                                           ({"lookahead": 1.5}, "lookahead"),
                                           ({"on_overflow": "wait"}, "on_overflow"),
                                           ({"window": 2}, "window")])
def test_bad_parameters_are_user_errors(params, field):
    with pytest.raises(UserError) as e:
        make_policy("scratchpipe", 10, 100, **params)
    assert e.value.field == field


def test_cli_cache_scratchpipe_json_reports_zero_train_misses(tmp_path, capsys):
    trace = zipf_trace(9, 5000, 800, 32)
    ids = trace.linear_ids()
    path = tmp_path / "ids.npy"
    np.save(path, ids)
    need = min_scratchpipe_capacity(trace, 3)
    rc = main(["cache", "--trace", str(path), "--policy", "scratchpipe", "--lookahead", "3",
               "--capacity", str(need + 20), "--batch-size", "32", "--json"])
    assert rc == 0
    got = json.loads(capsys.readouterr().out)
    ref = ref_scratchpipe(ids.tolist(), trace.batch_access_ptr().tolist(), need + 20, 3)
    assert got["train_misses"] == 0 and got["stalls"] == 0
    want = ref.counts()
    assert (got["hits"], got["misses"], got["evictions"], got["writebacks"]) == (
        want["hits"], want["misses"], want["evictions"], want["writebacks"])
    # one row too few: exit 2 with a one-line message naming the minimum
    rc = main(["cache", "--trace", str(path), "--policy", "scratchpipe", "--lookahead", "3",
               "--capacity", str(need - 1), "--batch-size", "32"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"needs capacity >= {need} rows for lookahead 3 (got {need - 1})" in err
    # stall mode through --param
    rc = main(["cache", "--trace", str(path), "--policy", "scratchpipe", "--lookahead", "3",
               "--capacity", str(need - 1), "--batch-size", "32", "--param",
               "on_overflow=stall", "--json"])
    assert rc == 0
    got = json.loads(capsys.readouterr().out)
    assert got["stalls"] >= 1 and got["train_misses"] == 0 and got["unplaced"] >= 1


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_refetch_distances_match_an_independent_count(data):
    per_batch, rows = multi_table_batches(data.draw, st)
    w = data.draw(st.integers(1, 5))
    chunk = data.draw(st.integers(1, 40))
    trace, ids, ptr = build_trace(per_batch, rows)
    need = min_capacity(ids, ptr, w)
    stall = data.draw(st.booleans())
    cap = max(1, need + data.draw(st.integers(-3 if stall else 0, 3)))
    outcome, victims, fills = ref_plans(ids, ptr, cap, w)
    assert outcome == ref_scratchpipe(ids, ptr, cap, w, stall=True).outcome  # same rules
    pol = make_policy("scratchpipe", cap, trace.total_rows, lookahead=w,
                      on_overflow="stall" if stall else "error")
    for _ in iter_cache(trace, pol, chunk):
        pass
    cols = pol.batch_columns()
    assert sorted(cols) == [f"refetch_d{d}" for d in range(1, w)]
    want = ref_refetch(victims, fills, w)
    for d in range(1, w):
        assert cols[f"refetch_d{d}"].tolist() == [c[d - 1] for c in want], d


def test_refetch_at_distance_one_at_the_capacity_floor():
    # W=2, capacity 2, batches [1] [2] [3] [1] [2].
    t = Trace.from_batches([[np.array([r])] for r in (1, 2, 3, 1, 2)], [6])
    pol = make_policy("scratchpipe", 2, 6, lookahead=2)
    res = run_cache(t, pol)
    # plan(2) pins {2,3}: evicts 1 (next use at batch 3 = inside the window, the only
    # candidate); plan(3) pins {3,1}: refetches 1 (evicted by plan(2): distance 1) and
    # evicts 2; plan(4) pins {1,2}: refetches 2 (evicted by plan(3): distance 1), evicts 3.
    assert (res.fills, res.evictions) == (5, 3)
    assert pol.batch_columns()["refetch_d1"].tolist() == [0, 0, 0, 1, 1]
