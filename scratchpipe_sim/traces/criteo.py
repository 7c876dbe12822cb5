"""Criteo Kaggle / Terabyte click logs (`train.txt`, `day_N`, optionally gzipped).

One sample per line, 40 tab-separated fields: label, 13 integer features, 26 categorical
features as 32-bit hex hashes; an empty field is a missing value. Each categorical column is
one embedding table (C1 -> table 0, ... C26 -> table 25), pooling 1: a sample looks up one
row per table, and a missing categorical is a skipped lookup (a bag of length 0, as DLRM's
Criteo loader does when it drops missing features). Ids are `int(hex, 16) % rows`
(`--rows`, DLRM's `max_ind_range`; default 40,000,000, MLPerf DLRM-DCNv2's and torchrec's
Criteo 1TB setting) or a dense per-column remap (`--dense-remap`); raw 32-bit hashes would
make tables of 2^32 rows.

Several day files convert into one trace, in the order given, batches cut across file
boundaries: the same trace as their concatenation. Lines are parsed by a Numba kernel over
raw bytes, one block at a time, so memory stays bounded by the block size (plus the
dense-remap dictionary, which holds every distinct value: `plan_note` says what it may
cost before a conversion starts). A malformed line names file:line and the field; a
truncated gzip day names the file and the last whole line.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.convert import (
    DENSE_BYTES_PER_ENTRY,
    ConvertOptions,
    ConvertResult,
    IdMap,
    WholeBatches,
    finish,
    input_position,
    open_input,
    open_writer,
    register_converter,
    sample_major_batches,
)
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.io import register_reader
from scratchpipe_sim.traces.store import read_trace

NUM_INT = 13
NUM_CAT = 26
NUM_FIELDS = 1 + NUM_INT + NUM_CAT
#: MLPerf DLRM-DCNv2's (and torchrec's) Criteo 1TB id range: id = hex value mod 40,000,000
#: per table (`--max_ind_range=40000000`); the converter's default when no mapping is named
MLPERF_ROWS = 40_000_000
FIELD_NAMES = ["label", *(f"I{i}" for i in range(1, NUM_INT + 1)),
               *(f"C{i}" for i in range(1, NUM_CAT + 1))]

# error codes of the kernel
OK, E_COUNT, E_LABEL, E_INT, E_HEX, E_HEXLEN = 0, 1, 2, 3, 4, 5
_MESSAGES = {
    E_LABEL: "expected an integer label",
    E_INT: "expected an integer (or empty)",
    E_HEX: "expected a hex categorical (or empty)",
    E_HEXLEN: "expected at most 8 hex digits (a 32-bit hash)",
}


@njit(cache=True)
def _hexval(c):
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


@njit(cache=True)
def parse_block(buf, cats, status, where):
    """Parse whole lines of `buf` (which ends with a newline).

    Fills cats[i, c] (-1 = missing), status[i] (OK or an error code) and where[i] (the
    0-based field of the error, or the field count for E_COUNT). Returns the line count.
    """
    n = len(buf)
    line = 0
    pos = 0
    while pos < n:
        # one line: [pos, end)
        end = pos
        while end < n and buf[end] != 10:
            end += 1
        stop = end
        if stop > pos and buf[stop - 1] == 13:  # CRLF
            stop -= 1
        st = OK
        wh = 0
        f = 0
        i = pos
        for c in range(NUM_CAT):
            cats[line, c] = -1
        while True:
            # field f spans [i, j)
            j = i
            while j < stop and buf[j] != 9:
                j += 1
            if st == OK and f < NUM_FIELDS:
                if f == 0 or f <= NUM_INT:
                    k = i
                    if k < j and buf[k] == 45 and f > 0:  # '-' allowed in integer features
                        k += 1
                    if f == 0 and i == j:
                        st = E_LABEL
                        wh = f
                    elif f > 0 and k == j and k > i:
                        st = E_INT
                        wh = f
                    else:
                        while k < j:
                            if buf[k] < 48 or buf[k] > 57:
                                st = E_LABEL if f == 0 else E_INT
                                wh = f
                                break
                            k += 1
                else:
                    if j - i > 8:
                        st = E_HEXLEN
                        wh = f
                    elif j > i:
                        v = 0
                        for k in range(i, j):
                            h = _hexval(buf[k])
                            if h < 0:
                                st = E_HEX
                                wh = f
                                break
                            v = v * 16 + h
                        if st == OK:
                            cats[line, f - 1 - NUM_INT] = v
            f += 1
            if j >= stop:
                break
            i = j + 1
        if f != NUM_FIELDS:
            st = E_COUNT
            wh = f
        status[line] = st
        where[line] = wh
        line += 1
        pos = end + 1
    return line


def looks_like_criteo(path: Path) -> bool:
    """True when the first line has 40 tab-separated fields."""
    try:
        with open_input(path) as f:
            first = f.readline(1 << 14)  # the first line alone: a truncated .gz day too
    except (UserError, OSError, EOFError, zlib.error):
        return False
    return first.count(b"\t") == NUM_FIELDS - 1


def iter_samples(path: Path, opts: ConvertOptions, stats: ConvertResult):
    """Yield (samples, 26) int64 blocks of raw categorical values (-1 missing).

    Bad lines raise (default) or are counted into `stats` and dropped; a truncated or
    damaged gzip file is one line naming the file and the last whole line read.
    """
    src = str(path)
    line0 = 0  # lines before this block
    carry = b""
    with open_input(path) as f:
        pos = 0
        while True:
            try:
                data = f.read(opts.block_bytes)
            except (EOFError, OSError, zlib.error) as e:
                why = ("truncated: the compressed stream ends before its end marker"
                       if isinstance(e, EOFError) else f"damaged ({e})")
                raise UserError(f"gzip file {why} after {line0} whole lines: expected "
                                "a complete .gz file; nothing was written", source=src
                                ) from None
            if opts.progress is not None:
                now = input_position(f)
                opts.progress(now - pos)
                pos = now
            block = carry + data
            if not data:
                if not block:
                    break
                if not block.endswith(b"\n"):
                    block += b"\n"
                carry = b""
            else:
                cut = block.rfind(b"\n")
                if cut < 0:
                    carry = block
                    continue
                block, carry = block[: cut + 1], block[cut + 1:]
            buf = np.frombuffer(block, np.uint8)
            nlines = block.count(b"\n")
            cats = np.empty((nlines, NUM_CAT), np.int64)
            status = np.empty(nlines, np.int8)
            where = np.empty(nlines, np.int16)
            got = parse_block(buf, cats, status, where)
            assert got == nlines
            bad = np.flatnonzero(status != OK)
            if len(bad):
                msg = _message(src, line0 + int(bad[0]) + 1, int(status[bad[0]]),
                               int(where[bad[0]]))
                if not opts.skip_bad_lines:
                    raise UserError(msg)
                stats.skipped += len(bad)
                stats.first_error = stats.first_error or msg
                cats = cats[status == OK]
            stats.records += nlines
            line0 += nlines
            yield cats
            if not data:
                break


def _message(src: str, line: int, code: int, where: int) -> str:
    loc = f"{src}:{line}"
    if code == E_COUNT:
        return f"{loc}: fields: expected {NUM_FIELDS} tab-separated fields, got {where}"
    return f"{loc}: {FIELD_NAMES[where]} (field {where + 1}): {_MESSAGES[code]}"


def sniff_criteo(path: Path) -> str | None:
    """'criteo' for a file whose first line is Criteo's 40 tab-separated fields."""
    return "criteo" if looks_like_criteo(path) else None


