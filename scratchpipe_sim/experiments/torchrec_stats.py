"""Per-table cache statistics of a trace for TorchRec's planner (issue 45).

TorchRec's planner takes, per table, a `torchrec.distributed.types.CacheStatistics`
(`CacheParams(stats=...)` in `ParameterConstraints`): `expected_lookups` (distinct ids per
global batch), `expected_miss_rate(clf)` (1 at load factor 0, 0 at 1) and `cacheability`
(the area under the miss-ratio curve: 0 = very cacheable, 1 = hard). TorchRec ships
`EmbeddingOffloadStats`, built from an LRU miss-ratio histogram, but nothing that makes the
histogram from a trace. This module makes it from a trace, for FBGEMM's cache as it is:

* each table alone (TorchRec's load factor is per table) replayed through the simulator's
  `fbgemm-lru` (or `fbgemm-lfu`) policy — 32-way set associative, whole mini-batches,
  per-batch deduplicated lookups, conflict misses served from UVM — at the load factors of
  `LOAD_FACTORS` (capacity = round(clf x rows), at least one row);
* the cache is warmed by the first half of the trace's batches and counted over the rest;
  a batch's miss rate is its rows fetched from host memory (fills + distinct conflict
  misses) over its distinct rows, FBGEMM's own unit (`expected_cache_fetches =
  miss_rate x expected_lookups` in TorchRec's estimator);
* between the replayed load factors the curve is interpolated linearly and made monotone
  (a running minimum: a set-associative cache is not a stack algorithm, so a larger cache
  can miss slightly more); its ends are TorchRec's contract, 1 at 0 and 0 at 1.

Why replays and not a one-pass curve: the one-pass curve of `traces/stats.py` is the fully
associative LRU's; FBGEMM's hashing into 32-way sets, its per-batch stamps and its conflict
misses are only seen by replaying its policy. A replay costs one pass per load factor.

The statistics are written to a small JSON file (`trace stats PATH --torchrec OUT`) that
holds the trace's checksum, so a planning job reads the file, not the trace, and a file of
another trace is refused by its digest. Nothing here imports TorchRec except
`cache_statistics` (the `CacheStatistics` subclass, built on first use).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.csr_trace import Trace

#: the file's format name and version
FORMAT = "scratchpipe-sim/torchrec-cache-stats"
VERSION = 1
#: load factors replayed (the ends 0 and 1 are TorchRec's contract, not replays)
LOAD_FACTORS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75)
#: FBGEMM's CacheAlgorithm -> the simulator's policy
ALGORITHMS = {"lru": "fbgemm-lru", "lfu": "fbgemm-lfu"}


@dataclass(frozen=True)
class TableCurve:
    """One table's curves over `load_factors` (0 and 1 included), shares of distinct rows
    per batch except `unplaced_access` (a share of the lookups). At 0 a cache of no rows
    places nothing (every row a conflict miss read over UVM); at 1 nothing misses."""

    table: int
    rows: int
    expected_lookups: float
    accesses_per_batch: float
    load_factors: tuple[float, ...]
    #: rows fetched (fills + distinct conflict misses) / distinct rows, monotone
    miss: tuple[float, ...]
    #: the replays' miss rates before the running minimum (the ends are the contract's)
    raw_miss: tuple[float, ...]
    fill: tuple[float, ...]
    #: rows written back (evictions) / distinct rows: below `fill` while the cache fills
    writeback: tuple[float, ...]
    unplaced_unique: tuple[float, ...]
    unplaced_access: tuple[float, ...]

    def _at(self, curve: Sequence[float], clf: float) -> float:
        return float(np.interp(min(max(float(clf), 0.0), 1.0), self.load_factors, curve))

    def miss_rate(self, clf: float) -> float:
        return self._at(self.miss, clf)

    def fill_rate(self, clf: float) -> float:
        return self._at(self.fill, clf)

    def writeback_rate(self, clf: float) -> float:
        return self._at(self.writeback, clf)

    def unplaced_unique_rate(self, clf: float) -> float:
        return self._at(self.unplaced_unique, clf)

    def unplaced_access_rate(self, clf: float) -> float:
        return self._at(self.unplaced_access, clf)

    @property
    def cacheability(self) -> float:
        """TorchRec's: the area under the miss-ratio curve over clf in [0, 1]."""
        x, y = np.asarray(self.load_factors), np.asarray(self.miss)
        return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.table, "rows": self.rows,
                "expected_lookups": self.expected_lookups,
                "accesses_per_batch": self.accesses_per_batch,
                "cacheability": self.cacheability,
                "load_factors": list(self.load_factors), "miss": list(self.miss),
                "raw_miss": list(self.raw_miss), "fill": list(self.fill),
                "writeback": list(self.writeback),
                "unplaced_unique": list(self.unplaced_unique),
                "unplaced_access": list(self.unplaced_access)}


