"""Faults injected into the on-disk caches, not only bad input (issue 42, "Also"): a read-only
cache folder, several runs sharing one empty cache folder at once, and a run killed with
SIGKILL in the middle of a cache write. Each asserts "nothing lost, nothing wrong trusted":
every run's results equal a run that reads no cache, and the folder afterwards holds whole,
valid entries only (a later run reads them, warns nothing and gets the same results).

The runs are `scratchpipe-sim run` in subprocesses (the kill is real: the process sends
itself SIGKILL from a hook on the cache's rename). They share the test process's compiled
kernels through NUMBA_CACHE_DIR, so each takes about a second, not a compile."""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml
from small_configs import TWO_SMALL_TABLES

import scratchpipe_sim
from scratchpipe_sim.policies import replay_cache
from scratchpipe_sim.traces import store, trace_cache

#: a hang detector, not a timing assertion: one run takes about a second
RUN_TIMEOUT_S = 120
#: runs sharing one cache folder at once
N_PROCS = 4

_RUN = """
import sys
from scratchpipe_sim.cli import main
sys.exit(main(sys.argv[1:]))
"""

#: a hook run before `main`: the first rename of a cache temporary whose name ends in
#: sys.argv[1] (".spr.part": a replay entry; ".tmp": a trace entry's folder) cuts the
#: temporary short, as a write stopped half way, and the process kills itself with SIGKILL
_KILL_DURING_WRITE = """
import os, signal, sys
from pathlib import Path
target = sys.argv.pop(1)
real = os.replace
def replace(src, dst, *a, **k):
    p = Path(src)
    if p.name.startswith(".tmp-") or p.name.endswith(".tmp"):
        if p.name.endswith(target) and (target != ".tmp" or p.is_dir()):
            files = sorted(f for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())
            big = max(files, key=lambda f: f.stat().st_size)
            with open(big, "r+b") as f:
                f.truncate(big.stat().st_size // 2)
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.replace = replace
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The config, the shared kernel folder and the reference table (a run reading no
    cache)."""
    d = tmp_path_factory.mktemp("cache-faults")
    cfg = d / "c.yaml"
    cfg.write_text(yaml.safe_dump(copy.deepcopy(TWO_SMALL_TABLES) | {
        "hardware": {"preset": "a100-gen4"},
        "designs": ["hybrid", "lru-cache", "scratchpipe"]}))
    numba = os.environ.get("NUMBA_CACHE_DIR") or scratchpipe_sim.numba_cache_folder()
    ctx = {"cfg": cfg, "numba": numba, "dir": d}
    p = _run(ctx, d / "unused-cache", "--no-cache")
    code, err = _finish(p)
    assert code == 0, err
    ctx["reference"] = _table(p.out)
    return ctx


def _run(ctx: dict, cache: Path, *extra: str, hook: str = "", hook_args: tuple = ()
         ) -> subprocess.Popen:
    """Start `scratchpipe-sim run CONFIG` with `cache` as its cache folder (stderr piped)."""
    out = ctx["dir"] / f"out-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "SCRATCHPIPE_CACHE_DIR": str(cache)}
    if ctx["numba"]:
        env["NUMBA_CACHE_DIR"] = ctx["numba"]
    argv = [sys.executable, "-c", hook + _RUN, *hook_args, "run", str(ctx["cfg"]),
            "--quiet", "--no-timeline", "--out", str(out), *extra]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    p.out = out  # type: ignore[attr-defined]
    return p


def _finish(p: subprocess.Popen) -> tuple[int, str]:
    _, err = p.communicate(timeout=RUN_TIMEOUT_S)
    return p.returncode, err


def _table(out: Path) -> pd.DataFrame:
    """results.csv without the wall-clock columns (the only ones a cache may change)."""
    t = pd.read_csv(out / "results.csv")
    return t.drop(columns=[c for c in t.columns if c.endswith("_wall_s")])


def _same(ctx: dict, out: Path) -> None:
    pd.testing.assert_frame_equal(_table(out), ctx["reference"], check_exact=True)


def _clean_run(ctx: dict, cache: Path) -> None:
    """A run that reads `cache`: the reference results, no warning, nothing rewritten."""
    before = _listing(cache)
    p = _run(ctx, cache)
    code, err = _finish(p)
    assert code == 0 and err == "", err
    _same(ctx, p.out)
    assert _listing(cache) == before  # every entry was read, none recomputed


def _listing(cache: Path) -> dict[str, list[str]]:
    return {sub: sorted(p.name for p in (cache / sub).iterdir()) if (cache / sub).is_dir()
            else [] for sub in ("replays", "traces")}


