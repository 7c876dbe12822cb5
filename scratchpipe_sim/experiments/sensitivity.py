"""Sensitivity of every design's speedup to the constants nobody has measured.

Each key in `hardware.ranges` ({dotted key under hardware: [low, high]}) is varied

* one at a time, at its low and at its high end (the others at their nominal values): the
  swing of each design's speedup vs hybrid ranks the parameters (a tornado);
* jointly, by a Latin hypercube of `samples` points (seeded: same seed, same points).

A curve key (`cpu.gather_efficiency`, `gpu.gather_efficiency`) takes a scale factor: every
efficiency is multiplied by it (clamped to 1). A zero-width range [v, v] pins the key at v.

Why one replay serves every sample: the policy counts depend on the trace, the model and
the cache, never on hardware speeds, so the designs are re-priced on the same counts
(`timing.runner.Replays`) and only SimPy runs again per sample (tens of ms). On-chip cache
geometry (`llc_MiB`, `llc_ways`, `l2_MiB`, `l2_ways`) changes the counts: a sample that
varies it gets its own replays (slow; sizes are datasheet facts and carry no range in the
shipped presets).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from scratchpipe_sim.config import Config, set_dotted
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.designs import DESIGNS, baseline_design
from scratchpipe_sim.timing.machine import Machine
from scratchpipe_sim.timing.runner import (
    Replays,
    build_trace,
    check_designs,
    fit_trace,
    sized_config,
    summarize,
)
from scratchpipe_sim.traces.trace import Trace

#: keys whose value changes the per-batch counts (on-chip hits), not only their price
COUNT_KEYS = frozenset({"cpu.llc_MiB", "cpu.llc_ways", "gpu.l2_MiB", "gpu.l2_ways"})
CURVE_KEYS = frozenset({"cpu.gather_efficiency", "gpu.gather_efficiency"})
#: relative margin under which two designs count as tied (an order change must exceed it)
TIE = 0.005


@dataclass(frozen=True)
class Param:
    key: str  # dotted, under hardware
    low: float
    high: float
    nominal: float | None  # None: the key is null (e.g. no duplex rate) or a curve (1.0)

    @property
    def label(self) -> str:
        return self.key + (" (x)" if self.key in CURVE_KEYS else "")


@dataclass
class Sensitivity:
    designs: list[str]
    params: list[Param]
    nominal: dict[str, float]  # design -> speedup vs hybrid
    #: param key -> (speedups at low, speedups at high), design -> speedup
    oat: dict[str, tuple[dict[str, float], dict[str, float]]]
    #: LHS sample values (samples x params) and speedups (design -> list)
    lhs_values: list[list[float]] = field(default_factory=list)
    lhs: dict[str, list[float]] = field(default_factory=dict)
    seed: int = 0
    #: range keys left at the config's value because a sweep sets them (fig2's PCIe rates)
    pinned: list[str] = field(default_factory=list)
    #: design -> why it cannot run here (left out of every run; `skip_infeasible`)
    infeasible: dict[str, str] = field(default_factory=dict)

    def runs(self) -> list[dict[str, float]]:
        """Every evaluated point (nominal, each one-at-a-time end, each LHS sample)."""
        out = [self.nominal]
        for lo, hi in self.oat.values():
            out += [lo, hi]
        n = len(next(iter(self.lhs.values()), []))
        out += [{d: self.lhs[d][i] for d in self.designs} for i in range(n)]
        return out

    def band(self, design: str) -> tuple[float, float]:
        vals = [r[design] for r in self.runs()]
        return min(vals), max(vals)

    def swings(self, design: str) -> list[tuple[str, float, float]]:
        """(param, speedup at low, at high), largest |high - low| first."""
        rows = [(k, lo[design], hi[design]) for k, (lo, hi) in self.oat.items()]
        return sorted(rows, key=lambda r: (-abs(r[2] - r[1]), r[0]))

    def order(self, run: dict[str, float]) -> tuple[str, ...]:
        return tuple(sorted(self.designs, key=lambda d: (-run[d], d)))

    def swaps(self) -> dict[tuple[str, str], int]:
        """(a, b) -> runs in which b beats a by more than TIE although a was at least as
        fast at nominal: the order of the designs changed (near-ties do not count)."""
        out: dict[tuple[str, str], int] = {}
        nom = self.nominal
        for run in self.runs():
            for a in self.designs:
                for b in self.designs:
                    if a != b and nom[a] >= nom[b] and run[b] > run[a] * (1 + TIE):
                        out[(a, b)] = out.get((a, b), 0) + 1
        return out

    def overtaken(self, design: str) -> int:
        """Runs in which a design at most as fast as `design` at nominal passes it by more
        than TIE: how often this design's place in the order is lost."""
        nom = self.nominal
        return sum(1 for run in self.runs()
                   if any(b != design and nom[design] >= nom[b]
                          and run[b] > run[design] * (1 + TIE) for b in self.designs))

    def changed_runs(self) -> int:
        nom = self.nominal
        return sum(1 for run in self.runs()
                   if any(nom[a] >= nom[b] and run[b] > run[a] * (1 + TIE)
                          for a in self.designs for b in self.designs if a != b))

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "designs": self.designs,
            "params": [{"key": p.key, "low": p.low, "high": p.high, "nominal": p.nominal}
                       for p in self.params],
            "nominal": self.nominal,
            "one_at_a_time": {k: {"low": lo, "high": hi} for k, (lo, hi) in self.oat.items()},
            "lhs": {"values": self.lhs_values, "speedup": self.lhs},
            "summary": {d: {"nominal": self.nominal[d], "min": self.band(d)[0],
                            "max": self.band(d)[1],
                            "top": [{"key": k, "low": lo, "high": hi}
                                    for k, lo, hi in self.swings(d)[:3]],
                            "overtaken_runs": self.overtaken(d)}
                        for d in self.designs},
            "pinned": self.pinned,
            "infeasible": self.infeasible,
            "nominal_order": list(self.order(self.nominal)),
            "runs": len(self.runs()),
            "order_changed_runs": self.changed_runs(),
            "swaps": [{"faster_at_nominal": a, "overtaken_by": b, "runs": n}
                      for (a, b), n in sorted(self.swaps().items())],
        }


