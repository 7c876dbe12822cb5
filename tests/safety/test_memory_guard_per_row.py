"""`memory_guard.RUN_BYTES_PER_ROW` recomputed from what the engine allocates: each policy's
replay at N and 2N rows (the same lookups), its peak traced memory (`tracemalloc`: every
NumPy array's data) differing by the per-row arrays alive together. The engine's unique-row
set is made a stamp a row from the start (its worst case, which a batch comparable to the
table reaches; the counts are the same), so the difference is each policy's worst. The
constant must cover every policy and be the worst one's, not a guess above it."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from scratchpipe_sim.policies import engine
from scratchpipe_sim.policies.base import POLICIES
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.timing import counts
from scratchpipe_sim.traces.csr_trace import Trace

#: rows of the smaller trace: per-row arrays dominate its few hundred lookups' arrays
N = 1 << 20
#: a cache of this many slots: per-slot state is the same at N and 2N rows
CAPACITY = 1000


def _trace(rows: int, batches: int = 12, per_batch: int = 64, seed: int = 3) -> Trace:
    """The same lookups (ids below N) in a table of `rows` rows."""
    rng = np.random.default_rng(seed)
    data = [[(rng.zipf(1.3, per_batch) - 1) % N] for _ in range(batches)]
    return Trace.from_batches(data, [rows], [[np.ones(per_batch, np.int64)]] * batches)


def _peak(fn) -> int:
    """The largest traced memory while `fn` runs (after one call: compiling allocates)."""
    fn()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class _StampPerRow(engine.SeenSet):
    """The unique-row set as a stamp a row (`shift` < 0), made at once: what a batch
    comparable to the table makes (its largest per-row form)."""

    def __init__(self, trace: Trace, ptr: np.ndarray, lazy: bool = False):
        super().__init__(trace, ptr, lazy=True)
        self._entries, self.shift = trace.total_rows, -1
        self.slots, self.ready = np.full(1, -1, np.int64), False
        self.ensure()


def _replay(name: str, rows: int) -> dict:
    t = _trace(rows)
    cols, _ = engine.replay_columns(t, engine.make_policy(name, CAPACITY, rows))
    return cols


def _per_row(fn) -> float:
    """Bytes a row: the peak at 2N rows less the peak at N, over N."""
    return (_peak(lambda: fn(2 * N)) - _peak(lambda: fn(N))) / N


@pytest.fixture(scope="module")
def per_policy() -> dict[str, float]:
    mp = pytest.MonkeyPatch()
    mp.setattr(engine, "SeenSet", _StampPerRow)
    try:
        return {name: _per_row(lambda rows, name=name: _replay(name, rows))
                for name in POLICIES.names()}
    finally:
        mp.undo()


def test_the_set_as_a_stamp_a_row_counts_what_the_engine_counts():
    """Forcing the set's per-row form changes no count (it is a mode the engine picks)."""
    plain = {n: _replay(n, N) for n in ("lru", "lfu", "bagpipe", "static")}
    mp = pytest.MonkeyPatch()
    mp.setattr(engine, "SeenSet", _StampPerRow)
    try:
        forced = {n: _replay(n, N) for n in plain}
    finally:
        mp.undo()
    for n in plain:
        for k in plain[n]:
            np.testing.assert_array_equal(plain[n][k], forced[n][k], err_msg=f"{n} {k}")


def test_a_batch_comparable_to_the_table_makes_the_set_a_stamp_a_row():
    rows = 4096
    t = _trace(rows, batches=2, per_batch=rows // 8)
    seen = engine.SeenSet(t, t.batch_access_ptr())
    seen.ensure()
    assert seen.shift < 0 and seen.slots.nbytes == 8 * rows


def test_every_policy_replay_keeps_at_most_the_constant_a_row(per_policy):
    for name, b in per_policy.items():
        assert b <= memory_guard.RUN_BYTES_PER_ROW + 0.01, (name, b)


def test_the_constant_is_the_worst_policys_per_row_state(per_policy):
    """Not a guess above it: the worst policy's (bagpipe: expiry 4 + stamp 8 + the set's
    8) within a byte."""
    worst = max(per_policy, key=per_policy.get)
    assert worst == "bagpipe"
    assert memory_guard.RUN_BYTES_PER_ROW - 1 <= per_policy[worst], per_policy
    assert per_policy["bagpipe"] == pytest.approx(20, abs=0.01)
    assert per_policy["lru"] == pytest.approx(8, abs=0.01)  # the set alone
    assert per_policy["static"] == pytest.approx(12, abs=0.01)  # row states 4 + the set 8


def test_the_policy_free_designs_passes_keep_bits():
    """hybrid, gpu-only, uvm, multi-gpu: first touches and unique rows, a bit a row each."""
    def first(rows):
        counts._FIRST_TOUCHES.clear()
        return counts.first_touches(_trace(rows))

    assert _per_row(first) <= 0.25
    assert _per_row(lambda rows: engine.access_unique(_trace(rows))) <= 0.25
