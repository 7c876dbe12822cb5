"""Spatial sampling of a trace (traces/spatial_sampling.py): the kept set is the hash rule's
(an independent oracle), the batches and bags stay, salts differ, R = 1 is the trace itself,
a sample is cached and streamed alike, bad rates are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from reference_spatial_sampling import kept

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.generators import generate_trace
from scratchpipe_sim.traces.spatial_sampling import (
    META_RATE,
    cached_sample,
    check_rate,
    sample_trace,
)


@pytest.fixture(scope="module")
def trace():
    return generate_trace("zipf", [3000, 400, 200], 32, 6, [4, 2, 1], 3, alpha=1.05)


def _oracle(trace, rate, salt):
    """Per batch, per table, per bag: the ids the rule keeps (plain Python)."""
    out = []
    for k in range(trace.num_batches):
        b = trace.batch(k)
        for t in range(trace.num_tables):
            ids, offs = b.table(t)
            for i in range(len(offs) - 1):
                out.append([int(x) for x in ids[offs[i]:offs[i + 1]]
                            if kept(salt, t, int(x), rate)])
    return out


def _bags(trace):
    out = []
    for k in range(trace.num_batches):
        b = trace.batch(k)
        for t in range(trace.num_tables):
            ids, offs = b.table(t)
            out += [[int(x) for x in ids[offs[i]:offs[i + 1]]] for i in range(len(offs) - 1)]
    return out


@pytest.mark.parametrize(("rate", "salt"), [(0.1, 0), (0.37, 5), (0.9, 2)])
def test_kept_ids_are_the_hash_rule_bag_by_bag(trace, rate, salt):
    s = sample_trace(trace, rate, salt, max_accesses=100)  # several chunks
    assert _bags(s) == _oracle(trace, rate, salt)
    assert np.array_equal(s.samples_per_batch(), trace.samples_per_batch())
    assert np.array_equal(s.table_rows, trace.table_rows)
    assert s.batch_size == trace.batch_size and s.meta[META_RATE] == rate


def test_a_row_is_kept_in_every_batch_or_none(trace):
    s = sample_trace(trace, 0.2, 1)
    ids, sids = set(trace.linear_ids().tolist()), set(s.linear_ids().tolist())
    dropped = ids - sids
    assert sids and dropped and not (set(s.linear_ids().tolist()) & dropped)


def test_salts_keep_different_rows_at_the_same_rate(trace):
    a, b = (set(sample_trace(trace, 0.3, salt).linear_ids().tolist()) for salt in (0, 1))
    assert a != b
    # about R of the distinct rows either way (a hash, not a coin per access)
    n = len(set(trace.linear_ids().tolist()))
    assert 0.2 * n < len(a) < 0.4 * n and 0.2 * n < len(b) < 0.4 * n


def test_rate_one_is_the_trace_itself(trace):
    assert sample_trace(trace, 1.0, 3) is trace
    assert cached_sample(trace, 1, 3) is trace


def test_streamed_sample_equals_in_memory(trace, tmp_path):
    mem = sample_trace(trace, 0.25, 4)
    disk = sample_trace(trace, 0.25, 4, out=tmp_path / "s.sptrace", max_accesses=64)
    for name in ("indices", "offsets", "batch_bounds", "table_rows"):
        assert np.array_equal(np.asarray(getattr(disk, name)), getattr(mem, name)), name


def test_cached_sample_reads_back_the_same_trace(trace, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path))
    first = cached_sample(trace, 0.25, 4)
    again = cached_sample(trace, 0.25, 4)
    assert again.fingerprint() == first.fingerprint()
    assert np.array_equal(np.asarray(again.indices), sample_trace(trace, 0.25, 4).indices)


@pytest.mark.parametrize("rate", [0, -0.1, 1.5, float("nan"), "half", True])
def test_rates_outside_zero_one_are_refused(rate):
    with pytest.raises(UserError) as e:
        check_rate(rate)
    assert e.value.field == "trace.sample_rate"


def test_a_table_left_with_no_row_is_refused(trace):
    with pytest.raises(UserError) as e:
        sample_trace(trace, 1e-4, 0)
    assert e.value.field == "trace.sample_rate" and "keeps no row of table" in e.value.message
