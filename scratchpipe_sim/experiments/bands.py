"""`sensitivity SWEEP.yaml`: the band of every headline speedup, point by point.

Why: the study's headline speedups come from sweeps, and each is only as firm as the
unmeasured constants behind it. This expands the sweep's points (experiments.spec.
expand_points, the `sweep` command's own expansion), runs the one-config analysis of
experiments/sensitivity_analysis.py at each selected point (its own preset's ranges; a range key the
sweep sets is pinned at the point's value) and writes one row per (point, design). Every
point uses the same seed, hence the same Latin-hypercube unit sample: differences between
points are not sampling noise (common random numbers).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scratchpipe_sim.config import Config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments.sensitivity_analysis import run_sensitivity
from scratchpipe_sim.safety import jsonout
from scratchpipe_sim.timing.designs import baseline_design
from scratchpipe_sim.timing.runner import check_designs
from scratchpipe_sim.traces.forked import check_jobs, usable_cores

BANDS_JSON = "bands.json"
BANDS_CSV = "bands.csv"
BANDS_FORMAT = "scratchpipe-bands"
#: columns of bands.csv after the point's index, hash and swept values
BAND_COLUMNS = ("design", "status", "nominal", "min", "max", "top_param", "top_low",
                "top_high", "overtaken_runs", "order_changed_runs", "runs", "error")


def is_sweep_spec(path: str) -> bool:
    """Whether `path` is an experiment YAML (a top-level `sweep:`), which `sweep` runs,
    rather than a config. Unreadable files are left to the config loader's message."""
    from scratchpipe_sim.config.loader import read_yaml  # noqa: PLC0415

    try:
        data = read_yaml(path)
    except UserError:
        return False
    return "sweep" in data


def _parse_value(text: str) -> Any:
    from scratchpipe_sim.config.loader import parse_yaml_value  # noqa: PLC0415

    return parse_yaml_value(text, "--points") if text.strip() else ""


def select_points(points: Sequence[Any], axes: Sequence[str], selectors: Sequence[str],
                  source: str) -> list[Any]:
    """The points that `--points` selectors name, in sweep order (every point without one).

    A selector is either indices as `sweep --dry-run` prints them (`3`, `0,4`, `10-14`) or
    conditions on swept keys, all of which must hold (`cache.load_factor=0.05,trace.alpha=
    1.05`; a value is read as YAML: `null`, `zipf`, `0.05`). Repeating `--points` takes the
    union. Unknown keys, indices out of range and a selector that matches nothing are errors.
    """
    if not selectors:
        return list(points)
    keep: set[int] = set()
    n = len(points)
    for sel in selectors:
        parts = [p.strip() for p in sel.split(",")]
        if not sel.strip() or any(not p for p in parts):
            raise UserError(f"empty selector {sel!r}: expected indices (0,3,10-14) or "
                            "KEY=VALUE conditions", source=source, field="--points")
        if all("=" not in p for p in parts):
            for p in parts:
                lo, _, hi = p.partition("-")
                try:
                    a, b = int(lo), int(hi) if hi else int(lo)
                except ValueError:
                    raise UserError(f"bad point index {p!r}: expected an index (3), a range "
                                    f"(10-14) or KEY=VALUE", source=source,
                                    field="--points") from None
                if not 0 <= a <= b < n:
                    raise UserError(f"point index {p} out of range: the sweep has points "
                                    f"0-{n - 1}", source=source, field="--points")
                keep.update(range(a, b + 1))
            continue
        conds = []
        for p in parts:
            key, eq, text = p.partition("=")
            key = key.strip()
            if not eq:
                raise UserError(f"{p!r} mixes indices and conditions: expected all KEY=VALUE "
                                "or all indices", source=source, field="--points")
            if key not in axes:
                from scratchpipe_sim.errors import closest  # noqa: PLC0415

                raise UserError(f"'{key}' is not a swept key{closest(key, axes)}; expected one "
                                f"of: {', '.join(axes)}", source=source, field="--points")
            conds.append((key, _parse_value(text)))
        hit = [i for i, pt in enumerate(points)
               if all(_same(pt.values.get(k), v) for k, v in conds)]
        if not hit:
            raise UserError(f"selector {sel!r} matches no point: swept values are "
                            + "; ".join(f"{k} in {sorted({repr(pt.values[k]) for pt in points})}"
                                        for k, _ in conds), source=source, field="--points")
        keep.update(hit)
    return [pt for i, pt in enumerate(points) if i in keep]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return a == b


