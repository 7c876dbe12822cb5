"""Run a sweep: expand points, skip finished ones, execute the rest, store rows as they land.

`run_sweep` takes the point function as a parameter (default: the real simulator,
`simulate_point`), so the resume / parallel machinery is tested with a cheap deterministic
function and used with the timing model unchanged.
"""

from __future__ import annotations

import copy
import functools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from scratchpipe_sim import __version__
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.experiments.executors import Outcome, PointFn, execute
from scratchpipe_sim.experiments.hashing import config_hash
from scratchpipe_sim.experiments.progress import Progress
from scratchpipe_sim.experiments.results_store import (
    ERROR,
    INFEASIBLE,
    OK,
    ResultStore,
    columns_for,
)
from scratchpipe_sim.experiments.run_folder import versions
from scratchpipe_sim.experiments.spec import ExperimentSpec, Point, Resolver, expand_points

#: metrics kept when an experiment does not list its own (the timing model's result keys).
DEFAULT_METRICS = ("iter_ns_mean", "iter_ns_p50", "iter_ns_p99",
                   "samples_per_s", "speedup_vs_hybrid", "hit_ratio",
                   "pcie_h2d_bytes_per_sample", "pcie_d2h_bytes_per_sample")


#: key under which a point function reports that one design (not the whole point) failed.
DESIGN_ERROR = "__error__"
#: key under which a point function reports that one design cannot run at this point (a
#: legitimate result: the simulator's UserError, e.g. scratchpipe's window does not fit).
DESIGN_INFEASIBLE = "__infeasible__"

_TRACE_CACHE: dict[str, Any] = {}


def _trace_key(config: dict, cfg: Any) -> str:
    """What the trace depends on: the trace section, the model's shape, the seed and the
    warm-up prefix; with `cache.warmup_batches: auto` the prefix grows with the cache
    (`timing/trace_setup.py`), so its rows, the designs and model.warmup_batches are keys
    too (hardware never is: a sweep over anything else reuses one trace)."""
    m = config.get("model", {})
    wb = config.get("cache", {}).get("warmup_batches", "auto")
    auto = ({"capacity_rows": cfg.capacity_rows(), "designs": config.get("designs"),
             "measured_from": m.get("warmup_batches")} if wb == "auto" else {})
    return config_hash({"trace": config.get("trace"), "seed": config.get("seed"),
                        "tables": m.get("tables"), "batch_size": m.get("batch_size"),
                        "pooling": m.get("pooling"), "num_batches": m.get("num_batches"),
                        "warmup_batches": wb, **auto})


def point_trace(config: dict, cfg: Any, cache: bool = True, jobs: int = 1) -> Any:
    """The trace of a sweep point, built once per worker process (after a memory estimate)
    and reused by later points with the same trace-determining keys (`cache=False`: a
    generated trace is not read from or written to the on-disk trace cache)."""
    from scratchpipe_sim.timing import build_trace
    from scratchpipe_sim.timing.trace_setup import check_config_memory, check_trace_memory

    key = _trace_key(config, cfg)
    trace = _TRACE_CACHE.get(key)
    if trace is None:
        from scratchpipe_sim.traces.csr_trace import forget_slices

        _TRACE_CACHE.clear()  # the previous trace (and its slices) freed before building
        forget_slices()
        check_config_memory(cfg, source="sweep point")
        trace = build_trace(cfg, cache=cache, jobs=jobs)
        check_trace_memory(cfg, trace, source="sweep point")
        _TRACE_CACHE[key] = trace
    return trace


