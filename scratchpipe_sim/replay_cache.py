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
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import scratchpipe_sim
from scratchpipe_sim.errors import UserError

#: bump when the entry layout or the meaning of a stored column changes
SCHEMA_VERSION = 1
MAGIC = b"SPREPLAY\x01"
SUFFIX = ".spr"
#: default size budget of the folder (bytes); env SCRATCHPIPE_REPLAY_CACHE_MAX_BYTES overrides
DEFAULT_MAX_BYTES = 1 << 30
MAX_BYTES_ENV = "SCRATCHPIPE_REPLAY_CACHE_MAX_BYTES"
#: a writer's temporary file older than this (seconds) is left over from a crash
_STALE_TMP_S = 3600.0
_DIGEST = 32  # sha256 bytes at the end of an entry
_HASH_BLOCK = 1 << 24  # bytes hashed per step (bounded memory for memory-mapped traces)

Columns = dict[str, np.ndarray]
Extras = dict[str, int]


def cache_folder() -> Path:
    """`<user cache folder>/replays`: $SCRATCHPIPE_CACHE_DIR, else $XDG_CACHE_HOME/
    scratchpipe_sim, else ~/.cache/scratchpipe_sim (see `scratchpipe_sim.cache_dir`)."""
    return scratchpipe_sim.cache_dir() / "replays"


