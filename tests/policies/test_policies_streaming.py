"""Replays of a memory-mapped `.sptrace` with the next uses on disk (the production-scale
path, issue 41) give exactly the in-memory replay, for every policy, at chunk sizes of one
batch, an odd size and more than the trace; the spill file goes away with the replay and a
full disk is one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies import POLICIES, engine
from scratchpipe_sim.traces import _pages, csr_trace
from scratchpipe_sim.traces.bag_offsets import BagOffsets
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import read_trace, write_trace
from tests.sptrace_v1 import write_v1

ROWS = (300, 500)
BATCH = 16
#: chunk sizes in accesses: one batch (every chunk holds at least one), an odd size cutting
#: across batches' sizes, more than the trace
CHUNKS = (1, 37, 1 << 30)


def _trace() -> Trace:
    """Two tables, varied bag lengths (so batches differ in accesses), skewed ids."""
    rng = np.random.default_rng(7)
    batches, lengths = [], []
    for _ in range(24):
        per_t, len_t = [], []
        for rows in ROWS:
            lens = rng.integers(0, 5, BATCH)
            ids = (rng.zipf(1.3, int(lens.sum())) - 1) % rows
            per_t.append(ids)
            len_t.append(lens)
        batches.append(per_t)
        lengths.append(len_t)
    return Trace.from_batches(batches, list(ROWS), lengths)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> tuple[Trace, Trace]:
    """(in memory, memory-mapped from its own `.sptrace`: compact u32-marks offsets)."""
    mem = _trace()
    path = write_trace(mem, tmp_path_factory.mktemp("stream") / "t.sptrace")
    return mem, read_trace(path)


@pytest.fixture(scope="module")
def v1_trace(tmp_path_factory) -> Trace:
    """The same trace from a format-version-1 store (int64 offsets.bin)."""
    return read_trace(write_v1(_trace(), tmp_path_factory.mktemp("v1") / "t.sptrace"))


@pytest.fixture(scope="module")
def constant_traces(tmp_path_factory) -> tuple[Trace, Trace]:
    """(in memory, mapped) of a trace whose bags all hold 2 ids: no offsets file."""
    rng = np.random.default_rng(3)
    batches = [[(rng.zipf(1.3, 2 * BATCH) - 1) % rows for rows in ROWS] for _ in range(24)]
    lengths = [[np.full(BATCH, 2)] * len(ROWS)] * 24
    mem = Trace.from_batches(batches, list(ROWS), lengths)
    path = write_trace(mem, tmp_path_factory.mktemp("const") / "t.sptrace")
    assert not (path / "offsets_u32.bin").exists() and not (path / "offsets.bin").exists()
    return mem, read_trace(path)


def _policy(name: str, trace: Trace):
    cap = 200 if name not in ("scratchpipe",) else 400
    return engine.make_policy(name, cap, trace.total_rows)


def _columns(trace: Trace, name: str, chunk: int | None):
    per = np.zeros((trace.num_tables, 4), np.int64)
    cols, extra = engine.replay_columns(trace, _policy(name, trace), chunk, per_table=per)
    return {k: v.tolist() for k, v in cols.items()}, extra, per.tolist()


@pytest.mark.parametrize("name", POLICIES.names())
def test_streamed_replay_equals_in_memory(name, traces, monkeypatch):
    mem, mapped = traces
    want = _columns(mem, name, None)  # next uses in memory, one chunk
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, "0")  # next uses on disk
    for chunk in CHUNKS:
        assert _columns(mapped, name, chunk) == want, chunk
    # the timed slice of a mapped trace, its offsets rebased lazily, against the in-memory
    # slice
    part = mapped.slice(5, 24)
    assert isinstance(part.offsets, BagOffsets)
    monkeypatch.delenv(engine.NEXT_USE_MEMORY_ENV)
    ref = _columns(mem.slice(5, 24), name, None)
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, "0")
    assert _columns(part, name, 37) == ref


@pytest.mark.parametrize("name", POLICIES.names())
def test_old_and_constant_stores_replay_as_in_memory(name, traces, v1_trace,
                                                     constant_traces, monkeypatch):
    """A version-1 store (int64 offsets, its timed slice's offsets spilled) and a
    constant-pooling store (no offsets file) replay exactly as in memory."""
    mem, _ = traces
    want = _columns(mem, name, None)
    cmem, cmapped = constant_traces
    cwant = _columns(cmem, name, None)
    ref = _columns(mem.slice(5, 24), name, None)
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, "0")
    for chunk in (1, 37):
        assert _columns(v1_trace, name, chunk) == want, chunk
        assert _columns(cmapped, name, chunk) == cwant, chunk
    monkeypatch.setattr(csr_trace, "_REBASE_IN_MEMORY", 0)
    part = v1_trace.slice(5, 24)
    assert isinstance(part.offsets, np.memmap)
    assert _columns(part, name, 37) == ref


@pytest.mark.parametrize("chunk", CHUNKS)
def test_next_uses_on_disk_read_back_as_computed(chunk, traces):
    mem, mapped = traces
    want = engine.compute_next_use(mem)
    nu = engine.next_uses(mapped, chunk, on_disk=True)
    assert nu.on_disk and nu.dtype == want.dtype
    first = 0
    for c in mapped.iter_chunks(chunk):
        got = nu.read(c.first_access, len(c.ids))
        assert got.tolist() == want[first : first + len(c.ids)].tolist()
        first += len(c.ids)
    assert first == len(want)
    nu.close()


def test_a_mapped_traces_next_uses_never_stay_in_memory(traces, monkeypatch):
    """Issue 41: with any bound above zero, a mapped trace just below it would peak higher
    than a longer one; an in-memory trace keeps its bound (the quickstart's speed)."""
    mem, mapped = traces
    monkeypatch.delenv(engine.NEXT_USE_MEMORY_ENV, raising=False)
    assert mem.num_accesses * 4 <= engine.NEXT_USE_MEMORY_BYTES
    assert not engine.next_uses(mem).on_disk
    nu = engine.next_uses(mapped)
    assert nu.on_disk
    nu.close()
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, str(1 << 40))  # the override still wins
    assert not engine.next_uses(mapped).on_disk


def test_disk_is_chosen_past_the_memory_bound(traces, monkeypatch):
    mem, _ = traces
    nbytes = mem.num_accesses * 4  # int32
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, str(nbytes))
    assert not engine.next_uses(mem).on_disk
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, str(nbytes - 1))
    nu = engine.next_uses(mem)
    assert nu.on_disk
    nu.close()