@dataclass(frozen=True)
class TraceCacheStats:
    """Every table's curves and what they were made from (the trace's checksum)."""

    trace_sha256: str
    source: str
    batch_size: int
    num_batches: int
    warm_batches: int
    policy: str
    ways: int
    tables: tuple[TableCurve, ...]

    @property
    def table_rows(self) -> tuple[int, ...]:
        return tuple(t.rows for t in self.tables)

    def as_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "trace_sha256": self.trace_sha256,
                "source": self.source, "batch_size": self.batch_size,
                "num_batches": self.num_batches, "warm_batches": self.warm_batches,
                "policy": self.policy, "ways": self.ways,
                "tables": [t.as_dict() for t in self.tables]}

    def check_trace(self, trace: Trace, source: str | None = None) -> None:
        """Refuse statistics of another trace (by the trace's checksum)."""
        digest = trace.checksum()
        if digest != self.trace_sha256:
            raise UserError(f"these statistics are of another trace (sha256 "
                            f"{self.trace_sha256[:12]}..., from {self.source}); the trace "
                            f"given is {digest[:12]}...: expected statistics made from it "
                            "(scratchpipe-sim trace stats PATH --torchrec OUT)",
                            source=source, field="trace_sha256")

    def check_rows(self, table_rows: Sequence[int], source: str | None, field: str) -> None:
        """Refuse statistics whose tables are not the config's (count and rows)."""
        if tuple(int(r) for r in table_rows) != self.table_rows:
            raise UserError(f"the statistics hold {len(self.tables)} tables of rows "
                            f"{_rows_text(self.table_rows)}; the config has "
                            f"{len(table_rows)} of rows {_rows_text(table_rows)}: expected "
                            "the same tables", source=source, field=field)


def _rows_text(rows: Sequence[int]) -> str:
    rows = [int(r) for r in rows]
    return str(rows[0]) if len(set(rows)) == 1 else ",".join(map(str, rows[:6])) + (
        ",..." if len(rows) > 6 else "")


def table_trace(trace: Trace, t: int) -> Trace:
    """Table t of `trace` as a one-table trace (its bags and ids copied, batches kept)."""
    T = trace.num_tables
    bounds = np.asarray(trace.batch_bounds, np.int64)
    offs = np.asarray(trace.offsets, np.int64)
    B = np.diff(bounds) // T
    lo = bounds[:-1] + t * B
    hi = lo + B
    bags = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in zip(lo, hi, strict=True)]
                          or [np.zeros(0, np.int64)])
    lengths = offs[bags + 1] - offs[bags]
    indices = np.concatenate([np.asarray(trace.indices[offs[a]:offs[b]], np.int64)
                              for a, b in zip(lo, hi, strict=True)] or [np.zeros(0, np.int64)])
    new_offs = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    new_bounds = np.concatenate(([0], np.cumsum(B))).astype(np.int64)
    return Trace(np.array([int(trace.table_rows[t])], np.int64), indices, new_offs,
                 new_bounds, trace.batch_size, {}, f"{trace.source}[table {t}]")


