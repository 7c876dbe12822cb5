"""The compile cache is one folder per state of the sources: an edit anywhere a kernel could
inline or freeze from gives a fresh folder (Numba itself only checks the defining file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scratchpipe_sim import prune_source_states, source_key


def _tree(root: Path) -> None:
    for rel in ("policies/_hashmap.py", "policies/lru.py", "cli/run.py", "__init__.py"):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# {rel}\n")


def test_an_edit_of_a_helper_file_changes_the_key_a_cli_edit_does_not(tmp_path):
    _tree(tmp_path)
    key = source_key(tmp_path)
    assert len(key) == 16 and key == source_key(tmp_path)  # deterministic
    helper = tmp_path / "policies" / "_hashmap.py"
    st = helper.stat()
    os.utime(helper, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # same bytes, touched
    touched = source_key(tmp_path)
    assert touched != key
    helper.write_text("# policies/_hashmap.py edited\n")  # a new size
    assert source_key(tmp_path) not in (key, touched)
    before = source_key(tmp_path)
    (tmp_path / "cli" / "run.py").write_text("# a CLI edit, compiled nowhere\n")
    assert source_key(tmp_path) == before


def test_pruning_keeps_the_most_recently_used_states_and_nothing_else_of_ours(tmp_path):
    names = [f"{i:016x}" for i in range(6)]
    for i, n in enumerate(names):
        (tmp_path / n).mkdir()
        os.utime(tmp_path / n, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "cpu_old_layout").mkdir()  # not a source state: left alone
    prune_source_states(tmp_path, keep=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names[2:], "cpu_old_layout"])
    prune_source_states(tmp_path / "missing")  # no folder: nothing to do, no error


FOREIGN = """
import numba


@numba.njit(cache=True)
def twice(x):
    return 2 * x
"""

PROBE = """
import json, os, sys
import numba.core.config as config
before = (os.environ.get("NUMBA_CACHE_DIR"), config.CACHE_DIR)
import scratchpipe_sim
from scratchpipe_sim.traces import _jit
imported = (os.environ.get("NUMBA_CACHE_DIR"), config.CACHE_DIR)
_jit.ready_target()  # builds our kernels and compiles one (cache=True)
import foreign
assert foreign.twice(3) == 6
after = (os.environ.get("NUMBA_CACHE_DIR"), config.CACHE_DIR)
print(json.dumps([before, imported, after, scratchpipe_sim.numba_cache_folder()]))
"""


def _probe(tmp_path: Path, env: dict) -> list:
    (tmp_path / "foreign.py").write_text(FOREIGN)
    env = {**env, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_our_kernels_cache_in_our_state_folder_and_nothing_else_changes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["SCRATCHPIPE_CACHE_DIR"] = str(tmp_path / "cache")
    before, imported, after, folder = _probe(tmp_path, env)
    # importing the package and building our kernels leave Numba's folder as it was
    assert before == imported == after == [None, ""]
    assert Path(folder) == tmp_path / "cache" / "numba" / source_key()
    assert list(Path(folder).rglob("_jit._first_kernel-*.nbi"))  # ours: in our folder
    assert not list(Path(folder).rglob("foreign.*"))
    assert list((tmp_path / "__pycache__").glob("foreign.twice-*.nbi"))  # Numba's default


def test_a_numba_cache_dir_the_user_set_wins(tmp_path):
    env = {**os.environ, "SCRATCHPIPE_CACHE_DIR": str(tmp_path / "cache"),
           "NUMBA_CACHE_DIR": str(tmp_path / "mine")}
    before, imported, after, folder = _probe(tmp_path, env)
    assert before == imported == after == [str(tmp_path / "mine")] * 2 and folder is None
    assert list((tmp_path / "mine").rglob("_jit._first_kernel-*.nbi"))
    assert list((tmp_path / "mine").rglob("foreign.twice-*.nbi"))
    assert not (tmp_path / "cache" / "numba").exists()
