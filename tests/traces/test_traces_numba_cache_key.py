"""The compile cache is one folder per state of the sources: an edit anywhere a kernel could
inline or freeze from gives a fresh folder (Numba itself only checks the defining file)."""

from __future__ import annotations

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


def test_the_package_points_numba_at_its_own_state_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["SCRATCHPIPE_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", "import os, scratchpipe_sim; "
                          "print(os.environ['NUMBA_CACHE_DIR'])"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(out) == tmp_path / "numba" / source_key()
    assert Path(out).is_dir()
    # a folder the user chose wins
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", "import os, scratchpipe_sim; "
                          "print(os.environ['NUMBA_CACHE_DIR'])"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(tmp_path / "mine")
