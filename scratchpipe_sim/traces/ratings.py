"""`--format ratings`: a user-item interaction log (MovieLens and alike) as a two-table trace.

Each line is one interaction `user item [rating] timestamp`: MovieLens-100k `u.data`
(tab-separated), MovieLens-1M/10M `ratings.dat` (`::`-separated), the later MovieLens
`ratings.csv` and RecBole's `.inter` files (one header line, recognised because it is not
numeric). The first two columns are the user and item ids, the last the timestamp; the
rating, if any, is ignored. Interactions are replayed in timestamp order (stable: ties keep
file order) as samples of two tables — table 0 the user id, table 1 the item id, one lookup
each — so a training data loader that reads the log in time order sees exactly this trace.
Ids are kept as they are (a table has max id + 1 rows) unless `--rows` or `--dense-remap`.

The whole file is read into memory to sort it (32 bytes per interaction: 3.2 MB for
MovieLens-100k, 0.8 GB for MovieLens-25M).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.convert import (
    ConvertOptions,
    ConvertResult,
    IdMap,
    finish,
    open_input,
    open_writer,
    register_converter,
)
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.io import register_reader
from scratchpipe_sim.traces.store import read_trace


def _layout(path: Path) -> tuple[str, int]:
    """(field separator, header lines) from the first line."""
    with open_input(path) as f:
        first = f.read(1 << 12).split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    sep = "::" if "::" in first else "\t" if "\t" in first else "," if "," in first \
        else r"\s+"
    token = re.split(r"::|[\t, ]+", first)[0] if first else ""
    return sep, 0 if token.lstrip("-").isdigit() else 1  # RecBole / CSV header line


def read_interactions(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(user, item, timestamp) int64 arrays in file order, and the number of header lines."""
    import pandas as pd  # here, not at import: ~1 s that only this reader needs

    from scratchpipe_sim.traces.tabular import int64_column
    src = str(path)
    sep, header = _layout(path)
    try:
        df = pd.read_csv(path, sep=sep, header=None, skiprows=header, dtype=str,
                         engine="python" if sep == "::" else "c", keep_default_na=False,
                         compression="infer")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        if isinstance(e, pd.errors.EmptyDataError):
            raise UserError("no interactions in the file (nothing to write)",
                            source=src) from None
        raise UserError(f"not a readable interaction log ({str(e).splitlines()[0]})",
                        source=src) from None
    if df.shape[1] < 3:
        raise UserError(f"expected user, item, [rating,] timestamp per line, got "
                        f"{df.shape[1]} field(s)", source=src, field="fields")
    cols = []
    for name, c in (("user", 0), ("item", 1), ("timestamp", df.shape[1] - 1)):
        values, good = int64_column(df[c], whole=name != "timestamp")
        if not good.all():
            r = int(np.argmax(~good))
            got = str(df[c].iloc[r])
            got = got if len(got) <= 40 else got[:37] + "..."
            raise UserError(f"{src}:{r + header + 1}: {name}: expected a non-negative "
                            f"{'number' if name == 'timestamp' else 'integer id'} below 2**63, "
                            f"got {got!r}")
        cols.append(values)
    if not len(cols[0]):
        raise UserError("no interactions in the file (nothing to write)", source=src)
    return cols[0], cols[1], cols[2], header


@register_converter("ratings")
def convert_ratings(src: Path, out: Path, opts: ConvertOptions) -> ConvertResult:
    from scratchpipe_sim.traces.tabular import _append

    users, items, stamps, _ = read_interactions(src)
    order = np.argsort(stamps, kind="stable")
    n = len(order)
    sample = np.repeat(np.arange(n, dtype=np.int64), 2)
    table = np.tile(np.array([0, 1], np.int64), n)
    ids = np.column_stack((users[order], items[order])).ravel()
    idmap = IdMap(2, opts, str(src))
    B = opts.batch()
    result = ConvertResult(out, "ratings", [], 0, 0, records=n,
                           extra={"record_name": "interactions"})
    writer = open_writer(out, idmap, B, {"reader": "ratings", "source_file": str(src),
                                         "tables": ["user", "item"],
                                         "order": "timestamp"}, opts)
    try:
        _append(writer, idmap, sample, table, ids, 2, B, result)
    except BaseException:
        writer.abort()
        raise
    return finish(writer, idmap, result)


@register_reader("ratings", help="user item [rating] timestamp log (MovieLens u.data, "
                                 "ratings.dat, RecBole .inter): 2 tables in time order")
def read_ratings(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    import tempfile

    opts = ConvertOptions(rows=(num_rows,) if num_rows else None, batch_size=batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.sptrace"
        convert_ratings(path, out, opts)
        t = read_trace(out)
        return Trace(t.table_rows, np.array(t.indices), np.array(t.offsets),
                     np.array(t.batch_bounds), t.batch_size, t.meta, str(path))