def simulate_point(config: dict, designs: tuple, replay_cache: bool = True,
                   replay_jobs: int = 1) -> list[dict]:
    """The real point function: validate the resolved config and run the timing model
    (`replay_cache=False`: recompute policy replays instead of reading the on-disk cache;
    `replay_jobs`: processes for the point's trace tables and replays, as `run --jobs`).

    The trace is built once per worker process (after a memory estimate) and reused by
    later points with the same trace-determining keys. When the designs together fail (one
    design's cache cannot hold its window, say), each design runs alone, so only the
    failing one gets an infeasible (`DESIGN_INFEASIBLE`: the simulator's UserError) or
    error (`DESIGN_ERROR`: any other exception) row and the others keep their numbers.
    """
    from scratchpipe_sim.config import Config
    from scratchpipe_sim.timing import simulate

    cfg = Config.from_dict(config, source="sweep point")
    names = list(designs) or list(cfg.designs)
    rows: list[dict] = []
    try:
        trace = point_trace(config, cfg, replay_cache, replay_jobs)
    except UserError:
        # a design that cannot be built here (its input check) fails the trace's warm-up
        # check, which builds every design, only when the trace is not yet this worker's:
        # infeasible either way, the others priced on the trace of their own
        from scratchpipe_sim.timing.designs.design_parameters import refusals

        unbuilt = dict(refusals(cfg, names, build=True))
        if not unbuilt:
            raise
        rows = [_failed_row(n, e) for n, e in unbuilt.items()]
        names = [n for n in names if n not in unbuilt]
        if not names:
            return rows
        config = {**config, "designs": names}
        cfg = Config.from_dict(config, source="sweep point")
        trace = point_trace(config, cfg, replay_cache, replay_jobs)
    if not rows:
        try:
            return list(simulate(cfg, designs=names, trace=trace,
                                 replay_cache=replay_cache, jobs=replay_jobs))
        except Exception as e:
            if len(names) == 1:
                return [_failed_row(names[0], e)]
    for name in names:
        try:
            rows.extend(simulate(cfg, designs=[name], trace=trace,
                                 replay_cache=replay_cache))
        except Exception as e:
            rows.append(_failed_row(name, e))
    _fix_speedups(rows)
    return rows


def refused_everywhere(points: list[Point], designs: tuple[str, ...],
                       spec: ExperimentSpec) -> None:
    """Before any point runs: a design whose input check (`check_inputs`: what a config
    alone decides, the cluster's ranks or HBM, say) refuses every point is a mistake in
    the experiment, one line naming the key (exit 2); one that refuses some points only
    is infeasible there (a sweep over batch sizes past the HBM, say), as before."""
    from scratchpipe_sim.config import Config
    from scratchpipe_sim.timing.designs.design_parameters import check_inputs

    cfgs: dict[int, Config] = {}
    for name in designs:
        first: tuple[Point, UserError] | None = None
        for p in points:
            if p.index not in cfgs:
                cfgs[p.index] = Config.from_dict(p.config, source=spec.base_source)
            try:
                check_inputs(cfgs[p.index], [name])
            except UserError as e:
                first = first or (p, e)
                continue
            break
        else:
            if first is not None:
                p, e = first
                raise UserError(f"design {name} refuses every sweep point, the first "
                                f"{p.values}: {e.line()}", source=spec.source)


def _failed_row(design: str, e: Exception) -> dict:
    """A design that did not run: infeasible when the simulator says why in a UserError
    (the input asks for something this design cannot do), an error otherwise (a bug)."""
    from scratchpipe_sim.experiments.executors import _one_line

    return {"design": design,
            (DESIGN_INFEASIBLE if isinstance(e, UserError) else DESIGN_ERROR): _one_line(e)}


def _failed(r: dict) -> bool:
    return DESIGN_ERROR in r or DESIGN_INFEASIBLE in r


def reported_metrics(config: dict, designs: tuple[str, ...],
                     replay_cache: bool = True) -> set[str] | None:
    """The metric names the simulator reports for `config`, from a few-batch run of each
    design (seconds, not the point's full run); None when no design could run that way."""
    from scratchpipe_sim.config import Config
    from scratchpipe_sim.timing import simulate
    from scratchpipe_sim.timing.trace_setup import check_config_memory

    short = copy.deepcopy(config)
    model = short.setdefault("model", {})
    nb = min(int(model.get("num_batches", 4)), 4)
    model["num_batches"] = nb
    model["warmup_batches"] = min(int(model.get("warmup_batches", 0)), nb - 1)
    try:
        cfg = Config.from_dict(short, source="metric check")
        check_config_memory(cfg)
    except Exception:
        return None  # too large to probe, or not valid shortened: checked at the first point
    names: set[str] = set()
    for d in designs:
        try:
            for r in simulate(cfg, designs=[d], replay_cache=replay_cache):
                names.update(r)
        except Exception:
            continue
    return names or None


