"""No tracked file names a path outside the repository (a machine's work, home or shared
folders, by absolute path or by `..`): a reader elsewhere cannot follow it. Cite the
published source instead, and copy data a test needs into the repository (e.g.
traces/dlrm_datasets_locality/)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: written in pieces so that this file does not match itself
FORBIDDEN = re.compile("|".join(re.escape(p) for p in (
    "/" + "work/", "/" + "home/", "/" + "Users/", ".." + "/shared")))


def _tracked() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / name for name in out.stdout.decode().split("\0") if name]


def test_no_tracked_file_names_a_path_outside_the_repository() -> None:
    found = []
    for path in _tracked():
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue                       # binary (a trace's arrays)
        for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "paths outside the repository:\n" + "\n".join(found)


def test_the_pattern_catches_what_it_should() -> None:
    assert FORBIDDEN.search("see " + "/" + "work/shared/REFERENCE.md")
    assert FORBIDDEN.search("--target .." + "/shared/data/x.txt")
    assert not FORBIDDEN.search("traces/dlrm_datasets_locality/2021_locality_stats.txt")
    assert not FORBIDDEN.search("--out /tmp/pairs")
