"""The project's on-disk trace format: a folder `NAME.sptrace/` that memory-maps.

    manifest.json      format, version, table_rows, batch_size, counts, dtypes, sha256,
                       crc32 (of each .bin file), offsets (their encoding), meta
    indices.bin        row ids (uint32 when every table fits, else int64), raw little-endian
    batch_bounds.bin   int64 bag index where each batch starts (num_batches + 1)
    the bag offsets (num_bags + 1 of them), by `offsets.encoding` (version 2):
      constant         no file: every bag holds `offsets.bag_length` ids (Criteo: 1)
      u32-marks        offsets_u32.bin (uint32, each offset relative to its block's start)
                       and offset_marks.bin (int64, one per block of 65,536 bags)
    version 1 (still read): offsets.bin, int64 bag offsets

Why the encodings: version 1's int64 offsets were twice the bytes of the ids at pooling 1,
so a Criteo-Terabyte day (~4.7 B lookups) took ~57 GB instead of ~19 GB (`bag_offsets.py`).
The writer streams: it stays `constant` while every bag has the first bag's length and
switches to u32-marks (writing the offsets so far) at the first bag that does not.

Raw arrays (not .npy) so `TraceWriter` can append chunk by chunk without knowing the final
length; the writer builds in a temporary sibling folder and renames it into place only when
complete, so a crash never leaves a half-written trace under the final name. Reading maps the
files (`np.memmap`), so a trace larger than RAM streams with bounded memory. The manifest's
CRC-32 of each file (computed while writing, so it costs no extra pass) lets a reader
check the data (`read_trace(path, verify=True)`, `verify_store`) without hashing the files
with sha256; a store written before it was added has none and is not checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety.atomic_files import default_dir_mode
from scratchpipe_sim.safety.paths import input_file
from scratchpipe_sim.traces._pages import release
from scratchpipe_sim.traces.bag_offsets import ENCODINGS, MARK_BAGS, BagOffsets, encode_u32
from scratchpipe_sim.traces.csr_trace import Trace

FORMAT = "scratchpipe-trace"
#: what the writer writes (2: compact offsets); READ_VERSIONS are read
VERSION = 2
READ_VERSIONS = (1, 2)
SUFFIX = ".sptrace"
#: every data file a store of any version may hold, in checksum order
DATA_FILES = ("indices.bin", "offsets.bin", "offsets_u32.bin", "offset_marks.bin",
              "batch_bounds.bin")
#: the index dtypes TraceWriter writes (raw little-endian integers)
INDEX_DTYPES = ("<u4", "<i8")


def index_dtype_for(table_rows) -> np.dtype:
    """The narrowest of `INDEX_DTYPES` that holds every row id of tables of `table_rows`
    rows (uint32 up to 2^32 rows a table): what a store writes, and what a generated trace
    holds in memory, so both feed the kernels the same array type."""
    fits = int(np.max(np.asarray(table_rows, np.int64), initial=0)) <= 2**32
    return np.dtype(INDEX_DTYPES[0] if fits else INDEX_DTYPES[1])


def store_nbytes(num_indices: int, index_itemsize: int, num_bags: int, num_batches: int,
                 constant_bags: bool) -> int:
    """Bytes of a store's data files as `TraceWriter` writes them: the ids, the batch
    bounds and, unless every bag holds the same number of ids, 4 bytes an offset plus one
    int64 mark per block."""
    offsets = 0 if constant_bags else 4 * (num_bags + 1) + 8 * (num_bags // MARK_BAGS + 1)
    return num_indices * index_itemsize + 8 * (num_batches + 1) + offsets


def data_files(manifest: dict) -> tuple[str, ...]:
    """The data files of a store with this (checked) manifest, in checksum order."""
    if manifest.get("version", 1) < 2:
        names = {"indices.bin", "offsets.bin", "batch_bounds.bin"}
    elif manifest.get("offsets", {}).get("encoding") == "constant":
        names = {"indices.bin", "batch_bounds.bin"}
    else:
        names = {"indices.bin", "offsets_u32.bin", "offset_marks.bin", "batch_bounds.bin"}
    return tuple(n for n in DATA_FILES if n in names)


def is_store(path: str | os.PathLike) -> bool:
    return (Path(path) / "manifest.json").is_file()


class TraceWriter:
    """Append mini-batches to a new `.sptrace` folder; `close()` publishes it atomically.

    Use as a context manager; on an exception nothing is published.
    """

    def __init__(self, path: str | os.PathLike, table_rows, batch_size: int,
                 meta: dict | None = None, overwrite: bool = False,
                 index_dtype: str | None = None, extra: dict | None = None):
        """`index_dtype`: one of `INDEX_DTYPES` (default: uint32 when every table fits,
        else int64); `extra`: more manifest keys (e.g. the trace cache's record)."""
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise UserError("already exists; refusing to overwrite", source=str(self.path))
        self.table_rows = np.asarray(table_rows, np.int64)
        self.batch_size = int(batch_size)
        self.meta = dict(meta or {})
        self.overwrite = overwrite
        if index_dtype is None:
            index_dtype = index_dtype_for(self.table_rows)
        if np.dtype(index_dtype).str not in INDEX_DTYPES:
            raise ValueError(f"index dtype {index_dtype}: expected one of {INDEX_DTYPES}")
        self.index_dtype = np.dtype(index_dtype)
        self.extra = dict(extra or {})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=self.path.name + ".", suffix=".tmp",
                                          dir=self.path.parent))
        os.chmod(self._tmp, default_dir_mode())  # mkdtemp's 0700 would hide it from the group
        self._f = {name: open(self._tmp / name, "wb")
                   for name in ("indices.bin", "batch_bounds.bin")}
        self._num_indices = 0
        self._num_bags = 0
        self._num_batches = 0
        self._crc = dict.fromkeys(self._f, 0)
        #: every bag so far holds this many ids (None: no bag yet); u32-marks once one does not
        self._bag_length: int | None = None
        self._marks: list[int] = []  # u32-marks: the offset at each block start
        self._write("batch_bounds.bin", np.zeros(1, "<i8"))

    def _write(self, name: str, arr: np.ndarray) -> None:
        """Append `arr`'s bytes to file `name`, its CRC-32 updated on the way (in blocks:
        no bytes copy of a large array)."""
        flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        try:
            for lo in range(0, len(flat), _CRC_BLOCK):
                block = memoryview(flat[lo : lo + _CRC_BLOCK])
                self._crc[name] = zlib.crc32(block, self._crc[name])
                self._f[name].write(block)
        except OSError as e:
            self.abort()
            raise self._write_error(e) from None

    def _write_error(self, e: OSError) -> UserError:
        """A failed write (a full disk, a quota, an I/O error) as one line naming the
        output; the temporary folder is already gone, so nothing half-written remains."""
        return UserError(f"cannot write the trace ({e.strerror or e}); nothing was "
                         "published", source=str(self.path))

    def append_batch(self, indices: np.ndarray, offsets: np.ndarray) -> None:
        """One batch in FBGEMM layout: `offsets` has T*B+1 entries starting at 0."""
        self.append_batches(indices, offsets, np.array([0, len(offsets) - 1], np.int64))

    def append_batches(self, indices: np.ndarray, offsets: np.ndarray,
                       batch_bounds: np.ndarray) -> None:
        """Many batches at once; `offsets` and `batch_bounds` relative to this call's arrays."""
        indices = np.asarray(indices)
        offsets = np.asarray(offsets, np.int64)
        bounds = np.asarray(batch_bounds, np.int64)
        T = len(self.table_rows)
        if offsets[0] != 0 or offsets[-1] != len(indices):
            raise ValueError("offsets must run from 0 to len(indices)")
        if bounds[0] != 0 or bounds[-1] != len(offsets) - 1 or np.any(np.diff(bounds) % T):
            raise ValueError("batch_bounds must cut the bags into groups of T*B")
        if len(indices) and (indices.min() < 0):
            raise ValueError("negative row id")
        self._write("indices.bin", indices.astype(self.index_dtype, copy=False))
        self._write_offsets(offsets)
        self._write("batch_bounds.bin", (bounds[1:] + self._num_bags).astype("<i8"))
        self._num_indices += len(indices)
        self._num_bags += len(offsets) - 1
        self._num_batches += len(bounds) - 1

    def _write_offsets(self, offsets: np.ndarray) -> None:
        """This call's bags (`offsets` relative, starting at 0) in the stream's encoding:
        nothing while every bag has the first bag's length, else u32-marks entries."""
        lengths = np.diff(offsets)
        if "offsets_u32.bin" not in self._f and len(lengths):
            if self._bag_length is None:
                self._bag_length = int(lengths[0])
            if np.all(lengths == self._bag_length):
                return
            self._start_u32()
        if len(lengths):
            rel = encode_u32(offsets[1:] + self._num_indices, self._num_bags + 1,
                             self._marks)
            self._write("offsets_u32.bin", rel)

    def _start_u32(self) -> None:
        """Leave the constant encoding: write the offsets of the bags so far (entries
        0..num_bags, all of length `_bag_length`) as u32-marks, a block at a time."""
        try:
            self._f["offsets_u32.bin"] = open(self._tmp / "offsets_u32.bin", "wb")
        except OSError as e:
            self.abort()
            raise self._write_error(e) from None
        self._crc["offsets_u32.bin"] = 0
        length = int(self._bag_length or 0)
        for lo in range(0, self._num_bags + 1, _APPEND_BAGS):
            hi = min(lo + _APPEND_BAGS, self._num_bags + 1)
            values = np.arange(lo, hi, dtype=np.int64) * length
            self._write("offsets_u32.bin", encode_u32(values, lo, self._marks))

    def append_trace(self, trace: Trace) -> None:
        """Every batch of `trace`, a run of batches at a time (a memory-mapped trace larger
        than RAM is never read whole)."""
        bounds = np.asarray(trace.batch_bounds)
        offsets = trace.offsets
        step = max(1, _APPEND_BAGS // max(1, len(trace.table_rows) * trace.batch_size))
        for lo in range(0, len(bounds) - 1, step):
            hi = min(lo + step, len(bounds) - 1)
            b0, b1 = int(bounds[lo]), int(bounds[hi])
            offs = np.asarray(offsets[b0:b1 + 1], np.int64)
            idx = np.asarray(trace.indices[int(offs[0]):int(offs[-1])])
            self.append_batches(idx, offs - offs[0], bounds[lo:hi + 1] - b0)

    def close(self) -> Path:
        """Publish the trace; on any failure (a full disk, another writer publishing the
        same name first) the temporary folder is removed, never left behind."""
        try:
            return self._publish()
        except UserError:
            self.abort()
            raise
        except OSError as e:
            self.abort()
            raise self._write_error(e) from None
        except BaseException:
            self.abort()
            raise

    def _publish(self) -> Path:
        if "offsets_u32.bin" in self._f:
            self._f["offset_marks.bin"] = open(self._tmp / "offset_marks.bin", "wb")
            self._crc["offset_marks.bin"] = 0
            self._write("offset_marks.bin", np.asarray(self._marks, "<i8"))
            offsets = {"encoding": "u32-marks", "mark_bags": MARK_BAGS}
        else:
            offsets = {"encoding": "constant", "bag_length": int(self._bag_length or 0)}
        for f in self._f.values():
            f.close()
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "offsets": offsets,
            "table_rows": [int(x) for x in self.table_rows],
            "batch_size": self.batch_size,
            "num_batches": self._num_batches,
            "num_bags": self._num_bags,
            "num_indices": self._num_indices,
            "index_dtype": self.index_dtype.str,
            "sha256": _checksum(self._tmp, [n for n in DATA_FILES if n in self._f]),
            "crc32": dict(self._crc),
            "meta": self.meta,
            **self.extra,
        }
        (self._tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if self.path.exists() and self.overwrite:
            shutil.rmtree(self.path, ignore_errors=True) if self.path.is_dir() \
                else self.path.unlink(missing_ok=True)
        try:
            os.replace(self._tmp, self.path)
        except OSError as e:
            if not self.path.exists():
                raise
            # another writer published this name between our check and our rename: keep
            # its complete trace, drop ours
            raise UserError("written by another process meanwhile; kept that trace "
                            f"({e.strerror or e})", source=str(self.path)) from None
        return self.path

    def abort(self) -> None:
        for f in self._f.values():
            try:
                f.close()
            except OSError:  # flushing the rest fails on a full disk too: dropped anyway
                pass
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_trace(trace: Trace, path: str | os.PathLike, overwrite: bool = False,
                index_dtype: str | None = None, extra: dict | None = None) -> Path:
    """`trace` as a new `.sptrace` folder (see `TraceWriter` for the options)."""
    with TraceWriter(path, trace.table_rows, trace.batch_size, trace.meta, overwrite,
                     index_dtype, extra) as w:
        w.append_trace(trace)
    return Path(path)


#: manifest.json is metadata (counts, a checksum, a few meta keys): a larger one is not ours
MANIFEST_MAX_BYTES = 16 << 20
#: bags appended at a time by `append_trace` (bounded memory on a mapped trace)
_APPEND_BAGS = 1 << 22
#: bytes fed to CRC-32 at a time (bounded memory on a trace larger than RAM)
_CRC_BLOCK = 1 << 24
#: bytes of offsets/batch bounds checked at a time (bounded memory on a trace larger than RAM)
_CHECK_BLOCK = 1 << 22
#: the manifest's keys and what each must be (checked before any data file is mapped)
_COUNT_KEYS = ("batch_size", "num_batches", "num_bags", "num_indices")


def _manifest(path: Path) -> dict:
    """manifest.json parsed and checked key by key: a corrupt or foreign manifest is one
    line naming the key, never a KeyError, a float id array or a SIGBUS later."""
    src = str(path)
    mf = path / "manifest.json"
    if not is_store(path):
        raise UserError("not a trace folder: expected manifest.json inside", source=src)
    input_file(mf, "manifest.json")
    if mf.stat().st_size > MANIFEST_MAX_BYTES:
        raise UserError(f"manifest.json is {mf.stat().st_size:,} bytes: expected at most "
                        f"{MANIFEST_MAX_BYTES:,} (not a trace manifest)", source=src)
    try:
        m = json.loads(mf.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        why = getattr(e, "msg", None) or type(e).__name__
        raise UserError(f"manifest.json is not valid JSON ({why})", source=src) from None
    if not isinstance(m, dict):
        raise UserError(f"manifest.json holds {type(m).__name__}: expected an object",
                        source=src)

    def bad(key: str, expected: str) -> UserError:
        got = repr(m.get(key)) if key in m else "nothing (missing)"
        if len(got) > 80:
            got = got[:77] + "..."
        return UserError(f"expected {expected}, got {got}", source=src,
                         field=f"manifest.json.{key}")

    if m.get("format") != FORMAT or m.get("version") not in READ_VERSIONS:
        raise UserError(f"expected format '{FORMAT}' version "
                        f"{' or '.join(map(str, READ_VERSIONS))} (written by this "
                        f"version), got format {m.get('format')!r} version "
                        f"{m.get('version')!r}", source=src, field="manifest.json")
    rows = m.get("table_rows")
    if not isinstance(rows, list) or not rows or not all(_count(r, 1) for r in rows):
        raise bad("table_rows", "a non-empty list of row counts >= 1")
    for key in _COUNT_KEYS:
        if not _count(m.get(key), 1 if key == "batch_size" else 0):
            raise bad(key, "an integer >= " + ("1" if key == "batch_size" else "0"))
    try:
        dtype = np.dtype(m.get("index_dtype"))
    except (TypeError, ValueError, SyntaxError):
        dtype = None
    if dtype is None or m.get("index_dtype") not in INDEX_DTYPES:
        raise bad("index_dtype", f"an integer dtype ({' or '.join(INDEX_DTYPES)})")
    if not isinstance(m.get("sha256"), str):
        raise bad("sha256", "a hex string")
    if not isinstance(m.get("meta", {}), dict):
        raise bad("meta", "a mapping")
    if m["version"] >= 2:
        enc = m.get("offsets")
        if not isinstance(enc, dict) or enc.get("encoding") not in ENCODINGS:
            raise bad("offsets", f"an encoding ({' or '.join(ENCODINGS)})")
        if enc["encoding"] == "constant" and not (
                _count(enc.get("bag_length"), 0)
                and enc["bag_length"] * m["num_bags"] == m["num_indices"]):
            raise bad("offsets", "a bag length times num_bags equal to num_indices")
        if enc["encoding"] == "u32-marks" and enc.get("mark_bags") != MARK_BAGS:
            raise bad("offsets", f"mark_bags {MARK_BAGS}")
    crc = m.get("crc32", {})
    if not (isinstance(crc, dict) and set(crc) <= set(DATA_FILES)
            and all(_count(v, 0) and v < 2**32 for v in crc.values())):
        raise bad("crc32", "a mapping of data file names to CRC-32 values")
    return m


def read_manifest(path: str | os.PathLike) -> dict:
    """The store's manifest.json, every key checked (UserError naming the key)."""
    return _manifest(Path(path))


def _count(x: object, low: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and low <= x < 2**63


def _check_pointers(arr: np.ndarray, end: int, name: str, src: str, step: int = 1) -> None:
    """`arr` starts at 0, ends at `end`, never decreases (and every gap is a multiple of
    `step`), checked block by block: offsets past the data would be read past the map."""
    if int(arr[0]) != 0 or int(arr[-1]) != end:
        raise UserError(f"{name} runs from {int(arr[0])} to {int(arr[-1])}: expected 0 to "
                        f"{end}", source=src, field=name)
    n = _CHECK_BLOCK // 8
    for lo in range(0, len(arr) - 1, n):
        d = np.diff(np.asarray(arr[lo:lo + n + 1]))
        release(arr, lo, lo + n + 1)  # checked: the map's pages go back (bounded RSS)
        if np.any(d < 0):
            at = lo + int(np.argmax(d < 0)) + 1
            raise UserError(f"{name} decreases at entry {at}: expected a non-decreasing "
                            "sequence", source=src, field=name)
        if step > 1 and np.any(d % step):
            raise UserError(f"{name}: a batch that is not a whole number of bags per table "
                            f"({step} tables)", source=src, field=name)


def read_trace(path: str | os.PathLike, verify: bool = False,
               manifest: dict | None = None) -> Trace:
    """Memory-map a `.sptrace` folder (nothing is read into RAM until used). The manifest
    (every key, its type, an integer index dtype), the files' sizes and the offsets' and
    batch bounds' range and order are checked first, before any id is read. `verify`: also
    check each file's CRC-32 against the manifest's (a pass over the data). `manifest`:
    `read_manifest(path)`'s result, when the caller already read it."""
    path = Path(path)
    src = str(path)
    m = _manifest(path) if manifest is None else manifest

    def mmap(name, dtype, count):
        f = path / name
        expected = count * np.dtype(dtype).itemsize
        if not f.is_file() or f.stat().st_size != expected:
            raise UserError(f"{name} is missing or truncated: expected {expected} bytes",
                            source=src)
        if count == 0:
            return np.zeros(0, dtype)
        return np.memmap(f, dtype=dtype, mode="r", shape=(count,))

    indices = mmap("indices.bin", m["index_dtype"], m["num_indices"])
    bounds = mmap("batch_bounds.bin", "<i8", m["num_batches"] + 1)
    files = {"indices.bin": indices, "batch_bounds.bin": bounds}
    n_offsets = m["num_bags"] + 1
    enc = m.get("offsets", {}).get("encoding") if m["version"] >= 2 else None
    if enc is None:  # version 1
        offsets = files["offsets.bin"] = mmap("offsets.bin", "<i8", n_offsets)
        checked = "offsets.bin"
    elif enc == "constant":
        offsets = BagOffsets(n_offsets, bag_length=m["offsets"]["bag_length"])
        checked = None  # i * L: from 0 to num_indices (checked with the manifest), rising
    else:
        rel = files["offsets_u32.bin"] = mmap("offsets_u32.bin", "<u4", n_offsets)
        marks = files["offset_marks.bin"] = mmap("offset_marks.bin", "<i8",
                                                 (n_offsets - 1) // MARK_BAGS + 1)
        offsets = BagOffsets(n_offsets, rel=rel, marks=np.array(marks, np.int64))
        checked = "offsets_u32.bin"
    if verify:  # over the maps themselves: no copy, and the pages stay cached for the run
        for name, arr in files.items():
            _check_crc(arr, m, name, src)
    if checked is not None:
        _check_pointers(offsets, m["num_indices"], checked, src)
    _check_pointers(bounds, m["num_bags"], "batch_bounds.bin", src, len(m["table_rows"]))
    meta = dict(m.get("meta", {}))
    meta["sha256"] = m["sha256"]
    return Trace(np.asarray(m["table_rows"], np.int64), indices, offsets, bounds,
                 int(m["batch_size"]), meta, src)


def verify_store(path: str | os.PathLike, manifest: dict | None = None) -> None:
    """Check the store (as `read_trace` does) and each data file against the manifest's
    CRC-32 (in blocks of the maps: bounded memory); UserError naming the first damaged
    file. A store without CRCs passes that part."""
    read_trace(path, verify=True, manifest=manifest)


def _check_crc(arr: np.ndarray, m: dict, name: str, src: str) -> None:
    want = m.get("crc32", {}).get(name)
    if want is None:
        return
    crc, flat = 0, np.asarray(arr).reshape(-1).view(np.uint8)
    for lo in range(0, len(flat), _CRC_BLOCK):
        crc = zlib.crc32(memoryview(flat[lo : lo + _CRC_BLOCK]), crc)
        release(flat, lo, lo + _CRC_BLOCK)
    if crc != want:
        raise UserError(f"{name} does not match its CRC-32 in manifest.json (damaged)",
                        source=src, field=name)


def _checksum(folder: Path, names: list[str]) -> str:
    h = hashlib.sha256()
    for name in names:
        with open(folder / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()
