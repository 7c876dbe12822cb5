"""A pass over a memory-mapped trace works in a fixed budget, whatever the trace's length
(issue 41): chunks are sized from `memory_guard.CHUNK_BUDGET_BYTES` (not from the trace),
so the buffers of a replay of a 4x longer trace are the same arrays of the same sizes, and
what a replay allocates grows only by its per-batch columns. Memory is counted with
`tracemalloc` (every NumPy array's data, deterministic), not the resident set."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from scratchpipe_sim.policies import engine
from scratchpipe_sim.safety import memory_guard as mg
from scratchpipe_sim.traces import csr_trace
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import read_trace, write_trace

ROWS = (4000, 6000)
BATCH = 64  # samples; pooling 4: 512 accesses a batch
POOL = 4
#: accesses per chunk in these tests: 8 batches
CHUNK = 8 * BATCH * POOL * len(ROWS)
#: batches of the short trace (4 chunks); the long one has 4x as many
SHORT = 32
#: what a replay may keep per batch of its trace: the engine's counters and the policy's
#: per-batch columns (scratchpipe's refetches), int64, with their copies, and the batch
#: pointers (one int64 each); generous, and two orders of magnitude below what one
#: access's buffers would add per batch (512 accesses x 4-32 B)
BYTES_PER_BATCH = 64 * 8


def test_the_chunk_is_the_budget_in_accesses():
    assert mg.CHUNK_ACCESSES == mg.CHUNK_BUDGET_BYTES // mg.CHUNK_BYTES_PER_ACCESS
    assert csr_trace.DEFAULT_CHUNK_ACCESSES == mg.CHUNK_ACCESSES
    assert mg.CHUNK_ACCESSES * mg.CHUNK_BYTES_PER_ACCESS <= mg.CHUNK_BUDGET_BYTES


def _mapped(tmp_path, batches: int) -> Trace:
    rng = np.random.default_rng(batches)
    data = [[(rng.zipf(1.2, BATCH * POOL) - 1) % r for r in ROWS] for _ in range(batches)]
    lengths = [[np.full(BATCH, POOL)] * len(ROWS)] * batches
    mem = Trace.from_batches(data, list(ROWS), lengths)
    return read_trace(write_trace(mem, tmp_path / f"t{batches}.sptrace"))


@pytest.fixture(scope="module")
def short_long(tmp_path_factory) -> tuple[Trace, Trace]:
    d = tmp_path_factory.mktemp("budget")
    return _mapped(d, SHORT), _mapped(d, 4 * SHORT)


def test_chunks_are_as_large_at_any_length(short_long):
    """The layout's largest chunk (what every reused buffer is sized to) is the same for a
    trace of 4 chunks and one of 16."""
    sizes = []
    for t in short_long:
        ptr = t.batch_access_ptr()
        starts = np.asarray(t.chunk_starts(CHUNK), np.int64)
        sizes.append(int(np.max(ptr[starts[1:]] - ptr[starts[:-1]])))
    assert sizes[0] == sizes[1] <= CHUNK


def _replay_peak(trace: Trace, name: str) -> int:
    """Bytes `replay_columns` had allocated at its peak beyond what was there before."""
    policy = engine.make_policy(name, 3000, trace.total_rows)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        engine.replay_columns(trace, policy, CHUNK)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", ["lru", "belady", "scratchpipe"])
def test_a_replay_allocates_per_batch_only_beyond_its_budget(short_long, name, monkeypatch):
    """From a trace of 4 chunks to one of 16: the peak grows by per-batch columns at most
    (next uses spilled and read a chunk at a time, chunk buffers reused, the window a few
    batches)."""
    monkeypatch.delenv(engine.NEXT_USE_MEMORY_ENV, raising=False)
    short, long = short_long
    engine.replay_columns(short, engine.make_policy(name, 3000, short.total_rows), CHUNK)
    peaks = [_replay_peak(t, name) for t in (short, long)]
    assert peaks[1] - peaks[0] <= BYTES_PER_BATCH * (long.num_batches - short.num_batches)
    # tight enough to see an array of one entry per access grow with the trace (the
    # narrowest, int32 next uses, is 4 B an access: 2 KiB a batch)
    assert BYTES_PER_BATCH < 4 * BATCH * POOL * len(ROWS)
