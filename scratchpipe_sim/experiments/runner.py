"""Run a sweep: expand points, skip finished ones, execute the rest, store rows as they land.

`run_sweep` takes the point function as a parameter (default: the real simulator,
`simulate_point`), so the resume / parallel machinery is tested with a cheap deterministic
function and used with the timing model unchanged.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from scratchpipe_sim import __version__
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.experiments.executors import Outcome, PointFn, execute
from scratchpipe_sim.experiments.hashing import config_hash
from scratchpipe_sim.experiments.spec import ExperimentSpec, Point, Resolver, expand_points
from scratchpipe_sim.experiments.store import ERROR, OK, ResultStore, columns_for

#: metrics kept when an experiment does not list its own (the timing model's result keys).
DEFAULT_METRICS = ("iter_ns_mean", "iter_ns_p50", "iter_ns_p99",
                   "samples_per_s", "speedup_vs_hybrid", "hit_ratio",
                   "pcie_h2d_bytes_per_sample", "pcie_d2h_bytes_per_sample")


#: key under which a point function reports that one design (not the whole point) failed.
DESIGN_ERROR = "__error__"

_TRACE_CACHE: dict[str, Any] = {}


def _trace_key(config: dict) -> str:
    """What the trace depends on: the trace section, the model's shape and the seed (cache
    size, hardware and designs do not change it, so a cache-size sweep reuses one trace)."""
    m = config.get("model", {})
    return config_hash({"trace": config.get("trace"), "seed": config.get("seed"),
                        "tables": m.get("tables"), "batch_size": m.get("batch_size"),
                        "pooling": m.get("pooling"), "num_batches": m.get("num_batches")})


def simulate_point(config: dict, designs: tuple) -> list[dict]:
    """The real point function: validate the resolved config and run the timing model.

    The trace is built once per worker process and reused by later points with the same
    trace-determining keys. When the designs together fail (one design's cache cannot hold
    its working set, say), each design runs alone, so only the failing one gets an error
    row (`DESIGN_ERROR`) and the others keep their numbers.
    """
    from scratchpipe_sim.config import Config
    from scratchpipe_sim.timing import build_trace, simulate

    cfg = Config.from_dict(config, source="sweep point")
    names = list(designs) or list(cfg.designs)
    key = _trace_key(config)
    trace = _TRACE_CACHE.get(key)
    if trace is None:
        trace = build_trace(cfg)
        _TRACE_CACHE.clear()
        _TRACE_CACHE[key] = trace
    try:
        return list(simulate(cfg, designs=names, trace=trace))
    except Exception as e:
        if len(names) == 1:
            raise
        first = e
    rows: list[dict] = []
    for name in names:
        try:
            rows.extend(simulate(cfg, designs=[name], trace=trace))
        except Exception as e:
            from scratchpipe_sim.experiments.executors import _one_line

            rows.append({"design": name, DESIGN_ERROR: _one_line(e)})
    if all(DESIGN_ERROR in r for r in rows):
        raise first
    _fix_speedups(rows)
    return rows


def _fix_speedups(rows: list[dict]) -> None:
    """Per-design runs lose the cross-design speedup; recompute it against hybrid's row."""
    base = next((r for r in rows if r.get("design") == "hybrid" and DESIGN_ERROR not in r),
                None)
    for r in rows:
        if DESIGN_ERROR in r or "iter_ns_mean" not in r:
            continue
        r["speedup_vs_hybrid"] = (base["iter_ns_mean"] / r["iter_ns_mean"]
                                  if base is not None else None)


@dataclass
class SweepSummary:
    name: str
    out: Path
    points: int
    designs: int
    skipped: int
    ran: int
    failed: int
    parquet: Path | None

    def line(self) -> str:
        return (f"sweep {self.name}: {self.points} points x {self.designs} designs; "
                f"{self.ran} run, {self.skipped} already done, {self.failed} failed -> "
                f"{self.out}")


def experiment_hash(spec: ExperimentSpec, points: list[Point], metrics: tuple[str, ...],
                    designs: tuple[str, ...]) -> str:
    """Identity of the experiment's results: its points (by config hash), designs, metrics.
    Any change to the base config or an axis changes it, so old rows are never mixed in."""
    return config_hash({"name": spec.name, "points": sorted(p.key for p in points),
                        "designs": list(designs), "metrics": list(metrics),
                        "axes": spec.axes}, length=32)


