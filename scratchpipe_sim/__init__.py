"""scratchpipe_sim: a simulator of hybrid CPU-GPU DLRM training with GPU embedding caches.

Numba's on-disk cache (`@njit(cache=True)`) of the package's own kernels goes to a user cache
folder (`numba_cache_folder`), through a cache locator that `traces/_jit.py` adds when it
builds them and that answers for this package's files only: importing the package changes
nothing for another library's kernels (no `NUMBA_CACHE_DIR`, no `numba.config.CACHE_DIR`).
Numba's default is a `__pycache__` beside each source file: inside an installed package that
writes files pip does not record, which survive an uninstall and then shadow a later
editable install of the same package.

The folder is one per state of the package's sources (`source_key`): Numba revalidates a
cached kernel only against the file that defines it, so an edit of a helper it inlines
from another file (policies/_hashmap.py) or of a module constant it froze would otherwise
leave the old compiled code in use — silently wrong counts. Checked: a kernel calling an
inlined `f(x) = x + 1` from another file still returned x + 1 after `f` became x + 2.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

__version__ = "0.1.0"


def cache_dir() -> Path:
    """The user cache folder: $SCRATCHPIPE_CACHE_DIR, else $XDG_CACHE_HOME/scratchpipe_sim,
    else ~/.cache/scratchpipe_sim."""
    if os.environ.get("SCRATCHPIPE_CACHE_DIR"):
        return Path(os.environ["SCRATCHPIPE_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scratchpipe_sim"


#: subpackages that compile nothing: editing them never makes a cached kernel stale
NOT_COMPILED = ("cli", "experiments")
#: source states whose compiled kernels are kept (the most recently used ones)
KEEP_SOURCE_STATES = 4
_KEY = re.compile(r"^[0-9a-f]{16}$")


def source_key(root: Path | None = None) -> str:
    """16 hex digits naming the state of the package's sources: the path, size and
    modification time of every .py file outside NOT_COMPILED (stat only: ~1 ms). Any edit
    gives a new key, hence a fresh compile cache; an installed package keeps its key."""
    root = Path(__file__).parent if root is None else root
    h = hashlib.sha1()
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if rel.parts[0] in NOT_COMPILED:
            continue
        st = p.stat()
        h.update(f"{rel.as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def prune_source_states(folder: Path, keep: int = KEEP_SOURCE_STATES) -> None:
    """Delete all but the `keep` most recently used source-state folders under `folder`
    (best effort: another process may be using or deleting one too)."""
    try:
        states = [p for p in folder.iterdir() if p.is_dir() and _KEY.match(p.name)]
        states.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in states[keep:]:
        shutil.rmtree(old, ignore_errors=True)


_NUMBA_FOLDER: list[str | None] = []  # the folder, once chosen in this process


def numba_cache_folder() -> str | None:
    """<cache_dir>/numba/<source_key>, the folder our kernels are cached in; None when the
    user set NUMBA_CACHE_DIR (their folder wins, for every kernel; staleness across files
    is then theirs to manage). Chosen once per process, on the first kernel built: the
    folder's time is renewed on every use, so pruning keeps the states in use."""
    if not _NUMBA_FOLDER:
        _NUMBA_FOLDER.append(None if os.environ.get("NUMBA_CACHE_DIR") else _state_folder())
    return _NUMBA_FOLDER[0]


def _state_folder() -> str:
    base = cache_dir() / "numba"
    path = base / source_key()
    try:
        if path.is_dir():
            os.utime(path)
        else:
            path.mkdir(parents=True, exist_ok=True)
            prune_source_states(base)
    except OSError:
        pass  # an unwritable cache: Numba then compiles without caching
    return str(path)


#: the Python API (scratchpipe_sim.api), imported on first use: `import scratchpipe_sim`
#: stays cheap (no pandas, numba or SimPy until a function runs)
API = ("simulate", "sweep", "resolve")


#: the package's public face (`from scratchpipe_sim import *`, `dir()`, a notebook's tab
#: completion): the API, the error it raises for bad input, the version; the cache-folder
#: helpers above are the layers' own, not the user's
__all__ = [*API, "UserError", "__version__"]


def __getattr__(name: str) -> object:
    """`scratchpipe_sim.simulate` and the rest of `API` (docs/api.md), loaded on first use;
    `scratchpipe_sim.UserError` and `scratchpipe_sim.errors` (the module)."""
    if name in API:
        from scratchpipe_sim import api

        return getattr(api, name)
    if name in ("errors", "UserError"):
        import scratchpipe_sim.errors as errors

        return errors if name == "errors" else errors.UserError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """What `dir(scratchpipe_sim)` lists: the public face, not the modules it imports."""
    return sorted(__all__)
