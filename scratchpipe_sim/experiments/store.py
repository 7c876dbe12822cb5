"""The results folder of a sweep: a manifest, the point configs, one append-only table.

    manifest.json    experiment name and hash, axes, designs, metrics, columns, figures
    points.jsonl     one line per point: key, index, axis values, fully resolved config
    results.csv      a row per (point, design); appended and fsync'ed point by point
    results.parquet  rewritten from the CSV when a sweep finishes (when pyarrow is present)

Crash safety: the manifest and points file are published atomically (temporary file +
rename) before any row exists; each point's rows go out in one write followed by fsync.
A `kill -9` can therefore only leave a torn last line or a point with some of its design
rows: opening the store truncates the torn line and drops incomplete points (rewriting the
file atomically), so those points run again and no row is ever written twice.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from scratchpipe_sim.errors import UserError

MANIFEST = "manifest.json"
POINTS = "points.jsonl"
CSV_NAME = "results.csv"
PARQUET_NAME = "results.parquet"
FORMAT = "scratchpipe-sweep"
VERSION = 1

#: leading columns of every results table; then the swept keys, then the metrics.
ID_COLUMNS = ("point", "index")
TAIL_ID_COLUMNS = ("design", "status", "error")
OK, ERROR = "ok", "error"


def columns_for(axes: Sequence[str], metrics: Sequence[str]) -> list[str]:
    return [*ID_COLUMNS, *axes, *TAIL_ID_COLUMNS, *metrics]


def encode(value: Any) -> str:
    """One CSV cell: floats by repr (round-trip exact), lists/dicts as canonical JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if hasattr(value, "item") and callable(value.item):
        return encode(value.item())
    return str(value).replace("\r", " ").replace("\n", " ")


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary sibling + fsync + rename: readers see old or new, never half."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _csv_bytes(rows: Iterable[Sequence[str]]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow(r)
    return buf.getvalue().encode("utf-8")


def read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError("unreadable sweep manifest", source=str(path)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"not a {FORMAT} manifest", source=str(path))
    return data


class ResultStore:
    """Append-only, crash-safe results of one experiment in one folder."""

    def __init__(self, folder: Path, manifest: dict[str, Any]):
        self.folder = folder
        self.manifest = manifest
        self.columns: list[str] = list(manifest["columns"])
        self.designs: list[str] = list(manifest["designs"])
        self.csv_path = folder / CSV_NAME
        #: point key -> {design: status} for every complete point in the CSV
        self.done: dict[str, dict[str, str]] = {}

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, folder: str | os.PathLike, manifest: dict[str, Any],
             points: Sequence[dict[str, Any]] = (), retry_failed: bool = False
             ) -> ResultStore:
        """Create the folder, or reopen it after checking it holds this same experiment."""
        folder = Path(folder)
        manifest = {"format": FORMAT, "version": VERSION, **manifest}
        old = read_manifest(folder) if folder.is_dir() else None
        if old is None:
            if folder.is_dir() and any(folder.iterdir()):
                raise UserError("exists and is not a sweep results folder (no manifest.json); "
                                "expected a new or a previous results folder of this "
                                "experiment", source=str(folder))
            folder.mkdir(parents=True, exist_ok=True)
            store = cls(folder, manifest)
            atomic_write(folder / POINTS, b"".join(
                (json.dumps(p, sort_keys=True) + "\n").encode() for p in points))
            atomic_write(folder / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
            atomic_write(store.csv_path, _csv_bytes([store.columns]))
            return store
        if old.get("experiment_hash") != manifest["experiment_hash"]:
            raise UserError(
                f"holds results of experiment '{old.get('name')}' (hash "
                f"{old.get('experiment_hash')}), not of '{manifest['name']}' (hash "
                f"{manifest['experiment_hash']}): its config or axes differ; expected a new "
                "--out folder (or delete this one)", source=str(folder))
        store = cls(folder, old)
        store._recover(retry_failed)
        return store

    def _recover(self, retry_failed: bool) -> None:
        """Truncate a torn last line; drop incomplete points (and failed ones on retry)."""
        raw = self.csv_path.read_bytes() if self.csv_path.is_file() else b""
        cut = raw.rfind(b"\n") + 1
        text = raw[:cut].decode("utf-8", errors="strict")
        rows = list(csv.reader(io.StringIO(text)))
        if not rows or rows[0] != self.columns:
            if rows:
                raise UserError("results table's header does not match its manifest "
                                "(written by another version or experiment?)",
                                source=str(self.csv_path))
            rows = [self.columns]
        body = rows[1:]
        ip, idesign, istatus = (self.columns.index(c) for c in ("point", "design", "status"))
        by_point: dict[str, dict[str, str]] = {}
        for r in body:
            if len(r) != len(self.columns):
                continue  # cannot happen after truncation; never trust a malformed row
            by_point.setdefault(r[ip], {})[r[idesign]] = r[istatus]
        want = set(self.designs)
        keep = {k for k, d in by_point.items() if set(d) == want
                and not (retry_failed and ERROR in d.values())}
        kept = [r for r in body if len(r) == len(self.columns) and r[ip] in keep]
        if cut != len(raw) or len(kept) != len(body):
            atomic_write(self.csv_path, _csv_bytes([self.columns, *kept]))
        self.done = {k: by_point[k] for k in keep}

    # -- writing -------------------------------------------------------------------------
    def append_point(self, rows: Sequence[dict[str, Any]]) -> None:
        """All design rows of one point, in one write, then fsync."""
        data = _csv_bytes([[encode(r.get(c)) for c in self.columns] for r in rows])
        with open(self.csv_path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        for r in rows:
            self.done.setdefault(str(r["point"]), {})[str(r["design"])] = str(r["status"])

    def finalize(self, order: Sequence[str]) -> Path | None:
        """Rewrite the CSV in point order (so --jobs N gives the same file as --jobs 1) and
        the Parquet copy; returns the Parquet path or None without pyarrow."""
        raw = self.csv_path.read_bytes()
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
        body = rows[1:]
        rank = {k: i for i, k in enumerate(order)}
        drank = {d: i for i, d in enumerate(self.designs)}
        ip, idesign = self.columns.index("point"), self.columns.index("design")
        body.sort(key=lambda r: (rank.get(r[ip], len(rank)), drank.get(r[idesign], 0)))
        atomic_write(self.csv_path, _csv_bytes([self.columns, *body]))
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return None
        from scratchpipe_sim.experiments.results import read_csv_table

        frame = read_csv_table(self.csv_path)
        out = self.folder / PARQUET_NAME
        fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=self.folder)
        os.close(fd)
        try:
            frame.to_parquet(tmp, index=False)
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return out