def _spill_fds() -> int:
    folder = str(_pages.spill_folder())
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(folder)
        except OSError:
            pass
    return n


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_the_spill_file_is_gone_after_the_replay(traces, monkeypatch):
    _, mapped = traces
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, "0")
    before = _spill_fds()
    engine.run_cache(mapped, "belady", 100)
    assert _spill_fds() == before
    assert list(_pages.spill_folder().iterdir()) == []  # unnamed: never a file to clean up


def test_a_full_disk_is_one_line(traces, monkeypatch):
    _, mapped = traces
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, "0")

    def full(path):
        return shutil._ntuple_diskusage(10**9, 10**9, 0)

    monkeypatch.setattr(shutil, "disk_usage", full)
    with pytest.raises(UserError, match="next uses of .* on disk, more than the 0 B free"):
        engine.run_cache(mapped, "belady", 100)


def test_chunks_release_the_pages_of_a_mapped_trace(traces):
    """A pass over a mapped trace leaves none of its ids' and offsets' pages resident (the
    mappings' share of the resident set, from /proc/self/smaps; the batch bounds, one int64
    a batch, may stay)."""
    _, mapped = traces
    if not Path("/proc/self/smaps").exists() or _pages._madvise() is None:
        pytest.skip("needs Linux")
    assert _pages.read_only_mapping(mapped.indices)
    assert not _pages.read_only_mapping(np.zeros(3))
    for _ in mapped.iter_chunks(37):
        pass
    for name in ("indices.bin", "offsets_u32.bin"):
        assert _resident_kib(str(Path(mapped.source) / name)) == 0, name


def _resident_kib(folder: str) -> int:
    """Resident KiB of this process's mappings of files under `folder`."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
            inside = len(head) >= 6 and head[5].startswith(folder)
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total
