"""Any table of `(sample, table, id)` rows, in CSV or TSV (with a header) or Parquet.

Each row is one lookup: sample `sample` reads row `id` of table `table`. Rows must come
grouped by sample in non-decreasing sample order (the order a data loader yields them);
inside a sample, the order of a table's rows is its bag order (pooling = rows per sample
and table; a table a sample does not touch gets an empty bag). Consecutive samples are cut
into mini-batches of `batch_size`; tables are 0 .. max(table), found by a first pass.

Both formats are read in bounded chunks (pandas `read_csv(chunksize=)`, pyarrow
`iter_batches`); Parquet needs pyarrow (the `parquet` extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.traces.convert import (
    ConvertOptions,
    ConvertResult,
    IdMap,
    finish,
    open_writer,
    register_converter,
)
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.io import register_reader
from scratchpipe_sim.traces.store import read_trace

COLUMNS = ("sample", "table", "id")
#: text formats and their field separators.
SEPARATORS = {"csv": ",", "tsv": "\t"}


def tabular_header_format(path: Path) -> str | None:
    """'tsv' or 'csv' when the first line is a header naming sample, table and id (so a
    `.tsv` of lookups is not taken for Criteo's click log), else None."""
    from scratchpipe_sim.traces.convert import open_input

    try:
        with open_input(path) as f:
            first = f.read(1 << 12).split(b"\n", 1)[0].decode("utf-8", "replace")
    except (UserError, OSError, EOFError):
        return None
    for fmt, sep in (("tsv", "\t"), ("csv", ",")):
        names = {x.strip().strip('"').lower() for x in first.split(sep)}
        if set(COLUMNS) <= names:
            return fmt
    return None


#: ids, tables and samples are int64: a value at or beyond 2**63 would wrap to a negative one
_ID_END = 2.0**63


def int64_column(column, whole: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, mask of the good ones) of a text or numeric column: a good value is a
    number in 0..2**63-1 (`whole`: an integer); bad ones read 0. The one reader of numbers
    from table files, so a value beyond int64 is an error, never wrapped to a negative."""
    import pandas as pd  # noqa: PLC0415 (only table readers need it)

    num = pd.to_numeric(column, errors="coerce")
    v = num.to_numpy(np.float64, na_value=-1.0)
    good = (v >= 0) & (v < _ID_END)
    if whole:
        good &= v % 1 == 0
    return np.where(good, num.to_numpy(), 0).astype(np.int64), good


def _check_columns(cols, src: str) -> None:
    for c in COLUMNS:
        if c not in cols:
            raise UserError(f"no column '{c}'{closest(c, [str(x) for x in cols])}: expected "
                            f"columns {', '.join(COLUMNS)}", source=src, field=c)


def iter_rows(path: Path, fmt: str, opts: ConvertOptions,
              stats: ConvertResult | None = None) -> Iterator[tuple[np.ndarray, ...]]:
    """(sample, table, id) int64 blocks; bad rows raise or are dropped and counted."""
    import pandas as pd  # here, not at import: ~1 s that only this reader needs
    src = str(path)
    chunk_rows = max(1, opts.block_bytes // 24)
    text = fmt in SEPARATORS
    first_line = 2 if text else 1  # CSV line of the first data row (after header)
    if text:
        sep = SEPARATORS[fmt]
        try:
            head = pd.read_csv(path, nrows=0, sep=sep)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise UserError(f"not a readable CSV ({e})", source=src) from None
        _check_columns(head.columns, src)
        frames = (f for f in pd.read_csv(path, usecols=list(COLUMNS), chunksize=chunk_rows,
                                         dtype=str, keep_default_na=False, sep=sep))
    else:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError("reading Parquet needs pyarrow: pip install "
                            "'scratchpipe_sim[parquet]'", source=src) from None
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises several kinds on a bad file
            raise UserError(f"not a readable Parquet file ({e})", source=src) from None
        _check_columns(pf.schema_arrow.names, src)
        frames = (b.to_pandas() for b in pf.iter_batches(batch_size=chunk_rows,
                                                          columns=list(COLUMNS)))
    row0 = 0
    try:
        for df in frames:
            cols, ok = [], np.ones(len(df), bool)
            for c in COLUMNS:
                values, good = int64_column(df[c])
                ok &= good
                cols.append(values)
            bad = np.flatnonzero(~ok)
            if len(bad):
                r = int(bad[0])
                c = next(c for c in COLUMNS if not _good(df[c].iloc[r]))
                where = "line" if text else "row"
                got = str(df[c].iloc[r])
                got = got if len(got) <= 40 else got[:37] + "..."
                msg = (f"{src}:{row0 + first_line + r}: {c}: expected a non-negative integer "
                       f"below 2**63, got {got!r} ({where} {row0 + first_line + r})")
                if stats is None or not opts.skip_bad_lines:
                    raise UserError(msg)
                stats.skipped += len(bad)
                stats.first_error = stats.first_error or msg
                cols = [x[ok] for x in cols]
            if stats is not None:
                stats.records += len(df)
            row0 += len(df)
            yield tuple(cols)
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise UserError(f"not a readable CSV ({str(e).splitlines()[0]})", source=src) from None


def _good(x) -> bool:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return False
    return 0 <= v < _ID_END and v % 1 == 0


def _batch_csr(s, t, v, T, B):
    """CSR of whole samples: the rows of sample ranks 0..n-1 cut into batches of B."""
    change = np.concatenate(([True], s[1:] != s[:-1]))
    rank = np.cumsum(change) - 1
    n = int(rank[-1]) + 1
    k = rank // B
    j = rank % B
    nb = (n + B - 1) // B
    b_k = np.full(nb, B, np.int64)
    b_k[-1] = n - B * (nb - 1)
    bag_start = np.concatenate(([0], np.cumsum(T * b_k)))
    bag = bag_start[k] + t * b_k[k] + j
    order = np.argsort(bag, kind="stable")
    lengths = np.bincount(bag, minlength=int(bag_start[-1]))
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return v[order], t[order], offsets, bag_start.astype(np.int64), n


def _convert(src: Path, out: Path, opts: ConvertOptions, fmt: str) -> ConvertResult:
    source = str(src)
    if opts.rows is not None and len(opts.rows) > 1:
        T = len(opts.rows)
    else:  # first pass: the number of tables
        top = -1
        for _, t, _ in iter_rows(src, fmt, opts, ConvertResult(out, fmt, [], 0, 0)):
            if len(t):
                top = max(top, int(t.max()))
        T = top + 1
        if T < 1:
            raise UserError("no rows in the input (nothing to write)", source=source)
    idmap = IdMap(T, opts, source)
    B = opts.batch()
    result = ConvertResult(out, fmt, [], 0, 0, extra={"record_name": f"{fmt} records"})
    # raw ids of unknown width are stored as int64; dense ids always fit 32 bits
    writer = open_writer(out, idmap, B, {"reader": fmt, "source_file": source}, opts,
                         raw_limit=1 << 32 if opts.dense_remap else 1 << 62)
    last = -1
    try:
        pend = [np.zeros(0, np.int64)] * 3
        for s, t, v in iter_rows(src, fmt, opts, result):
            if len(s) == 0:
                continue
            if np.any(t >= T):
                raise UserError(f"table {int(t.max())} out of range: expected < {T} "
                                "(one row count per table given)", source=source,
                                field="table")
            down = np.flatnonzero(np.diff(np.concatenate(([last], s))) < 0)
            if len(down):
                raise UserError(f"near row {result.records - len(s) + int(down[0]) + 1}: "
                                f"sample {int(s[down[0]])} after a larger one: expected rows "
                                "grouped by sample in non-decreasing order", source=source,
                                field="sample")
            last = int(s[-1])
            s, t, v = (np.concatenate((a, b)) for a, b in zip(pend, (s, t, v), strict=True))
            # keep the last sample (maybe incomplete) and samples short of a full batch
            starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
            complete = len(starts) - 1
            full = (complete // B) * B
            cut = int(starts[full]) if full < len(starts) else len(s)
            if full:
                _append(writer, idmap, s[:cut], t[:cut], v[:cut], T, B, result)
            pend = [s[cut:], t[cut:], v[cut:]]
        if len(pend[0]):
            _append(writer, idmap, *pend, T, B, result)
    except BaseException:
        writer.abort()
        raise
    return finish(writer, idmap, result)


def _append(writer, idmap, s, t, v, T, B, result) -> None:
    ids, tabs, offsets, bounds, _ = _batch_csr(s, t, v, T, B)
    writer.append_batches(idmap.map(ids, tabs), offsets, bounds)
    result.num_batches += len(bounds) - 1
    result.num_accesses += len(ids)


@register_converter("csv", suffixes=(".csv", ".csv.gz"), sniff=tabular_header_format)
def convert_csv(src: Path, out: Path, opts: ConvertOptions) -> ConvertResult:
    return _convert(src, out, opts, "csv")


@register_converter("tsv")  # no suffix: .tsv is Criteo's unless the header says otherwise
def convert_tsv(src: Path, out: Path, opts: ConvertOptions) -> ConvertResult:
    return _convert(src, out, opts, "tsv")


@register_converter("parquet", suffixes=(".parquet", ".pq"))
def convert_parquet(src: Path, out: Path, opts: ConvertOptions) -> ConvertResult:
    return _convert(src, out, opts, "parquet")


def _read(path: Path, batch_size: int | None, num_rows: int | None, fmt: str) -> Trace:
    import tempfile

    opts = ConvertOptions(rows=(num_rows,) if num_rows else None, batch_size=batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.sptrace"
        _convert(path, out, opts, fmt)
        t = read_trace(out)
        return Trace(t.table_rows, np.array(t.indices), np.array(t.offsets),
                     np.array(t.batch_bounds), t.batch_size, t.meta, str(path))


@register_reader("csv", suffixes=(".csv", ".csv.gz"),
                 help="CSV with columns sample, table, id (one lookup per row)")
def read_csv(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    return _read(path, batch_size, num_rows, "csv")


@register_reader("tsv", suffixes=(".tsv", ".tsv.gz"),
                 sniff=lambda p: tabular_header_format(p) == "tsv",
                 help="TSV with a header naming sample, table, id (one lookup per row)")
def read_tsv(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    return _read(path, batch_size, num_rows, "tsv")


@register_reader("parquet", suffixes=(".parquet", ".pq"),
                 help="Parquet with columns sample, table, id; needs pyarrow")
def read_parquet(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    return _read(path, batch_size, num_rows, "parquet")