@register_converter("criteo", suffixes=(".tsv", ".tsv.gz"), sniff=sniff_criteo)
def convert_criteo(src: Path | Sequence[Path], out: Path, opts: ConvertOptions
                   ) -> ConvertResult:
    """Criteo TSV (one file or several days, in order) -> `.sptrace`: 26 tables, batches
    of `batch_size` samples cut across file boundaries (as if the files were one)."""
    srcs = [src] if isinstance(src, Path) else list(src)
    opts = with_default_rows(opts)
    idmap = IdMap(NUM_CAT, opts, str(srcs[0]))
    B = opts.batch()
    result = ConvertResult(out, "criteo", [], 0, 0, extra={"record_name": "lines"})
    meta = {"reader": "criteo", "source_file": str(srcs[0]), "pooling": 1,
            **({"source_files": [str(p) for p in srcs]} if len(srcs) > 1 else {})}
    writer = open_writer(out, idmap, B, meta, opts)
    try:
        batches = WholeBatches(writer, B, result, sample_major_batches)
        for path in srcs:
            for cats in iter_samples(path, opts, result):
                if len(cats) == 0:
                    continue
                mask = cats >= 0
                tables = np.broadcast_to(np.arange(NUM_CAT, dtype=np.int64), cats.shape)
                mapped = cats.copy()
                mapped[mask] = idmap.map(cats[mask], tables[mask])
                batches.add(mapped)
        batches.flush()
    except BaseException:
        writer.abort()
        raise
    return finish(writer, idmap, result)


