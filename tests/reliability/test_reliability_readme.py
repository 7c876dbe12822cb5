"""The README's Quickstart, replayed as written in a fresh virtual environment (issue 13.1).

Command 1 (`pip install .` + `run`) used to leave Numba's compiled cache inside the
installed package; pip does not remove those files, so after command 2 (`pip install -e`)
the leftover folder shadowed the editable install and every `scratchpipe-sim` call failed
with an ImportError. The test copies the checkout (so build/ and egg-info never land in the
repository), runs both commands in order and then the CLI.

Slow (two pip installs, from the local wheel cache and index); it runs in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info",
                                "__pycache__", "results", "out", ".pytest_cache",
                                ".ruff_cache", ".hypothesis", ".gpu_deps", "*.pyc")


def quickstart_commands() -> list[str]:
    """The shell lines of the README's Quickstart code block, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md: no bash block under ## Quickstart"
    return [ln.strip() for ln in block.group(1).splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


def _site_packages(env_dir: Path) -> Path:
    return next(env_dir.glob("lib/python3*/site-packages"))


def _sh(cmd: str, cwd: Path, env: dict, timeout: int = 900) -> subprocess.CompletedProcess:
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"{cmd!r} exited {p.returncode}:\n{p.stdout[-3000:]}\n" \
                              f"{p.stderr[-3000:]}"
    return p


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell replay")
def test_readme_quickstart_in_a_fresh_venv(tmp_path: Path) -> None:
    cmds = quickstart_commands()
    assert len(cmds) == 2, cmds
    install, run = cmds[0].split(" && ")
    assert install == "python3 -m pip install ." and run.startswith("scratchpipe-sim run ")
    install_test, pytest_cmd = cmds[1].split(" && ")
    assert install_test.startswith("python3 -m pip install -e ") and "pytest" in pytest_cmd

    repo = tmp_path / "checkout"
    shutil.copytree(ROOT, repo, ignore=IGNORE)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "NUMBA_CACHE_DIR",
                        "SCRATCHPIPE_CACHE_DIR", "SCRATCHPIPE_CONFIGS", "PYTHONHOME")}
    env.update(PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
               VIRTUAL_ENV=str(env_dir), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PIP_QUIET="1")

    # command 1, as written: install, then the quickstart run
    _sh(install, repo, env)
    _sh(run, repo, env)
    site = _site_packages(env_dir)
    leftovers = sorted(str(p.relative_to(site)) for p in site.rglob("*.nb[ic]"))
    assert not leftovers, f"Numba cache written into the installed package: {leftovers[:5]}"
    assert any((tmp_path / "cache" / "scratchpipe_sim" / "numba").rglob("*.nbi"))

    # command 2's install (its pytest is this test suite), then the CLI must still work
    _sh(install_test, repo, env)
    assert "usage" in _sh("scratchpipe-sim --help", repo, env).stdout.lower()
    out = _sh("scratchpipe-sim run configs/quickstart.yaml --set model.num_batches=10 "
              "--set model.warmup_batches=2 --design hybrid --no-timeline --quiet "
              f"--out {tmp_path / 'tiny'}", repo, env)
    assert "hybrid" in out.stdout
    assert (tmp_path / "tiny" / "results.csv").is_file()
