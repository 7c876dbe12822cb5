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

import contextlib
import dataclasses
import hashlib
import json
import os
import struct
import sys
import tempfile
import time
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

import scratchpipe_sim
from scratchpipe_sim.safety.jsonout import canonical_json, canonical_sha256

#: bump when the entry layout or the meaning of a stored column changes
SCHEMA_VERSION = 2  # 2: extras as ordered pairs (their order is the result columns' order)
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


def max_bytes_setting(env: str = MAX_BYTES_ENV, default: int = DEFAULT_MAX_BYTES) -> int:
    """A folder's byte budget: env `env` (SCRATCHPIPE_REPLAY_CACHE_MAX_BYTES for replays),
    else `default` (1 GiB for replays)."""
    from scratchpipe_sim.safety.limits import env_number  # noqa: PLC0415

    return int(env_number(env, default, minimum=0))


# -- keys -------------------------------------------------------------------------------------
#: the sources whose code produces policy counts (the policies and the trace chunking)
POLICY_SOURCES = ("policies/*.py", "traces/trace.py")
_CODE_DIGESTS: dict[tuple[str, ...], str] = {}


def code_digest(sources: tuple[str, ...] = POLICY_SOURCES) -> str:
    """sha256 of the package sources (globs relative to the package) that produce an entry,
    so edited code never reads what its previous version computed."""
    if sources not in _CODE_DIGESTS:
        root = Path(__file__).resolve().parents[1]  # the scratchpipe_sim package
        files = sorted({f for pattern in sources for f in root.glob(pattern)})
        h = hashlib.sha256()
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
        _CODE_DIGESTS[sources] = h.hexdigest()
    return _CODE_DIGESTS[sources]


def full_key(key: Mapping[str, Any], sources: tuple[str, ...] = POLICY_SOURCES
             ) -> dict[str, Any]:
    """The caller's key plus what every entry depends on: schema, package version, code."""
    return {**key, "_schema": SCHEMA_VERSION, "_version": scratchpipe_sim.__version__,
            "_code": code_digest(sources)}


def _entry_path(root: Path, fk: Mapping[str, Any], suffix: str) -> Path:
    """Where the entry of full key `fk` lives: named by the sha256 of its canonical JSON."""
    return root / f"{canonical_sha256(fk, strict=True)}{suffix}"


def _canonical(key: Mapping[str, Any]) -> str:
    """The strict canonical JSON of a key or header (numpy scalars and paths besides plain
    types; anything else raises TypeError: see `safety.jsonout.canonical_json`)."""
    return canonical_json(key, strict=True)


