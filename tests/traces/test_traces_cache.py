"""Trace digests (`Trace.content_sha256`, `fingerprint`, slices) and the on-disk trace
cache (`traces.trace_cache`, `.sptrace` entries): a trace read back is the built one, a
damaged entry is detected, reported and rebuilt, and the folder stays within its budget."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from processes import run_together
from small_configs import small_zipf_trace

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces import trace_cache as tc
from scratchpipe_sim.traces.csr_trace import Trace, slice_trace
from scratchpipe_sim.traces.store import (
    data_files,
    read_manifest,
    read_trace,
    verify_store,
    write_trace,
)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(tc.TRACE_MAX_BYTES_ENV, raising=False)


def _multi_trace() -> Trace:
    from scratchpipe_sim.traces.generators import generate_trace

    return generate_trace("zipf", [300, 500], 16, 9, [3, 2], 7, alpha=1.1)


# -- digests ------------------------------------------------------------------------------------
def test_content_sha256_is_the_int64_arrays_hash_and_slices_derive_their_fingerprint():
    t = small_zipf_trace(4, n=700, batch=5)
    h = hashlib.sha256()  # the oracle: the four arrays as little-endian int64, in order
    for arr in (t.table_rows, t.indices, t.offsets, t.batch_bounds):
        h.update(np.asarray(arr, "<i8").tobytes())
    assert t.content_sha256() == h.hexdigest() == t.checksum()
    a, a2, b = slice_trace(t, 3, 40), t.slice(3, 40), t.slice(4, 41)
    assert a.fingerprint() == a2.fingerprint()  # no hashing: derived
    assert "content_sha256" not in a2._memo
    assert a.fingerprint() != b.fingerprint()  # same shape, other batches
    assert a.fingerprint() != t.fingerprint()
    assert t.slice(0, t.num_batches) is t
    # with_meta keeps the digests (and the slice's parent): never hashed again
    m = a2.with_meta({"x": 1})
    assert m.meta == {"x": 1} and m.fingerprint() == a.fingerprint()
    assert t.with_meta({"sha256": "abc"}).checksum() == "abc"


def test_digest_values_are_the_ones_caches_were_written_with():
    """Computed by the id()-keyed functions of policies/replay_cache.py before they moved
    to Trace: the same values, so trace-cache keys and stored fingerprints stay valid. A
    generated trace holds uint32 ids since issue 26's session 6 (as a store does): its
    content digest is unchanged (it hashes the ids as int64), its fingerprint names the
    dtype; the same ids as int64 give the fingerprints caches were written with before."""
    t = _multi_trace()
    assert t.indices.dtype == np.uint32
    assert t.content_sha256() == \
        "2b77bb33bd923394625a9846e46dee0df250a88651a84525c7ba40d956bd9be8"
    assert t.fingerprint() == \
        "ea35d9b4fd5bf06851f4ea7c6ab92f521311e79caf9199a47c0c2084b2e71b4f"
    assert t.slice(2, 7).fingerprint() == \
        "58f38ea41d311dfa57fca461125ac474516d822b13a7d41229e543fb3040fc65"
    wide = _multi_trace()
    wide = Trace(wide.table_rows, wide.indices.astype(np.int64), wide.offsets,
                 wide.batch_bounds, wide.batch_size, wide.meta, wide.source)
    assert wide.content_sha256() == t.content_sha256()
    assert wide.fingerprint() == \
        "5205ae822474e02e0bb08c6ed7d11b2452463bcade9a2cb8e7344e7d7e4f695b"
    assert wide.slice(2, 7).fingerprint() == \
        "c1911091205edfb95aec09443fecbc0faf7ff42a675c48c320f2e6274a8209a2"


# -- the trace cache ------------------------------------------------------------------------------
def _same_trace(a: Trace, b: Trace) -> None:
    for name in ("table_rows", "indices", "offsets", "batch_bounds"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert type(np.asarray(y)) is np.ndarray
        np.testing.assert_array_equal(x, y)
    assert (a.batch_size, a.meta, a.source) == (b.batch_size, b.meta, b.source)


def _trace_entries() -> list[Path]:
    return sorted(tc.trace_cache_folder().glob(f"*{tc.SUFFIX}"))


def test_cached_trace_reads_back_the_same_trace_with_its_checksums():
    calls = []

    def build():
        calls.append(1)
        return _multi_trace()

    key = {"kind": "test-trace", "seed": 7}
    first = tc.cached_trace(key, build)
    want_fp, want_sha = first.fingerprint(), first.content_sha256()
    again = tc.cached_trace(key, build)
    assert calls == [1] and again is not first and len(_trace_entries()) == 1
    _same_trace(first, again)
    assert again.fingerprint() == want_fp and again.checksum() == want_sha
    assert "sha256" not in again.meta  # the entry's store checksum is not the trace's
    # read back from the entry, not recomputed: equal to a fresh computation on a copy
    copy = Trace(*(np.array(getattr(again, n)) for n in ("table_rows", "indices", "offsets",
                                                        "batch_bounds")), again.batch_size)
    assert copy.content_sha256() == want_sha
    tc.cached_trace({**key, "seed": 8}, build)
    assert calls == [1, 1] and len(_trace_entries()) == 2
    off = tc.cached_trace({"kind": "other"}, build, enabled=False)
    assert calls == [1, 1, 1] and len(_trace_entries()) == 2
    _same_trace(off, first)
    # a key JSON cannot write has no stable name: built every time, never stored
    odd = {"kind": "test-trace", "params": {"p": object()}}
    tc.cached_trace(odd, build)
    tc.cached_trace(odd, build)
    assert calls == [1, 1, 1, 1, 1] and len(_trace_entries()) == 2
    # an entry is an ordinary .sptrace store, its files checked by their CRC-32
    for entry in _trace_entries():
        verify_store(entry)
        assert read_trace(entry).num_batches == first.num_batches


def _flip(name: str, frac: float):
    def damage(entry: Path) -> None:
        p = entry / name
        data = bytearray(p.read_bytes())
        data[min(len(data) - 1, int(len(data) * frac))] ^= 0x10
        p.write_bytes(bytes(data))
    damage.__name__ = f"flip_{name}_{frac}"
    return damage


def _truncate(entry: Path) -> None:
    p = entry / "indices.bin"
    p.write_bytes(p.read_bytes()[:-9])


def _empty_manifest(entry: Path) -> None:
    (entry / "manifest.json").write_bytes(b"")


def _missing_file(entry: Path) -> None:
    (entry / "offsets_u32.bin").unlink()


def _meta_edit(entry: Path) -> None:  # valid JSON, a value changed: the record's sha256
    m = json.loads((entry / "manifest.json").read_text())
    m["meta"]["generator"]["seed"] = 8
    (entry / "manifest.json").write_text(json.dumps(m))


def _a_file(entry: Path) -> None:  # a file where the folder was (e.g. written by hand)
    shutil.rmtree(entry)
    entry.write_bytes(b"SPTRACE\x01 not a folder")


@pytest.mark.parametrize("damage", [_truncate, _empty_manifest, _missing_file, _meta_edit,
                                    _a_file, _flip("indices.bin", 0.02),
                                    _flip("indices.bin", 0.5), _flip("offsets_u32.bin", 0.999),
                                    _flip("offset_marks.bin", 0.1),
                                    _flip("batch_bounds.bin", 0.5),
                                    _flip("manifest.json", 0.3),
                                    _flip("manifest.json", 0.9)])
def test_damaged_trace_entry_is_detected_and_rebuilt(damage, capsys):
    key = {"kind": "test-trace", "seed": 7}
    want = tc.cached_trace(key, _multi_trace)
    (entry,) = _trace_entries()
    damage(entry)
    calls = []

    def build():
        calls.append(1)
        return _multi_trace()

    got = tc.cached_trace(key, build)
    err = capsys.readouterr().err
    assert calls == [1] and "damaged entry" in err and len(err.strip().splitlines()) == 1
    _same_trace(got, want)
    assert got.fingerprint() == want.fingerprint()
    tc.cached_trace(key, build)  # rewritten whole: read back
    assert calls == [1]


def test_trace_entry_of_another_key_is_never_used(capsys):
    a = tc.cached_trace({"k": 1}, _multi_trace)
    tc.cached_trace({"k": 2}, lambda: Trace.single_table(np.arange(40) % 9, 9, 4))
    (one, two) = _trace_entries()
    shutil.rmtree(one)
    shutil.copytree(two, one)
    calls = []
    for k in (1, 2):
        tc.cached_trace({"k": k}, lambda: calls.append(1) or _multi_trace())
    assert calls == [1]  # exactly the overwritten one was rebuilt
    assert "another key" in capsys.readouterr().err
    _same_trace(tc.cached_trace({"k": 1}, _multi_trace), a)


def test_trace_cache_stays_within_its_budget_and_cleans_up(monkeypatch):
    one = tc.cached_trace({"k": 0}, _multi_trace)
    (entry,) = _trace_entries()
    size = sum(f.stat().st_size for f in entry.iterdir())
    folder = tc.trace_cache_folder()
    stale = folder / "x.sptrace.abc.tmp"  # a crashed writer's folder
    stale.mkdir()
    (stale / "indices.bin").write_bytes(b"0" * 10)
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    fresh_tmp = folder / "y.sptrace.def.tmp"  # a writer at work: kept
    fresh_tmp.mkdir()
    legacy = folder / ("0" * 64 + ".spt")  # the retired single-file format
    legacy.write_bytes(b"SPTRACE\x01")
    for k in (1, 2, 3):
        tc.cached_trace({"k": k}, _multi_trace, max_bytes=int(2.5 * size))
    names = {p.name for p in folder.iterdir()}
    assert not stale.exists() and fresh_tmp.exists() and not legacy.exists(), names
    assert len(_trace_entries()) == 2  # the two most recent
    tc.cached_trace({"k": 3}, lambda: pytest.fail("rebuilt"))
    tc.cached_trace({"k": 0}, lambda: one)  # evicted: built again
    assert tc.evict_traces(max_bytes=0) > 0 and not _trace_entries()
    # an entry larger than the budget is never written
    tc.cached_trace({"k": 4}, _multi_trace, max_bytes=size // 2)
    assert not _trace_entries()


def test_trace_cache_budget_setting(monkeypatch):
    monkeypatch.setenv(tc.TRACE_MAX_BYTES_ENV, "lots")
    with pytest.raises(UserError, match=tc.TRACE_MAX_BYTES_ENV):
        tc.trace_max_bytes_setting()


def test_a_verified_entry_skips_the_crc_pass_until_a_file_changes(monkeypatch, capsys):
    key = {"kind": "test-trace", "seed": 7}
    want = tc.cached_trace(key, _multi_trace)
    (entry,) = _trace_entries()
    passes = []
    real = tc.read_trace

    def spy(path, verify=False, manifest=None):
        passes.append(verify)
        return real(path, verify=verify, manifest=manifest)

    monkeypatch.setattr(tc, "read_trace", spy)
    # files written this instant are racy (a change within the same clock tick would keep
    # their stat): checked on every read, and no record is kept
    future = time.time_ns() + 10**10
    names = data_files(read_manifest(entry))
    assert set(names) == {"indices.bin", "offsets_u32.bin", "offset_marks.bin",
                          "batch_bounds.bin"}  # pooling 3 and 2: not one bag length
    for name in names:
        os.utime(entry / name, ns=(future, future))
    tc.cached_trace(key, _multi_trace)
    assert passes == [True] and not (entry / tc._VERIFIED).exists()
    # files older than the record: checked once, then trusted while their stat holds
    old = time.time_ns() - 10**10
    for name in names:
        os.utime(entry / name, ns=(old, old))
    for _ in range(3):
        _same_trace(tc.cached_trace(key, _multi_trace), want)
    assert passes == [True, True, False, False]
    # a byte changed later changes the file's mtime: checked again, found damaged, rebuilt
    _flip("indices.bin", 0.5)(entry)
    calls = []
    got = tc.cached_trace(key, lambda: calls.append(1) or _multi_trace())
    assert passes[-1] is True and calls == [1] and "damaged entry" in capsys.readouterr().err
    _same_trace(got, want)


def test_store_crc_detects_damage_and_old_stores_pass(tmp_path):
    t = _multi_trace()
    path = write_trace(t, tmp_path / "t.sptrace")
    verify_store(path)
    read_trace(path, verify=True)
    p = path / "indices.bin"
    data = bytearray(p.read_bytes())
    data[5] ^= 1
    p.write_bytes(bytes(data))
    read_trace(path)  # not verified by default: a pass over the data
    with pytest.raises(UserError, match="indices.bin does not match its CRC-32"):
        read_trace(path, verify=True)
    m = json.loads((path / "manifest.json").read_text())
    del m["crc32"]  # a store written before CRCs: nothing to check
    (path / "manifest.json").write_text(json.dumps(m))
    verify_store(path)


def _trace_writer(folder: str, barrier) -> None:
    barrier.wait()
    for _ in range(5):
        got = tc.cached_trace({"same": "entry"}, _multi_trace, folder=folder)
        assert got.fingerprint() == _multi_trace().fingerprint()
        for p in Path(folder).glob(f"*{tc.SUFFIX}"):
            shutil.rmtree(p, ignore_errors=True)  # the next round writes again, concurrently


def test_concurrent_trace_writers_leave_one_valid_entry(tmp_path, capsys):
    import multiprocessing as mp

    folder = str(tmp_path / "shared")
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_trace_writer, args=(folder, barrier)) for _ in range(2)]
    run_together(procs)
    procs = [ctx.Process(target=tc.cached_trace, args=({"same": "entry"}, _multi_trace),
                         kwargs={"folder": folder}) for _ in range(2)]
    run_together(procs)
    names = sorted(os.listdir(folder))
    assert len(names) == 1 and names[0].endswith(tc.SUFFIX), names  # no temporary left
    got = tc.cached_trace({"same": "entry"}, lambda: pytest.fail("rebuilt"), folder=folder)
    _same_trace(got, _multi_trace())
