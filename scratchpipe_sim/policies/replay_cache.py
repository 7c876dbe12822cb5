"""A content-addressed on-disk cache of policy replays (per-batch count columns).

Why: a policy's counts depend only on the trace's content, the policy, its capacity and
parameters, and the code. A sweep over hardware parameters, the designs of one run that
share a policy, and a rerun of the same config all replay the very same counts; replaying
costs seconds to minutes, reading an entry milliseconds.

Entry = one file `<sha256 of the key>.spr` in `cache_folder()`:

    MAGIC | u64 header length | JSON header | payload (int64 little-endian columns) | sha256

The header holds the full key (checked on read: a digest collision or a bug never returns
another key's counts), the column names and lengths and the extras; the trailing sha256
covers everything before it. A truncated or corrupted entry fails the check, is removed and
recomputed.

Concurrency: a writer writes a private temporary file in the same folder and renames it over
the entry (`os.replace`, atomic on POSIX), so readers see a whole old entry, a whole new one
or none, and two workers writing the same key leave one valid entry. Size: after each write
the oldest entries (by mtime; a hit touches its entry) are removed beyond `max_bytes`.
What this cache shares with the trace cache (folder, budget, keys, atomic write, eviction)
is `traces.disk_cache`; the trace fingerprint a key names is `Trace.fingerprint()`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.traces import disk_cache as dc
from scratchpipe_sim.traces.csr_trace import Trace

#: bump when the entry layout or the meaning of a stored column changes
SCHEMA_VERSION = 2  # 2: extras as ordered pairs (their order is the result columns' order)
MAGIC = b"SPREPLAY\x01"
SUFFIX = ".spr"
#: default size budget of the folder (bytes); env SCRATCHPIPE_REPLAY_CACHE_MAX_BYTES overrides
DEFAULT_MAX_BYTES = 1 << 30
MAX_BYTES_ENV = "SCRATCHPIPE_REPLAY_CACHE_MAX_BYTES"
_DIGEST = 32  # sha256 bytes at the end of an entry
_WHAT = "replay cache"

Columns = dict[str, np.ndarray]
Extras = dict[str, int]


def cache_folder() -> Path:
    """`<user cache folder>/replays` (see `disk_cache.cache_subfolder`)."""
    return dc.cache_subfolder("replays")


def max_bytes_setting(env: str = MAX_BYTES_ENV, default: int = DEFAULT_MAX_BYTES) -> int:
    """The replays folder's byte budget: env SCRATCHPIPE_REPLAY_CACHE_MAX_BYTES or 1 GiB."""
    return dc.max_bytes_setting(env, default)


# -- keys -------------------------------------------------------------------------------------
#: the sources whose code produces policy counts: the policies, and the trace chunking and
#: fingerprint (`traces/csr_trace.py`)
POLICY_SOURCES = ("policies/*.py", "traces/csr_trace.py")


def code_digest(sources: tuple[str, ...] = POLICY_SOURCES) -> str:
    """sha256 of the package sources that produce an entry (`disk_cache.code_digest`)."""
    return dc.code_digest(sources)


def full_key(key: Mapping[str, Any], sources: tuple[str, ...] = POLICY_SOURCES
             ) -> dict[str, Any]:
    """The caller's key plus what every entry depends on: schema, package version, code."""
    return dc.full_key(key, sources, SCHEMA_VERSION)