def _get(cfg: Config, key: str) -> Any:
    node: Any = cfg.hardware
    for part in key.split("."):
        if not hasattr(node, part) or part.startswith("_"):
            return _Missing
        node = getattr(node, part)
    return node


class _Missing:
    pass


def params_of(cfg: Config) -> list[Param]:
    """The config's ranges as Params (keys checked: numeric leaves under hardware)."""
    out = []
    for key, (lo, hi) in sorted(cfg.hardware.ranges.items()):
        where = f"hardware.ranges.{key}"
        value = _get(cfg, key)
        if value is _Missing or key == "ranges" or key.startswith("ranges."):
            raise UserError(f"no key hardware.{key} to vary: expected a dotted key under "
                            "hardware (e.g. cpu.parallel_efficiency)", source=cfg.source,
                            field=where)
        if key in CURVE_KEYS:
            out.append(Param(key, float(lo), float(hi), None))
            continue
        if isinstance(value, bool) or not (value is None or isinstance(value, int | float)):
            raise UserError(f"hardware.{key} is not a number: expected a numeric key",
                            source=cfg.source, field=where)
        out.append(Param(key, float(lo), float(hi), None if value is None else float(value)))
    return out


def with_values(cfg: Config, values: dict[str, float]) -> Config:
    """`cfg` with hardware keys set (curves scaled), validated like a `--set`."""
    d = cfg.to_dict()
    for key, v in values.items():
        if key in CURVE_KEYS:
            sec, name = key.split(".")
            curve = d["hardware"][sec][name]
            v = [[x, min(1.0, y * v)] for x, y in curve]
        else:
            cur = _get(cfg, key)
            if isinstance(cur, int) and not isinstance(cur, bool):
                v = max(1, int(round(v)))
        set_dotted(d, f"hardware.{key}", v, source=cfg.source)
    return Config.from_dict(d, source=cfg.source)


