"""The replay cache returns exactly what a fresh replay computes, or recomputes."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from processes import run_together
from small_configs import small_zipf_trace

from scratchpipe_sim.policies import replay_cache as rc
from scratchpipe_sim.policies.engine import COUNTERS, iter_cache, make_policy
from scratchpipe_sim.traces.csr_trace import Trace, slice_trace

POLICY_CASES = [("lru", {}), ("lfu", {}), ("belady", {}), ("belady-bypass", {}),
                ("static", {"profile_fraction": 0.5}), ("fbgemm-lru", {"ways": 4}),
                ("fbgemm-lfu", {"ways": 2})]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(rc.MAX_BYTES_ENV, raising=False)


def _direct(trace: Trace, name: str, capacity: int, params: dict) -> dict[str, np.ndarray]:
    """Per-batch columns straight from the engine's chunk iterator (independent of the
    cache and of `replay_columns`)."""
    pol = make_policy(name, capacity, trace.total_rows, **params)
    counts = np.concatenate([bc.counts for bc in iter_cache(trace, pol, chunk_accesses=50)])
    return {c: counts[:, i] for i, c in enumerate(COUNTERS)}


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{rc.SUFFIX}"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(POLICY_CASES), capacity=st.integers(1, 90),
       seed=st.integers(0, 10_000), batch=st.sampled_from([1, 3, 16]))
def test_counts_identical_with_and_without_cache(tmp_path, case, capacity, seed, batch):
    name, params = case
    trace = small_zipf_trace(seed, batch=batch)
    want = _direct(trace, name, capacity, params)
    off, off_extra = rc.policy_columns(trace, name, capacity, enabled=False, **params)
    first, extra1 = rc.policy_columns(trace, name, capacity, **params)  # miss: computes
    again, extra2 = rc.policy_columns(trace, name, capacity, **params)  # hit: reads
    for got in (off, first, again):
        for c in COUNTERS:
            np.testing.assert_array_equal(got[c], want[c], err_msg=f"{name} {c}")
    assert off_extra == extra1 == extra2
    assert list(off_extra) == list(extra2)  # in the policy's order (result columns follow it)


def test_disabled_touches_no_file(tmp_path):
    trace = small_zipf_trace(1)
    rc.policy_columns(trace, "lru", 10, enabled=False)
    assert not rc.cache_folder().exists() or not _entries(rc.cache_folder())
    rc.policy_columns(trace, "lru", 10)
    assert len(_entries(rc.cache_folder())) == 1


def test_hit_does_not_recompute_and_key_parts_matter(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"a": np.arange(5, dtype=np.int64)}, {"x": 3}

    key = {"trace": "t", "policy": "lru", "capacity": 4}
    for _ in range(3):
        cols, extra = rc.cached_columns(key, compute)
        assert cols["a"].tolist() == [0, 1, 2, 3, 4] and extra == {"x": 3}
    assert len(calls) == 1
    rc.cached_columns({**key, "capacity": 5}, compute)
    assert len(calls) == 2
    # a different trace content gives a different fingerprint, an equal one the same
    a, b = small_zipf_trace(1), small_zipf_trace(1)
    assert a.fingerprint() == b.fingerprint()
    ids = a.indices.copy()
    ids[17] = (ids[17] + 1) % 80
    c = Trace.single_table(ids, 80, 7)
    assert c.fingerprint() != a.fingerprint()
    assert small_zipf_trace(1, batch=8).fingerprint() != a.fingerprint()


def _damage_truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 9])


def _damage_flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[-3] ^= 0x40  # inside the payload: a count changes
    p.write_bytes(bytes(data))


def _damage_header(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(rc.MAGIC) + 12] ^= 0x01  # inside the JSON header
    p.write_bytes(bytes(data))


def _damage_empty(p: Path) -> None:
    p.write_bytes(b"")


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_flip, _damage_header,
                                    _damage_empty])
def test_damaged_entry_is_detected_removed_and_recomputed(tmp_path, damage, capsys):
    trace = small_zipf_trace(2)
    want, want_extra = rc.policy_columns(trace, "fbgemm-lru", 12, enabled=False, ways=4)
    rc.policy_columns(trace, "fbgemm-lru", 12, ways=4)
    (entry,) = _entries(rc.cache_folder())
    damage(entry)
    calls = []

    def compute():
        calls.append(1)
        return rc.policy_columns(trace, "fbgemm-lru", 12, enabled=False, ways=4)

    key = rc.policy_key(trace, "fbgemm-lru", 12, {"ways": 4})
    got, extra = rc.cached_columns(key, compute)
    assert calls == [1]  # the damaged entry was not used
    assert "damaged entry" in capsys.readouterr().err
    for c in want:
        np.testing.assert_array_equal(got[c], want[c])
    assert extra == want_extra
    (fresh,) = _entries(rc.cache_folder())  # rewritten whole
    got2, _ = rc.cached_columns(key, compute)
    assert calls == [1] and fresh.exists()
    for c in want:
        np.testing.assert_array_equal(got2[c], want[c])


def test_entry_of_another_key_is_never_used(tmp_path):
    """A file named by one key's digest but holding another key (a collision) is rejected."""
    folder = rc.cache_folder()
    rc.cached_columns({"k": 1}, lambda: ({"a": np.array([1], np.int64)}, {}))
    rc.cached_columns({"k": 2}, lambda: ({"a": np.array([2], np.int64)}, {}))
    one = folder / f"{rc.key_digest({'k': 1})}{rc.SUFFIX}"
    two = folder / f"{rc.key_digest({'k': 2})}{rc.SUFFIX}"
    one.write_bytes(two.read_bytes())
    cols, _ = rc.cached_columns({"k": 1}, lambda: ({"a": np.array([1], np.int64)}, {}))
    assert cols["a"].tolist() == [1]


