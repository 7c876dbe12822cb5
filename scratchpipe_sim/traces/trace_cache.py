"""A content-addressed on-disk cache of generated traces, in the `.sptrace` store format.

Why: generating the quickstart's trace costs seconds; mapping its entry and checking it
(manifest, each file's CRC-32) a fraction of that. A generated trace is a pure function of
its generator parameters and the trace code, so the key names both (`disk_cache.full_key`).

Entry = one folder `<sha256 of the key>.sptrace` in `trace_cache_folder()`, written by
`traces.store.write_trace` (built under a temporary name, renamed into place whole) and read
by `store.read_trace(verify=True)`. Its manifest also holds the record `cache`: the full key
(checked on read: a digest collision or a bug never returns another key's trace), the
trace's `content_sha256` and `fingerprint` (so a trace read back is never hashed), its
source, and a sha256 over the record, the table rows, the batch size and the meta. A
damaged, truncated or foreign entry is reported in one line, removed and rebuilt.

The CRC pass reads every byte (~50 ms for the quickstart's 100 MB), so a fully cached run
would pay it for a trace it never reads. After a pass, `verified.json` records each data
file's (size, mtime_ns, inode); a later read whose files still have that stat skips the
pass. Git's racy-clean rule keeps this sound on a coarse clock: the record is kept only
when every file is strictly older than the record itself, so a change written later, even
within the clock tick of the files' last write, always changes a file's mtime.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces import disk_cache as dc
from scratchpipe_sim.traces.bag_offsets import BagOffsets
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import (
    INDEX_DTYPES,
    SUFFIX,
    data_files,
    read_manifest,
    read_trace,
    write_trace,
)

#: the sources a generated trace depends on (generators, distributions, the Trace type)
TRACE_SOURCES = ("traces/*.py",)
#: bump when the entry layout or the meaning of a stored value changes
TRACE_SCHEMA_VERSION = 3  # 3: .sptrace folders (2: the retired single-file .spt format)
#: entries of the retired format, removed when the folder is next written
_LEGACY_SUFFIXES = (".spt",)
#: default size budget of the traces folder (bytes); env SCRATCHPIPE_TRACE_CACHE_MAX_BYTES
DEFAULT_TRACE_MAX_BYTES = 2 << 30
TRACE_MAX_BYTES_ENV = "SCRATCHPIPE_TRACE_CACHE_MAX_BYTES"
_WHAT = "trace cache"
#: the record of the data files' stat (store.data_files) at their last CRC pass
_VERIFIED = "verified.json"


def trace_cache_folder() -> Path:
    """`<user cache folder>/traces` (beside `replays`, with its own size budget)."""
    return dc.cache_subfolder("traces")


def trace_max_bytes_setting() -> int:
    """The traces folder's byte budget: env SCRATCHPIPE_TRACE_CACHE_MAX_BYTES or 2 GiB."""
    return dc.max_bytes_setting(TRACE_MAX_BYTES_ENV, DEFAULT_TRACE_MAX_BYTES)


def evict_traces(folder: str | Path | None = None, max_bytes: int | None = None,
                 keep: Path | None = None) -> int:
    """Evict the traces folder down to its budget (see `disk_cache.evict`); bytes removed."""
    root = Path(folder) if folder is not None else trace_cache_folder()
    budget = trace_max_bytes_setting() if max_bytes is None else max_bytes
    return dc.evict(root, budget, SUFFIX, keep=keep, legacy=_LEGACY_SUFFIXES)


def cached_trace(key: Mapping[str, Any], build: Callable[[], Trace], enabled: bool = True,
                 folder: str | Path | None = None, max_bytes: int | None = None) -> Trace:
    """`build()` (a synthetic `Trace`, a pure function of `key` and the trace code), read
    back memory-mapped when the traces folder has an intact entry for `key`, else built and
    stored; a trace read back has the built one's arrays, dtypes, meta, source and digests.

    `enabled=False` builds and touches no file, as does a key JSON cannot write (a
    generator parameter of another type: it has no stable name); an unwritable folder
    costs one warning."""
    if not enabled:
        return build()
    fk = {**dc.full_key(key, TRACE_SOURCES, TRACE_SCHEMA_VERSION), "_numpy": np.__version__}
    root = Path(folder) if folder is not None else trace_cache_folder()
    try:
        path = dc.entry_path(root, fk, SUFFIX)
    except (TypeError, ValueError):
        return build()
    trace = _read(path, fk)
    if trace is not None:
        return trace
    trace = build()
    budget = trace_max_bytes_setting() if max_bytes is None else max_bytes
    _write(root, path, fk, trace, budget)
    return trace


def _record_sha256(record: Mapping[str, Any], table_rows: Any, batch_size: Any,
                   meta: Any) -> str:
    """What guards the manifest's values the data files' CRCs do not cover."""
    body = {"cache": record, "table_rows": table_rows, "batch_size": batch_size, "meta": meta}
    return hashlib.sha256(dc.canonical(body).encode()).hexdigest()