def latin_hypercube(n: int, d: int, seed: int) -> np.ndarray:
    """n points in [0, 1)^d, one per row; each column hits every 1/n stratum once."""
    rng = np.random.default_rng(seed)
    u = np.empty((n, d))
    for j in range(d):
        u[:, j] = (rng.permutation(n) + rng.random(n)) / n
    return u


class Pricer:
    """Speedups of `designs` for hardware variants of one config, replays shared."""

    def __init__(self, cfg: Config, designs: Sequence[str], trace: Trace):
        self.cfg, self.trace = cfg, trace
        self.designs = list(designs)
        self.base = baseline_design()
        self.names = (self.designs if self.base in self.designs
                      else [self.base, *self.designs])
        self._replays: dict[tuple, Replays] = {}
        #: the config `infeasible` probed (the nominal) and its iteration times: its SimPy
        #: runs are not repeated
        self._probed: Config | None = None
        self._known: dict[str, float] = {}

    def drop(self, names: Sequence[str]) -> None:
        """Leave `names` out of every later pricing (the baseline stays)."""
        self.designs = [d for d in self.designs if d not in names]
        self.names = [n for n in self.names if n not in names or n == self.base]

    def _replays_for(self, cfg: Config) -> Replays:
        hw = cfg.hardware
        geo = (hw.cpu.llc_MiB, hw.cpu.llc_ways, hw.gpu.l2_MiB, hw.gpu.l2_ways)
        if geo not in self._replays:
            cached = any(DESIGNS.get(n)(cfg).workload_key().policy is not None
                         for n in self.names)
            self._replays[geo] = Replays(cfg, self.trace, cached)
        return self._replays[geo]

    def iter_ns(self, cfg: Config, name: str) -> float:
        """Mean iteration time of one design, as `simulate` reports it (same replays, same
        SimPy run, same summary)."""
        replays = self._replays_for(cfg)
        design = DESIGNS.get(name)(cfg)
        w, _ = replays.get(design.workload_key())
        env = simpy.Environment()
        m = Machine(env, cfg, w.num_batches)
        env.process(design.run(m, w))
        env.run()
        return summarize(cfg, name, m, w)["iter_ns_mean"]

    def speedups(self, cfg: Config) -> dict[str, float]:
        known = self._known if cfg is self._probed else {}
        iters = {name: known[name] if name in known else self.iter_ns(cfg, name)
                 for name in self.names}
        return {d: iters[self.base] / iters[d] for d in self.designs}

    def infeasible(self, cfg: Config) -> dict[str, str]:
        """design -> the simulator's reason, for each design that cannot run on `cfg` (as
        a sweep records it: scratchpipe's window does not fit the cache, say). Each design
        is tried alone, so one that fails does not take the others' replays with it."""
        bad: dict[str, str] = {}
        for name in self.names:
            if name == self.base:
                continue
            try:
                DESIGNS.get(name)(cfg).workload_key()
            except UserError as e:
                bad[name] = e.line()
        if bad:
            self.drop(list(bad))
        self._probed, self._known = cfg, {}
        for name in list(self.names):
            try:
                self._known[name] = self.iter_ns(cfg, name)
            except UserError as e:
                if name == self.base:
                    raise
                bad[name] = e.line()
        self.drop(list(bad))
        return bad