def test_budget_evicts_least_recently_used(tmp_path):
    folder = tmp_path / "small"
    big = {"a": np.zeros(1000, np.int64)}  # ~8 KB an entry
    for k in range(3):
        rc.cached_columns({"k": k}, lambda: (big, {}), folder=folder, max_bytes=10**6)
        path = folder / f"{rc.key_digest({'k': k})}{rc.SUFFIX}"
        os.utime(path, (time.time() - 100 + k, time.time() - 100 + k))
    # reading k=0 makes it the most recent; a budget of two entries then drops k=1
    rc.cached_columns({"k": 0}, lambda: pytest.fail("recomputed"), folder=folder,
                      max_bytes=10**6)
    size = _entries(folder)[0].stat().st_size
    rc.cached_columns({"k": 3}, lambda: (big, {}), folder=folder, max_bytes=3 * size)
    left = {p.name for p in _entries(folder)}
    assert left == {f"{rc.key_digest({'k': k})}{rc.SUFFIX}" for k in (0, 2, 3)}
    assert rc.evict(folder, 0) == 3 * size and not _entries(folder)


def test_bad_budget_setting_is_a_user_error(monkeypatch):
    from scratchpipe_sim.errors import UserError

    monkeypatch.setenv(rc.MAX_BYTES_ENV, "lots")
    with pytest.raises(UserError, match=rc.MAX_BYTES_ENV):
        rc.max_bytes_setting()


def _writer(folder: str, barrier, n: int) -> None:
    cols = {"a": np.arange(n, dtype=np.int64), "b": np.arange(n, dtype=np.int64) * 3}
    barrier.wait()
    for _ in range(20):
        rc.cached_columns({"same": "entry"}, lambda: (cols, {"n": n}), folder=folder)
        for p in Path(folder).glob(f"*{rc.SUFFIX}"):
            p.unlink(missing_ok=True)  # force the next round to write again, concurrently


def test_concurrent_writers_leave_one_valid_entry(tmp_path):
    folder = str(tmp_path / "shared")
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(2)
    n = 200_000  # 3.2 MB: writes take long enough to overlap
    procs = [ctx.Process(target=_writer, args=(folder, barrier, n)) for _ in range(2)]
    run_together(procs)
    # one last concurrent round without deleting
    procs = [ctx.Process(target=rc.cached_columns,
                         args=({"same": "entry"},
                               lambda: ({"a": np.arange(n, dtype=np.int64),
                                         "b": np.arange(n, dtype=np.int64) * 3}, {"n": n})),
                         kwargs={"folder": folder}) for _ in range(2)]
    run_together(procs)
    names = sorted(os.listdir(folder))
    assert len(names) == 1 and names[0].endswith(rc.SUFFIX), names  # no temporary left
    cols, extra = rc.cached_columns({"same": "entry"}, lambda: pytest.fail("recomputed"),
                                    folder=folder)
    assert extra == {"n": n}
    np.testing.assert_array_equal(cols["b"], np.arange(n) * 3)


# -- a slice's replay ---------------------------------------------------------------------------
def test_a_slices_replay_through_the_cache_equals_a_fresh_copys():
    t = small_zipf_trace(4, n=700, batch=5)
    a, a2 = slice_trace(t, 3, 40), slice_trace(t, 3, 40)
    fresh = Trace.single_table(np.asarray(a.indices).copy(), 80, 5)
    want, _ = rc.policy_columns(fresh, "lru", 9, enabled=False)
    got, _ = rc.policy_columns(a, "lru", 9)
    again, _ = rc.policy_columns(a2, "lru", 9)
    for c in want:
        np.testing.assert_array_equal(got[c], want[c])
        np.testing.assert_array_equal(again[c], want[c])
