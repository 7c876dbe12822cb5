"""`.sptrace` pointer checks, block by block: a bad entry anywhere, block boundaries included.

`read_trace` checks offsets.bin and batch_bounds.bin in blocks of `_CHECK_BLOCK` bytes (bounded
memory on a trace larger than RAM). A block that does not overlap the next by one entry would
miss a decrease exactly at a boundary (a bag of length -1, read silently): here the block is
made 4 entries long and a decrease is put at every entry in turn, so every boundary is hit.
"""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces import store
from scratchpipe_sim.traces.generators import generate_trace
from scratchpipe_sim.traces.store import read_trace, write_trace

#: entries per checked block in these tests (the boundaries fall at 4, 8, 12, ...)
BLOCK_ENTRIES = 4
TABLES, BATCH, BATCHES, POOLING = 2, 4, 3, 3


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(store, "_CHECK_BLOCK", 8 * BLOCK_ENTRIES)


@pytest.fixture
def sptrace(tmp_path):
    t = generate_trace("uniform", [50] * TABLES, BATCH, BATCHES, POOLING, seed=1)
    return write_trace(t, tmp_path / "t.sptrace")


def _edit(path, name, index, value):
    a = np.fromfile(path / name, "<i8")
    a[index] = value
    a.tofile(path / name)
    return a


def test_an_intact_store_reads_back_with_small_blocks(small_blocks, sptrace):
    t = read_trace(sptrace)
    bags = TABLES * BATCH * BATCHES
    assert np.diff(np.asarray(t.offsets)).tolist() == [POOLING] * bags
    assert np.asarray(t.batch_bounds).tolist() == [k * TABLES * BATCH for k in range(BATCHES + 1)]


@pytest.mark.parametrize("entry", range(1, TABLES * BATCH * BATCHES))
def test_a_bag_of_length_minus_one_is_named_wherever_it_falls(small_blocks, sptrace, entry):
    # bag `entry - 1` (offsets[entry] - offsets[entry - 1]) becomes -1; the next one longer
    offsets = np.asarray(read_trace(sptrace).offsets, np.int64).copy()
    offsets[entry] = offsets[entry - 1] - 1
    with pytest.raises(UserError, match=f"decreases at entry {entry}:") as e:
        store._check_pointers(offsets, int(offsets[-1]), "offsets.bin", "t.sptrace")
    assert e.value.field == "offsets.bin"


@pytest.mark.parametrize("entry", range(1, BATCHES))
def test_batch_bounds_checked_across_blocks(monkeypatch, sptrace, entry):
    monkeypatch.setattr(store, "_CHECK_BLOCK", 8)  # one entry a block: every pair on a seam
    bounds = np.fromfile(sptrace / "batch_bounds.bin", "<i8")
    _edit(sptrace, "batch_bounds.bin", entry, bounds[entry - 1] - TABLES)
    with pytest.raises(UserError, match=f"decreases at entry {entry}:"):
        read_trace(sptrace)


def test_a_batch_cut_mid_table_is_named_across_a_seam(monkeypatch, sptrace):
    monkeypatch.setattr(store, "_CHECK_BLOCK", 8)
    _edit(sptrace, "batch_bounds.bin", 1, TABLES * BATCH + 1)  # batch 0 one bag too long
    with pytest.raises(UserError, match="not a whole number of bags per table"):
        read_trace(sptrace)


# -- the writer's own checks (a store is refused when written, not only when read) -------------
def _writer(tmp_path, rows=(50, 50), batch=2):
    return store.TraceWriter(tmp_path / "w.sptrace", list(rows), batch, {})