def band_point(config: dict, designs: tuple, *, samples: int, seed: int | None,
               pinned: tuple[str, ...] = (), jobs: int = 1) -> list[dict]:
    """One sweep point's analysis (a point function for experiments.executors): the
    resolved config as `sweep` runs it, its trace built once per worker process; `jobs`
    processes price its varied configs."""
    from scratchpipe_sim.experiments.sweep_runner import point_trace  # noqa: PLC0415

    cfg = Config.from_dict(config, source="sweep point")
    trace = point_trace(config, cfg)
    res = run_sensitivity(cfg, list(designs) or None, samples=samples, seed=seed,
                          trace=trace, pinned=pinned, skip_infeasible=True, jobs=jobs)
    return [{"sensitivity": res.to_json()}]


def pinned_by(axes: Sequence[str]) -> tuple[str, ...]:
    """Range keys (under hardware) that a sweep sets: the point's value is the point."""
    return tuple(sorted(a.removeprefix("hardware.") for a in axes
                        if a.startswith("hardware.")))


def band_rows(index: int, key: str, values: dict[str, Any], designs: Sequence[str],
              sens: dict[str, Any] | None, error: str | None) -> list[dict[str, Any]]:
    """One row per design of a point (in the sweep's design order)."""
    base = {"index": index, "point": key, **values}
    out = []
    for d in designs:
        row: dict[str, Any] = {**base, **dict.fromkeys(BAND_COLUMNS)}
        row["design"] = d
        if error is not None:
            row.update(status="error", error=error)
        elif d in sens["infeasible"]:
            row.update(status="infeasible", error=sens["infeasible"][d])
        else:
            s = sens["summary"][d]
            top = next((t for t in s["top"] if t["low"] != t["high"]), None)
            row.update(status="ok", nominal=s["nominal"], min=s["min"], max=s["max"],
                       overtaken_runs=s["overtaken_runs"],
                       order_changed_runs=sens["order_changed_runs"], runs=sens["runs"])
            if top is not None:
                row.update(top_param=top["key"], top_low=top["low"], top_high=top["high"])
        out.append(row)
    return out


@dataclass
class Bands:
    """A sweep's bands: one row per (point, design) and each point's full analysis."""

    name: str
    source: str
    axes: list[str]
    designs: list[str]
    samples: int
    seed: int | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(1 for p in self.points if p["error"] is not None)

    def to_json(self) -> dict[str, Any]:
        return {"format": BANDS_FORMAT, "version": 1, "name": self.name,
                "experiment": self.source, "axes": self.axes, "designs": self.designs,
                "baseline": baseline_design(), "samples": self.samples, "seed": self.seed,
                "columns": self.columns(), "rows": self.rows, "points": self.points}

    def columns(self) -> list[str]:
        return ["index", "point", *self.axes, *BAND_COLUMNS]


def run_bands(spec: Any, selectors: Sequence[str] = (), designs: Sequence[str] | None = None,
              samples: int = 32, seed: int | None = None, jobs: int = 1,
              log: Callable[[str], None] | None = None,
              points: Sequence[Any] | None = None) -> Bands:
    """The analysis at every selected point of the experiment `spec`, `jobs` points at a
    time (one process each; the on-disk replay cache shares replays between them)."""
    import functools  # noqa: PLC0415
    import time  # noqa: PLC0415

    from scratchpipe_sim.experiments.executors import execute  # noqa: PLC0415
    from scratchpipe_sim.experiments.spec import expand_points  # noqa: PLC0415

    if samples < 0:
        raise UserError(f"expected samples >= 0, got {samples}", field="--samples")
    check_jobs(jobs)
    points = expand_points(spec) if points is None else list(points)
    chosen = select_points(points, spec.axes, selectors, spec.source)
    names = list(designs) if designs else list(points[0].config.get("designs") or [])
    if not names:
        raise UserError("expected a 'designs:' list (the base config has none)",
                        source=spec.source, field="designs")
    check_designs(Config.from_dict(points[0].config, source=spec.source), names)
    # points in parallel, one process each; one point at a time (`--jobs 1`, or a sweep
    # of one selected point) prices its varied configs on the cores instead (every usable
    # core for `--jobs 1`, else `jobs`): the same floats either way
    parallel = min(jobs, len(chosen)) > 1
    fn = functools.partial(band_point, samples=samples, seed=seed,
                           pinned=pinned_by(spec.axes),
                           jobs=1 if parallel else usable_cores() if jobs == 1 else jobs)
    say = log or (lambda _s: None)
    by_key = {p.key: p for p in chosen}
    done: dict[str, tuple[dict | None, str | None]] = {}
    t0 = time.perf_counter()
    tasks = [(p.key, p.config, tuple(names)) for p in chosen]
    for outcome in execute("process" if parallel else "local", fn, tasks, jobs):
        sens = outcome.rows[0]["sensitivity"] if outcome.error is None else None
        done[outcome.key] = (sens, outcome.error)
        p = by_key[outcome.key]
        say(f"sensitivity {spec.name}: point {p.index} done ({len(done)}/{len(chosen)}, "
            f"{outcome.wall_s:.1f} s{'; ERROR ' + outcome.error if outcome.error else ''}; "
            f"{time.perf_counter() - t0:.0f} s so far)")
    bands = Bands(spec.name, spec.source, list(spec.axes), names, samples, seed)
    for p in chosen:  # sweep order, whatever order the workers finished in
        sens, error = done[p.key]
        bands.rows += band_rows(p.index, p.key, p.values, names, sens, error)
        bands.points.append({"index": p.index, "point": p.key, "values": p.values,
                             "error": error, "sensitivity": sens})
    return bands


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict | list):
        return "{..}" if v else "{}"
    return str(v)


