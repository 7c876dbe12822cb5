"""A full disk is one line and nothing half-written (issue 42, item 3): every result writer
goes through `safety.atomic_files.atomic_write` (a temporary sibling, fsync, rename; the
OSError names the file), a run's folder keeps no partial result, a sweep's table only whole
points. The real case runs on a small tmpfs (root only; skipped with a reason otherwise)."""

from __future__ import annotations

import copy
import errno
import subprocess
import uuid

import pytest
import yaml
from small_configs import TWO_SMALL_TABLES

from scratchpipe_sim.cli import main
from scratchpipe_sim.safety import atomic_files
from scratchpipe_sim.safety.atomic_files import atomic_write


@pytest.fixture
def tiny_fs(tmp_path):
    """A 96 KiB tmpfs: room for a folder and a few small files, not for a run's results."""
    mnt = tmp_path / f"tiny-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()[:80]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _config(tmp_path) -> str:
    d = copy.deepcopy(TWO_SMALL_TABLES) | {"hardware": {"preset": "a100-gen4"},
                                           "designs": ["hybrid", "lru-cache"]}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(d))
    return str(cfg)


def test_atomic_write_leaves_the_old_file_and_names_the_path(tmp_path, monkeypatch) -> None:
    target = tmp_path / "results.csv"
    target.write_bytes(b"old\n")

    def full(fd, *_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_files.os, "fsync", full)
    with pytest.raises(OSError) as e:
        atomic_write(target, b"new\n")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(target)
    assert target.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]  # no temporary left


def test_run_on_a_full_disk_is_one_line_and_keeps_no_partial_result(
        capsys, tmp_path, tiny_fs) -> None:
    cfg = _config(tmp_path)
    out = tiny_fs / "res"
    code = main(["run", cfg, "--quiet", "--no-cache", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "No space left on device" in err or "no space" in err.lower()
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert "results.csv" not in left and not any(n.endswith(".tmp") for n in left), left


def test_write_run_removes_what_it_wrote_when_the_table_cannot_be(tmp_path,
                                                                  monkeypatch) -> None:
    from scratchpipe_sim import api

    cfg = _config(tmp_path)
    cfg_obj, names = api.check_run(cfg, None)
    outcome = api.run_designs(cfg_obj, names, api.run_trace(cfg_obj, replay_cache=False))
    real = atomic_write

    def fail_on_table(path, data):
        if path.name == "results.csv":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(atomic_files, "atomic_write", fail_on_table)
    out = tmp_path / "res"
    out.mkdir()
    with pytest.raises(OSError):
        api.write_run(out, outcome, cfg, [])
    assert list(out.iterdir()) == []