def replay_shares(sub: Trace, clf: float, policy: str, ways: int, warm: int
                  ) -> dict[str, float]:
    """One replay of a one-table trace at load factor `clf`: its shares over the batches
    after `warm` (the unique rows and lookups per batch too)."""
    from scratchpipe_sim.policies.engine import make_policy, replay_columns

    rows = int(sub.table_rows[0])
    cap = max(1, int(round(clf * rows)))
    cols, _ = replay_columns(sub, make_policy(policy, cap, rows, ways=ways))
    tot = {k: float(np.sum(cols[k][warm:])) for k in
           ("accesses", "unique", "fills", "writebacks", "unique_unplaced",
                         "unplaced")}
    n = max(sub.num_batches - warm, 1)
    U, A = max(tot["unique"], 1.0), max(tot["accesses"], 1.0)
    return {"miss": (tot["fills"] + tot["unique_unplaced"]) / U, "fill": tot["fills"] / U,
            "writeback": tot["writebacks"] / U,
            "unplaced_unique": tot["unique_unplaced"] / U,
            "unplaced_access": tot["unplaced"] / A, "unique_per_batch": tot["unique"] / n,
            "accesses_per_batch": tot["accesses"] / n}


def table_curve(trace: Trace, t: int, policy: str = "fbgemm-lru", ways: int = 32,
                load_factors: Sequence[float] = LOAD_FACTORS, warm: int | None = None
                ) -> TableCurve:
    """Table t's curves from one replay per load factor (see the module doc)."""
    sub = table_trace(trace, t) if trace.num_tables > 1 else trace
    warm = trace.num_batches // 2 if warm is None else warm
    lfs = sorted({float(x) for x in load_factors if 0.0 < float(x) < 1.0})
    reps = [replay_shares(sub, x, policy, ways, warm) for x in lfs]
    raw = [1.0] + [r["miss"] for r in reps] + [0.0]
    miss = np.minimum.accumulate(np.clip(raw, 0.0, 1.0))
    mono = [float(v) for v in miss]

    def curve(key: str, at0: float) -> tuple[float, ...]:
        return tuple([at0] + [r[key] for r in reps] + [0.0])

    first = reps[0] if reps else replay_shares(sub, 1.0, policy, ways, warm)
    return TableCurve(
        table=t, rows=int(trace.table_rows[t]), expected_lookups=first["unique_per_batch"],
        accesses_per_batch=first["accesses_per_batch"],
        load_factors=tuple([0.0] + lfs + [1.0]), miss=tuple(mono), raw_miss=tuple(raw),
        fill=curve("fill", 0.0), writeback=curve("writeback", 0.0),
        unplaced_unique=curve("unplaced_unique", 1.0),
        unplaced_access=curve("unplaced_access", 1.0))


def trace_stats(trace: Trace, algorithm: str = "lru", ways: int = 32,
                load_factors: Sequence[float] = LOAD_FACTORS) -> TraceCacheStats:
    """Every table's curves (`table_curve`) with the trace's checksum."""
    if algorithm not in ALGORITHMS:
        raise UserError(f"unknown cache algorithm '{algorithm}'; expected one of: "
                        f"{', '.join(ALGORITHMS)}", field="algorithm")
    policy = ALGORITHMS[algorithm]
    warm = trace.num_batches // 2
    tables = tuple(table_curve(trace, t, policy, ways, load_factors, warm)
                   for t in range(trace.num_tables))
    return TraceCacheStats(trace.checksum(), str(trace.source), int(trace.batch_size),
                           int(trace.num_batches), warm, policy, int(ways), tables)


# -- the file ---------------------------------------------------------------------------------
def write_stats(stats: TraceCacheStats, path: str | Path) -> Path:
    from scratchpipe_sim.safety import jsonout
    from scratchpipe_sim.safety.atomic_files import atomic_write

    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UserError("the folder to write into does not exist or is not a folder",
                        source=str(path), field="--torchrec")
    return atomic_write(path, jsonout.dumps(stats.as_dict(), indent=1) + "\n")


