"""The one way a result file is written: a temporary sibling, fsync, rename.

Why: a full disk, a quota or an interrupt in the middle of a write must leave the old file or
none, never half a file that a later `report`, resume or cache read would trust; and the
OSError of a write (which Python raises without a file name) must name the file, so the CLI
prints one line instead of a traceback.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def default_mode() -> int:
    """What `open(path, "w")` gives a new file: 0666 less the umask (mkstemp gives 0600)."""
    return 0o666 & ~_umask()


def default_dir_mode() -> int:
    """What `mkdir` gives a new folder: 0777 less the umask (mkdtemp gives 0700, so a
    trace published from a temporary folder could not be read by the user's group)."""
    return 0o777 & ~_umask()


def named(e: OSError, path: str | os.PathLike) -> OSError:
    """`e` with `path` as its file name when it has none (a write's or fsync's error)."""
    if e.filename is None:
        e.filename = os.fspath(path)
    return e


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write `data` (str as UTF-8) via a temporary sibling + fsync + rename: readers see the
    old file or the new one, never half; on any failure the temporary file is removed and
    the OSError names `path`."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise named(e, path) from None
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _unlink_quietly(tmp)
        raise named(e, path) from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)
    return path


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (best effort: some file systems refuse)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