def with_default_rows(opts: ConvertOptions) -> ConvertOptions:
    """`opts` with MLPerf's `--rows 40000000` when it names no id mapping (raw 32-bit
    hashes would make 26 tables of up to 2^32 rows, almost all untouched)."""
    if opts.rows is None and not opts.dense_remap:
        return dataclasses.replace(opts, rows=(MLPERF_ROWS,))
    return opts


def input_bytes(paths: Sequence[Path]) -> int:
    """Bytes on disk of the inputs (what progress counts against)."""
    return sum(p.stat().st_size for p in paths)


def estimate_lines(paths: Sequence[Path], sample_bytes: int = 1 << 22) -> int:
    """Lines in the inputs, from the first `sample_bytes` (decompressed) of the first:
    its bytes per line and, for gzip, its compression ratio, scaled to the files' size."""
    with open_input(paths[0]) as f:
        try:
            head = f.read(sample_bytes)
        except (EOFError, OSError, zlib.error):
            head = b""
        used = max(1, input_position(f))
    lines = max(1, head.count(b"\n"))
    per_line_on_disk = used / lines if head else 1.0
    return int(input_bytes(paths) / max(per_line_on_disk, 1e-9))


def plan_note(paths: Sequence[Path], opts: ConvertOptions) -> str | None:
    """What the id mapping will cost, said before a conversion starts (None: nothing worth
    saying: an explicit --rows keeps no dictionary)."""
    if opts.rows is not None:
        return None
    lines = estimate_lines(paths)
    size = _gib(input_bytes(paths))
    if not opts.dense_remap:
        return (f"ids modulo {MLPERF_ROWS:,} per table (MLPerf's Criteo 1TB setting, the "
                "default; --rows N or --dense-remap to change it): no dictionary, memory "
                f"bounded by the {opts.block_bytes >> 20} MiB blocks (~{lines:,} lines in "
                f"{size} of input)")
    worst = lines * NUM_CAT * DENSE_BYTES_PER_ENTRY
    return (f"--dense-remap keeps every distinct (table, value) pair in memory, about "
            f"{DENSE_BYTES_PER_ENTRY} bytes each: ~{lines:,} lines in {size} of input, so "
            f"up to {_gib(worst)} if all their {NUM_CAT} values were "
            f"distinct (real days repeat most values; --rows {MLPERF_ROWS} keeps none)")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**28 else f"{n / 2**20:,.1f} MiB"


def _sniff(path: Path) -> bool:
    return looks_like_criteo(path)


@register_reader("criteo", suffixes=(".tsv", ".tsv.gz"), sniff=_sniff,
                 help="Criteo Kaggle/Terabyte TSV: 26 categorical tables, pooling 1")
def read_criteo(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    """Open a Criteo file directly (converted into a temporary store, then read in RAM):
    ids modulo `num_rows`, or densely remapped when no row count is given."""
    import tempfile

    opts = ConvertOptions(rows=(num_rows,) if num_rows else None, dense_remap=not num_rows,
                          batch_size=batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.sptrace"
        convert_criteo(path, out, opts)
        t = read_trace(out)
        trace = Trace(t.table_rows, np.array(t.indices), np.array(t.offsets),
                      np.array(t.batch_bounds), t.batch_size, t.meta, str(path))
    return trace
