"""The engine's per-batch counters against a plain-Python count of the policy's outcomes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_recorder import OutcomeRecorder

from scratchpipe_sim.policies import engine
from scratchpipe_sim.policies.base import HIT, UNPLACED
from scratchpipe_sim.policies.engine import (
    COUNTERS,
    iter_cache,
    make_policy,
    replay_columns,
    run_cache,
)
from scratchpipe_sim.traces.csr_trace import Trace

POLICIES = [("lru", {}), ("belady-bypass", {}), ("static", {"profile_fraction": 0.4}),
            ("fbgemm-lru", {"ways": 2}), ("fbgemm-lfu", {"ways": 4})]


def _python_counts(stream: list[int], ptr: list[int], outcome: np.ndarray) -> np.ndarray:
    rows = []
    for b in range(len(ptr) - 1):
        seen: set[int] = set()
        acc = uniq = hits = unpl = uniq_unpl = 0
        for j in range(ptr[b], ptr[b + 1]):
            acc += 1
            o = int(outcome[j])
            hits += o == HIT
            unpl += o == UNPLACED
            if stream[j] not in seen:
                seen.add(stream[j])
                uniq += 1
                uniq_unpl += o == UNPLACED
        rows.append((acc, uniq, hits, acc - hits, unpl, uniq_unpl))
    return np.array(rows, np.int64).reshape(-1, 6)


@st.composite
def traces(draw):
    tables = draw(st.integers(1, 3))
    rows = [draw(st.integers(1, 30)) for _ in range(tables)]
    nbat = draw(st.integers(1, 12))
    batches, pooling = [], []
    for _ in range(nbat):
        b = draw(st.integers(1, 5))
        per_t, lens_t = [], []
        for t in range(tables):
            lens = draw(st.lists(st.integers(0, 3), min_size=b, max_size=b))
            per_t.append(np.array([draw(st.integers(0, rows[t] - 1)) for _ in range(sum(lens))],
                                  np.int64))
            lens_t.append(np.array(lens, np.int64))
        batches.append(per_t)
        pooling.append(lens_t)
    trace = Trace.from_batches(batches, rows, pooling)
    if trace.num_accesses == 0:
        trace = Trace.single_table(np.array([0, 1, 0]), 2, 2)
    return trace


@settings(max_examples=60, deadline=None)
@given(trace=traces(), case=st.sampled_from(POLICIES), capacity=st.integers(1, 40),
       chunk=st.sampled_from([1, 5, 64, 1 << 20]))
def test_counters_match_python(trace, case, capacity, chunk):
    name, params = case
    rec = OutcomeRecorder(make_policy(name, capacity, trace.total_rows, **params))
    counts = np.concatenate([bc.counts for bc in iter_cache(trace, rec, chunk)])
    stream = trace.linear_ids().tolist()
    ptr = trace.batch_access_ptr().tolist()
    want = _python_counts(stream, ptr, np.concatenate(rec.outcomes))
    idx = [COUNTERS.index(c) for c in ("accesses", "unique", "hits", "misses", "unplaced",
                                        "unique_unplaced")]
    np.testing.assert_array_equal(counts[:, idx], want)
    # totals, per-batch columns and per-table counts agree with the per-batch counters
    res = run_cache(trace, name, capacity, chunk_accesses=chunk, **params)
    for i, c in enumerate(COUNTERS):
        assert getattr(res, c) == int(counts[:, i].sum()), c
    cols, extra = replay_columns(trace, make_policy(name, capacity, trace.total_rows, **params),
                                 chunk)
    for i, c in enumerate(COUNTERS):
        np.testing.assert_array_equal(cols[c], counts[:, i])
    assert extra == res.extra
    tables = np.repeat(np.arange(trace.num_tables),
                       np.diff(np.append(trace.table_offsets, trace.total_rows)))
    out = np.concatenate(rec.outcomes)
    for t, row in enumerate(res.per_table):
        mine = tables[np.array(stream, np.int64)] == t if stream else np.zeros(0, bool)
        assert row["accesses"] == int(mine.sum())
        assert row["hits"] == int((out[mine] == HIT).sum())
        assert row["unplaced"] == int((out[mine] == UNPLACED).sum())


def test_counter_indices_never_shift():
    """Consumers index COUNTERS by position: new counters are only ever appended."""
    assert COUNTERS[:8] == ("accesses", "unique", "hits", "misses", "fills", "evictions",
                            "writebacks", "unplaced")
    assert COUNTERS[8] == "unique_unplaced"


@pytest.mark.parametrize("name", ["lru", "belady", "fbgemm-lru"])
def test_tiny_batches_are_cut_into_bounded_chunks(monkeypatch, zipf_ids, name):
    """At batch size 1 a chunk holds at most MAX_CHUNK_BATCHES batches, and the counts do
    not depend on where chunks are cut."""
    ids = zipf_ids(5000, 400, 1.1, 3)
    trace = Trace.single_table(ids, 400, 1)
    base = run_cache(trace, name, 50)
    monkeypatch.setattr(engine, "MAX_CHUNK_BATCHES", 333)
    sizes = [len(bc.counts) for bc in iter_cache(trace, make_policy(name, 50, 400))]
    assert max(sizes) == 333 and sum(sizes) == 5000
    again = run_cache(trace, name, 50)
    assert again.to_dict() | {"wall_s": 0, "accesses_per_s": 0} == \
        base.to_dict() | {"wall_s": 0, "accesses_per_s": 0}
    assert base.unique == base.accesses  # batch size 1: every access is a unique row


def _seen(trace):
    return engine.SeenSet(trace, trace.batch_access_ptr())


def test_large_batches_use_the_per_row_stamps():
    """A batch as large as the table takes the per-row stamp path; counts are the same."""
    ids = np.array([3, 1, 3, 2, 0, 1, 1, 3, 2, 2])
    assert _seen(Trace.single_table(ids, 4, 10)).shift < 0
    assert _seen(Trace.single_table(ids, 1000, 2)).shift > 0  # hashed per batch
    assert run_cache(Trace.single_table(ids, 1000, 2), "lru", 2).unique == 9
    one = run_cache(Trace.single_table(ids, 4, 10), "lru", 2)
    assert (one.accesses, one.unique) == (10, 4)
    split = run_cache(Trace.single_table(ids, 4, 5), "lru", 2)
    assert split.unique == 4 + 3


@pytest.mark.parametrize("name, params", [
    ("belady", {}), ("belady-bypass", {}), ("bagpipe", {"lookahead": 3}),
    ("scratchpipe", {"lookahead": 3, "on_overflow": "stall"})])
def test_int32_and_int64_next_uses_replay_the_same(monkeypatch, name, params):
    """Every policy that reads next uses decides the same with int32 next uses (sentinel
    2^31 - 1) as with int64 ones (sentinel 2^63 - 1): every column, every extra, bit for bit,
    over several chunks (the scratchpipe window carried across them)."""
    rng = np.random.default_rng(11)
    ids = (rng.zipf(1.3, 30_000) % 3000).astype(np.int64)
    trace = Trace.single_table(ids, 3000, batch_size=64)

    def replay():
        policy = make_policy(name, 300, trace.total_rows, **params)
        return replay_columns(trace, policy, chunk_accesses=5_000)

    narrow_cols, narrow_extra = replay()
    assert engine.compute_next_use(trace).dtype == np.int32
    monkeypatch.setattr(engine, "_NARROW_NEXT_USE_ACCESSES", 0)
    assert engine.compute_next_use(trace).dtype == np.int64
    wide_cols, wide_extra = replay()
    assert narrow_extra == wide_extra
    assert narrow_cols.keys() == wide_cols.keys()
    for col in narrow_cols:
        assert np.array_equal(narrow_cols[col], wide_cols[col]), col
    assert narrow_cols["misses"].sum() > 0 and narrow_cols["evictions"].sum() > 0
