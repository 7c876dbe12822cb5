"""`trace convert`: stream a production trace format into a `.sptrace` folder.

Every converter reads its input in bounded blocks and appends whole mini-batches to a
`TraceWriter`, which builds in a temporary folder and renames it into place only when the
conversion completed; a failure (bad line, interrupt) leaves nothing under OUT.

Ids are mapped the same way for every format (`IdMap`):

* `rows=N` (or one N per table) — `id % N`: DLRM's `max_ind_range` convention for hashed
  categorical values;
* `dense_remap` — per table, the order of first appearance (0, 1, 2, ...), so the table has
  exactly as many rows as distinct values;
* neither — ids are kept; a table has `max id + 1` rows.

A converter is `fn(src: Path, out: Path, opts: ConvertOptions) -> ConvertResult`, registered
in `CONVERTERS` by the format module that owns it (criteo, dlrm_formats, meta, tabular).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import types
from numba.typed import Dict

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.registry import Registry
from scratchpipe_sim.safety.memory_guard import available_bytes, human
from scratchpipe_sim.safety.paths import input_file
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.store import TraceWriter

#: bytes of input read per block (text formats); memory use is a few times this.
DEFAULT_BLOCK_BYTES = 1 << 23
DEFAULT_BATCH_SIZE = 4096
#: ids of any format that fit in 32 bits are stored as uint32 (the writer's choice).
_U32_ROWS = 1 << 32


@dataclass(frozen=True)
class ConvertOptions:
    """How ids are mapped and samples cut into mini-batches (see the module docstring)."""

    rows: tuple[int, ...] | None = None
    dense_remap: bool = False
    batch_size: int | None = None
    skip_bad_lines: bool = False
    overwrite: bool = False
    block_bytes: int = DEFAULT_BLOCK_BYTES
    #: called with the input bytes (on disk: compressed for gzip) read since the last call
    progress: Callable[[int], None] | None = field(default=None, compare=False)

    def batch(self, default: int = DEFAULT_BATCH_SIZE) -> int:
        return self.batch_size if self.batch_size is not None else default


@dataclass
class ConvertResult:
    """What a conversion wrote and what it skipped (printed by the CLI, kept in meta)."""

    path: Path
    format: str
    table_rows: list[int]
    num_batches: int
    num_accesses: int
    records: int = 0  # lines / samples read
    skipped: int = 0
    first_error: str | None = None
    extra: dict = field(default_factory=dict)

    def summary(self) -> str:
        how = {"dense": "distinct ids, renumbered", "modulo": "ids modulo --rows",
               "raw": "max id + 1 per table"}.get(self.extra.get("id_mapping", ""), "")
        s = (f"wrote {self.path}: {self.records} {self.extra.get('record_name', 'records')} "
             f"read -> {len(self.table_rows)} tables, {self.num_batches} batches, "
             f"{self.num_accesses} accesses, {sum(self.table_rows)} table rows in all"
             + (f" ({how})" if how else ""))
        if self.skipped:
            s += f"; skipped {self.skipped} bad (first: {self.first_error})"
        return s


ConvertFn = Callable[[Path, Path, ConvertOptions], ConvertResult]
#: converters register from any module of scratchpipe_sim.traces (imported on first use).
CONVERTERS: Registry[ConvertFn] = Registry("convert format", package="scratchpipe_sim.traces")
#: suffix -> converter format, checked longest first.
SUFFIXES: dict[str, str] = {}
#: content sniffers, in registration order: each gives a format for a file it recognises
#: (e.g. Criteo's 40 tab-separated fields, a `sample, table, id` header), else None
Sniffer = Callable[[Path], "str | None"]
SNIFFERS: list[Sniffer] = []


def register_converter(name: str, suffixes: tuple[str, ...] = (),
                       sniff: Sniffer | None = None) -> Callable[[ConvertFn], ConvertFn]:
    """Register a converter under `name`, found by any of `suffixes` and, before any
    suffix, by `sniff` on the file's content."""
    def decorate(fn: ConvertFn) -> ConvertFn:
        CONVERTERS.register(name)(fn)
        for s in suffixes:
            SUFFIXES[s] = name
        if sniff is not None:
            SNIFFERS.append(sniff)
        return fn

    return decorate


def load_converters() -> None:
    """Import every converter module (SUFFIXES is filled as they register)."""
    CONVERTERS.load()


def detect_format(path: Path) -> str:
    """The converter format for `path`: by content where a converter's sniffer recognises
    it (Criteo's 40 tab-separated fields; a table's `sample, table, id` header), else by
    suffix."""
    load_converters()
    for sniff in SNIFFERS:  # by content first: a `.tsv` may be Criteo's or a table's
        found = sniff(path)
        if found:
            return found
    name = path.name.lower()
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return SUFFIXES[suffix]
    raise UserError("cannot tell the input format from its name or content; expected one of "
                    f"{', '.join(CONVERTERS.names())} (pass --format)", source=str(path))


