"""The results folder of a sweep: a manifest, the point configs, one append-only table.

    manifest.json    experiment name and hash, axes, designs, metrics, columns, figures
    points.jsonl     one line per point: key, index, axis values, fully resolved config
    results.csv      a row per (point, design); appended and fsync'ed point by point
    results.parquet  rewritten from the CSV when a sweep finishes (when pyarrow is present)

    sweep.lock       while a sweep runs: its pid, host and start time (one sweep per folder)

Crash safety: the manifest and points file are published atomically (temporary file +
rename) before any row exists; each point's rows go out in one write followed by fsync.
A `kill -9` can therefore only leave a torn last line or a point with some of its design
rows: opening the store truncates the torn line and drops incomplete points (rewriting the
file atomically), so those points run again.

One writer: `ResultStore.open` takes sweep.lock (flock, which the kernel drops when the holder
dies); a second sweep on the folder gets a UserError naming the holder (pid, host, start),
and a lock file left by a dead sweep is taken over. Rows are keyed by (point, design):
`append_point` refuses a key already in the table, and reopening drops any duplicate a
foreign writer left, so the table never holds a row twice. Files get the permissions of
`open()` (0666 less the umask), as `run`'s.

Statuses: `ok`; `infeasible` (a legitimate result: the design cannot run at this point, e.g.
scratchpipe's window does not fit the cache; the reason is in `error`); `error` (a bug or a
broken input: the sweep exits non-zero and lists it on every rerun until rerun with
--retry-failed).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import socket
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from scratchpipe_sim.errors import UserError, os_reason
from scratchpipe_sim.safety.atomic_files import atomic_write, named

MANIFEST = "manifest.json"
POINTS = "points.jsonl"
CSV_NAME = "results.csv"
PARQUET_NAME = "results.parquet"
FORMAT = "scratchpipe-sweep"
VERSION = 1

#: leading columns of every results table; then the swept keys, then the metrics.
ID_COLUMNS = ("point", "index")
TAIL_ID_COLUMNS = ("design", "status", "error")
LOCK = "sweep.lock"
OK, INFEASIBLE, ERROR = "ok", "infeasible", "error"
STATUSES = (OK, INFEASIBLE, ERROR)


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


def read_csv_table(path: str | os.PathLike) -> Any:
    """A results table as a DataFrame, its text columns kept as text (pandas imported
    here, on first use: a sweep's start-up does not need it)."""
    import pandas as pd

    return pd.read_csv(path, dtype={"point": str, "error": str, "design": str,
                                    "status": str}, keep_default_na=True)


def csv_bytes(rows: Iterable[Sequence[str]]) -> bytes:
    """CSV text of `rows` (cells already encoded), as written atomically by its callers."""
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
    if data.get("version") != VERSION:
        raise UserError(f"written by another version of scratchpipe-sim (manifest version "
                        f"{data.get('version')!r}, {data.get('scratchpipe_sim', 'unknown')}); "
                        f"expected version {VERSION}: rerun the sweep into a new folder",
                        source=str(path), field="version")
    for key, kind in _MANIFEST_KEYS.items():
        value = data.get(key)
        ok = (isinstance(value, list) and all(isinstance(v, str) for v in value)
              if kind is list else isinstance(value, kind) and not isinstance(value, bool))
        if not ok:
            got = "nothing (missing)" if key not in data else type(value).__name__
            raise UserError(f"expected {_KIND_WORDS[kind]}, got {got}: not a manifest this "
                            "version wrote", source=str(path), field=key)
    if not isinstance(data.get("figures", {}), dict):
        raise UserError("expected a mapping of figures", source=str(path), field="figures")
    return data


#: what a manifest read back must hold (read_manifest): a folder from elsewhere, edited by
#: hand or written by another version is one line, not a KeyError in a resumed sweep
_MANIFEST_KEYS: dict[str, type] = {"name": str, "experiment_hash": str, "axes": list,
                                   "designs": list, "metrics": list, "columns": list,
                                   "points": int}
_KIND_WORDS = {str: "a string", list: "a list of names", int: "an integer"}


def _read_lock(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class SweepLock:
    """folder/sweep.lock, held with flock(2) for the sweep's lifetime.

    The kernel drops the flock when its process dies (kill -9 included), so a lock file left
    by a dead sweep (its pid no longer running) is simply taken over; the file's JSON only
    names the holder (pid, host, start) for the message a second sweep prints.
    """

    def __init__(self, folder: Path):
        self.path = folder / LOCK
        self.fd: int | None = None

    def acquire(self) -> SweepLock:
        import fcntl

        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = _read_lock(self.path)
                who = (f"pid {holder.get('pid')} on {holder.get('host')}, since "
                       f"{holder.get('started', '?')}" if holder.get("pid") is not None
                       else "a process that has not written its name yet")
                raise UserError(f"another sweep is writing here ({who}); expected one sweep "
                                "per results folder: wait for it or use another --out",
                                source=str(self.path.parent)) from None
            try:  # the file we locked may have been unlinked by a finishing holder: retry
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            me = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
            os.fsync(fd)
            self.fd = fd
            return self
        raise UserError(f"cannot take the sweep lock {self.path}; expected it to be free",
                        source=str(self.path.parent))

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink()  # before unlocking: a waiter re-checks the path's inode
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None


class ResultStore:
    """Append-only, crash-safe results of one experiment in one folder (one writer)."""

    def __init__(self, folder: Path, manifest: dict[str, Any]):
        self.folder = folder
        self.manifest = manifest
        self.columns: list[str] = list(manifest["columns"])
        self.designs: list[str] = list(manifest["designs"])
        self.csv_path = folder / CSV_NAME
        #: point key -> {design: status} for every complete point in the CSV
        self.done: dict[str, dict[str, str]] = {}
        #: (point, design) -> reason, for rows with status error / infeasible
        self.reasons: dict[tuple[str, str], str] = {}
        self.lock: SweepLock | None = None

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, folder: str | os.PathLike, manifest: dict[str, Any],
             points: Sequence[dict[str, Any]] = (), retry_failed: bool = False
             ) -> ResultStore:
        """Create the folder, or reopen it after checking it holds this same experiment;
        either way take its lock (release it with `close`)."""
        folder = Path(folder)
        manifest = {"format": FORMAT, "version": VERSION, **manifest}
        if folder.exists() and not folder.is_dir():
            raise UserError("exists and is not a folder; expected a results folder path "
                            "(new, or a previous run of this experiment)", source=str(folder),
                            field="--out")
        old = read_manifest(folder) if folder.is_dir() else None
        if old is None and folder.is_dir() and any(p.name != LOCK for p in folder.iterdir()):
            raise UserError("exists and is not a sweep results folder (no manifest.json); "
                            "expected a new or a previous results folder of this "
                            "experiment", source=str(folder))
        try:
            folder.mkdir(parents=True, exist_ok=True)
            lock = SweepLock(folder).acquire()
        except OSError as e:
            raise UserError(f"cannot create the results folder: {os_reason(e)}; expected a "
                            "writable folder path", source=str(folder), field="--out") from None
        try:
            store = cls._open_locked(folder, manifest, points, retry_failed)
        except BaseException:
            lock.release()
            raise
        store.lock = lock
        return store

    @classmethod
    def _open_locked(cls, folder: Path, manifest: dict[str, Any],
                     points: Sequence[dict[str, Any]], retry_failed: bool) -> ResultStore:
        old = read_manifest(folder)
        if old is not None and old.get("experiment_hash") != manifest["experiment_hash"] \
                and not cls._has_rows(folder):
            old = None  # a folder with no results (a run stopped before its first point)
        if old is None:
            store = cls(folder, manifest)
            try:
                atomic_write(folder / POINTS, b"".join(
                    (json.dumps(p, sort_keys=True) + "\n").encode() for p in points))
                atomic_write(folder / MANIFEST,
                             (json.dumps(manifest, indent=2) + "\n").encode())
                atomic_write(store.csv_path, csv_bytes([store.columns]))
            except OSError as e:
                raise UserError(f"cannot write the results folder: {os_reason(e)}",
                                source=str(folder), field="--out") from None
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

    @staticmethod
    def _has_rows(folder: Path) -> bool:
        path = folder / CSV_NAME
        try:
            with open(path, "rb") as f:
                f.readline()
                return bool(f.readline().strip())
        except OSError:
            return False

    def close(self) -> None:
        """Release the folder's lock."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

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
        ierr = self.columns.index("error")
        by_point: dict[str, dict[str, str]] = {}
        unique: list[list[str]] = []
        for r in body:
            if len(r) != len(self.columns):
                continue  # cannot happen after truncation; never trust a malformed row
            if r[idesign] in by_point.get(r[ip], {}):
                continue  # a duplicate (point, design): keep the first
            by_point.setdefault(r[ip], {})[r[idesign]] = r[istatus]
            unique.append(r)
        want = set(self.designs)
        keep = {k for k, d in by_point.items() if set(d) == want
                and not (retry_failed and ERROR in d.values())}
        kept = [r for r in unique if r[ip] in keep]
        if cut != len(raw) or len(kept) != len(body):
            atomic_write(self.csv_path, csv_bytes([self.columns, *kept]))
        self.done = {k: by_point[k] for k in keep}
        self.reasons = {(r[ip], r[idesign]): r[ierr] for r in kept
                        if r[istatus] in (ERROR, INFEASIBLE)}

    # -- writing -------------------------------------------------------------------------
    def append_point(self, rows: Sequence[dict[str, Any]]) -> None:
        """All design rows of one point, in one write, then fsync. A (point, design) key
        already in the table is a bug (a point run twice): refused, nothing written."""
        keys = [(str(r["point"]), str(r["design"])) for r in rows]
        dup = [k for k in keys if k[1] in self.done.get(k[0], {})] + \
            [k for i, k in enumerate(keys) if k in keys[:i]]
        if dup:
            raise RuntimeError(f"row {dup[0]} is already in {self.csv_path}")
        data = csv_bytes([[encode(r.get(c)) for c in self.columns] for r in rows])
        with open(self.csv_path, "ab") as f:
            size = f.tell()
            try:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:  # a full disk: the table keeps only whole points
                try:
                    f.truncate(size)
                except OSError:
                    pass  # a torn last row is cut by the next open's recovery
                raise named(e, self.csv_path) from None
        for r in rows:
            key = (str(r["point"]), str(r["design"]))
            self.done.setdefault(key[0], {})[key[1]] = str(r["status"])
            if r["status"] in (ERROR, INFEASIBLE):
                self.reasons[key] = str(r.get("error") or "")
            else:
                self.reasons.pop(key, None)

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
        atomic_write(self.csv_path, csv_bytes([self.columns, *body]))
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return None
        frame = read_csv_table(self.csv_path)
        out = self.folder / PARQUET_NAME
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        atomic_write(out, buf.getvalue())
        return out