def check_metrics(metrics: tuple[str, ...], reported: set[str], spec: ExperimentSpec) -> None:
    for m in metrics:
        if m not in reported:
            raise UserError(f"the simulator reports no metric '{m}'"
                            f"{closest(m, sorted(reported))}; it reports: "
                            f"{', '.join(sorted(reported))}", source=spec.source,
                            field="metrics")


def _fix_speedups(rows: list[dict]) -> None:
    """Per-design runs lose the cross-design speedup; recompute it against the baseline's
    row (the design whose class sets `baseline`: hybrid)."""
    from scratchpipe_sim.timing.designs import baseline_design  # noqa: PLC0415

    name = baseline_design()
    base = next((r for r in rows if r.get("design") == name and not _failed(r)), None)
    for r in rows:
        if _failed(r) or "iter_ns_mean" not in r:
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
    failed: int            # points with an error row in the table (this run or before)
    parquet: Path | None
    infeasible: int = 0    # design rows marked infeasible in the table
    #: every error row in the table: (point index, axis values, design, reason)
    errors: list[tuple[int, dict, str, str]] = field(default_factory=list)

    def line(self) -> str:
        text = (f"sweep {self.name}: {self.points} points x {self.designs} designs; "
                f"{self.ran} run, {self.skipped} already done")
        if self.infeasible:
            text += f", {self.infeasible} infeasible design result(s) (marked in figures)"
        text += f", {self.failed} point(s) with errors -> {self.out}"
        return text

    def error_lines(self, limit: int = 20) -> list[str]:
        out = []
        for index, values, design, reason in self.errors[:limit]:
            vals = ", ".join(f"{k}={v}" for k, v in values.items())
            out.append(f"error: point {index} ({vals}) {design}: {reason}")
        if len(self.errors) > limit:
            out.append(f"... and {len(self.errors) - limit} more error rows (see the 'error' "
                       "column of results.csv)")
        return out


def experiment_hash(spec: ExperimentSpec, points: list[Point], metrics: tuple[str, ...],
                    designs: tuple[str, ...]) -> str:
    """Identity of the experiment's results: its points (by config hash), designs, metrics.
    Any change to the base config or an axis changes it, so old rows are never mixed in."""
    return config_hash({"name": spec.name, "points": sorted(p.key for p in points),
                        "designs": list(designs), "metrics": list(metrics),
                        "axes": spec.axes}, length=32)


def sweep_designs(points: list[Point], spec: ExperimentSpec) -> tuple[str, ...]:
    """The designs a sweep runs: the experiment's list, else its base config's."""
    if spec.designs:
        return spec.designs
    d = points[0].config.get("designs") if points else None
    if not d:
        raise UserError("expected a 'designs:' list (the base config has none)",
                        source=spec.source, field="designs")
    dup = sorted({x for x in d if list(d).count(x) > 1})
    if dup:
        raise UserError(f"design '{dup[0]}' listed twice; expected each design once",
                        source=spec.base_source, field="designs")
    return tuple(d)


def point_rows(point: Point, outcome: Outcome, designs: tuple[str, ...],
               metrics: tuple[str, ...], spec: ExperimentSpec) -> list[dict[str, Any]]:
    """The results-table rows of one point's outcome, one per design (public: the golden
    regression in tests/golden/ builds a sweep's rows the way `run_sweep` stores them)."""
    base = {"point": point.key, "index": point.index, **point.values}
    if outcome.error is not None:
        return [{**base, "design": d, "status": ERROR, "error": outcome.error}
                for d in designs]
    by_design = {str(r.get("design")): r for r in outcome.rows or []}
    missing = [d for d in designs if d not in by_design]
    if missing:
        err = f"the point function returned no row for design(s) {', '.join(missing)}"
        return [{**base, "design": d, "status": ERROR, "error": err} for d in designs]
    reported = set().union(*(r.keys() for r in by_design.values() if not _failed(r)))
    if reported:
        check_metrics(metrics, reported, spec)
    out = []
    for d in designs:
        r = by_design[d]
        if DESIGN_ERROR in r:
            out.append({**base, "design": d, "status": ERROR, "error": str(r[DESIGN_ERROR])})
            continue
        if DESIGN_INFEASIBLE in r:
            out.append({**base, "design": d, "status": INFEASIBLE,
                        "error": str(r[DESIGN_INFEASIBLE])})
            continue
        row = {**base, "design": d, "status": OK, "error": None}
        for m in metrics:
            v = r.get(m)
            row[m] = v if not (isinstance(v, float) and math.isnan(v)) else None
        out.append(row)
    return out


