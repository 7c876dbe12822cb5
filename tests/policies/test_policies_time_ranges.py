"""Time ranges (`policies/time_ranges.py`): a replay split into K ranges, each from a warm-up
overlap, stitched. With an overlap that touches the capacity's distinct rows an lru replay
equals the full one bit for bit (LRU's stack property); with less, the check says "not
proven" and, on a crafted trace, the columns differ."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies import POLICIES
from scratchpipe_sim.policies.engine import make_policy, replay_columns
from scratchpipe_sim.policies.time_ranges import (
    RangeSetting,
    compare_full,
    forked_mapper,
    plan_ranges,
    replay_ranges,
    split_batches,
)
from scratchpipe_sim.traces.csr_trace import Trace


def _full(trace: Trace, policy: str, capacity: int, **params):
    return replay_columns(trace, make_policy(policy, capacity, trace.total_rows, **params))


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _zipf(seed: int, n: int, rows: int, batch: int, tables: int = 1) -> Trace:
    rng = np.random.default_rng(seed)
    if tables == 1:
        ids = np.minimum(rng.zipf(1.2, n) - 1, rows - 1).astype(np.int64)
        return Trace.single_table(ids, rows, batch)
    nb = n // (batch * tables)
    batches = [[np.minimum(rng.zipf(1.2, batch) - 1, rows - 1).astype(np.int64)
                for _ in range(tables)] for _ in range(nb)]
    return Trace.from_batches(batches, [rows] * tables)


@pytest.mark.parametrize("batch,tables,capacity,k", [
    (1, 1, 30, 4), (7, 1, 60, 3), (16, 2, 150, 5), (5, 1, 10_000, 3)])
def test_lru_ranges_with_a_proving_overlap_equal_the_full_replay(batch, tables, capacity, k):
    trace = _zipf(batch + tables, 6000, 700, batch, tables)
    want, want_extra = _full(trace, "lru", capacity)
    got = replay_ranges(trace, "lru", capacity, k)
    assert got.proven and len(got.ranges) == k
    assert _equal(got.cols, want) and got.extra == want_extra
    check = compare_full(got, want)
    assert check.all_equal and check.hit_ratio_ranges == check.hit_ratio_full
    # forked processes give the same columns
    forked = replay_ranges(trace, "lru", capacity, k, mapper=forked_mapper(2))
    assert _equal(forked.cols, want)


def _distinct(trace: Trace, lo: int, hi: int) -> int:
    """Distinct linearized rows of batches lo..hi-1 (a plain set: the oracle)."""
    return len({int(i) for b in range(lo, hi) for i in trace.linear_batch(b)[0]})


def test_automatic_overlap_is_the_fewest_batches_that_touch_the_capacity():
    trace = _zipf(3, 4000, 500, 4)
    capacity = 40
    for r in plan_ranges(trace, "lru", capacity, 5):
        if r.lo == 0:
            assert r.start == 0 and r.proven
            continue
        assert _distinct(trace, r.start, r.lo) >= capacity
        assert _distinct(trace, r.start + 1, r.lo) < capacity  # one batch less is too few
        assert r.overlap_rows >= capacity and r.target == capacity and r.proven
        assert r.stop == r.hi  # lru looks at no batch past its own


def _crafted() -> Trace:
    """Rows 0 1 0 1 at batch size 1: with capacity 2 the last two accesses hit."""
    return Trace.single_table(np.array([0, 1, 0, 1], np.int64), 2, 1)


def test_too_little_overlap_is_reported_and_the_columns_differ():
    trace = _crafted()
    want, _ = _full(trace, "lru", 2)
    for overlap, rows in ((0, 0), (1, 1)):
        got = replay_ranges(trace, "lru", 2, 2, overlap)
        late = got.ranges[1]
        assert (late.overlap_batches, late.overlap_rows, late.target) == (overlap, rows, 2)
        assert not late.proven and not got.proven
        assert "not proven" in late.describe() and "vs capacity 2" in late.describe()
        check = compare_full(got, want)
        assert check.equal == (True, False) and check.max_abs_diff[1] == 1
        assert check.hit_ratio_ranges < check.hit_ratio_full
    # an overlap reaching batch 0 replays the whole history: exact
    got = replay_ranges(trace, "lru", 2, 2, 2)
    assert got.proven and "from batch 0" in got.ranges[1].describe()
    assert _equal(got.cols, want)


def test_only_stack_policies_are_proven_and_each_is_exact_with_its_overlap():
    trace = _zipf(5, 3000, 300, 3)
    for name in POLICIES.names():
        cls = POLICIES.get(name)
        plan = plan_ranges(trace, name, 50, 3)
        assert all(r.proven for r in plan) == bool(cls.stack_property)
        if cls.stack_property:
            assert _equal(replay_ranges(trace, name, 50, 3).cols, _full(trace, name, 50)[0])


def test_a_lookahead_policy_is_replayed_past_its_range_and_its_columns_stitched():
    trace = _zipf(6, 3000, 300, 6)
    got = replay_ranges(trace, "scratchpipe", 80, 3, lookahead=3)
    assert [r.stop for r in got.ranges[:-1]] == [r.hi + 3 for r in got.ranges[:-1]]
    assert got.ranges[-1].stop == trace.num_batches
    want, _ = _full(trace, "scratchpipe", 80, lookahead=3)
    assert got.cols.keys() == want.keys()  # refetch_d1, refetch_d2 beside the counters
    assert all(len(v) == trace.num_batches for v in got.cols.values())
    assert not got.proven  # measured, never proven (compare_full says how close)


def test_lru_setting_of_a_run_applies_to_lru_only():
    s = RangeSetting(3)
    assert s.applies("lru") and not s.applies("lfu") and not s.applies(None)
    assert not RangeSetting(1).applies("lru")
    trace = _zipf(7, 3000, 300, 5)
    cols, extra = s.columns(trace, "lru", 30)
    assert _equal(cols, _full(trace, "lru", 30)[0]) and extra == {}


def test_split_covers_every_batch_and_bad_input_is_named():
    assert split_batches(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert split_batches(2, 5) == [(0, 1), (1, 2)]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UserError) as e:
            split_batches(10, bad)
        assert e.value.field == "--ranges"
    with pytest.raises(UserError) as e:
        plan_ranges(_crafted(), "lru", 2, 2, -1)
    assert e.value.field == "--overlap"