def key_digest(key: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of `full_key(key)`: the entry's file name."""
    return canonical_sha256(full_key(key), strict=True)


# -- trace fingerprint --------------------------------------------------------------------------
#: per trace object (traces are immutable): content sha256, fingerprint, and for a slice made
#: by `slice_trace` its parent and bounds (a slice's fingerprint derives from its parent's)
_CONTENT: dict[int, str] = {}
_FINGERPRINTS: dict[int, str] = {}
_SLICES: dict[int, tuple[Any, int, int]] = {}
_ARRAYS = ("table_rows", "indices", "offsets", "batch_bounds")


def _remember(memo: dict[int, Any], trace: Any, value: Any) -> None:
    if id(trace) not in memo:
        weakref.finalize(trace, memo.pop, id(trace), None)
    memo[id(trace)] = value


def content_sha256(trace: Any) -> str:
    """sha256 of the trace's table rows, indices, offsets and batch bounds, each as
    little-endian int64, in that order (hashed in 16 MiB blocks; remembered per trace
    object): what `run` writes as trace.sha256 for a trace not read from a store."""
    cached = _CONTENT.get(id(trace))
    if cached is None:
        h = hashlib.sha256()
        for name in _ARRAYS:
            _hash_array(h, getattr(trace, name))
        cached = h.hexdigest()
        _remember(_CONTENT, trace, cached)
    return cached


def with_meta(trace: Any, meta: dict[str, Any]) -> Any:
    """`trace` with another meta dict (its arrays shared), keeping the digests already made
    of it: neither `content_sha256` nor `trace_fingerprint` reads meta, so the new object
    is never hashed again (a warm `run` hashed its 100 MB trace for nothing)."""
    new = dataclasses.replace(trace, meta=meta)
    for memo in (_CONTENT, _FINGERPRINTS):
        if id(trace) in memo:
            _remember(memo, new, memo[id(trace)])
    return new


def trace_sha256(trace: Any) -> str:
    """The checksum `run` writes as trace.sha256: the one a trace store recorded (sha256 of
    its files) when the trace was read from one, else `content_sha256` (never hashed twice
    in one process)."""
    if "sha256" in trace.meta:
        return str(trace.meta["sha256"])
    return content_sha256(trace)


def trace_fingerprint(trace: Any) -> str:
    """What a trace's replays depend on: batch size, array dtypes and shapes and
    `content_sha256` (never a store's unverified manifest checksum). A slice made by
    `slice_trace` derives its fingerprint from its parent's and its bounds (no hashing)."""
    cached = _FINGERPRINTS.get(id(trace))
    if cached is not None:
        return cached
    parent = _SLICES.get(id(trace))
    h = hashlib.sha256()
    if parent is not None:
        base, start, stop = parent
        h.update(f"slice:{trace_fingerprint(base)}:{start}:{stop}".encode())
    else:
        h.update(f"batch_size={int(trace.batch_size)};".encode())
        for name in _ARRAYS:
            arr = getattr(trace, name)
            h.update(f"{name}:{np.dtype(arr.dtype).str}:{tuple(arr.shape)};".encode())
        h.update(content_sha256(trace).encode())
    digest = h.hexdigest()
    _remember(_FINGERPRINTS, trace, digest)
    return digest


#: slices made by `slice_trace`, per parent trace object (the parent is kept in the entry, so
#: its id cannot be reused while the entry exists): every point of a sweep slices its shared
#: trace the same way, and a slice rebases its offsets (a pass over them). At most
#: _SLICE_MEMO_PARENTS parents are kept; `forget_slices()` drops them all.
_SLICE_MEMO: dict[int, tuple[Any, dict[tuple[int, int], Any]]] = {}
_SLICE_MEMO_PARENTS = 2


def slice_trace(trace: Any, start: int, stop: int) -> Any:
    """`trace.slice(start, stop)`, whose fingerprint is derived from `trace`'s (so the
    slices a run replays are never hashed again); the same object for the same parent and
    bounds (traces are immutable)."""
    start, stop = int(start), int(stop)
    entry = _SLICE_MEMO.get(id(trace))
    if entry is None or entry[0] is not trace:
        if len(_SLICE_MEMO) >= _SLICE_MEMO_PARENTS:
            _SLICE_MEMO.clear()
        entry = _SLICE_MEMO[id(trace)] = (trace, {})
    part = entry[1].get((start, stop))
    if part is None:
        part = trace.slice(start, stop)
        if part is not trace:
            _remember(_SLICES, part, (trace, start, stop))
        entry[1][start, stop] = part
    return part


def forget_slices() -> None:
    """Drop the remembered slices (and the parents they keep alive): a sweep worker calls it
    when it moves to another trace, so an old trace's memory is freed."""
    _SLICE_MEMO.clear()


def _hash_array(h: Any, arr: np.ndarray) -> None:
    flat = np.asarray(arr).reshape(-1)
    step = max(1, _HASH_BLOCK // 8)
    for lo in range(0, len(flat), step):
        block = np.ascontiguousarray(flat[lo : lo + step], dtype="<i8")
        h.update(memoryview(block).cast("B"))


# -- entries ------------------------------------------------------------------------------------
def _encode(key: dict[str, Any], cols: Columns, extra: Extras) -> bytes:
    arrays = [np.ascontiguousarray(cols[name], dtype="<i8") for name in cols]
    payload = b"".join(a.tobytes() for a in arrays)
    header = {"key": key, "columns": [[n, len(a)] for n, a in zip(cols, arrays, strict=True)],
              "extra": [[k, int(v)] for k, v in extra.items()]}  # pairs: order kept
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
        extra = {str(k): int(v) for k, v in header["extra"]}
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
    path = _entry_path(root, fk, SUFFIX)
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
    _write_entry(root, path, SUFFIX, max_bytes, lambda f: f.write(blob))


def _write_entry(root: Path, path: Path, suffix: str, max_bytes: int,
                 write: Callable[[BinaryIO], object]) -> None:
    """Write an entry atomically (a temporary file in the folder, then os.replace: a reader
    sees the old entry or the whole new one, and concurrent writers leave one valid
    entry), then evict down to `max_bytes`. A failure to write is a warning, not an error:
    the cache is an optimisation."""
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=suffix + ".part")
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        _warn(f"cannot write {path}: {e}")
        return
    finally:
        if tmp is not None:
            _remove(Path(tmp))
    evict(root, max_bytes, keep=path, suffix=suffix)


def evict(folder: str | Path | None = None, max_bytes: int | None = None,
          keep: Path | None = None, suffix: str = SUFFIX) -> int:
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
        elif e.name.endswith(suffix):
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


# -- generated traces -----------------------------------------------------------------------------
#: the sources a generated trace depends on (generators, distributions, the Trace type)
TRACE_SOURCES = ("traces/*.py",)
TRACE_MAGIC = b"SPTRACE\x01"
TRACE_SUFFIX = ".spt"
#: default size budget of the traces folder (bytes); env SCRATCHPIPE_TRACE_CACHE_MAX_BYTES
DEFAULT_TRACE_MAX_BYTES = 2 << 30
TRACE_MAX_BYTES_ENV = "SCRATCHPIPE_TRACE_CACHE_MAX_BYTES"
_ALIGN = 64


def trace_cache_folder() -> Path:
    """`<user cache folder>/traces` (beside `replays`, with its own size budget)."""
    return scratchpipe_sim.cache_dir() / "traces"


def trace_max_bytes_setting() -> int:
    """The traces folder's byte budget: env SCRATCHPIPE_TRACE_CACHE_MAX_BYTES or 2 GiB."""
    return max_bytes_setting(TRACE_MAX_BYTES_ENV, DEFAULT_TRACE_MAX_BYTES)


def cached_trace(key: Mapping[str, Any], build: Callable[[], Any], enabled: bool = True,
                 folder: str | Path | None = None, max_bytes: int | None = None) -> Any:
    """`build()` (a synthetic `Trace`, a pure function of `key` and the trace code), read
    back memory-mapped when the traces folder has an intact entry for `key`, else built and
    stored. Generating the quickstart's trace costs seconds; mapping its entry and checking
    it (CRC-32 of the arrays, sha256 of the header) a fraction of that.

    The entry also records the trace's `content_sha256` and `trace_fingerprint`, so a trace
    read back is never hashed again (its replays and `run`'s trace.sha256 use them).
    `enabled=False` builds and touches no file, as does a key JSON cannot write (a
    generator parameter of another type: it has no stable name); an unwritable folder
    costs one warning."""
    if not enabled:
        return build()
    fk = {**full_key(key, TRACE_SOURCES), "_numpy": np.__version__}
    root = Path(folder) if folder is not None else trace_cache_folder()
    try:
        path = _entry_path(root, fk, TRACE_SUFFIX)
    except (TypeError, ValueError):
        return build()
    trace = _read_trace(path, fk)
    if trace is not None:
        return trace
    trace = build()
    budget = trace_max_bytes_setting() if max_bytes is None else max_bytes
    _write_trace(root, path, fk, trace, budget)
    return trace


def _crc(arr: np.ndarray) -> int:
    crc, flat = 0, arr.reshape(-1).view(np.uint8)
    for lo in range(0, len(flat), _HASH_BLOCK):
        crc = zlib.crc32(memoryview(flat[lo : lo + _HASH_BLOCK]), crc)
    return crc


def _write_trace(root: Path, path: Path, fk: dict[str, Any], trace: Any,
                 max_bytes: int) -> None:
    arrays = [np.ascontiguousarray(getattr(trace, n)) for n in _ARRAYS]
    layout, pos = [], 0
    for name, a in zip(_ARRAYS, arrays, strict=True):
        layout.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape),
                       "offset": pos, "crc32": _crc(a)})
        pos += -(-a.nbytes // _ALIGN) * _ALIGN
    header = {"key": fk, "arrays": layout, "payload_bytes": pos,
              "batch_size": int(trace.batch_size), "meta": trace.meta,
              "source": str(trace.source), "content_sha256": content_sha256(trace),
              "fingerprint": trace_fingerprint(trace)}
    try:
        head = _canonical(header).encode()
    except TypeError:
        return  # meta holds something JSON cannot write: not cached
    prefix = TRACE_MAGIC + struct.pack("<Q", len(head)) + head + hashlib.sha256(head).digest()
    start = -(-len(prefix) // _ALIGN) * _ALIGN
    if start + pos > max_bytes:
        return

    def write(f: BinaryIO) -> None:
        f.write(prefix + bytes(start - len(prefix)))
        for spec, a in zip(layout, arrays, strict=True):
            f.seek(start + spec["offset"])
            f.write(memoryview(a.reshape(-1).view(np.uint8)))
        f.truncate(start + pos)

    _write_entry(root, path, TRACE_SUFFIX, max_bytes, write)


def _read_trace(path: Path, fk: dict[str, Any]) -> Any:
    """The entry's trace (arrays memory-mapped read-only), or None when there is none; a
    damaged entry or one of another key is removed (one warning) and None returned."""
    from scratchpipe_sim.traces.trace import Trace

    try:
        with open(path, "rb") as f:
            first = f.read(len(TRACE_MAGIC) + 8)
            if len(first) < len(TRACE_MAGIC) + 8 or not first.startswith(TRACE_MAGIC):
                raise _Corrupt("bad magic or truncated")
            (hlen,) = struct.unpack_from("<Q", first, len(TRACE_MAGIC))
            head, digest = f.read(hlen), f.read(_DIGEST)
            used = len(TRACE_MAGIC) + 8 + hlen + _DIGEST
            pad = f.read(-(-used // _ALIGN) * _ALIGN - used)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn(f"cannot read {path}: {e}")
        return None
    except _Corrupt as e:
        return _damaged(path, e)
    try:
        if len(head) != hlen or hashlib.sha256(head).digest() != digest:
            raise _Corrupt("header checksum")
        if pad.strip(b"\0"):
            raise _Corrupt("padding")
        try:
            header = json.loads(head)
            if _canonical(header["key"]) != _canonical(fk):
                raise _Corrupt("another key")
            start = -(-used // _ALIGN) * _ALIGN
            if size != start + int(header["payload_bytes"]):
                raise _Corrupt("truncated payload")
            payload = int(header["payload_bytes"])
            raw = (np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(payload,))
                   if payload else np.zeros(0, np.uint8))
            arrays, pos = {}, 0
            for spec in header["arrays"]:
                dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
                lo = int(spec["offset"])
                hi = lo + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if lo < pos or hi > payload or raw[pos:lo].any():
                    raise _Corrupt("layout or padding")
                a = np.asarray(raw[lo:hi]).view(dtype).reshape(shape)
                if _crc(a) != int(spec["crc32"]):
                    raise _Corrupt(f"{spec['name']} checksum")
                arrays[spec["name"]], pos = a, hi
            if raw[pos:].any():
                raise _Corrupt("padding")
            trace = Trace(arrays["table_rows"], arrays["indices"], arrays["offsets"],
                          arrays["batch_bounds"], int(header["batch_size"]),
                          dict(header["meta"]), str(header["source"]))
            content, fingerprint = str(header["content_sha256"]), str(header["fingerprint"])
        except (ValueError, KeyError, TypeError) as e:
            raise _Corrupt(f"bad header: {e}") from None
    except _Corrupt as e:
        return _damaged(path, e)
    _remember(_CONTENT, trace, content)
    _remember(_FINGERPRINTS, trace, fingerprint)
    try:
        os.utime(path)  # recently used: evicted last
    except OSError:
        pass
    return trace


def _damaged(path: Path, e: Exception) -> None:
    _warn(f"removed a damaged entry {path.name} ({e}); recomputing")
    _remove(path)
    return None