def key_digest(key: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of `full_key(key)`: the entry's file name."""
    return dc.entry_path(Path(), full_key(key), "").name


# -- entries ------------------------------------------------------------------------------------
def _encode(key: dict[str, Any], cols: Columns, extra: Extras) -> bytes:
    arrays = [np.ascontiguousarray(cols[name], dtype="<i8") for name in cols]
    payload = b"".join(a.tobytes() for a in arrays)
    header = {"key": key, "columns": [[n, len(a)] for n, a in zip(cols, arrays, strict=True)],
              "extra": [[k, int(v)] for k, v in extra.items()]}  # pairs: order kept
    head = dc.canonical(header).encode()
    body = MAGIC + struct.pack("<Q", len(head)) + head + payload
    return body + hashlib.sha256(body).digest()


class _Corrupt(Exception):
    pass


def _decode(data: bytes, key: dict[str, Any]) -> tuple[Columns, Extras]:
    """Columns and extras of an entry; `_Corrupt` unless it is whole and holds `key`."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8 + _DIGEST:
        raise _Corrupt("bad magic or truncated")
    data, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(data).digest() != digest:
        raise _Corrupt("checksum")
    (hlen,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    if start + hlen > len(data):
        raise _Corrupt("truncated header")
    try:
        header = json.loads(data[start : start + hlen])
        names = [(str(n), int(k)) for n, k in header["columns"]]
        extra = {str(k): int(v) for k, v in header["extra"]}
        stored_key = header["key"]
    except (ValueError, KeyError, TypeError) as e:
        raise _Corrupt(f"bad header: {e}") from None
    payload = data[start + hlen :]
    if len(payload) != 8 * sum(k for _, k in names):
        raise _Corrupt("payload length")
    if dc.canonical(stored_key) != dc.canonical(key):
        raise _Corrupt("another key")
    flat = np.frombuffer(payload, dtype="<i8")
    cols, pos = {}, 0
    for name, k in names:
        cols[name] = flat[pos : pos + k].astype(np.int64)  # a writable copy
        pos += k
    return cols, extra


class NotCached(Exception):
    """Raised by `cached_columns` inside `lookup_only()` when the entry is not there."""


#: set by `lookup_only`: a miss raises NotCached instead of computing
_LOOKUP_ONLY = False


@contextlib.contextmanager
def lookup_only() -> Iterator[None]:
    """Within: `cached_columns` returns what the cache holds and raises NotCached on a miss
    (`run --jobs` reads every cached pass before forking workers for the others)."""
    global _LOOKUP_ONLY
    before, _LOOKUP_ONLY = _LOOKUP_ONLY, True
    try:
        yield
    finally:
        _LOOKUP_ONLY = before


def cached_columns(key: Mapping[str, Any], compute: Callable[[], tuple[Columns, Extras]],
                   enabled: bool = True, folder: str | Path | None = None,
                   max_bytes: int | None = None, sources: tuple[str, ...] = POLICY_SOURCES
                   ) -> tuple[Columns, Extras]:
    """`compute()` (int64 columns by name, int extras), read from the cache when an entry for
    `key` exists and is intact, else computed and stored.

    `key`: JSON-serializable mapping naming everything the result depends on besides code
    (e.g. trace fingerprint, policy, capacity, parameters); schema, package version and a
    digest of `sources` (package-relative globs of the code computing it) are added.
    `enabled=False` computes and touches no file.
    A cache folder that cannot be written only costs the saving (one warning), never the run.
    """
    if not enabled:
        return compute()
    fk = full_key(key, sources)
    root = Path(folder) if folder is not None else cache_folder()
    path = dc.entry_path(root, fk, SUFFIX)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no entry (or no folder) there
        data = None
    except OSError as e:
        dc.warn_folder(_WHAT, root, f"cannot read {path}: {e}")
        data = None
    if data is not None:
        try:
            cols, extra = _decode(data, fk)
        except _Corrupt as e:
            dc.warn(_WHAT, f"removed a damaged entry {path.name} ({e}); recomputing")
            dc.remove(path)
        else:
            dc.touch(path)  # recently used: evicted last
            return cols, extra
    if _LOOKUP_ONLY:
        raise NotCached(path.name)
    cols, extra = compute()
    cols = {k: np.asarray(v, np.int64) for k, v in cols.items()}
    extra = {k: int(v) for k, v in extra.items()}
    _store(root, path, _encode(fk, cols, extra),
           max_bytes_setting() if max_bytes is None else max_bytes)
    return cols, extra


def _store(root: Path, path: Path, blob: bytes, max_bytes: int) -> None:
    if len(blob) > max_bytes:
        return  # would evict everything and itself
    if dc.write_file(root, path, SUFFIX, lambda f: f.write(blob), _WHAT):
        evict(root, max_bytes, keep=path)


def evict(folder: str | Path | None = None, max_bytes: int | None = None,
          keep: Path | None = None) -> int:
    """Remove the least recently used entries until the folder holds <= `max_bytes`; also
    writers' temporary files older than an hour. Returns the bytes removed."""
    root = Path(folder) if folder is not None else cache_folder()
    budget = max_bytes_setting() if max_bytes is None else max_bytes
    return dc.evict(root, budget, SUFFIX, keep=keep)


# -- policy replays -------------------------------------------------------------------------------
def policy_key(trace: Trace, policy: str, capacity: int, params: Mapping[str, Any]) -> dict:
    """The key of one policy replay: trace fingerprint, policy, capacity and every parameter
    (defaults filled in, so `ways=32` and no `ways` share an entry)."""
    from scratchpipe_sim.policies import POLICIES

    full = POLICIES.get(policy, field="policy").check_params(dict(params))
    return {"kind": "policy-columns", "trace": trace.fingerprint(), "policy": policy,
            "capacity": int(capacity), "params": full}


def policy_columns(trace: Trace, policy: str, capacity: int, enabled: bool = True,
                   **params: Any) -> tuple[Columns, Extras]:
    """Per-batch columns (`engine.COUNTERS` + the policy's `batch_columns()`) and
    `extra_totals()` of `policy` over `trace`, replayed once and then read from the cache."""
    from scratchpipe_sim.policies.engine import make_policy, replay_columns

    def compute() -> tuple[Columns, Extras]:
        return replay_columns(trace, make_policy(policy, capacity, trace.total_rows, **params))

    return cached_columns(policy_key(trace, policy, capacity, params), compute, enabled)
