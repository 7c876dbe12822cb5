"""The project's on-disk trace format: a folder `NAME.sptrace/` that memory-maps.

    manifest.json      format, version, table_rows, batch_size, counts, dtypes, sha256, meta
    indices.bin        row ids (uint32 when every table fits, else int64), raw little-endian
    offsets.bin        int64 bag offsets (num_bags + 1)
    batch_bounds.bin   int64 bag index where each batch starts (num_batches + 1)

Raw arrays (not .npy) so `TraceWriter` can append chunk by chunk without knowing the final
length; the writer builds in a temporary sibling folder and renames it into place only when
complete, so a crash never leaves a half-written trace under the final name. Reading maps the
files (`np.memmap`), so a trace larger than RAM streams with bounded memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.trace import Trace

FORMAT = "scratchpipe-trace"
VERSION = 1
SUFFIX = ".sptrace"
_FILES = ("indices.bin", "offsets.bin", "batch_bounds.bin")


def is_store(path: str | os.PathLike) -> bool:
    return (Path(path) / "manifest.json").is_file()


class TraceWriter:
    """Append mini-batches to a new `.sptrace` folder; `close()` publishes it atomically.

    Use as a context manager; on an exception nothing is published.
    """

    def __init__(self, path: str | os.PathLike, table_rows, batch_size: int,
                 meta: dict | None = None, overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise UserError("already exists; refusing to overwrite", source=str(self.path))
        self.table_rows = np.asarray(table_rows, np.int64)
        self.batch_size = int(batch_size)
        self.meta = dict(meta or {})
        self.overwrite = overwrite
        self.index_dtype = np.dtype("<u4") if self.table_rows.max() <= 2**32 else np.dtype("<i8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=self.path.name + ".", suffix=".tmp",
                                          dir=self.path.parent))
        self._f = {name: open(self._tmp / name, "wb") for name in _FILES}
        self._num_indices = 0
        self._num_bags = 0
        self._num_batches = 0
        self._f["offsets.bin"].write(np.zeros(1, "<i8").tobytes())
        self._f["batch_bounds.bin"].write(np.zeros(1, "<i8").tobytes())

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
        self._f["indices.bin"].write(indices.astype(self.index_dtype, copy=False).tobytes())
        self._f["offsets.bin"].write((offsets[1:] + self._num_indices).astype("<i8").tobytes())
        self._f["batch_bounds.bin"].write((bounds[1:] + self._num_bags).astype("<i8").tobytes())
        self._num_indices += len(indices)
        self._num_bags += len(offsets) - 1
        self._num_batches += len(bounds) - 1

    def append_trace(self, trace: Trace) -> None:
        self.append_batches(np.asarray(trace.indices), np.asarray(trace.offsets),
                            np.asarray(trace.batch_bounds))

    def close(self) -> Path:
        for f in self._f.values():
            f.close()
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "table_rows": [int(x) for x in self.table_rows],
            "batch_size": self.batch_size,
            "num_batches": self._num_batches,
            "num_bags": self._num_bags,
            "num_indices": self._num_indices,
            "index_dtype": self.index_dtype.str,
            "sha256": _checksum(self._tmp),
            "meta": self.meta,
        }
        (self._tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if self.path.exists() and self.overwrite:
            shutil.rmtree(self.path) if self.path.is_dir() else self.path.unlink()
        os.replace(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        for f in self._f.values():
            f.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_trace(trace: Trace, path: str | os.PathLike, overwrite: bool = False) -> Path:
    with TraceWriter(path, trace.table_rows, trace.batch_size, trace.meta, overwrite) as w:
        w.append_trace(trace)
    return Path(path)


def read_trace(path: str | os.PathLike) -> Trace:
    """Memory-map a `.sptrace` folder (nothing is read into RAM until used)."""
    path = Path(path)
    src = str(path)
    mf = path / "manifest.json"
    if not mf.is_file():
        raise UserError("not a trace folder: expected manifest.json inside", source=src)
    try:
        m = json.loads(mf.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"manifest.json is not valid JSON ({e.msg})", source=src) from None
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        raise UserError(f"expected format '{FORMAT}' version {VERSION}", source=src,
                        field="manifest.json")

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
    offsets = mmap("offsets.bin", "<i8", m["num_bags"] + 1)
    bounds = mmap("batch_bounds.bin", "<i8", m["num_batches"] + 1)
    meta = dict(m.get("meta", {}))
    meta["sha256"] = m["sha256"]
    return Trace(np.asarray(m["table_rows"], np.int64), indices, offsets, bounds,
                 int(m["batch_size"]), meta, src)


def _checksum(folder: Path) -> str:
    h = hashlib.sha256()
    for name in _FILES:
        with open(folder / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()
