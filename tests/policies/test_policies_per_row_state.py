"""Per-row state of the passes a run makes (issue 41): a Criteo day has 204M rows, so each
byte a row is 204 MB in the worker that makes the pass. What each pass allocates per row is
asserted here with `tracemalloc` (every NumPy array's data, deterministic) at a row count
far above the trace's accesses, and the narrower encodings against the plain ones, exact."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from scratchpipe_sim.policies import engine
from scratchpipe_sim.policies.base import NO_NEXT_USE
from scratchpipe_sim.policies.static import Static
from scratchpipe_sim.timing import counts
from scratchpipe_sim.traces.csr_trace import Trace

#: rows of the wide trace: per-row arrays dominate anything per access or per batch
ROWS = 4_000_000


def _trace(rows: int, batches: int = 12, per_batch: int = 64, seed: int = 3) -> Trace:
    rng = np.random.default_rng(seed)
    data = [[(rng.zipf(1.3, per_batch) - 1) % rows] for _ in range(batches)]
    return Trace.from_batches(data, [rows], [[np.ones(per_batch, np.int64)]] * batches)


def _peak(fn) -> tuple[object, int]:
    """What `fn` returns and the largest traced memory while it ran, after one call first
    (compiling its kernels allocates Python objects too)."""
    fn()
    tracemalloc.start()
    try:
        got = fn()
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_first_touches_keep_a_bit_a_row():
    t = _trace(ROWS)
    def fresh():
        counts._FIRST_TOUCHES.clear()
        return counts.first_touches(t)

    _, peak = _peak(fresh)
    assert ROWS / 8 <= peak < ROWS / 8 + (1 << 20)  # a byte a row would be 4 MB


def test_first_touches_and_warmup_length_are_the_byte_a_row_counts():
    t = _trace(5000, batches=40, per_batch=300)
    ids = np.asarray(t.indices)
    ptr = t.batch_access_ptr()
    seen: set[int] = set()
    want = []
    for b in range(t.num_batches):
        rows = {int(r) for r in ids[ptr[b]:ptr[b + 1]]}
        want.append(len(rows - seen))
        seen |= rows
    counts._FIRST_TOUCHES.clear()
    assert counts.first_touches(t).tolist() == want
    for cap in (1, 50, 700, 10**6):
        k = next((k for k in range(1, 41) if len({int(r) for r in ids[ptr[40 - k]:]}) >= cap),
                 40)
        assert counts.warmup_length(t, 40, cap) == k


def test_static_counts_are_freed_before_the_row_states():
    """The profile's counts (int32) and the row states (int32) are never alive together:
    the peak is 4 B a row (and 8 B a picked row), not 9 B (with a flag a row, a temporary)."""
    t = _trace(ROWS)
    pol = Static(1000, ROWS, profile_fraction=0.5)
    _, peak = _peak(lambda: pol.prepare(t))
    assert pol.rowstate.dtype == np.int32 and len(pol.rowstate) == ROWS
    assert 4 * ROWS <= peak < 4 * ROWS + (1 << 20)


@pytest.mark.parametrize("low_bits", [4, 5, 6])
def test_split_next_uses_equal_the_int64_ones(monkeypatch, low_bits):
    """Next uses of a trace past 2^31 - 1 accesses are int64; the backward pass then keeps a
    row's next position in a uint32 and one bit. With fewer low bits (so that a small trace
    needs the top bit), the next uses equal the int64-a-row pass's, sentinels included."""
    t = _trace(40, batches=4, per_batch=(7, 15, 30)[low_bits - 4], seed=low_bits)
    n = t.num_accesses
    monkeypatch.setattr(engine, "_NARROW_NEXT_USE_ACCESSES", 0)  # int64 next uses
    monkeypatch.setattr(engine, "_SPLIT_NEXT_USE", False)
    plain = engine.compute_next_use(t, 7)
    assert plain.dtype == np.int64 and (plain == NO_NEXT_USE).any()
    monkeypatch.setattr(engine, "_SPLIT_NEXT_USE", True)
    monkeypatch.setattr(engine, "_SPLIT_LOW_BITS", low_bits)
    if n >= (2 << low_bits) - 1:
        pytest.skip("trace too long for these bits")
    split = engine.compute_next_use(t, 7)
    assert split.dtype == np.int64
    assert (plain >= 1 << low_bits).any() or low_bits >= 6  # the top bit is exercised
    np.testing.assert_array_equal(split, plain)


def test_split_next_uses_keep_four_bytes_and_a_bit_a_row(monkeypatch):
    t = _trace(ROWS)
    monkeypatch.setattr(engine, "_NARROW_NEXT_USE_ACCESSES", 0)
    _, peak = _peak(lambda: engine.compute_next_use(t))
    assert 4 * ROWS + ROWS / 8 <= peak < 4 * ROWS + ROWS / 8 + (1 << 20)  # int64: 8 B a row
    monkeypatch.setattr(engine, "_SPLIT_NEXT_USE", False)
    _, wide = _peak(lambda: engine.compute_next_use(t))
    assert wide >= 8 * ROWS


def test_scratchpipe_state_is_made_after_the_next_uses():
    """The engine makes the next uses before `prepare`, and scratchpipe its slots' state
    there: the backward pass's int32 a row is freed before the map exists, so a replay's
    peak is below the state plus that array (it was their sum)."""
    from scratchpipe_sim.policies.scratchpipe import ScratchPipe

    t = _trace(ROWS)
    made = ScratchPipe(200_000, ROWS, lookahead=3)
    assert made.table.nbytes == 0  # nothing before `prepare`
    made._make_state()
    state = sum(a.nbytes for a in (made.table, made.slot_row, made.fifo, made.heap,
                                   made.vring))
    assert state > 4 * ROWS  # the per-row array alone would not show in the peak

    def replay():
        return engine.run_cache(t, ScratchPipe(200_000, ROWS, lookahead=3))

    _, peak = _peak(replay)
    assert state <= peak < state + 4 * ROWS


def test_split_kernel_reads_uint32_ids_as_int64_ones():
    """A memory-mapped trace's ids are uint32: the split kernel gives the same next uses."""
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 300, 200)
    got = []
    for dtype in (np.int64, np.uint32):
        low = np.full(300, (1 << 7) - 1, np.uint32)
        high = np.full((300 + 63) >> 6, -1, np.int64)
        out = np.empty(len(ids), np.int64)
        engine._next_use_backward_split(ids.astype(dtype), 0, low, high, 7, out)
        got.append(out)
    plain = np.empty(len(ids), np.int64)
    engine._next_use_backward(ids, 0, np.full(300, NO_NEXT_USE, np.int64), plain)
    np.testing.assert_array_equal(got[0], plain)
    np.testing.assert_array_equal(got[1], plain)
    assert (plain >= 1 << 7).any() and (plain == NO_NEXT_USE).any()
