"""The memory guard's model of a run (issue 41): a trace held in memory costs
`BYTES_PER_ACCESS` a lookup, one memory-mapped from a `.sptrace` only its bounded chunk
buffers, so the mapped estimate does not grow with the trace; what cannot fit is still one
line."""

from __future__ import annotations

import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies import engine
from scratchpipe_sim.safety import memory_guard as mg
from scratchpipe_sim.traces import csr_trace

GIB = 1 << 30


def test_the_bounds_are_the_ones_the_passes_use():
    assert csr_trace.DEFAULT_CHUNK_ACCESSES == mg.CHUNK_ACCESSES
    assert engine.NEXT_USE_MEMORY_BYTES == mg.NEXT_USE_MEMORY_BYTES


def test_streaming_bytes_is_bounded_by_chunk_and_next_uses():
    cap = mg.CHUNK_ACCESSES * mg.CHUNK_BYTES_PER_ACCESS + mg.NEXT_USE_MEMORY_BYTES
    assert mg.streaming_bytes(10) == 10 * mg.CHUNK_BYTES_PER_ACCESS + 80
    assert mg.streaming_bytes(10**9) == cap
    assert mg.streaming_bytes(10**14) == cap  # a week of production traffic: the same


def test_a_mapped_trace_of_any_length_fits_where_an_in_memory_one_does_not(monkeypatch):
    monkeypatch.setenv(mg.ENV, str(4 * GIB))
    rows, lookups = 10**7, 5 * 10**9  # a Criteo 1TB day's lookups
    mg.check_run(rows, lookups, mapped=True)
    mg.check_run(rows, 100 * lookups, mapped=True)
    with pytest.raises(UserError, match=r"needs about 93.3 GiB of memory, more than the "
                                        r"4 GiB available") as e:
        mg.check_run(rows, lookups, field="trace.path")
    assert "\n" not in str(e.value) and e.value.field == "trace.path"


def test_per_row_state_is_still_refused_when_mapped(monkeypatch):
    monkeypatch.setenv(mg.ENV, str(4 * GIB))
    with pytest.raises(UserError, match=r"memory-mapped, chunk buffers 96 MiB") as e:
        mg.check_run(10**9, 10**9, mapped=True)
    assert e.value.field == "model.tables.rows"
