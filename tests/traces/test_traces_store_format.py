"""The `.sptrace` format version 2's compact offsets (issue 41: a Criteo day in ~19 GB, not
~57): a constant bag length stores no offsets, variable bags 4 bytes each (u32-marks);
either reads back as the int64 offsets of version 1, which still reads."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sptrace_v1 import write_v1

from scratchpipe_sim.traces import bag_offsets
from scratchpipe_sim.traces.bag_offsets import MARK_BAGS, BagOffsets, encode_u32
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import TraceWriter, read_trace, verify_store, write_trace


def _same(a: Trace, b: Trace) -> None:
    assert np.array_equal(np.asarray(a.offsets), np.asarray(b.offsets))
    assert np.array_equal(np.asarray(a.batch_bounds), np.asarray(b.batch_bounds))
    assert np.array_equal(a.linear_ids(), b.linear_ids())
    assert a.content_sha256() == b.content_sha256()


def test_pooling_one_stores_ids_and_batch_bounds_only(tmp_path):
    ids = np.arange(1000, dtype=np.int64) % 97
    mem = Trace.single_table(ids, 97, 8)
    path = write_trace(mem, tmp_path / "t.sptrace")
    m = json.loads((path / "manifest.json").read_text())
    assert m["version"] == 2 and m["offsets"] == {"encoding": "constant", "bag_length": 1}
    on_disk = sum(f.stat().st_size for f in path.glob("*.bin"))
    assert on_disk == 4 * 1000 + 8 * (mem.num_batches + 1)  # uint32 ids + int64 bounds
    back = read_trace(path)
    assert isinstance(back.offsets, BagOffsets)
    _same(back, mem)
    verify_store(path)


def _variable_trace(rng, bags_per_batch_table: int, batches: int, constant_first: int):
    """Two tables; the first `constant_first` batches hold bags of 2 ids, later ones 0-4."""
    lengths, ids = [], []
    for k in range(batches):
        per_l, per_i = [], []
        for rows in (50, 70):
            lens = (np.full(bags_per_batch_table, 2) if k < constant_first
                    else rng.integers(0, 5, bags_per_batch_table))
            per_l.append(lens)
            per_i.append(rng.integers(0, rows, int(lens.sum())))
        lengths.append(per_l)
        ids.append(per_i)
    return Trace.from_batches(ids, [50, 70], lengths)


def test_u32_marks_across_blocks_read_as_the_int64_offsets(tmp_path):
    """Constant for the first batches, then varied (the writer switches mid-stream and
    mid-block), appended in uneven runs; ~3.7 blocks of bags."""
    mem = _variable_trace(np.random.default_rng(1), 4001, 30, constant_first=9)
    n_bags = len(mem.offsets) - 1
    assert n_bags > 3 * MARK_BAGS
    bounds = np.asarray(mem.batch_bounds)
    with TraceWriter(tmp_path / "t.sptrace", mem.table_rows, mem.batch_size) as w:
        for lo, hi in ((0, 5), (5, 9), (9, 10), (10, 23), (23, 30)):
            offs = np.asarray(mem.offsets[bounds[lo]:bounds[hi] + 1])
            w.append_batches(mem.indices[offs[0]:offs[-1]], offs - offs[0],
                             bounds[lo:hi + 1] - bounds[lo])
    path = tmp_path / "t.sptrace"
    assert json.loads((path / "manifest.json").read_text())["offsets"]["encoding"] \
        == "u32-marks"
    assert (path / "offsets_u32.bin").stat().st_size == 4 * (n_bags + 1)
    assert (path / "offset_marks.bin").stat().st_size == 8 * (n_bags // MARK_BAGS + 1)
    back = read_trace(path, verify=True)
    _same(back, mem)
    off = back.offsets
    want = np.asarray(mem.offsets)
    for lo, hi in ((MARK_BAGS - 3, MARK_BAGS + 5), (0, 1), (n_bags - 2, n_bags + 1)):
        assert np.array_equal(np.asarray(off[lo:hi]), want[lo:hi])
        assert np.array_equal(np.asarray(off[lo:hi][1:]), want[lo:hi][1:])
    pick = np.array([0, MARK_BAGS, 2 * MARK_BAGS - 1, -1, -MARK_BAGS])
    assert np.array_equal(off[pick], want[pick])
    assert int(off[-1]) == back.num_accesses and int(off[MARK_BAGS]) == want[MARK_BAGS]
    part, ref = back.slice(11, 27), mem.slice(11, 27)
    assert np.array_equal(np.asarray(part.offsets), ref.offsets)
    assert np.array_equal(part.batch_access_ptr(), ref.batch_access_ptr())
    with pytest.raises(IndexError):
        off[n_bags + 1]


def test_a_block_of_2_32_ids_is_refused():
    marks: list[int] = []
    encode_u32(np.array([0, 5]), 0, marks)
    assert marks == [0]
    with pytest.raises(ValueError, match="2\\^32"):
        encode_u32(np.array([1 << 32]), 2, marks)
    # a new block starts from its own mark: large absolute offsets are fine
    assert encode_u32(np.array([1 << 40, (1 << 40) + 9]), MARK_BAGS, marks).tolist() == [0, 9]
    assert bag_offsets.MARK_BAGS == 1 << bag_offsets.MARK_SHIFT


def test_a_version_1_store_still_reads_and_digests_alike(tmp_path):
    mem = _variable_trace(np.random.default_rng(2), 7, 12, constant_first=0)
    old = read_trace(write_v1(mem, tmp_path / "old.sptrace"), verify=True)
    assert isinstance(old.offsets, np.memmap)
    new = read_trace(write_trace(mem, tmp_path / "new.sptrace"))
    _same(old, mem)
    _same(new, mem)
    # what the replay cache keys on does not depend on the format
    assert old.fingerprint() == new.fingerprint()
    assert old.slice(3, 9).fingerprint() == new.slice(3, 9).fingerprint()
    # re-written, a version-1 store comes out compact
    again = read_trace(write_trace(old, tmp_path / "again.sptrace"))
    assert not (tmp_path / "again.sptrace" / "offsets.bin").exists()
    _same(again, mem)


@pytest.mark.parametrize("pooling, sigma", [(1, 0.0), ([2, 3], 0.0), (4, 1.5)])
def test_the_disk_estimate_is_what_the_writer_writes(tmp_path, pooling, sigma):
    """`generators.spec_disk_bytes` (`trace gen`'s disk check and progress) against the
    files written."""
    from scratchpipe_sim.traces import generators as gen

    spec = gen.make_spec("zipf", [300, 500], 16, 9, pooling, 7, pooling_sigma=sigma,
                         alpha=1.1)
    path = gen.store_from_spec(spec, tmp_path / "t.sptrace")
    written = sum(f.stat().st_size for f in path.glob("*.bin"))
    assert gen.spec_disk_bytes(spec) == written
    assert (path / "offsets_u32.bin").exists() == (pooling != 1)