def run_sensitivity(cfg: Config, designs: Sequence[str] | None = None, samples: int = 32,
                    seed: int | None = None, trace: Trace | None = None,
                    log: Callable[[str], None] | None = None, pinned: Sequence[str] = (),
                    skip_infeasible: bool = False) -> Sensitivity:
    """Vary every range of `cfg` but the `pinned` keys (one at a time, then by Latin
    hypercube). `skip_infeasible`: a design that cannot run on `cfg` is left out and its
    reason kept in `infeasible` (a sweep's infeasible point), instead of failing the run."""
    names = check_designs(cfg, designs)
    params = [p for p in params_of(cfg) if p.key not in set(pinned)]
    if not cfg.hardware.ranges:
        raise UserError("no hardware.ranges in this config's preset: expected "
                        "{dotted.key: [low, high]} entries to vary", source=cfg.source,
                        field="hardware.ranges")
    if samples < 0:
        raise UserError(f"expected samples >= 0, got {samples}", field="--samples")
    seed = cfg.seed if seed is None else seed
    trace = build_trace(cfg) if trace is None else trace
    cfg = sized_config(cfg, trace)  # exactly as `simulate` prices it
    trace = fit_trace(trace, cfg)
    pricer = Pricer(cfg, names, trace)
    infeasible = pricer.infeasible(cfg) if skip_infeasible else {}
    names = [n for n in names if n not in infeasible]
    say = log or (lambda _s: None)
    say(f"sensitivity: nominal ({len(params)} ranges, {samples} LHS samples)")
    nominal = pricer.speedups(cfg)
    oat = {}

    def at(p: Param, v: float) -> dict[str, float]:
        # an end at the nominal value is the nominal run (the same config: the same result)
        same = v == (1.0 if p.key in CURVE_KEYS else p.nominal)
        return dict(nominal) if same else pricer.speedups(with_values(cfg, {p.key: v}))

    for p in params:
        say(f"sensitivity: {p.key} at {p.low:g} and {p.high:g}")
        oat[p.key] = (at(p, p.low), at(p, p.high))
    res = Sensitivity(names, params, nominal, oat, seed=seed,
                      pinned=sorted(k for k in cfg.hardware.ranges if k in set(pinned)),
                      infeasible=infeasible)
    if samples and params:
        u = latin_hypercube(samples, len(params), seed)
        lows = np.array([p.low for p in params])
        highs = np.array([p.high for p in params])
        vals = lows + u * (highs - lows)
        res.lhs = {d: [] for d in names}
        for i, row in enumerate(vals):
            if i % 8 == 0:
                say(f"sensitivity: LHS sample {i + 1}/{samples}")
            sp = pricer.speedups(with_values(cfg, {p.key: float(v) for p, v in
                                                   zip(params, row, strict=True)}))
            for d in names:
                res.lhs[d].append(sp[d])
        res.lhs_values = vals.tolist()
    return res


def format_report(res: Sensitivity) -> str:
    lines = [f"{'design':<14} {'nominal':>8} {'min':>7} {'max':>7}   "
             "parameters that move it most (speedup at low -> high)"]
    for d in res.designs:
        lo, hi = res.band(d)
        top = "; ".join(f"{k} {a:.2f}->{b:.2f}" for k, a, b in res.swings(d)[:3]
                        if not math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0))
        lines.append(f"{d:<14} {res.nominal[d]:>8.2f} {lo:>7.2f} {hi:>7.2f}   "
                     f"{top or '(nothing moves it)'}")
    n = len(res.runs())
    base = " > ".join(res.order(res.nominal))
    swaps = res.swaps()
    if not swaps:
        lines.append(f"design order (fastest first) {base}: the same in all {n} runs "
                     f"(designs within {TIE:.1%} count as tied)")
    else:
        lines.append(f"design order (fastest first) {base} changes in {res.changed_runs()} "
                     f"of {n} runs: " + "; ".join(f"{b} overtakes {a} in {k}"
                                                 for (a, b), k in sorted(swaps.items())))
    return "\n".join(lines)