def _write(root: Path, path: Path, fk: dict[str, Any], trace: Trace, max_bytes: int) -> None:
    index_dtype = np.dtype(trace.indices.dtype).str
    if (index_dtype not in INDEX_DTYPES or np.dtype(trace.table_rows.dtype).str != "<i8"
            or any(np.dtype(getattr(trace, n).dtype).str != "<i8"
                   for n in ("offsets", "batch_bounds"))):
        return  # the store would change a dtype: not cached
    size = sum(getattr(trace, n).nbytes for n in ("indices", "offsets", "batch_bounds"))
    if size > max_bytes:
        return  # would evict everything and itself
    try:  # plain JSON values, as they will read back (meta JSON cannot write: not cached)
        key = json.loads(dc.canonical(fk))
        meta = json.loads(dc.canonical(trace.meta))
    except (TypeError, ValueError):
        return
    record = {"key": key, "source": str(trace.source),
              "content_sha256": trace.content_sha256(), "fingerprint": trace.fingerprint()}
    rows = [int(x) for x in trace.table_rows]
    record["sha256"] = _record_sha256(record, rows, int(trace.batch_size), meta)
    stored = Trace(trace.table_rows, trace.indices, trace.offsets, trace.batch_bounds,
                   trace.batch_size, meta, trace.source)
    try:
        root.mkdir(parents=True, exist_ok=True)
        write_trace(stored, path, index_dtype=index_dtype, extra={"cache": record})
    except UserError as e:
        if not path.exists():  # a full disk (not another process publishing it first)
            dc.warn_folder(_WHAT, root, f"cannot write {path}: {e.message}")
        return
    except (OSError, ValueError) as e:
        dc.warn_folder(_WHAT, root, f"cannot write {path}: {e}")
        return
    evict_traces(root, max_bytes, keep=path)


def _read(path: Path, fk: dict[str, Any]) -> Trace | None:
    """The entry's trace (arrays memory-mapped read-only), or None when there is none; a
    damaged entry or one of another key is removed (one warning) and None returned."""
    if not path.exists():
        return None
    try:
        m = read_manifest(path)
        record = m.get("cache")
        if not isinstance(record, dict):
            raise _Damaged("no cache record")
        rows, batch_size, meta = m["table_rows"], m["batch_size"], m.get("meta", {})
        body = {k: v for k, v in record.items() if k != "sha256"}
        if record.get("sha256") != _record_sha256(body, rows, batch_size, meta):
            raise _Damaged("manifest checksum")
        if dc.canonical(record["key"]) != dc.canonical(fk):
            raise _Damaged("another key")
        stamp = _stat_stamp(path, data_files(m))
        trusted = stamp is not None and _still_verified(path, stamp)
        stored = read_trace(path, verify=not trusted, manifest=m)
        if stamp is not None and not trusted:
            _mark_verified(path, stamp)
        trace = Trace(np.asarray(rows, np.int64), np.asarray(stored.indices),
                      _as_array(stored.offsets), np.asarray(stored.batch_bounds),
                      int(batch_size), dict(meta), str(record["source"]))
        trace.with_digests(str(record["content_sha256"]), str(record["fingerprint"]))
    except UserError as e:
        return _damaged(path, e.message)
    except _Damaged as e:
        return _damaged(path, str(e))
    except (KeyError, TypeError, ValueError) as e:
        return _damaged(path, f"bad manifest: {e}")
    except OSError as e:
        dc.warn_folder(_WHAT, path.parent, f"cannot read {path}: {e}")
        return None
    dc.touch(path)  # recently used: evicted last
    return trace


def _as_array(offsets):
    """A version-1 store's mapped offsets as a plain ndarray view; compact ones as they are
    (`np.asarray` would compute all of them)."""
    return offsets if isinstance(offsets, BagOffsets) else np.asarray(offsets)


class _Damaged(Exception):
    pass


def _stat_stamp(path: Path, names: tuple[str, ...]) -> list[list[Any]] | None:
    """(name, size, mtime_ns, inode) of each data file `names`; None when one cannot be
    read (the store's own checks then name it)."""
    try:
        return [[n, st.st_size, st.st_mtime_ns, st.st_ino]
                for n in names for st in [(path / n).stat()]]
    except OSError:
        return None


def _still_verified(path: Path, stamp: list[list[Any]]) -> bool:
    try:
        return json.loads((path / _VERIFIED).read_text(encoding="utf-8")) == stamp
    except (OSError, ValueError):
        return False


def _mark_verified(path: Path, stamp: list[list[Any]]) -> None:
    """Record `stamp` after a CRC pass (best effort: an unwritable entry verifies each
    time); dropped again when a file is not strictly older than the record (racy)."""
    rec = path / _VERIFIED
    tmp = path / f"{_VERIFIED}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(stamp), encoding="utf-8")
        os.replace(tmp, rec)
        if any(mtime >= rec.stat().st_mtime_ns for _, _, mtime, _ in stamp):
            rec.unlink()
    except OSError:
        tmp.unlink(missing_ok=True)


def _damaged(path: Path, why: str) -> None:
    dc.warn(_WHAT, f"removed a damaged entry {path.name} ({why}); recomputing")
    dc.remove(path)
    return None
