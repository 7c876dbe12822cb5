"""The fast paths a Criteo day's passes take (issue 41) equal their reference paths exactly,
at chunk sizes of one batch, an odd size and more than the trace: a constant-bag `.sptrace`
decodes its chunks without building offsets (`csr_trace.constant_bag_length`), and
`sample_traces` samples every salt in one read as `sample_trace` does one salt at a time
(itself checked against the hash rule in test_traces_spatial_sampling.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces import csr_trace, spatial_sampling
from scratchpipe_sim.traces.csr_trace import Trace, constant_bag_length, slice_trace
from scratchpipe_sim.traces.generators import generate_trace
from scratchpipe_sim.traces.spatial_sampling import (
    cached_sample,
    cached_samples,
    sample_trace,
    sample_traces,
)
from scratchpipe_sim.traces.store import read_trace, write_trace

#: pooling 1 (a Criteo day's) and 3, three tables, 17 batches of 24 samples
POOLINGS = (1, 3)
SALTS = (0, 1, 2)


def _chunk_sizes(trace: Trace) -> tuple[int, ...]:
    """One batch (each chunk holds at least one), an odd size, more than the trace."""
    return (1, 37, trace.num_accesses + 1000)


@pytest.fixture(scope="module", params=POOLINGS)
def stored(request, tmp_path_factory):
    mem = generate_trace("zipf", [5000, 300, 40], 24, 17, [request.param] * 3, 11,
                         alpha=1.05)
    path = tmp_path_factory.mktemp("fast") / "t.sptrace"
    return read_trace(write_trace(mem, path))


def _plain(trace: Trace) -> Trace:
    """The same trace with its offsets as a plain int64 array: the reference decode."""
    return dataclasses.replace(trace, offsets=np.asarray(trace.offsets, np.int64))


def _chunks(trace: Trace, size: int) -> list[tuple]:
    return [(c.first_batch, c.first_access, c.ids.copy(), c.tables.copy(),
             c.batch_ptr.copy()) for c in trace.iter_chunks(max_accesses=size)]


def _same(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(
        x[:2] == y[:2] and all(np.array_equal(p, q) for p, q in zip(x[2:], y[2:], strict=True))
        for x, y in zip(a, b, strict=True))


def test_the_store_takes_the_constant_path(stored):
    assert constant_bag_length(stored.offsets) == stored.num_accesses // (
        stored.num_batches * 24 * 3)
    assert constant_bag_length(np.asarray(stored.offsets)) is None


@pytest.mark.parametrize("which", ["whole", "slice"])
def test_constant_bag_chunks_equal_the_offsets_decode(stored, which):
    trace = stored if which == "whole" else slice_trace(stored, 5, 13)  # shifted offsets
    assert constant_bag_length(trace.offsets) is not None
    for size in _chunk_sizes(trace):
        assert _same(_chunks(trace, size), _chunks(_plain(trace), size)), size
    assert np.array_equal(trace.linear_ids(), _plain(trace).linear_ids())


def test_constant_bag_validate_finds_the_same_bad_id(stored):
    ids = np.asarray(stored.indices).copy()
    ids[len(ids) // 2] = np.iinfo(ids.dtype).max  # past every table's rows
    bad = dataclasses.replace(stored, indices=ids)
    with pytest.raises(UserError) as fast:
        bad.validate()
    with pytest.raises(UserError) as ref:
        _plain(bad).validate()
    assert fast.value.message == ref.value.message


@pytest.mark.parametrize("rate", [0.2, 0.5])
def test_every_salt_in_one_read_equals_one_salt_at_a_time(stored, rate):
    for trace in (stored, _plain(stored)):
        for size in _chunk_sizes(trace):
            got = sample_traces(trace, rate, SALTS, max_accesses=size)
            for salt, s in zip(SALTS, got, strict=True):
                want = sample_trace(_plain(stored), rate, salt, max_accesses=size)
                assert np.array_equal(np.asarray(s.indices), np.asarray(want.indices))
                assert np.array_equal(np.asarray(s.offsets), np.asarray(want.offsets))
                assert np.array_equal(s.batch_bounds, want.batch_bounds)
                assert s.meta == want.meta and s.source == want.source


def test_every_salt_streamed_equals_in_memory(stored, tmp_path):
    mem = sample_traces(stored, 0.3, SALTS)
    disk = sample_traces(stored, 0.3, SALTS, outs=[tmp_path / f"s{i}.sptrace" for i in SALTS],
                         max_accesses=41)
    for m, d in zip(mem, disk, strict=True):
        assert d.mapped and np.array_equal(d.linear_ids(), m.linear_ids())
        assert np.array_equal(np.asarray(d.offsets), m.offsets)


def test_cached_samples_equal_cached_sample(stored, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))
    for cache in (False, True, True):  # off; on, cold; on, warm
        got = cached_samples(stored, 0.25, SALTS, cache=cache)
        for salt, s in zip(SALTS, got, strict=True):
            want = cached_sample(stored, 0.25, salt, cache=False)
            assert np.array_equal(s.linear_ids(), want.linear_ids())
            assert np.array_equal(np.asarray(s.offsets), np.asarray(want.offsets))
    assert cached_samples(stored, 1.0, SALTS) == [stored] * len(SALTS)


def test_large_samples_stream_every_salt(stored, monkeypatch):
    monkeypatch.setattr(spatial_sampling, "IN_MEMORY_MAX_BYTES", 1)
    got = cached_samples(stored, 0.25, SALTS, cache=False)
    for salt, s in zip(SALTS, got, strict=True):
        assert s.mapped
        assert np.array_equal(s.linear_ids(), sample_trace(stored, 0.25, salt).linear_ids())


def test_a_salt_that_keeps_no_row_of_a_table_is_refused(stored):
    with pytest.raises(UserError, match="keeps no row"):
        sample_traces(stored, 1e-6, SALTS)


def test_the_constant_decode_is_used(stored, monkeypatch):
    calls = []
    real = csr_trace._linearize_constant_into
    monkeypatch.setattr(csr_trace, "_linearize_constant_into",
                        lambda *a: calls.append(1) or real(*a))
    list(stored.iter_chunks())
    assert calls