def _designs_of(points: list[Point], spec: ExperimentSpec) -> tuple[str, ...]:
    if spec.designs:
        return spec.designs
    d = points[0].config.get("designs") if points else None
    if not d:
        raise UserError("expected a 'designs:' list (the base config has none)",
                        source=spec.source, field="designs")
    return tuple(d)


def _rows(point: Point, outcome: Outcome, designs: tuple[str, ...],
          metrics: tuple[str, ...], spec: ExperimentSpec) -> list[dict[str, Any]]:
    base = {"point": point.key, "index": point.index, **point.values}
    if outcome.error is not None:
        return [{**base, "design": d, "status": ERROR, "error": outcome.error}
                for d in designs]
    by_design = {str(r.get("design")): r for r in outcome.rows or []}
    missing = [d for d in designs if d not in by_design]
    if missing:
        err = f"the point function returned no row for design(s) {', '.join(missing)}"
        return [{**base, "design": d, "status": ERROR, "error": err} for d in designs]
    reported = set().union(*(r.keys() for r in by_design.values()
                             if DESIGN_ERROR not in r))
    for m in metrics:
        if reported and m not in reported:
            raise UserError(f"the simulator reports no metric '{m}'{closest(m, sorted(reported))}; "
                            f"it reports: {', '.join(sorted(reported))}", source=spec.source,
                            field="metrics")
    out = []
    for d in designs:
        r = by_design[d]
        if DESIGN_ERROR in r:
            out.append({**base, "design": d, "status": ERROR, "error": str(r[DESIGN_ERROR])})
            continue
        row = {**base, "design": d, "status": OK, "error": None}
        for m in metrics:
            v = r.get(m)
            row[m] = v if not (isinstance(v, float) and math.isnan(v)) else None
        out.append(row)
    return out


def _progress(total: int, initial: int, name: str, quiet: bool, stream: TextIO):
    from tqdm import tqdm

    disable = quiet or not (hasattr(stream, "isatty") and stream.isatty())
    return tqdm(total=total, initial=initial, desc=name, unit="point", file=stream,
                disable=disable, dynamic_ncols=True, smoothing=0.1)


def run_sweep(spec: ExperimentSpec, out: str | Path, *, jobs: int = 1,
              executor: str | None = None, scheduler: str | None = None,
              run_point: PointFn | None = None, resolver: Resolver | None = None,
              quiet: bool = False, retry_failed: bool = False,
              stream: TextIO | None = None) -> SweepSummary:
    """Run every unfinished point of `spec` into the results folder `out`."""
    if jobs < 1:
        raise UserError(f"expected --jobs >= 1, got {jobs}", field="--jobs")
    executor = executor or ("process" if jobs > 1 else "local")
    run_point = run_point or simulate_point
    stream = stream or sys.stderr
    points = expand_points(spec, resolver)
    designs = _designs_of(points, spec)
    metrics = spec.metrics or DEFAULT_METRICS
    manifest = {
        "name": spec.name, "experiment": spec.source,
        "experiment_hash": experiment_hash(spec, points, metrics, designs),
        "axes": spec.axes, "designs": list(designs), "metrics": list(metrics),
        "columns": columns_for(spec.axes, metrics), "figures": spec.figures,
        "points": len(points), "scratchpipe_sim": __version__,
    }
    store = ResultStore.open(out, manifest, [
        {"point": p.key, "index": p.index, "values": p.values, "config": p.config}
        for p in points], retry_failed=retry_failed)
    todo = [p for p in points if p.key not in store.done]
    by_key = {p.key: p for p in points}
    skipped = len(points) - len(todo)
    failed = ran = 0
    bar = _progress(len(points), skipped, spec.name, quiet, stream)
    try:
        tasks = [(p.key, p.config, designs) for p in todo]
        for outcome in execute(executor, run_point, tasks, jobs, scheduler):
            rows = _rows(by_key[outcome.key], outcome, designs, metrics, spec)
            store.append_point(rows)
            ran += 1
            failed += any(r["status"] == ERROR for r in rows)
            bar.update(1)
            if failed:
                bar.set_postfix(failed=failed, refresh=False)
    finally:
        bar.close()
    parquet = store.finalize([p.key for p in points])
    return SweepSummary(spec.name, Path(out), len(points), len(designs), skipped, ran, failed,
                        parquet)
