"""The warm-up passes (`warmup_length`, `first_touches`) against Python sets; first touches
made once per trace content in a process (a trace re-made with new meta shares its
arrays)."""

from __future__ import annotations

import numpy as np
import pytest

import scratchpipe_sim.timing.counts as counts
from scratchpipe_sim.traces.generators import generate_trace


@pytest.fixture(scope="module")
def trace():
    return generate_trace("zipf", [300, 500], batch_size=16, num_batches=12, pooling=2,
                          seed=4, alpha=1.1)


def _batches(trace) -> list[set[int]]:
    """Each batch's rows as linear ids (a Python set per batch)."""
    out = []
    for k in range(trace.num_batches):
        chunk = trace.chunk(k, k + 1)
        out.append({int(r) for r in chunk.ids})
    return out


def _warmup_oracle(batches: list[set[int]], prefix: int, capacity: int) -> int:
    for k in range(1, prefix + 1):
        if len(set().union(*batches[prefix - k:prefix])) >= capacity:
            return k
    return prefix


@pytest.mark.parametrize(("prefix", "capacity"), [(6, 1), (6, 40), (6, 120), (10, 200),
                                                  (10, 10_000), (12, 150)])
def test_warmup_length_is_the_fewest_prefix_batches_touching_capacity_rows(
        trace, prefix, capacity):
    assert counts.warmup_length(trace, prefix, capacity) == _warmup_oracle(
        _batches(trace), prefix, capacity)


def test_first_touches_counts_rows_never_seen_before(trace):
    seen: set[int] = set()
    expected = []
    for rows in _batches(trace):
        expected.append(len(rows - seen))
        seen |= rows
    assert counts.first_touches(trace).tolist() == expected


def test_first_touches_are_made_once_per_trace_content(monkeypatch):
    t = generate_trace("zipf", [300, 500], batch_size=16, num_batches=12, pooling=2, seed=9,
                       alpha=1.1)
    calls = []
    real = counts._new_rows

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(counts, "_new_rows", counted)
    touches = counts.first_touches(t)
    made = len(calls)
    assert made > 0
    # asked again of a trace re-made with new meta (the same arrays): not recomputed
    assert counts.first_touches(t.with_meta({**t.meta, "note": 2})) is touches
    assert len(calls) == made
    # a trace with equal content but its own arrays is its own entry (the same answer)
    copy = generate_trace("zipf", [300, 500], batch_size=16, num_batches=12, pooling=2,
                          seed=9, alpha=1.1)
    assert np.array_equal(counts.first_touches(copy), touches)
    assert len(calls) > made
