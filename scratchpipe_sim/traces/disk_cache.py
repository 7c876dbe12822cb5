"""What the on-disk caches share: their folder, byte budget, keys, atomic writes, eviction.

Why here: the trace cache (`traces.trace_cache`) and the replay-columns cache
(`policies.replay_cache`) keep content-addressed entries the same way, and traces is the
lowest layer that needs them. An entry is a file or a folder named `<sha256 of its full
key><suffix>`; a writer builds it under a temporary name in the same folder and renames it
into place (atomic on POSIX), so readers see a whole entry or none. After a write the least
recently used entries (by mtime; a hit touches its entry) are removed beyond the budget, and
temporaries older than an hour (left by a crash) with them. A folder that cannot be written
(read-only, full, a file in its place) is one warning per process and user cache folder,
not one per entry: both caches and every entry share the one cause.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import scratchpipe_sim
from scratchpipe_sim.safety.jsonout import canonical_json, canonical_sha256

#: a writer's temporary file or folder older than this (seconds) is left over from a crash
STALE_TMP_S = 3600.0
_CODE_DIGESTS: dict[tuple[str, ...], str] = {}
#: user cache folders (a cache root's parent) whose failure this process has reported
_FOLDER_WARNED: set[Path] = set()


def cache_subfolder(name: str) -> Path:
    """`<user cache folder>/<name>`: $SCRATCHPIPE_CACHE_DIR, else $XDG_CACHE_HOME/
    scratchpipe_sim, else ~/.cache/scratchpipe_sim (see `scratchpipe_sim.cache_dir`)."""
    return scratchpipe_sim.cache_dir() / name


def max_bytes_setting(env: str, default: int) -> int:
    """A folder's byte budget: env `env` (a number of bytes), else `default`."""
    from scratchpipe_sim.safety.limits import env_number  # noqa: PLC0415

    return int(env_number(env, default, minimum=0))


def code_digest(sources: tuple[str, ...]) -> str:
    """sha256 of the package sources (globs relative to the package) that produce an entry,
    so edited code never reads what its previous version computed."""
    if sources not in _CODE_DIGESTS:
        root = Path(scratchpipe_sim.__file__).resolve().parent
        files = sorted({f for pattern in sources for f in root.glob(pattern)})
        h = hashlib.sha256()
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
        _CODE_DIGESTS[sources] = h.hexdigest()
    return _CODE_DIGESTS[sources]


def full_key(key: Mapping[str, Any], sources: tuple[str, ...], schema: int
             ) -> dict[str, Any]:
    """The caller's key plus what every entry depends on: schema, package version, code."""
    return {**key, "_schema": schema, "_version": scratchpipe_sim.__version__,
            "_code": code_digest(sources)}


def canonical(key: Mapping[str, Any]) -> str:
    """The strict canonical JSON of a key or header (numpy scalars and paths besides plain
    types; anything else raises TypeError: see `safety.jsonout.canonical_json`)."""
    return canonical_json(key, strict=True)


def entry_path(root: Path, fk: Mapping[str, Any], suffix: str) -> Path:
    """Where the entry of full key `fk` lives: named by the sha256 of its canonical JSON."""
    return root / f"{canonical_sha256(fk, strict=True)}{suffix}"


def warn(what: str, msg: str) -> None:
    """One line on stderr: a cache problem costs the saving, never the run."""
    print(f"scratchpipe-sim: {what}: {msg}", file=sys.stderr)


def warn_folder(what: str, root: Path, msg: str) -> None:
    """The one warning of an entry that cannot be written or read (`msg`): the first of this
    process for `root`'s user cache folder (the replays and traces folders share it, and a
    read-only or full folder fails every entry alike), so a run prints one line, not one per
    entry."""
    folder = root.parent
    if folder in _FOLDER_WARNED:
        return
    _FOLDER_WARNED.add(folder)
    warn(what, f"{msg}; running without it (further failures of this folder not reported)")


def touch(path: Path) -> None:
    """Mark an entry recently used (evicted last)."""
    try:
        os.utime(path)
    except OSError:
        pass


def remove(p: Path) -> bool:
    """Remove an entry file or folder; False when it could not be (or was already gone)."""
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
        return True
    except OSError:
        return False


def write_file(root: Path, path: Path, suffix: str, write: Callable[[BinaryIO], object],
               what: str) -> bool:
    """Write a file entry atomically (a temporary file in the folder, then os.replace: a
    reader sees the old entry or the whole new one, and concurrent writers leave one valid
    entry). A failure is one warning, not an error: the cache is an optimisation."""
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=suffix + ".part")
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError as e:
        warn_folder(what, root, f"cannot write {path}: {e}")
        return False
    finally:
        if tmp is not None:
            remove(Path(tmp))


def _is_temporary(name: str) -> bool:
    # write_file's ".tmp-*" files and traces.store.TraceWriter's "NAME.*.tmp" folders
    return name.startswith(".tmp-") or name.endswith(".tmp")


def _size(path: str, is_dir: bool, st: os.stat_result) -> int:
    if not is_dir:
        return st.st_size
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def evict(root: Path, max_bytes: int, suffix: str, keep: Path | None = None,
          legacy: tuple[str, ...] = ()) -> int:
    """Remove the least recently used entries (names ending in `suffix`) until the folder
    holds <= `max_bytes`; also temporaries older than an hour and entries of a retired
    format (names ending in one of `legacy`). Returns the bytes removed."""
    entries, removed, now = [], 0, time.time()
    try:
        listing = list(os.scandir(root))
    except OSError:
        return 0
    for e in listing:
        try:
            st = e.stat(follow_symlinks=False)
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            continue  # removed by another worker meanwhile
        stale = _is_temporary(e.name) and now - st.st_mtime > STALE_TMP_S
        if stale or (legacy and e.name.endswith(legacy)):
            size = _size(e.path, is_dir, st)
            removed += size if remove(Path(e.path)) else 0
        elif e.name.endswith(suffix) and not _is_temporary(e.name):
            entries.append((st.st_mtime, e.name, _size(e.path, is_dir, st), Path(e.path)))
    total = sum(size for _, _, size, _ in entries)
    for _, _, size, p in sorted(entries):
        if total <= max_bytes:
            break
        if keep is not None and p == keep:
            continue
        if remove(p):
            removed += size
        total -= size
    return removed