def _temporaries(cache: Path) -> list[Path]:
    return [p for sub in ("replays", "traces") if (cache / sub).is_dir()
            for p in (cache / sub).iterdir()
            if p.name.startswith(".tmp-") or p.name.endswith(".tmp")]


def _assert_entries_valid(cache: Path) -> None:
    """Every published entry is whole: a replay file's trailing sha256 covers the rest, a
    trace folder passes the store's full check (manifest and each file's CRC-32)."""
    spr = [p for p in (cache / "replays").iterdir() if p.name.endswith(replay_cache.SUFFIX)]
    traces = [p for p in (cache / "traces").iterdir() if p.name.endswith(store.SUFFIX)]
    assert spr and traces
    for p in spr:
        data = p.read_bytes()
        assert data.startswith(replay_cache.MAGIC)
        assert hashlib.sha256(data[:-32]).digest() == data[-32:], p.name
    for p in traces:
        store.read_trace(p, verify=True)  # raises on any damage


@pytest.fixture
def read_only_cache(tmp_path):
    """A cache folder no write can enter: chmod 0o500 for a user; for root (whom
    permissions do not stop) a read-only bind mount, else files where the cache's
    subfolders should be."""
    d = tmp_path / "ro-cache"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o500)
        yield d
        d.chmod(0o700)
        return
    mounted = subprocess.run(["mount", "--bind", str(d), str(d)], capture_output=True)
    if mounted.returncode == 0:
        r = subprocess.run(["mount", "-o", "remount,ro,bind", str(d)], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)
            mounted = r
    if mounted.returncode != 0:
        for sub in ("replays", "traces"):
            (d / sub).write_bytes(b"not a folder")
    try:
        yield d
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_a_read_only_cache_folder_costs_one_line_not_the_results(setup,
                                                                 read_only_cache) -> None:
    before = sorted(p.name for p in read_only_cache.iterdir())
    p = _run(setup, read_only_cache)
    code, err = _finish(p)
    assert code == 0, err
    assert "Traceback" not in err and len(err.splitlines()) <= 1, err
    assert "cannot write" in err  # the one line says what was lost: the saving
    _same(setup, p.out)
    assert sorted(p.name for p in read_only_cache.iterdir()) == before


def test_a_failed_write_warns_once_per_cache_folder(tmp_path, capsys) -> None:
    # a file where the replays folder should be: every entry fails alike, one line says so
    root = tmp_path / "replays"
    root.write_bytes(b"")
    for i in range(3):
        got = replay_cache.cached_columns({"i": i}, lambda: ({"a": [1, 2]}, {"x": 3}),
                                          folder=root)
        assert got[1] == {"x": 3} and list(got[0]["a"]) == [1, 2]
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "cannot write" in err, err


def test_runs_sharing_one_empty_cache_folder_agree_and_leave_valid_entries(
        setup, tmp_path) -> None:
    cache = tmp_path / "shared"
    procs = [_run(setup, cache) for _ in range(N_PROCS)]
    for p in procs:
        code, err = _finish(p)
        assert code == 0 and err == "", err
        _same(setup, p.out)
    assert _temporaries(cache) == []
    _assert_entries_valid(cache)
    _clean_run(setup, cache)


@pytest.mark.parametrize("target", [replay_cache.SUFFIX + ".part", ".tmp"],
                         ids=["replay-entry", "trace-entry"])
def test_a_run_killed_during_a_cache_write_leaves_nothing_trusted(setup, tmp_path,
                                                                  target) -> None:
    cache = tmp_path / "killed"
    p = _run(setup, cache, hook=_KILL_DURING_WRITE, hook_args=(target,))
    code, err = _finish(p)
    assert code == -9, err  # killed mid-write, as kill -9 would
    left = _temporaries(cache)
    assert [t for t in left if t.name.endswith(target)], left  # the half-written temporary

    # the next run ignores the temporary: the reference results, no warning
    p = _run(setup, cache)
    code, err = _finish(p)
    assert code == 0 and err == "", err
    _same(setup, p.out)
    _assert_entries_valid(cache)
    assert set(_temporaries(cache)) == set(left)  # fresh: perhaps another writer's, kept
    _clean_run(setup, cache)

    # once old enough to be a crash's, the next eviction removes it
    old = time.time() - 2 * 3600
    for t in left:
        os.utime(t, (old, old))
    replay_cache.evict(cache / "replays")
    trace_cache.evict_traces(cache / "traces")
    assert _temporaries(cache) == []
    _assert_entries_valid(cache)
    _clean_run(setup, cache)