def format_bands(bands: Bands) -> str:
    """The console table: per point its swept values, then one line per design."""
    varied = [a for a in bands.axes
              if len({json.dumps(r.get(a), sort_keys=True) for r in bands.rows}) > 1]
    lines = [f"{'design':<14} {'nominal':>8} {'min':>7} {'max':>7} {'overtaken':>10}   "
             "moves it most (speedup at low -> high)"]
    for pt in bands.points:
        vals = ", ".join(f"{k}={_cell(pt['values'][k])}" for k in (varied or bands.axes))
        lines.append(f"point {pt['index']}: {vals}")
        if pt["error"] is not None:
            lines.append(f"  error: {pt['error']}")
            continue
        sens = pt["sensitivity"]
        runs = sens["runs"]
        for r in (r for r in bands.rows if r["point"] == pt["point"]):
            if r["status"] != "ok":
                lines.append(f"  {r['design']:<12} {r['status']}: {r['error']}")
                continue
            top = (f"{r['top_param']} {r['top_low']:.2f}->{r['top_high']:.2f}"
                   if r["top_param"] else "(nothing moves it)")
            lines.append(f"  {r['design']:<12} {r['nominal']:>8.2f} {r['min']:>7.2f} "
                         f"{r['max']:>7.2f} {r['overtaken_runs']:>4d}/{runs:<5d}   {top}")
        lines.append(f"  order {' > '.join(sens['nominal_order'])} changes in "
                     f"{sens['order_changed_runs']} of {runs} runs")
    return "\n".join(lines)


def write_bands(bands: Bands, out: Path) -> list[Path]:
    """bands.csv and bands.json into the new folder `out` (made by `new_folder`)."""
    from scratchpipe_sim.experiments.results_store import csv_bytes, encode  # noqa: PLC0415
    from scratchpipe_sim.safety.atomic_files import atomic_write  # noqa: PLC0415

    cols = bands.columns()
    paths = [out / BANDS_CSV, out / BANDS_JSON]
    try:
        atomic_write(paths[0], csv_bytes([cols, *([encode(r.get(c)) for c in cols]
                                                  for r in bands.rows)]))
        atomic_write(paths[1], jsonout.dumps(bands.to_json(), indent=1).encode("utf-8"))
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}; expected a writable folder",
                        source=str(out), field="--out") from None
    return paths


def new_folder(out: Path) -> Path:
    """Make `out` for a bands table; an existing path is refused (a result is never
    overwritten: pick another --out or remove it)."""
    from scratchpipe_sim.errors import os_reason  # noqa: PLC0415

    if out.exists():
        raise UserError("exists: expected a new folder (a bands table is never written over "
                        "an earlier result; remove it or pick another --out)",
                        source=str(out), field="--out")
    try:
        out.mkdir(parents=True)
    except OSError as e:
        raise UserError(f"cannot create the folder: {os_reason(e)}; expected a writable "
                        "folder path", source=str(out), field="--out") from None
    return out


def load_bands(path: str | Path) -> dict[str, Any]:
    """A bands folder's (or its bands.json's) table, checked."""
    p = Path(path)
    f = p / BANDS_JSON if p.is_dir() else p
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"no {BANDS_JSON}: expected a folder written by `sensitivity "
                        "SWEEP.yaml --out DIR`", source=str(p)) from None
    except (OSError, ValueError) as e:
        raise UserError(f"unreadable bands table: {e}", source=str(f)) from None
    if not isinstance(data, dict) or data.get("format") != BANDS_FORMAT:
        raise UserError(f"not a {BANDS_FORMAT} table", source=str(f))
    return data
