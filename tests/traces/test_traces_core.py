"""The CSR trace layout, chunking, linearization, the .sptrace store and the engine plumbing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies import engine
from scratchpipe_sim.policies.base import NO_NEXT_USE, NO_NEXT_USE_32
from scratchpipe_sim.policies.engine import compute_next_use
from scratchpipe_sim.traces import Trace, TraceWriter, read_trace, write_trace


def two_table_trace() -> Trace:
    # batch 0: table 0 bags [1,2],[3]; table 1 bags [0],[0]
    # batch 1: table 0 bags [4],[4]; table 1 bags [1],[]
    return Trace.from_batches(
        [[np.array([1, 2, 3]), np.array([0, 0])], [np.array([4, 4]), np.array([1])]],
        [5, 2],
        pooling_lengths=[[[2, 1], [1, 1]], [[1, 1], [1, 0]]],
    )


def test_fbgemm_layout_and_table_slices():
    t = two_table_trace()
    assert t.num_tables == 2 and t.num_batches == 2 and t.num_accesses == 8
    b1 = t.batch(1)
    assert b1.batch_size == 2
    idx, offs = b1.table(0)
    assert idx.tolist() == [4, 4] and offs.tolist() == [0, 1, 2]
    idx, offs = b1.table(1)
    assert idx.tolist() == [1] and offs.tolist() == [0, 1, 1]


def test_linearized_ids_add_table_offsets():
    t = two_table_trace()
    assert t.table_offsets.tolist() == [0, 5]
    assert t.linear_ids().tolist() == [1, 2, 3, 5, 5, 4, 4, 6]


@pytest.mark.parametrize("chunk", [1, 2, 5, 100])
def test_chunks_are_whole_batches_and_cover_the_stream(chunk):
    t = two_table_trace()
    chunks = list(t.iter_chunks(max_accesses=chunk))
    assert sum(c.num_batches for c in chunks) == t.num_batches
    assert np.concatenate([c.ids for c in chunks]).tolist() == t.linear_ids().tolist()
    assert [c.first_access for c in chunks] == [int(t.batch_access_ptr()[c.first_batch])
                                               for c in chunks]
    tables = np.concatenate([c.tables for c in chunks]).tolist()
    assert tables == [0, 0, 0, 1, 1, 0, 0, 1]


def test_store_round_trip_is_memory_mapped_and_checksummed(tmp_path):
    t = two_table_trace()
    path = write_trace(t, tmp_path / "t.sptrace")
    r = read_trace(path)
    assert isinstance(r.indices, np.memmap)
    assert r.linear_ids().tolist() == t.linear_ids().tolist()
    assert r.table_rows.tolist() == [5, 2]
    assert len(r.meta["sha256"]) == 64
    with pytest.raises(UserError, match="refusing to overwrite"):
        write_trace(t, path)


def test_writer_appends_in_chunks_equal_to_one_shot(tmp_path):
    t = two_table_trace()
    with TraceWriter(tmp_path / "a.sptrace", t.table_rows, t.batch_size) as w:
        for k in range(t.num_batches):
            b = t.batch(k)
            w.append_batch(b.indices, b.offsets)
    one = write_trace(t, tmp_path / "b.sptrace")
    a, b = read_trace(tmp_path / "a.sptrace"), read_trace(one)
    assert a.meta["sha256"] == b.meta["sha256"]


def test_failed_write_publishes_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with TraceWriter(tmp_path / "x.sptrace", [4], 1) as w:
            w.append_batch(np.array([1]), np.array([0, 1]))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_truncated_store_is_a_user_error(tmp_path):
    path = write_trace(two_table_trace(), tmp_path / "t.sptrace")
    (path / "indices.bin").write_bytes(b"\0")
    with pytest.raises(UserError, match="truncated"):
        read_trace(path)


def test_validate_names_out_of_range_id():
    t = Trace.single_table(np.array([0, 1, 9]), num_rows=5, batch_size=2)
    with pytest.raises(UserError, match=r"id 9 at access 2 .* table 0: expected 0 <= id < 5"):
        t.validate()


@pytest.mark.parametrize("chunk", [1, 2, 5, 100])
@pytest.mark.parametrize("trace", ["two-table", "one-table-int32"])
def test_chunks_in_reused_buffers_hold_what_fresh_chunks_hold(chunk, trace):
    """`reuse_buffers=True` writes every chunk into the same two arrays: each chunk, read
    before the next is made, equals the fresh one (ids, tables, pointers, positions)."""
    t = two_table_trace()
    if trace == "one-table-int32":  # int32 ids, as a store can hold them: copied to int64
        t = Trace.single_table(np.array([3, 1, 4, 1, 5, 9, 2, 6]), 10, batch_size=3)
        t = dataclasses.replace(t, indices=t.indices.astype(np.int32))
    fresh = list(t.iter_chunks(max_accesses=chunk))
    seen = []
    for c in t.iter_chunks(max_accesses=chunk, reuse_buffers=True):
        seen.append((c.first_batch, c.first_access, c.ids.tolist(), c.tables.tolist(),
                     c.batch_ptr.tolist(), c.ids))
    assert [s[:5] for s in seen] == [(c.first_batch, c.first_access, c.ids.tolist(),
                                      c.tables.tolist(), c.batch_ptr.tolist()) for c in fresh]
    if len(seen) > 1:  # the buffers are really shared: the first chunk's ids were overwritten
        assert np.shares_memory(seen[0][5], seen[-1][5])


@pytest.mark.parametrize("chunk", [1, 2, 5, 100])
def test_next_use_of_a_two_table_trace_matches_brute_force(chunk):
    _assert_next_use_is_brute_force(two_table_trace(), chunk)


def test_single_table_cuts_batches_with_short_tail():
    t = Trace.single_table(np.arange(5), None, batch_size=2)
    assert t.num_batches == 3
    assert t.batch_access_ptr().tolist() == [0, 2, 4, 5]


def _assert_next_use_is_brute_force(t: Trace, chunk: int, never: int = NO_NEXT_USE_32) -> None:
    """`compute_next_use` against a search of the linearized ids after each access (`never`:
    the sentinel expected, int32's largest value for a trace this small)."""
    ids = t.linear_ids()
    nu = compute_next_use(t, chunk)
    assert nu.dtype == (np.int32 if never == NO_NEXT_USE_32 else np.int64)
    for j, r in enumerate(ids):
        later = np.nonzero(ids[j + 1 :] == r)[0]
        assert nu[j] == (j + 1 + later[0] if len(later) else never)


def test_next_use_is_int64_with_its_sentinel_past_the_int32_range(monkeypatch):
    """The wide path (2^31 - 1 accesses or more), taken here by lowering the threshold."""
    monkeypatch.setattr(engine, "_NARROW_NEXT_USE_ACCESSES", 8)  # 8 accesses
    _assert_next_use_is_brute_force(two_table_trace(), 4, never=NO_NEXT_USE)


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_next_use_matches_brute_force(chunk):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 6, 40)
    t = Trace.single_table(ids, 6, batch_size=3)
    assert t.linear_ids().tolist() == ids.tolist()  # one table: its ids are the linear ones
    _assert_next_use_is_brute_force(t, chunk)