def _curve_of(d: dict[str, Any], key: str, n: int, where: str, src: str) -> tuple[float, ...]:
    v = d.get(key)
    if (not isinstance(v, list) or len(v) != n
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                       and math.isfinite(x) and 0.0 <= x <= 1.0 for x in v)):
        raise UserError(f"expected a list of {n} numbers in [0, 1]", source=src,
                        field=f"{where}.{key}")
    return tuple(float(x) for x in v)


def read_stats(path: str | Path) -> TraceCacheStats:
    """A statistics file written by `write_stats` (one-line errors naming the key)."""
    from scratchpipe_sim.safety.paths import input_file

    src = str(path)
    p = input_file(path, "statistics file", field="--stats")
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"cannot read as JSON: {e}", source=src) from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise UserError(f"not a statistics file: expected format '{FORMAT}' (written by "
                        "trace stats --torchrec)", source=src, field="format")
    if d.get("version") != VERSION:
        raise UserError(f"version {d.get('version')!r}: expected {VERSION}", source=src,
                        field="version")
    for key, typ in (("trace_sha256", str), ("source", str), ("batch_size", int),
                     ("num_batches", int), ("warm_batches", int), ("policy", str),
                     ("ways", int), ("tables", list)):
        if not isinstance(d.get(key), typ) or isinstance(d.get(key), bool):
            raise UserError(f"expected {typ.__name__}", source=src, field=key)
    if d["policy"] not in ALGORITHMS.values():
        raise UserError(f"policy {d['policy']!r}: expected one of "
                        f"{', '.join(ALGORITHMS.values())}", source=src, field="policy")
    tables = []
    for i, t in enumerate(d["tables"]):
        where = f"tables[{i}]"
        if not isinstance(t, dict):
            raise UserError("expected a mapping", source=src, field=where)
        lfs = t.get("load_factors")
        if (not isinstance(lfs, list) or len(lfs) < 2 or lfs[0] != 0 or lfs[-1] != 1
                or any(not isinstance(x, (int, float)) for x in lfs)
                or any(b <= a for a, b in zip(lfs, lfs[1:], strict=False))):
            raise UserError("expected increasing load factors from 0 to 1", source=src,
                            field=f"{where}.load_factors")
        n = len(lfs)
        curves = {k: _curve_of(t, k, n, where, src) for k in
                  ("miss", "raw_miss", "fill", "writeback", "unplaced_unique",
                   "unplaced_access")}
        if any(b > a for a, b in zip(curves["miss"], curves["miss"][1:], strict=False)):
            raise UserError("expected a non-increasing miss curve", source=src,
                            field=f"{where}.miss")
        for key in ("rows", "expected_lookups", "accesses_per_batch"):
            v = t.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0:
                raise UserError("expected a number >= 0", source=src, field=f"{where}.{key}")
        tables.append(TableCurve(i, int(t["rows"]), float(t["expected_lookups"]),
                                 float(t["accesses_per_batch"]),
                                 tuple(float(x) for x in lfs), **curves))
    return TraceCacheStats(d["trace_sha256"], d["source"], d["batch_size"], d["num_batches"],
                           d["warm_batches"], d["policy"], d["ways"], tuple(tables))


# -- TorchRec's side ---------------------------------------------------------------------------
@functools.cache
def _statistics_class() -> type:
    """The `CacheStatistics` subclass (TorchRec imported here, on first use)."""
    from torchrec.distributed.types import CacheStatistics

    class SimulatedCacheStatistics(CacheStatistics):
        """One table's statistics from the simulator's replays of FBGEMM's cache."""

        def __init__(self, curve: TableCurve) -> None:
            self.curve = curve

        @property
        def expected_lookups(self) -> float:
            return self.curve.expected_lookups

        def expected_miss_rate(self, clf: float) -> float:
            return self.curve.miss_rate(clf)

        @property
        def cacheability(self) -> float:
            return self.curve.cacheability

    return SimulatedCacheStatistics


def cache_statistics(curve: TableCurve) -> Any:
    """A `torchrec.distributed.types.CacheStatistics` of one table (needs TorchRec)."""
    return _statistics_class()(curve)
