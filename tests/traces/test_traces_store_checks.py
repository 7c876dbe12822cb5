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
    offsets = np.fromfile(sptrace / "offsets.bin", "<i8")
    _edit(sptrace, "offsets.bin", entry, offsets[entry - 1] - 1)
    with pytest.raises(UserError, match=f"decreases at entry {entry}:") as e:
        read_trace(sptrace)
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
