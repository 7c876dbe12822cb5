"""Read a results table (folder, CSV or Parquet) for `plot` and `compare`.

A sweep's folder holds many points; a `run` folder (results.csv + metadata.json, no
manifest) is read as a one-point result: point "run", no swept keys, every row ok, and the
stage breakdown as its default figure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments.store import CSV_NAME, MANIFEST, PARQUET_NAME, read_manifest


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


def read_csv_table(path: str | os.PathLike) -> pd.DataFrame:
    return pd.read_csv(path, dtype={"point": str, "error": str, "design": str,
                                    "status": str}, keep_default_na=True)


def load_results(path: str | os.PathLike) -> Results:
    p = Path(path)
    if p.is_dir():
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
        return _one_point(frame, str(table))
    return Results(frame=frame, source=str(table), manifest=manifest or {})


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