def test_every_subcommand_and_policy_is_registered(capsys):
    from scratchpipe_sim.cli import build_parser, commands
    from scratchpipe_sim.policies import POLICIES

    help_text = build_parser().format_help()
    assert all(name in help_text for name in commands())
    # a property, not a pinned list: a new policy file must not break this test
    names = POLICIES.names()
    assert names == sorted(names) and len(set(names)) == len(names)
    assert {"bagpipe", "belady", "lfu", "lru", "scratchpipe", "static"} <= set(names)
    assert all(POLICIES.get(n).name == n for n in names)


def test_trace_accessors_slice_samples_and_linear_batches():
    rng = np.random.default_rng(3)
    rows = [7, 11]
    sizes = [3, 3, 2, 4]  # samples per batch (pooling 1: one id per bag)
    batches = [[rng.integers(0, r, n) for r in rows] for n in sizes]
    tr = Trace.from_batches(batches, rows)
    assert tr.samples_per_batch().tolist() == sizes
    part = tr.slice(1, 3)
    assert part.num_batches == 2 and part.samples_per_batch().tolist() == sizes[1:3]
    assert part.linear_ids().tolist() == tr.linear_ids()[2 * 3 : 2 * (3 + 3 + 2)].tolist()
    assert tr.slice(0, tr.num_batches) is tr
    for k in range(tr.num_batches):
        ids, offs = tr.linear_batch(k)
        want = np.concatenate([batches[k][0], batches[k][1] + rows[0]])
        assert ids.tolist() == want.tolist()
        assert offs.tolist() == list(range(2 * sizes[k] + 1))
