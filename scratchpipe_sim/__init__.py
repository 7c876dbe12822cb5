"""scratchpipe_sim: a simulator of hybrid CPU-GPU DLRM training with GPU embedding caches.

Importing the package points Numba's on-disk cache (`@njit(cache=True)`) at a user cache
folder before any submodule imports Numba. Numba's default is a `__pycache__` beside each
source file: inside an installed package that writes files pip does not record, which
survive an uninstall and then shadow a later editable install of the same package.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__version__ = "0.1.0"


def cache_dir() -> Path:
    """The user cache folder: $SCRATCHPIPE_CACHE_DIR, else $XDG_CACHE_HOME/scratchpipe_sim,
    else ~/.cache/scratchpipe_sim."""
    if os.environ.get("SCRATCHPIPE_CACHE_DIR"):
        return Path(os.environ["SCRATCHPIPE_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scratchpipe_sim"


def _set_numba_cache_dir() -> None:
    """NUMBA_CACHE_DIR = <cache_dir>/numba unless the user chose one. Numba reads it when it
    is imported; if it already was (imported before us), set its live config too."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    folder = str(cache_dir() / "numba")
    os.environ["NUMBA_CACHE_DIR"] = folder
    numba_config = sys.modules.get("numba.core.config")
    if numba_config is not None:
        numba_config.CACHE_DIR = folder


_set_numba_cache_dir()