@pytest.mark.parametrize("offsets, bounds, what", [
    ([0, 2, 1, 4, 4], [0, 4], "offsets"),      # a bag of length -1 (writer side)
    ([1, 2, 3, 4, 4], [0, 4], "offsets"),      # offsets not starting at 0
    ([0, 1, 2, 3, 3], [0, 4], "offsets"),      # offsets not ending at len(indices)
    ([0, 1, 2, 3, 4], [1, 4], "batch_bounds"),  # bounds not starting at 0
    ([0, 1, 2, 3, 4], [0, 3], "batch_bounds"),  # bounds not ending at the bags
    ([0, 1, 2, 3, 4], [0, 1, 4], "batch_bounds"),  # a batch cut mid-table
])
def test_append_batches_refuses_pointers_that_would_misread(tmp_path, offsets, bounds, what):
    w = _writer(tmp_path)
    with pytest.raises(ValueError, match=what):
        w.append_batches(np.arange(4), np.array(offsets), np.array(bounds))
    w.abort()


@pytest.mark.parametrize("rows, dtype", [((10, 2**31), "<u4"), ((2**32, 7), "<u4"),
                                         ((2**32 + 1, 7), "<i8"), ((3, 2**40), "<i8")])
def test_the_index_dtype_is_the_narrowest_that_holds_every_id(rows, dtype):
    # uint32 holds ids 0 .. 2^32 - 1: tables of up to 2^32 rows
    assert store.index_dtype_for(rows) == np.dtype(dtype)


def test_ids_beyond_uint32_round_trip_in_int64(tmp_path):
    from scratchpipe_sim.traces.csr_trace import Trace

    big = 2**32 + 5
    t = Trace.from_batches([[np.array([big - 1, 0]), np.array([3, 4])]], [big, 9])
    out = read_trace(write_trace(t, tmp_path / "big.sptrace"))
    assert store.read_manifest(tmp_path / "big.sptrace")["index_dtype"] == "<i8"
    assert np.asarray(out.indices).tolist() == [big - 1, 0, 3, 4]
    small = read_trace(write_trace(Trace.from_batches([[np.array([7]), np.array([8])]],
                                                      [9, 9]), tmp_path / "small.sptrace"))
    assert small.indices.dtype == np.dtype("<u4")


# -- checksums, CRCs, a long bad value, appends in steps (store.py survivors, second pass) ------
def test_verify_passes_an_intact_store_and_names_a_flipped_byte(sptrace):
    store.verify_store(sptrace)  # intact: every CRC-32 matches
    raw = bytearray((sptrace / "indices.bin").read_bytes())
    raw[5] ^= 0x01
    (sptrace / "indices.bin").write_bytes(bytes(raw))
    read_trace(sptrace)  # sizes and pointers are intact: only the CRC sees it
    with pytest.raises(UserError, match="indices.bin does not match its CRC-32") as e:
        store.verify_store(sptrace)
    assert e.value.field == "indices.bin"


def test_the_checksum_covers_the_data(tmp_path):
    a = generate_trace("uniform", [50, 50], BATCH, BATCHES, POOLING, seed=1)
    b = generate_trace("uniform", [50, 50], BATCH, BATCHES, POOLING, seed=2)
    sa = store.read_manifest(write_trace(a, tmp_path / "a.sptrace"))["sha256"]
    sb = store.read_manifest(write_trace(b, tmp_path / "b.sptrace"))["sha256"]
    again = store.read_manifest(write_trace(a, tmp_path / "a2.sptrace"))["sha256"]
    assert sa == again and sa != sb and len(sa) == 64


def test_a_long_bad_manifest_value_is_cut_in_the_message(sptrace):
    import json

    m = json.loads((sptrace / "manifest.json").read_text())
    m["table_rows"] = ["x" * 200]
    (sptrace / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UserError, match=r"got \['xxx") as e:
        read_trace(sptrace)
    assert str(e.value).endswith("...") and len(str(e.value)) < 300


def test_append_trace_in_steps_rebases_each_steps_offsets(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "_APPEND_BAGS", 5)  # several steps, none starting at offset 0
    t = generate_trace("uniform", [50, 50], BATCH, BATCHES, POOLING, seed=3, pooling_sigma=1.0)
    out = read_trace(write_trace(t, tmp_path / "s.sptrace"))
    assert np.asarray(out.offsets).tolist() == np.asarray(t.offsets).tolist()
    assert np.asarray(out.indices).tolist() == np.asarray(t.indices).tolist()
