"""Read a results table (folder, CSV or Parquet) for `plot` and `compare`.

A sweep's folder holds many points; a `run` folder (results.csv + metadata.json, no
manifest) is read as a one-point result: point "run", no swept keys, every row ok, and the
stage breakdown as its default figure.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments.results_store import (
    CSV_NAME,
    MANIFEST,
    PARQUET_NAME,
    read_csv_table,
    read_manifest,
)
from scratchpipe_sim.safety.paths import input_kind

#: the columns of a results table that hold text; every other column but a swept key is a
#: number (or empty), checked when the table is read back
TEXT_COLUMNS = ("point", "design", "status", "error", "policy")


@dataclass
class Results:
    frame: pd.DataFrame
    source: str
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def axes(self) -> list[str]:
        if "axes" in self.manifest:
            return [a for a in self.manifest["axes"] if a in self.frame.columns]
        return [c for c in self.frame.columns if "." in c]

    @property
    def figures(self) -> dict[str, dict[str, Any]]:
        return dict(self.manifest.get("figures") or {})

    def ok(self) -> pd.DataFrame:
        """Rows of points that ran (the others are marked in figures, not drawn as data)."""
        f = self.frame
        return f[f["status"] == "ok"] if "status" in f.columns else f

    def not_ok(self) -> pd.DataFrame:
        """Rows that did not run: status infeasible (a result) or error."""
        f = self.frame
        return f[f["status"] != "ok"] if "status" in f.columns else f.iloc[0:0]


def check_complete_csv(path: Path) -> None:
    """A UserError unless every row of the CSV at `path` has the header's fields and the
    file ends with a newline. Why: pandas reads a table cut mid-row (a disk that filled, a
    copy interrupted) as a short last row padded with NaN, and a report built from it would
    look whole. Read as a stream: the file is never held twice."""
    with open(path, newline="", encoding="utf-8", errors="strict") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise UserError("empty results table: expected a header row", source=str(path))
        for row in reader:
            if len(row) != len(header):
                raise UserError(f"results table is damaged at line {reader.line_num}: "
                                f"{len(row)} field(s), expected {len(header)} (a write cut "
                                "short? rerun the run; a sweep resumes and repairs it)",
                                source=str(path))
        f.seek(0, os.SEEK_END)
        end = f.tell()
    with open(path, "rb") as fb:
        fb.seek(max(0, end - 1))
        if end and fb.read(1) != b"\n":
            raise UserError("results table ends mid-row (no final newline: a write cut "
                            "short? rerun the run; a sweep resumes and repairs it)",
                            source=str(path))


def load_results(path: str | os.PathLike) -> Results:
    p = Path(path)
    if input_kind(p, "results folder or table") == "folder":
        folder = p
        table = p / PARQUET_NAME if (p / PARQUET_NAME).is_file() else p / CSV_NAME
    else:
        folder, table = p.parent, p
    if not table.is_file():
        raise UserError("no results table (results.csv or results.parquet)", source=str(p))
    try:
        if table.suffix == ".parquet":
            frame = pd.read_parquet(table)
        elif table.suffix == ".csv":
            check_complete_csv(table)
            frame = read_csv_table(table)
        else:
            raise UserError("expected a results folder, .csv or .parquet file", source=str(p))
    except UserError:
        raise
    except Exception as e:  # a corrupt or foreign file is the user's input
        raise UserError(f"cannot read results table: {e}".splitlines()[0],
                        source=str(table)) from None
    for col in ("design",):
        if col not in frame.columns:
            raise UserError(f"not a results table: no '{col}' column", source=str(table))
    manifest = read_manifest(folder) if (folder / MANIFEST).is_file() else None
    if manifest is None and "point" not in frame.columns:
        res = _one_point(frame, str(table))
    else:
        res = Results(frame=frame, source=str(table), manifest=manifest or {})
    _check_numeric(res)
    return res


def _check_numeric(res: Results) -> None:
    """Every column but the text ones and the swept keys must be numbers: a table from
    elsewhere (a hand edit, another tool) is one line naming the column and row, not a
    TypeError deep in a division or a plot."""
    axes = set(res.axes)
    for col in res.frame.columns:  # dotted columns are config keys (swept or recorded)
        if col in TEXT_COLUMNS or col in axes or "." in str(col):
            continue
        values = res.frame[col]
        if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            continue
        num = pd.to_numeric(values, errors="coerce")
        bad = num.isna() & values.notna() & (values.astype(str).str.strip() != "")
        if bad.any():
            row = int(bad.to_numpy().argmax())
            got = str(values.iloc[row])[:40]
            raise UserError(f"column '{col}' holds {got!r} in data row {row + 1}: expected "
                            "a number (a table written by scratchpipe-sim run or sweep)",
                            source=res.source, field=str(col))
        res.frame[col] = num


def _one_point(frame: pd.DataFrame, source: str) -> Results:
    """A `run` result (one row per design, no sweep columns) as a sweep of one point."""
    if frame["design"].duplicated().any():
        raise UserError("a design appears twice in a table without 'point' and 'index' "
                        "columns; expected a `run` results.csv (one row per design) or a "
                        "sweep's results folder", source=source)
    frame = frame.copy()
    frame.insert(0, "index", 0)
    frame.insert(0, "point", "run")
    if "status" not in frame.columns:
        frame["status"] = "ok"
    return Results(frame=frame, source=source,
                   manifest={"axes": [], "figures": {"stage-breakdown": {}}, "kind": "run"})
