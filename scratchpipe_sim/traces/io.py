"""One entry point for every trace on disk: `open_trace(path)` picks a reader and validates.

Readers live in their own modules and register here with `register_reader`, naming the
format, the file suffixes it claims and, optionally, a `sniff(path) -> bool` content check
for files whose suffix says nothing. Dispatch order: an explicit `fmt`, then a `.sptrace`
folder (or any folder holding `manifest.json`), then the suffix, then the sniffers in
registration order. The registry imports every non-underscore module of
`scratchpipe_sim.traces` on first use (sorted by name), so a new format is one module there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.registry import Registry
from scratchpipe_sim.safety.paths import input_kind
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import SUFFIX, is_store, read_trace

#: read(path, batch_size, num_rows) -> Trace (not yet validated; open_trace validates).
ReadFn = Callable[[Path, "int | None", "int | None"], Trace]


@dataclass(frozen=True)
class ReaderSpec:
    """A trace format: how to read it and how to recognise it."""

    name: str
    read: ReadFn
    suffixes: tuple[str, ...] = ()
    sniff: Callable[[Path], bool] | None = None
    help: str = ""


TRACE_WHAT = f"file or {SUFFIX} folder"

READERS: Registry[ReaderSpec] = Registry("trace format", package="scratchpipe_sim.traces")


def register_reader(name: str, suffixes: tuple[str, ...] = (),
                    sniff: Callable[[Path], bool] | None = None,
                    help: str = "") -> Callable[[ReadFn], ReadFn]:
    """Decorator: register `read(path, batch_size, num_rows) -> Trace` as format `name`."""

    def decorate(fn: ReadFn) -> ReadFn:
        READERS.register(name)(ReaderSpec(name, fn, tuple(s.lower() for s in suffixes),
                                          sniff, help))
        return fn

    return decorate


def formats() -> list[str]:
    return ["sptrace", *READERS.names()]


def detect_format(path: str | os.PathLike) -> str:
    """The format name `open_trace` would use for `path` (UserError when unknown)."""
    p = Path(path)
    if input_kind(p, TRACE_WHAT) == "folder":
        if is_store(p):
            return "sptrace"
        raise UserError(f"a folder but not a {SUFFIX} trace: expected manifest.json inside",
                        source=str(p))
    name = p.name.lower()
    specs = [spec for _, spec in READERS.items()]  # registration order
    # the longest claimed suffix wins ("x.csv.gz" -> ".csv.gz", not ".gz"); when several
    # formats claim it (e.g. ".txt"), the first whose sniff accepts the content, else the first
    best = max((len(s) for spec in specs for s in spec.suffixes if name.endswith(s)),
               default=0)
    if best:
        claim = [spec for spec in specs
                 if any(len(s) == best and name.endswith(s) for s in spec.suffixes)]
        if len(claim) > 1:
            for spec in claim:
                if spec.sniff is not None and spec.sniff(p):
                    return spec.name
        return claim[0].name
    for spec in specs:
        if spec.sniff is not None and spec.sniff(p):
            return spec.name
    raise UserError(f"cannot tell the trace format from the name or content; expected one of "
                    f"{', '.join(formats())} (pass the format explicitly)", source=str(p))


def open_trace(path: str | os.PathLike, batch_size: int | None = None,
               num_rows: int | None = None, fmt: str | None = None) -> Trace:
    """Open any supported trace, validated. `.sptrace` stays memory-mapped.

    `batch_size` and `num_rows` shape flat id streams (npy, text): mini-batches of
    `batch_size` ids (default 1) over `num_rows` rows (default max id + 1). A `.sptrace`
    keeps its own batches; asking for another batch size re-cuts it only when it is one
    table with one id per bag (otherwise the batch structure is part of the trace).
    """
    p = Path(path)
    src = str(p)
    if batch_size is not None and batch_size < 1:
        raise UserError(f"batch size must be >= 1, got {batch_size}", source=src,
                        field="batch_size")
    if num_rows is not None and num_rows < 1:
        raise UserError(f"number of rows must be >= 1, got {num_rows}", source=src,
                        field="num_rows")
    kind = input_kind(p, TRACE_WHAT)  # before any read: a FIFO or device would hang
    fmt = fmt or detect_format(p)
    if fmt == "sptrace":
        if kind != "folder":
            raise UserError(f"a file: format sptrace expects a {SUFFIX} folder (drop --format "
                            "to detect the file's format)", source=src, field="format")
        trace = _open_store(p, batch_size, num_rows)
    else:
        reader = READERS.get(fmt, source=src, field="format")
        if kind == "folder":
            raise UserError(f"a folder: format {fmt} expects a file (a {SUFFIX} folder is "
                            "read without --format)", source=src, field="format")
        trace = reader.read(p, batch_size, num_rows)
    trace.validate()
    return trace


def _open_store(p: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    trace = read_trace(p)
    src = str(p)
    if num_rows is not None and int(num_rows) != int(trace.table_rows[0]):
        if trace.num_tables != 1:
            raise UserError(f"the trace has {trace.num_tables} tables with fixed row counts; "
                            "a row count applies only to a one-table trace", source=src,
                            field="num_rows")
        trace = Trace(np.array([num_rows], np.int64), trace.indices, trace.offsets,
                      trace.batch_bounds, trace.batch_size, trace.meta, src)
    if batch_size is not None and batch_size != trace.batch_size:
        flat = trace.num_tables == 1 and len(trace.offsets) - 1 == trace.num_accesses
        if not flat:
            raise UserError(f"the trace's batches are fixed (batch size {trace.batch_size}, "
                            f"{trace.num_tables} tables, pooled bags); expected no batch size "
                            "or one table with one id per bag", source=src, field="batch_size")
        n = trace.num_accesses
        bounds = np.append(np.arange(0, n, batch_size, dtype=np.int64), n)
        trace = Trace(trace.table_rows, trace.indices, trace.offsets, bounds, batch_size,
                      trace.meta, src)
    return trace


def flat_trace(ids: np.ndarray, path: Path, batch_size: int | None, num_rows: int | None,
               fmt: str) -> Trace:
    """A one-table, pooling-1 trace from a flat id stream (shared by the flat readers)."""
    src = str(path)
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise UserError(f"expected a 1-D array of row ids, got shape {ids.shape}", source=src)
    if not np.issubdtype(ids.dtype, np.integer):
        raise UserError(f"expected integer row ids, got dtype {ids.dtype}", source=src)
    if len(ids) == 0:
        raise UserError("the trace is empty (no accesses)", source=src)
    if np.issubdtype(ids.dtype, np.signedinteger):
        lo = int(ids.min())
        if lo < 0:
            pos = int(np.argmax(ids < 0))
            raise UserError(f"negative row id {lo} at position {pos}: expected ids >= 0",
                            source=src, field="indices")
    hi = int(ids.max())
    if num_rows is not None and hi >= num_rows:
        pos = int(np.argmax(ids >= num_rows))
        raise UserError(f"id {hi} at position {pos} is out of range: expected "
                        f"0 <= id < {num_rows}", source=src, field="indices")
    meta = {"reader": fmt}
    return Trace.single_table(ids, num_rows, batch_size or 1, source=src, meta=meta)