def tornado_figure(res: Sensitivity, designs: Sequence[str] | None = None,
                   top: int = 10):
    """One panel per design: each parameter's speedup at its low and high end around the
    nominal (bars sorted by swing, largest on top)."""
    from scratchpipe_sim.experiments.plots import design_color, plt  # noqa: PLC0415

    base = baseline_design()
    names = [d for d in (designs or res.designs) if d != base] or list(res.designs)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 0.35 * top * rows + 1.6),
                             squeeze=False)
    for ax, d in zip(axes.flat, names, strict=False):
        sw = res.swings(d)[:top][::-1]
        nom = res.nominal[d]
        color = design_color(d, list(res.designs))
        for i, (_, lo, hi) in enumerate(sw):
            ax.barh(i, lo - nom, left=nom, color=color, alpha=0.45, height=0.7)
            ax.barh(i, hi - nom, left=nom, color=color, height=0.7)
        ax.axvline(nom, color="black", lw=0.8)
        ax.set_yticks(range(len(sw)), [k for k, _, _ in sw], fontsize=7)
        ax.set_title(f"{d} (nominal {nom:.2f}x)", fontsize=9)
        ax.set_xlabel("speedup vs hybrid (x); light: low end, dark: high end", fontsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def write_outputs(res: Sensitivity, out: Path) -> list[Path]:
    from scratchpipe_sim.experiments.plots import plt  # noqa: PLC0415

    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "sensitivity.json", out / "tornado.png", out / "tornado.pdf"]
        paths[0].write_text(json.dumps(res.to_json(), indent=1), encoding="utf-8")
        fig = tornado_figure(res)
        fig.savefig(paths[1], dpi=150)
        fig.savefig(paths[2])
        plt.close(fig)
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}; expected a writable folder",
                        source=str(out), field="--out") from None
    return paths


# -- a sweep's every point: the band of each headline speedup ----------------------------------
#
# `sensitivity SWEEP.yaml` expands the sweep's points (experiments.spec.expand_points, the
# `sweep` command's own expansion), runs the analysis above at each selected point (its own
# preset's ranges; a range key the sweep sets is pinned at the point's value) and writes one
# row per (point, design). Every point uses the same seed, hence the same Latin-hypercube unit
# sample: differences between points are not sampling noise (common random numbers).

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
    import yaml  # noqa: PLC0415

    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


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
               pinned: tuple[str, ...] = ()) -> list[dict]:
    """One sweep point's analysis (a point function for experiments.executors): the
    resolved config as `sweep` runs it, its trace built once per worker process."""
    from scratchpipe_sim.experiments.runner import point_trace  # noqa: PLC0415

    cfg = Config.from_dict(config, source="sweep point")
    trace = point_trace(config, cfg)
    res = run_sensitivity(cfg, list(designs) or None, samples=samples, seed=seed,
                          trace=trace, pinned=pinned, skip_infeasible=True)
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
    if jobs < 1:
        raise UserError(f"expected --jobs >= 1, got {jobs}", field="--jobs")
    points = expand_points(spec) if points is None else list(points)
    chosen = select_points(points, spec.axes, selectors, spec.source)
    names = list(designs) if designs else list(points[0].config.get("designs") or [])
    if not names:
        raise UserError("expected a 'designs:' list (the base config has none)",
                        source=spec.source, field="designs")
    check_designs(Config.from_dict(points[0].config, source=spec.source), names)
    fn = functools.partial(band_point, samples=samples, seed=seed,
                           pinned=pinned_by(spec.axes))
    say = log or (lambda _s: None)
    by_key = {p.key: p for p in chosen}
    done: dict[str, tuple[dict | None, str | None]] = {}
    t0 = time.perf_counter()
    tasks = [(p.key, p.config, tuple(names)) for p in chosen]
    for outcome in execute("process" if jobs > 1 else "local", fn, tasks, jobs):
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
    import csv  # noqa: PLC0415
    import io  # noqa: PLC0415

    from scratchpipe_sim.experiments.store import atomic_write, encode  # noqa: PLC0415

    cols = bands.columns()
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in bands.rows:
        w.writerow([encode(r.get(c)) for c in cols])
    paths = [out / BANDS_CSV, out / BANDS_JSON]
    try:
        atomic_write(paths[0], buf.getvalue().encode("utf-8"))
        atomic_write(paths[1], json.dumps(bands.to_json(), indent=1).encode("utf-8"))
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