def run_sweep(spec: ExperimentSpec, out: str | Path, *, jobs: int = 1,
              executor: str | None = None, scheduler: str | None = None,
              run_point: PointFn | None = None, resolver: Resolver | None = None,
              quiet: bool = False, retry_failed: bool = False,
              stream: TextIO | None = None, replay_cache: bool = True) -> SweepSummary:
    """Run every unfinished point of `spec` into the results folder `out`.

    `replay_cache=False` (`sweep --no-cache`): the simulator recomputes every policy replay
    instead of reading the on-disk replay cache (identical results)."""
    from scratchpipe_sim.traces.forked import check_jobs, usable_cores

    check_jobs(jobs)
    executor = executor or ("process" if jobs > 1 else "local")
    real = run_point is None
    if run_point is None:  # one point at a time: its replays use the cores instead
        run_point = functools.partial(
            simulate_point, replay_cache=replay_cache,
            replay_jobs=usable_cores() if executor == "local" else 1)
    stream = stream or sys.stderr
    points = expand_points(spec, resolver)
    designs = sweep_designs(points, spec)
    if real:  # a design no point can run: one line before any point (or the folder)
        refused_everywhere(points, designs, spec)
    metrics = spec.metrics or DEFAULT_METRICS
    manifest = {
        "name": spec.name, "experiment": spec.source,
        "experiment_hash": experiment_hash(spec, points, metrics, designs),
        "axes": spec.axes, "designs": list(designs), "metrics": list(metrics),
        "columns": columns_for(spec.axes, metrics), "figures": spec.figures,
        "points": len(points), "scratchpipe_sim": __version__, "versions": versions(),
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if real and points:
        # a metric typo fails here, before any point runs and before the folder is made
        reported = reported_metrics(points[0].config, designs, replay_cache)
        if reported is not None:
            check_metrics(metrics, reported, spec)
    store = ResultStore.open(out, manifest, [
        {"point": p.key, "index": p.index, "values": p.values, "config": p.config}
        for p in points], retry_failed=retry_failed)
    try:
        todo = [p for p in points if p.key not in store.done]
        by_key = {p.key: p for p in points}
        skipped = len(points) - len(todo)
        ran = 0
        with Progress(len(points), f"sweep {spec.name}", "point", initial=skipped,
                      quiet=quiet, stream=stream) as bar:
            tasks = [(p.key, p.config, designs) for p in todo]
            for outcome in execute(executor, run_point, tasks, jobs, scheduler):
                rows = point_rows(by_key[outcome.key], outcome, designs, metrics, spec)
                store.append_point(rows)
                ran += 1
                bad = sum(r["status"] != OK for r in rows)
                bar.update(1, note=f"{bad} design(s) did not run at the last point"
                           if bad else "")
        parquet = store.finalize([p.key for p in points])
    finally:
        store.close()
    rank = {d: i for i, d in enumerate(designs)}
    errors = sorted(
        ((by_key[k].index, by_key[k].values, d, store.reasons.get((k, d), ""))
         for k, ds in store.done.items() if k in by_key
         for d, st in ds.items() if st == ERROR), key=lambda e: (e[0], rank.get(e[2], 0)))
    infeasible = sum(st == INFEASIBLE for ds in store.done.values() for st in ds.values())
    return SweepSummary(spec.name, Path(out), len(points), len(designs), skipped, ran,
                        len({e[0] for e in errors}), parquet, infeasible, errors)
