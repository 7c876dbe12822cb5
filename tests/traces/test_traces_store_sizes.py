"""`.sptrace` sizes and write runs: `store_nbytes` (what the generators' memory check and
the trace cache budget on) is exactly the bytes `TraceWriter` leaves on disk, with constant
bags and with u32-marks over several mark blocks; `append_trace` hands the writer runs of
at most `_APPEND_BAGS` bags (a mapped trace larger than RAM is never read whole)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scratchpipe_sim.traces import store
from scratchpipe_sim.traces.bag_offsets import MARK_BAGS
from scratchpipe_sim.traces.generators import generate_trace
from scratchpipe_sim.traces.store import TraceWriter, data_files, store_nbytes, write_trace


def on_disk(path) -> int:
    m = json.loads((path / "manifest.json").read_text())
    return sum((path / n).stat().st_size for n in data_files(m))


@pytest.mark.parametrize("constant", [True, False])
def test_store_nbytes_is_the_data_files_bytes(tmp_path, constant):
    """Bags across three u32-mark blocks (2 x MARK_BAGS + 5 bags), 1 table, 2 batches."""
    bags = 2 * MARK_BAGS + 6  # even: two batches of one table
    rng = np.random.default_rng(3)
    lengths = np.full(bags, 2) if constant else rng.integers(0, 4, bags)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = rng.integers(0, 1000, int(offsets[-1]))
    path = tmp_path / "t.sptrace"
    with TraceWriter(path, [1000], bags // 2) as w:
        w.append_batches(ids, offsets, np.array([0, bags // 2, bags]))
    want = store_nbytes(len(ids), 4, bags, 2, constant)
    assert on_disk(path) == want
    back = store.read_trace(path, verify=True)  # every mark block read back
    np.testing.assert_array_equal(np.asarray(back.offsets[:]), offsets)
    if not constant:  # ids, 3 batch bounds, an offset per bag + 1, an int64 mark a block
        assert want == 4 * len(ids) + 8 * 3 + 4 * (bags + 1) + 8 * 3


def test_append_trace_writes_runs_of_at_most_append_bags(tmp_path, monkeypatch):
    t = generate_trace("uniform", [50, 50], 4, 10, 3, seed=1)  # 8 bags a batch
    monkeypatch.setattr(store, "_APPEND_BAGS", 16)
    runs = []
    real = TraceWriter.append_batches

    def spy(self, indices, offsets, bounds):
        runs.append(len(offsets) - 1)
        return real(self, indices, offsets, bounds)

    monkeypatch.setattr(TraceWriter, "append_batches", spy)
    path = write_trace(t, tmp_path / "t.sptrace")
    assert runs == [16] * 5  # two batches a run
    back = store.read_trace(path)
    np.testing.assert_array_equal(np.asarray(back.indices), np.asarray(t.indices))


def test_leaving_the_constant_encoding_after_an_odd_number_of_bags(tmp_path):
    """3 bags of 2 ids, then bags of 1, 2, 1: the first 3 bags' 4 offsets are rewritten as
    u32-marks entries (every one of them, whatever the parity of the count)."""
    path = tmp_path / "t.sptrace"
    with TraceWriter(path, [100], 3) as w:
        w.append_batch(np.arange(6), np.array([0, 2, 4, 6]))
        w.append_batch(np.arange(4), np.array([0, 1, 3, 4]))
    back = store.read_trace(path, verify=True)
    np.testing.assert_array_equal(np.asarray(back.offsets[:]), [0, 2, 4, 6, 7, 9, 10])


@pytest.mark.parametrize("key", ["num_indices", "num_bags"])
def test_a_count_of_2_63_is_refused(tmp_path, key):
    """Counts are int64 on disk and in the maps: 2^63 does not fit, and is refused as a
    bad manifest key before any file is mapped."""
    from scratchpipe_sim.errors import UserError

    path = write_trace(generate_trace("uniform", [50], 4, 2, 2, seed=1), tmp_path / "t")
    m = json.loads((path / "manifest.json").read_text())
    m[key] = 2**63
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UserError) as e:
        store.read_trace(path)
    assert e.value.field == f"manifest.json.{key}"