#: formats whose converter takes several inputs, read one after the other into one trace
MULTI_INPUT_FORMATS = ("criteo",)


def convert(src: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike,
            fmt: str | None = None, opts: ConvertOptions | None = None) -> ConvertResult:
    """Convert `src` (format `fmt`, default: detected) into the `.sptrace` folder `out`.
    `src` may be several files (Criteo's `day_0 day_1 ...`): their samples follow each
    other in that order, as if the files were one."""
    load_converters()
    opts = opts or ConvertOptions()
    srcs = [Path(src)] if isinstance(src, (str, os.PathLike)) else [Path(x) for x in src]
    if not srcs:
        raise UserError("expected at least one input file", source="options", field="input")
    src_p, out_p = srcs[0], Path(out)
    for p in srcs:
        input_file(p, "input file")
    if out_p.exists() and not opts.overwrite:
        raise UserError("already exists; refusing to overwrite (pass --force)",
                        source=str(out_p))
    if opts.rows is not None and opts.dense_remap:
        raise UserError("--rows and --dense-remap exclude each other", source="options",
                        field="rows")
    if opts.rows is not None and any(r < 1 for r in opts.rows):
        raise UserError(f"row counts must be >= 1, got {list(opts.rows)}", source="options",
                        field="rows")
    if opts.batch_size is not None and opts.batch_size < 1:
        raise UserError(f"batch size must be >= 1, got {opts.batch_size}", source="options",
                        field="batch_size")
    fmt = fmt or detect_format(src_p)
    fn = CONVERTERS.get(fmt, source=str(src_p), field="format")
    if len(srcs) > 1:
        if fmt not in MULTI_INPUT_FORMATS:
            raise UserError(f"{len(srcs)} inputs: only {', '.join(MULTI_INPUT_FORMATS)} "
                            "converts several files into one trace; expected one input",
                            source=str(src_p), field="format")
        return fn(srcs, out_p, opts)  # type: ignore[arg-type]
    try:
        return fn(src_p, out_p, opts)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:  # the writer has dropped its folder
        what = ("ends before its compressed stream does (truncated?)"
                if isinstance(e, EOFError) else f"is damaged ({e})")
        raise UserError(f"the compressed input {what}; nothing was written to {out_p}",
                        source=str(src_p)) from None


def input_position(f) -> int:
    """Bytes of the file on disk consumed so far by `f` (an `open_input` object): the
    compressed position for gzip, so progress runs against the file's size."""
    raw = getattr(f, "fileobj", None)
    try:
        return int((raw if raw is not None else f).tell())
    except (OSError, ValueError):
        return 0


def open_input(path: Path):
    """A binary file object; gzip is recognised by its magic bytes, not the name."""
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")
    except OSError as e:
        raise UserError(f"cannot read ({e.strerror})", source=str(path)) from None


# -- id mapping -----------------------------------------------------------------------------

#: bytes a dense-remap dictionary entry costs (Numba typed dict of (table, value) -> row,
#: measured: 8 M entries grew the peak RSS by ~100 bytes each, its resizes included)
DENSE_BYTES_PER_ENTRY = 100

