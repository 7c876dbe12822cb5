"""`engine.access_unique` against numpy at every chunk size (chunks that start past batch 0
and hold several batches), on both of its paths: the per-batch set and the bit per row,
with row counts one past a multiple of 64 (the bit array's last word holds one row)."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.policies.engine import SeenSet, access_unique
from scratchpipe_sim.traces.csr_trace import CHUNK_ENV, Trace


def numpy_counts(trace: Trace) -> tuple[list[int], list[int]]:
    ptr = trace.batch_access_ptr()
    ids = trace.linear_ids()
    return (np.diff(ptr).tolist(),
            [len(np.unique(ids[ptr[b] : ptr[b + 1]])) for b in range(trace.num_batches)])


def set_path_trace() -> Trace:
    """40 batches of 2-6 accesses over 1000 rows: the set (64 entries) is smaller than the
    rows, so `access_unique` walks the per-batch set."""
    rng = np.random.default_rng(5)
    batches = [[rng.integers(0, 12, size=int(n))] for n in rng.integers(2, 7, size=40)]
    return Trace.from_batches(batches, [1000])


def bits_path_trace(rows: int) -> Trace:
    """Batches of 20 accesses (a set of 256 entries >= the rows: a bit per row), each
    touching the last row, `rows - 1`, and duplicates."""
    rng = np.random.default_rng(rows)
    batches = [[np.concatenate([[rows - 1, rows - 1], rng.integers(0, rows, size=18)])]
               for _ in range(9)]
    return Trace.from_batches(batches, [rows])


@pytest.mark.parametrize("chunk", ["1", "7", "1000000"])
def test_set_path_counts_do_not_depend_on_chunking(monkeypatch, chunk):
    monkeypatch.setenv(CHUNK_ENV, chunk)
    trace = set_path_trace()
    assert SeenSet(trace, trace.batch_access_ptr()).shift >= 0  # the set, not per-row
    acc, uniq = access_unique(trace)
    assert (acc.tolist(), uniq.tolist()) == numpy_counts(trace)


@pytest.mark.parametrize("rows", [1, 65, 129])
@pytest.mark.parametrize("chunk", ["1", "7", "1000000"])
def test_bit_per_row_path_counts_the_last_row(monkeypatch, rows, chunk):
    monkeypatch.setenv(CHUNK_ENV, chunk)
    trace = bits_path_trace(rows)
    assert SeenSet(trace, trace.batch_access_ptr()).shift < 0  # a bit per row
    acc, uniq = access_unique(trace)
    assert (acc.tolist(), uniq.tolist()) == numpy_counts(trace)


@pytest.mark.parametrize("chunk", ["1", "7", "1000000"])
def test_set_path_batches_of_one_access_and_empty_batches(monkeypatch, chunk):
    """Batches of 0 or 1 access are counted without the set (their unique rows = their
    accesses) wherever they start in the chunk."""
    monkeypatch.setenv(CHUNK_ENV, chunk)
    sizes = [1, 1, 0, 3, 1, 0, 2, 1, 1, 0, 0, 3, 1]
    rng = np.random.default_rng(9)
    batches = [[rng.integers(0, 4, size=n)] for n in sizes]
    trace = Trace.from_batches(batches, [1000], [[np.array([n])] for n in sizes])
    assert SeenSet(trace, trace.batch_access_ptr()).shift >= 0  # the set, not per-row
    acc, uniq = access_unique(trace)
    assert (acc.tolist(), uniq.tolist()) == numpy_counts(trace)
    assert acc.tolist() == sizes