def max_bytes_setting() -> int:
    """The folder's byte budget: env SCRATCHPIPE_REPLAY_CACHE_MAX_BYTES or 1 GiB."""
    raw = os.environ.get(MAX_BYTES_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise UserError(f"expected a whole number of bytes >= 0, got {raw!r}",
                        source="environment", field=MAX_BYTES_ENV)
    return value


# -- keys -------------------------------------------------------------------------------------
_CODE_DIGEST: list[str] = []


def code_digest() -> str:
    """sha256 of the sources that produce counts (the policies and the trace chunking), so an
    edited policy never reads counts replayed by its previous code."""
    if not _CODE_DIGEST:
        root = Path(__file__).resolve().parent
        files = sorted((root / "policies").glob("*.py")) + [root / "traces" / "trace.py"]
        h = hashlib.sha256()
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        _CODE_DIGEST.append(h.hexdigest())
    return _CODE_DIGEST[0]


def full_key(key: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's key plus what every entry depends on: schema, package version, code."""
    return {**key, "_schema": SCHEMA_VERSION, "_version": scratchpipe_sim.__version__,
            "_code": code_digest()}


def _canonical(key: Mapping[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"replay cache key holds a {type(x).__name__}: {x!r}")


def key_digest(key: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of `full_key(key)`: the entry's file name."""
    return hashlib.sha256(_canonical(full_key(key)).encode()).hexdigest()


# -- trace fingerprint --------------------------------------------------------------------------
_FINGERPRINTS: dict[int, str] = {}


def trace_fingerprint(trace: Any) -> str:
    """sha256 over the trace's table rows, batch bounds, offsets and indices (dtype, shape and
    bytes, hashed in 16 MiB blocks). Remembered per trace object (traces are immutable)."""
    cached = _FINGERPRINTS.get(id(trace))
    if cached is not None:
        return cached
    h = hashlib.sha256()
    h.update(f"batch_size={int(trace.batch_size)};".encode())
    for name in ("table_rows", "batch_bounds", "offsets", "indices"):
        arr = getattr(trace, name)
        h.update(f"{name}:{np.dtype(arr.dtype).str}:{tuple(arr.shape)};".encode())
        _hash_array(h, arr)
    digest = h.hexdigest()
    _FINGERPRINTS[id(trace)] = digest
    weakref.finalize(trace, _FINGERPRINTS.pop, id(trace), None)
    return digest


def _hash_array(h: Any, arr: np.ndarray) -> None:
    flat = arr.reshape(-1)
    step = max(1, _HASH_BLOCK // max(1, flat.itemsize))
    for lo in range(0, len(flat), step):
        h.update(memoryview(np.ascontiguousarray(flat[lo : lo + step])).cast("B"))


# -- entries ------------------------------------------------------------------------------------
def _encode(key: dict[str, Any], cols: Columns, extra: Extras) -> bytes:
    arrays = [np.ascontiguousarray(cols[name], dtype="<i8") for name in cols]
    payload = b"".join(a.tobytes() for a in arrays)
    header = {"key": key, "columns": [[n, len(a)] for n, a in zip(cols, arrays, strict=True)],
              "extra": {k: int(v) for k, v in extra.items()}}
    head = _canonical(header).encode()
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
        extra = {str(k): int(v) for k, v in header["extra"].items()}
        stored_key = header["key"]
    except (ValueError, KeyError, TypeError) as e:
        raise _Corrupt(f"bad header: {e}") from None
    payload = data[start + hlen :]
    if len(payload) != 8 * sum(k for _, k in names):
        raise _Corrupt("payload length")
    if _canonical(stored_key) != _canonical(key):
        raise _Corrupt("another key")
    flat = np.frombuffer(payload, dtype="<i8")
    cols, pos = {}, 0
    for name, k in names:
        cols[name] = flat[pos : pos + k].astype(np.int64)  # a writable copy
        pos += k
    return cols, extra


def _warn(msg: str) -> None:
    print(f"scratchpipe-sim: replay cache: {msg}", file=sys.stderr)


def cached_columns(key: Mapping[str, Any], compute: Callable[[], tuple[Columns, Extras]],
                   enabled: bool = True, folder: str | Path | None = None,
                   max_bytes: int | None = None) -> tuple[Columns, Extras]:
    """`compute()` (int64 columns by name, int extras), read from the cache when an entry for
    `key` exists and is intact, else computed and stored.

    `key`: JSON-serializable mapping naming everything the result depends on besides code
    (e.g. trace fingerprint, policy, capacity, parameters); schema, package version and a
    digest of the policy sources are added. `enabled=False` computes and touches no file.
    A cache folder that cannot be written only costs the saving (one warning), never the run.
    """
    if not enabled:
        return compute()
    fk = full_key(key)
    digest = hashlib.sha256(_canonical(fk).encode()).hexdigest()
    root = Path(folder) if folder is not None else cache_folder()
    path = root / f"{digest}{SUFFIX}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = None
    except OSError as e:
        _warn(f"cannot read {path}: {e}")
        data = None
    if data is not None:
        try:
            cols, extra = _decode(data, fk)
        except _Corrupt as e:
            _warn(f"removed a damaged entry {path.name} ({e}); recomputing")
            _remove(path)
        else:
            try:
                os.utime(path)  # recently used: evicted last
            except OSError:
                pass
            return cols, extra
    cols, extra = compute()
    cols = {k: np.asarray(v, np.int64) for k, v in cols.items()}
    extra = {k: int(v) for k, v in extra.items()}
    _store(root, path, _encode(fk, cols, extra),
           max_bytes_setting() if max_bytes is None else max_bytes)
    return cols, extra


def _store(root: Path, path: Path, blob: bytes, max_bytes: int) -> None:
    if len(blob) > max_bytes:
        return  # would evict everything and itself
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=SUFFIX + ".part")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        _warn(f"cannot write {path}: {e}")
        return
    finally:
        if tmp is not None:
            _remove(Path(tmp))
    evict(root, max_bytes, keep=path)


def evict(folder: str | Path | None = None, max_bytes: int | None = None,
          keep: Path | None = None) -> int:
    """Remove the least recently used entries until the folder holds <= `max_bytes`; also
    writers' temporary files older than an hour. Returns the bytes removed."""
    root = Path(folder) if folder is not None else cache_folder()
    budget = max_bytes_setting() if max_bytes is None else max_bytes
    entries, removed, now = [], 0, time.time()
    try:
        listing = list(os.scandir(root))
    except OSError:
        return 0
    for e in listing:
        try:
            st = e.stat()
        except OSError:
            continue  # removed by another worker meanwhile
        if e.name.startswith(".tmp-"):
            if now - st.st_mtime > _STALE_TMP_S:
                removed += st.st_size if _remove(Path(e.path)) else 0
        elif e.name.endswith(SUFFIX):
            entries.append((st.st_mtime, e.name, st.st_size, Path(e.path)))
    total = sum(size for _, _, size, _ in entries)
    for _, _, size, p in sorted(entries):
        if total <= budget:
            break
        if keep is not None and p == keep:
            continue
        if _remove(p):
            removed += size
        total -= size
    return removed


def _remove(p: Path) -> bool:
    try:
        p.unlink()
        return True
    except OSError:
        return False


# -- policy replays -------------------------------------------------------------------------------
def policy_key(trace: Any, policy: str, capacity: int, params: Mapping[str, Any]) -> dict:
    """The key of one policy replay: trace fingerprint, policy, capacity and every parameter
    (defaults filled in, so `ways=32` and no `ways` share an entry)."""
    from scratchpipe_sim.policies import POLICIES

    full = POLICIES.get(policy, field="policy").check_params(dict(params))
    return {"kind": "policy-columns", "trace": trace_fingerprint(trace), "policy": policy,
            "capacity": int(capacity), "params": full}


def policy_columns(trace: Any, policy: str, capacity: int, enabled: bool = True,
                   **params: Any) -> tuple[Columns, Extras]:
    """Per-batch columns (`engine.COUNTERS` + the policy's `batch_columns()`) and
    `extra_totals()` of `policy` over `trace`, replayed once and then read from the cache."""
    from scratchpipe_sim.policies.engine import make_policy, replay_columns

    def compute() -> tuple[Columns, Extras]:
        return replay_columns(trace, make_policy(policy, capacity, trace.total_rows, **params))

    return cached_columns(policy_key(trace, policy, capacity, params), compute, enabled)
