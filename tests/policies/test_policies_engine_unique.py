"""The engine's unique-row counters against numpy (issue 15: the per-batch set packs a
15-bit batch stamp with the row, so stamps repeat every 2^15 batches and the set must be
cleared before a stamp comes back; with next uses, unique rows come from them instead)."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.policies import engine
from scratchpipe_sim.policies.engine import COUNTERS, iter_cache, make_policy
from scratchpipe_sim.traces.csr_trace import Trace

U, UU, UNPL = (COUNTERS.index(c) for c in ("unique", "unique_unplaced", "unplaced"))


def per_batch(trace, name, cap, chunk, **params):
    pol = make_policy(name, cap, trace.total_rows, **params)
    return np.concatenate([bc.counts for bc in iter_cache(trace, pol, chunk)])


def wrapping_trace():
    """Batches 0-9 touch rows 40-49 (one each) and row 1; then > 2^15 single-access
    batches (counted without the set, rows < 30); then batches 2^15-2^15+9, whose stamps
    equal batches 0-9's modulo 2^15, touching the same rows 40-49 again: a set not cleared
    in between would take them for rows already seen in the batch."""
    first = [[np.array([40 + k, 1, 40 + k])] for k in range(10)]
    singles = [[np.array([k % 30])] for k in range((1 << 15) - 10)]
    again = [[np.array([40 + k, 1, 1])] for k in range(10)]
    return Trace.from_batches(first + singles + again, [60])


@pytest.mark.parametrize("name", ["lru", "fbgemm-lru", "belady", "scratchpipe"])
@pytest.mark.parametrize("chunk", [1 << 22, 999, 5])
def test_unique_rows_match_numpy_across_stamp_wraparound(name, chunk):
    trace = wrapping_trace()
    counts = per_batch(trace, name, 8, chunk)
    ptr = trace.batch_access_ptr()
    ids = trace.linear_ids()
    want = [len(np.unique(ids[ptr[b] : ptr[b + 1]])) for b in range(trace.num_batches)]
    assert counts[:, U].tolist() == want
    assert counts[-10:, U].tolist() == [2] * 10  # the stamps did come back


@pytest.mark.parametrize("batch", [2, 7, 64])
def test_unique_unplaced_does_not_depend_on_chunking(zipf_ids, batch):
    """fbgemm-lru with one way and few sets: conflict misses (UNPLACED) in most batches."""
    ids = zipf_ids(40_000, 3000, 1.1, batch)
    trace = Trace.single_table(ids, 3000, batch)
    whole = per_batch(trace, "fbgemm-lru", 16, 1 << 22, ways=1)
    cut = per_batch(trace, "fbgemm-lru", 16, 37, ways=1)
    assert whole[:, UNPL].sum() > 0 and whole[:, UU].sum() > 0
    assert np.array_equal(whole, cut)
    ptr = trace.batch_access_ptr()
    want = [len(np.unique(ids[ptr[b] : ptr[b + 1]])) for b in range(trace.num_batches)]
    assert whole[:, U].tolist() == want
    assert np.all(whole[:, UU] <= whole[:, UNPL])


def test_access_unique_matches_numpy_across_stamp_wraparound():
    """`engine.access_unique` (the timing layer's unique rows per batch, issue 23) uses the
    same set: exact across the stamp wrap-around, at batch size 1 and with a big batch."""
    from scratchpipe_sim.policies.engine import access_unique

    for trace in (wrapping_trace(), Trace.from_batches(
            [[np.arange(5000) % 777], [np.array([3, 3])]], [800])):
        ptr = trace.batch_access_ptr()
        ids = trace.linear_ids()
        acc, uniq = access_unique(trace)
        assert acc.tolist() == np.diff(ptr).tolist()
        assert uniq.tolist() == [len(np.unique(ids[ptr[b] : ptr[b + 1]]))
                                 for b in range(trace.num_batches)]


def test_table_bytes_uses_the_same_set_and_matches_numpy():
    """`timing.counts.table_bytes` (bytes of the lookups and of the unique rows, tables of
    different dims) counts each batch's unique rows with the engine's set: exact."""
    from scratchpipe_sim.timing.counts import table_bytes

    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 30, size=300)
    batches = [[rng.integers(0, 50, size=n), rng.integers(0, 7, size=n)] for n in sizes]
    trace = Trace.from_batches(batches, [50, 7])
    got = table_bytes(trace, (64, 256), (192, 768))
    ptr = trace.batch_access_ptr()
    ids = trace.linear_ids()
    for b in range(trace.num_batches):
        ib = ids[ptr[b] : ptr[b + 1]]
        tb = (ib >= 50).astype(int)
        assert got["lookup_bytes"][b] == sum((64, 256)[t] for t in tb)
        assert got["unique_bytes"][b] == sum((192, 768)[int(r >= 50)] for r in np.unique(ib))


@pytest.mark.parametrize("name, params, made", [
    ("scratchpipe", {"lookahead": 2}, False),  # next uses, nothing unplaced
    ("static", {"preload": True}, False),  # counts its unique rows itself
    ("belady-bypass", {}, True),  # next uses and UNPLACED outcomes
    ("fbgemm-lru", {"ways": 2}, True),  # counts nothing itself
])
def test_a_replay_makes_its_unique_row_set_only_when_a_count_walks_it(monkeypatch, zipf_ids,
                                                                      name, params, made):
    """`SeenSet(lazy=True)`: a replay whose counts never walk the set never makes it (32 MB
    of fresh pages for the quickstart); one that does gets it in time (numpy's counts)."""
    monkeypatch.setattr(engine, "_SEEN_EAGER", 0)  # these sets are small: lazy all the same
    made_sets = []
    ensure = engine.SeenSet.ensure

    def logged(self):
        if not self.ready:
            made_sets.append(self._entries)
        ensure(self)

    monkeypatch.setattr(engine.SeenSet, "ensure", logged)
    ids = zipf_ids(4000, 500, 1.1, 3)
    trace = Trace.single_table(ids, 500, 40)
    counts = per_batch(trace, name, 120, 1000, **params)
    assert bool(made_sets) == made
    for b in range(trace.num_batches):
        assert counts[b, U] == len(np.unique(ids[b * 40:(b + 1) * 40]))
    if name == "belady-bypass":  # what makes it walk the set: rows served from host memory
        assert counts[:, UNPL].sum() > 0


def test_a_small_unique_row_set_is_made_at_once_and_chunks_are_not_tested(monkeypatch,
                                                                          zipf_ids):
    """Below `_SEEN_EAGER` entries the set is made up front: no per-chunk test (it cost
    ~3% of an lru replay at batch size 1)."""
    def never(*args):
        raise AssertionError("a chunk was tested")

    monkeypatch.setattr(engine, "_count_may_walk_set", never)
    ids = zipf_ids(4000, 500, 1.1, 3)
    for batch in (1, 40):
        trace = Trace.single_table(ids, 500, batch)
        assert engine.SeenSet(trace, trace.batch_access_ptr(), lazy=True).ready
        counts = per_batch(trace, "lru", 120, 1000)
        assert counts[:, U].tolist() == [len(np.unique(ids[b * batch:(b + 1) * batch]))
                                         for b in range(trace.num_batches)]