class IdMap:
    """Maps raw non-negative ids of T tables to row ids (modulo, dense or kept as is)."""

    def __init__(self, num_tables: int, opts: ConvertOptions, source: str):
        self.T = num_tables
        self.source = source
        self.mode = "dense" if opts.dense_remap else ("modulo" if opts.rows else "raw")
        if opts.rows is not None:
            rows = list(opts.rows)
            if len(rows) == 1:
                rows = rows * num_tables
            if len(rows) != num_tables:
                raise UserError(f"{len(rows)} row counts for {num_tables} tables: expected "
                                f"one or {num_tables}", field="--rows")
            self.rows = np.asarray(rows, np.int64)
        else:
            self.rows = np.zeros(num_tables, np.int64)  # max id + 1 so far
        self._dict = Dict.empty(key_type=types.UniTuple(types.int64, 2),
                                value_type=types.int64)
        # the dictionary holds every distinct (table, value): bounded by the memory free
        # when the conversion starts (checked a block at a time), never an OOM kill
        have = available_bytes() if self.mode == "dense" else None
        self._dense_max = None if have is None else max(1, have // DENSE_BYTES_PER_ENTRY)

    def writer_rows(self, raw_limit: int = _U32_ROWS) -> np.ndarray:
        """Row counts to open the writer with (they fix the stored id width)."""
        if self.mode == "modulo":
            return self.rows
        return np.full(self.T, raw_limit, np.int64)

    def map(self, values: np.ndarray, tables: np.ndarray) -> np.ndarray:
        """Row ids of `values` (int64 >= 0) of the given tables, in place order."""
        if self.mode == "modulo":
            return values % self.rows[tables]
        if self.mode == "dense":
            out = _dense(values, tables.astype(np.int64), self._dict, self.rows)
            if self._dense_max is not None and len(self._dict) > self._dense_max:
                raise UserError(
                    f"{len(self._dict):,} distinct (table, value) pairs so far, "
                    f"about {human(len(self._dict) * DENSE_BYTES_PER_ENTRY)}: more than the "
                    f"{human(self._dense_max * DENSE_BYTES_PER_ENTRY)} available; expected "
                    "--rows N (ids modulo N keep no dictionary) or more memory",
                    source=self.source, field="--dense-remap")
            return out
        _track_max(values, tables, self.rows)
        return values

    def table_rows(self) -> list[int]:
        """Final row counts (a table never touched gets 1 row so the trace stays valid)."""
        return [max(1, int(r)) for r in self.rows]


@njit(cache=True)
def _dense(values, tables, d, counts):
    out = np.empty(len(values), np.int64)
    for i in range(len(values)):
        key = (tables[i], values[i])
        r = d.get(key, -1)
        if r < 0:
            r = counts[tables[i]]
            d[key] = r
            counts[tables[i]] = r + 1
        out[i] = r
    return out


@njit(cache=True)
def _track_max(values, tables, rows):
    for i in range(len(values)):
        t = tables[i]
        if values[i] + 1 > rows[t]:
            rows[t] = values[i] + 1


# -- writing ----------------------------------------------------------------------------------

def open_writer(out: Path, idmap: IdMap, batch_size: int, meta: dict, opts: ConvertOptions,
                raw_limit: int = _U32_ROWS) -> TraceWriter:
    return TraceWriter(out, idmap.writer_rows(raw_limit), batch_size, meta,
                       overwrite=opts.overwrite)


def finish(writer: TraceWriter, idmap: IdMap, result: ConvertResult) -> ConvertResult:
    """Fix the final row counts into the manifest and publish (atomic rename)."""
    writer.table_rows = np.asarray(idmap.table_rows(), np.int64)
    writer.meta.update({"records": result.records, "skipped": result.skipped,
                        "id_mapping": idmap.mode})
    if result.num_accesses == 0:
        writer.abort()
        raise UserError("no accesses in the input (nothing to write)", source=str(result.path))
    writer.close()
    result.table_rows = idmap.table_rows()
    result.extra["id_mapping"] = idmap.mode
    return result


def sample_major_batches(cats: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray,
                                                                       np.ndarray]:
    """CSR of whole mini-batches from a (samples, T) id matrix, -1 = missing (empty bag).

    Samples are cut into batches of `batch_size` (the last may be shorter); each batch is
    laid table-major, as FBGEMM wants. Returns (indices, offsets, batch_bounds).
    """
    n, T = cats.shape
    parts_idx, parts_len, bounds = [], [], [0]
    for lo in range(0, n, batch_size):
        block = cats[lo: lo + batch_size].T  # (T, b)
        mask = block >= 0
        parts_idx.append(block[mask])
        parts_len.append(mask.ravel().astype(np.int64))
        bounds.append(bounds[-1] + block.size)
    if not parts_idx:
        return np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)
    lengths = np.concatenate(parts_len)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return np.concatenate(parts_idx), offsets, np.asarray(bounds, np.int64)


def flat_batches(ids: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray,
                                                            np.ndarray]:
    """CSR of whole mini-batches from a flat id stream: one table, pooling 1."""
    n = len(ids)
    offsets = np.arange(n + 1, dtype=np.int64)
    bounds = np.minimum(np.arange(0, n + batch_size, batch_size, dtype=np.int64), n)
    return ids, offsets, bounds[: -(-n // batch_size) + 1]


class WholeBatches:
    """Buffers converted samples and writes them to `writer` in whole mini-batches.

    Readers produce blocks that do not end on batch boundaries; this keeps the remainder
    until the next block (or `flush`, which writes the short last batch). `to_csr` turns a
    run of samples into `(indices, offsets, batch_bounds)`.
    """

    def __init__(self, writer: TraceWriter, batch_size: int, result: ConvertResult,
                 to_csr: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray,
                                                           np.ndarray]]):
        self.writer, self.B, self.result, self.to_csr = writer, batch_size, result, to_csr
        self.pending: np.ndarray | None = None

    def add(self, samples: np.ndarray) -> None:
        if self.pending is not None and len(self.pending):
            samples = np.concatenate((self.pending, samples))
        full = (len(samples) // self.B) * self.B
        if full:
            self._write(samples[:full])
        self.pending = samples[full:]

    def flush(self) -> None:
        if self.pending is not None and len(self.pending):
            self._write(self.pending)
        self.pending = None

    def _write(self, samples: np.ndarray) -> None:
        idx, offs, bounds = self.to_csr(samples, self.B)
        self.writer.append_batches(idx, offs, bounds)
        self.result.num_batches += len(bounds) - 1
        self.result.num_accesses += len(idx)
