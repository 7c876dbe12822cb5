"""Sensitivity of every design's speedup to the constants nobody has measured.

Each key in `hardware.ranges` ({dotted key under hardware: [low, high]}) is varied

* one at a time, at its low and at its high end (the others at their nominal values): the
  swing of each design's speedup vs hybrid ranks the parameters (a tornado);
* jointly, by a Latin hypercube of `samples` points (seeded: same seed, same points).

A curve key (`cpu.gather_efficiency`, `gpu.gather_efficiency`) takes a scale factor: every
efficiency is multiplied by it (clamped to 1). A zero-width range [v, v] pins the key at v.

Why one replay serves every sample: the policy counts depend on the trace, the model and
the cache, never on hardware speeds, so the designs are re-priced on the same counts
(`timing.replay_passes.Replays`) and only SimPy runs again per sample (tens of ms). On-chip cache
geometry (`llc_MiB`, `llc_ways`, `l2_MiB`, `l2_ways`) changes the counts: a sample that
varies it gets its own replays (slow; sizes are datasheet facts and carry no range in the
shipped presets).

Why most one-at-a-time ends cost no SimPy run: the nominal pricing of each design records
which hardware keys it read (`config.read_tracking`); a variant that changes none of them
prices that design exactly as the nominal (a deterministic function of what it reads), so
the nominal's float is reused. Which keys a design reads is observed, never declared (and
kept only where the tracked nominal pricing gives the plain one's float).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.config import Config, set_dotted
from scratchpipe_sim.config.hardware import RATE_CURVE_KEYS
from scratchpipe_sim.config.loader import key_origin
from scratchpipe_sim.config.read_tracking import (
    UntrackedAccess,
    hardware_diff,
    reads_any,
    track_hardware_reads,
    untracked,
)
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety import jsonout
from scratchpipe_sim.safety.atomic_files import atomic_write
from scratchpipe_sim.timing.designs import DESIGNS, baseline_design
from scratchpipe_sim.timing.designs.design_parameters import refusals
from scratchpipe_sim.timing.replay_passes import Replays
from scratchpipe_sim.timing.run_metrics import summarize
from scratchpipe_sim.timing.runner import (
    check_designs,
    run_design,
    timed_batches,
)
from scratchpipe_sim.timing.trace_setup import build_trace, fit_trace, sized_config
from scratchpipe_sim.traces.csr_trace import Trace

#: keys whose value changes the per-batch counts (on-chip hits), not only their price
COUNT_KEYS = frozenset({"cpu.llc_MiB", "cpu.llc_ways", "gpu.l2_MiB", "gpu.l2_ways"})
CURVE_KEYS = frozenset({"cpu.gather_efficiency", "gpu.gather_efficiency"})
#: rate keys that take a number or a [row_bytes, GBps] curve (calibrate --cpu writes curves)
RATE_KEYS = frozenset(f"cpu.{k}" for k in RATE_CURVE_KEYS)
#: the result file `sensitivity CONFIG --out DIR` writes (and `plot DIR` reads)
SENSITIVITY_JSON = "sensitivity.json"
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

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sensitivity:
        """The result `to_json` wrote (what `plot DIR` redraws the tornado from)."""
        return cls(designs=list(data["designs"]),
                   params=[Param(p["key"], p["low"], p["high"], p["nominal"])
                           for p in data["params"]],
                   nominal=dict(data["nominal"]),
                   oat={k: (v["low"], v["high"]) for k, v in data["one_at_a_time"].items()},
                   lhs_values=data["lhs"]["values"], lhs=data["lhs"]["speedup"],
                   seed=data["seed"], pinned=list(data.get("pinned", [])),
                   infeasible=dict(data.get("infeasible", {})))


def load_sensitivity(path: str | Path) -> Sensitivity:
    """A sensitivity folder's (or its sensitivity.json's) result; one-line errors."""
    p = Path(path)
    f = p / SENSITIVITY_JSON if p.is_dir() else p
    try:
        return Sensitivity.from_json(json.loads(f.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise UserError(f"no {SENSITIVITY_JSON}: expected a folder written by `sensitivity "
                        "CONFIG --out DIR`", source=str(p)) from None
    except (OSError, ValueError) as e:
        raise UserError(f"unreadable sensitivity result: {e}", source=str(f)) from None
    except (KeyError, TypeError, AttributeError) as e:
        raise UserError(f"not a sensitivity result (missing or malformed {e})",
                        source=str(f)) from None


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
        # no single nominal number: a curve key's range is a scale factor; a calibrated
        # [row_bytes, GBps] rate curve is replaced by the range's numbers (one rate at
        # every row size)
        if key in CURVE_KEYS or (key in RATE_KEYS and isinstance(value, tuple)):
            out.append(Param(key, float(lo), float(hi), None))
            continue
        if isinstance(value, bool) or not (value is None or isinstance(value, int | float)):
            raise UserError(f"hardware.{key} is not a number: expected a numeric key",
                            source=cfg.source, field=where)
        for end, v in (("low", lo), ("high", hi)):  # each end a value the key accepts:
            try:  # refused here, naming the range, not after the nominal is priced
                with_values(cfg, {key: v})
            except UserError as e:
                raise range_error(cfg, key, f"the range's {end} end {v:g} is refused: "
                                  f"{e.message}") from None
        out.append(Param(key, float(lo), float(hi), None if value is None else float(value)))
    return out


def range_error(cfg: Config, key: str | None, message: str) -> UserError:
    """A one-line error about `hardware.ranges` key `key` (None: the ranges together),
    naming the file that writes the range (the config, or the hardware preset it comes
    from: `ranges.KEY` there)."""
    parts = ["hardware", "ranges", *([key] if key else [])]
    origin = (key_origin(cfg.source, parts)
              if cfg.source and Path(cfg.source).is_file() else None)
    written = origin[2] if origin is not None else None
    if key and (not isinstance(written, list) or written != list(cfg.hardware.ranges[key])):
        origin = None  # replaced by a --set: the config's key
    source, field_ = origin[:2] if origin else (cfg.source, ".".join(parts))
    return UserError(message, source=source, field=field_)


def check_varied(cfg: Config, params: Sequence[Param], names: Sequence[str],
                 lhs_cfgs: Sequence[Config] = (), build: bool = False) -> None:
    """Before anything is priced: each design of `names` accepts both ends of every range
    (each applied alone to `cfg`) and every Latin-hypercube sample, through the designs'
    config checks (`check_inputs`; `build`: their construction, every check, for a config
    sized by its trace). A refusal is one line naming the range (the file that writes it)
    and the design's key, instead of an error after other configs were priced."""
    def refusal(c: Config) -> tuple[str, UserError] | None:
        return next(refusals(c, names, build), None)

    for p in params:
        for end, v in (("low", p.low), ("high", p.high)):
            bad = refusal(with_values(cfg, {p.key: v}))
            if bad is not None:
                name, e = bad
                raise range_error(cfg, p.key, f"the range's {end} end {v:g} is refused by "
                                  f"design {name}: {e.line()}; expected an end every design "
                                  "run accepts") from None
    for i, c in enumerate(lhs_cfgs):
        bad = refusal(c)
        if bad is None:
            continue
        name, e = bad
        drawn = {p.key: float(_get(c, p.key)) for p in params
                 if p.key not in CURVE_KEYS and _get(c, p.key) is not None}
        # the range whose drawn value alone is refused (an end accepted, a value between
        # not: a divisor, say), else the ranges together
        alone = next((k for k, v in drawn.items()
                      if refusal(with_values(cfg, {k: v})) is not None), None)
        what = (f"its value {drawn[alone]:g} drawn by Latin-hypercube sample {i}" if alone
                else f"Latin-hypercube sample {i} ({drawn})")
        raise range_error(cfg, alone, f"{what} is refused by design {name}: "
                          f"{e.line()}; expected ranges every value of which every design "
                          "run accepts") from None


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
        #: design -> its own per-batch columns (the cluster's per-rank counts): made once
        #: from the nominal config, as they depend on the trace and the design's
        #: parameters, never on the hardware constants a band varies
        self._own: dict[str, dict[str, np.ndarray]] = {}
        #: design -> (its nominal iteration time, the hardware keys that pricing read, or
        #: None where they could not be recorded): a variant changing none of those keys is
        #: priced as the nominal (`reused`)
        self._nominal: dict[str, tuple[float, frozenset[str] | None]] = {}

    def drop(self, names: Sequence[str]) -> None:
        """Leave `names` out of every later pricing (the baseline stays)."""
        self.designs = [d for d in self.designs if d not in names]
        self.names = [n for n in self.names if n not in names or n == self.base]

    def _replays_for(self, cfg: Config) -> Replays:
        """The replays of `cfg`'s on-chip geometry (read through `cfg`, so a tracked
        pricing records those keys; the replays themselves keep the plain config, as they
        serve every later variant of that geometry)."""
        hw = cfg.hardware
        geo = (hw.cpu.llc_MiB, hw.cpu.llc_ways, hw.gpu.l2_MiB, hw.gpu.l2_ways)
        if geo not in self._replays:
            plain = untracked(cfg)
            cached = any(DESIGNS.get(n)(plain).workload_key().policy is not None
                         for n in self.names)
            self._replays[geo] = Replays(plain, self.trace, cached)
        return self._replays[geo]

    def _price(self, cfg: Config, name: str) -> float:
        replays = self._replays_for(cfg)
        design = DESIGNS.get(name)(cfg)
        w, _ = replays.get(design.workload_key())
        if name not in self._own:
            plain = untracked(self.cfg)
            self._own[name] = DESIGNS.get(name)(plain).trace_columns(
                timed_batches(plain, self.trace))
        w = w.with_columns(self._own[name]) if self._own[name] else w
        return summarize(cfg, name, run_design(cfg, design, w), w)["iter_ns_mean"]

    def _nominal_of(self, name: str) -> float:
        """The nominal's iteration time, and the hardware keys its pricing read: priced
        once plainly and once through the recording view. The read set is kept only when
        both give the same float, so a view that changed the computation (rather than
        failing loudly) can cost reuse but never a wrong result."""
        if name not in self._nominal:
            value = self._price(self.cfg, name)
            reads: set[str] = set()
            try:
                same = self._price(track_hardware_reads(self.cfg, reads), name) == value
            except UntrackedAccess:
                same = False
            self._nominal[name] = (value, frozenset(reads) if same else None)
        return self._nominal[name][0]

    def iter_ns(self, cfg: Config, name: str) -> float:
        """Mean iteration time of one design, as `simulate` reports it (same replays, same
        SimPy run, same summary)."""
        return self._nominal_of(name) if cfg is self.cfg else self._price(cfg, name)

    def reused(self, cfg: Config) -> list[str]:
        """The designs whose nominal pricing read none of the hardware keys `cfg` changes:
        each prices `cfg` as the nominal, float for float, without a SimPy run."""
        diff = None if cfg is self.cfg else hardware_diff(self.cfg, cfg)
        if diff is None:
            return []
        out = []
        for name in self.names:
            _value, reads = self._nominal.get(name, (0.0, None))
            if reads is not None and not reads_any(reads, diff):
                out.append(name)
        return out

    def speedups(self, cfg: Config) -> dict[str, float]:
        same = set(self.reused(cfg))
        iters = {name: self._nominal[name][0] if name in same else self.iter_ns(cfg, name)
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
        for name in list(self.names):
            try:
                self.iter_ns(cfg, name)
            except UserError as e:
                if name == self.base:
                    raise
                bad[name] = e.line()
        self.drop(list(bad))
        return bad


def _speedups_at(state: tuple[Pricer, list[Config]], i: int) -> dict[str, float]:
    """A forked worker's config (`fork_map`): its speedups."""
    pricer, cfgs = state
    return pricer.speedups(cfgs[i])


def price_all(pricer: Pricer, cfgs: list[Config], jobs: int = 1) -> list[dict[str, float]]:
    """`pricer.speedups` of every config, in `jobs` forked processes (each inherits the
    pricer's trace and replays; SimPy is deterministic, so the floats are the serial ones)."""
    from scratchpipe_sim.traces.forked import can_fork, fork_map  # noqa: PLC0415

    jobs = min(int(jobs), len(cfgs))
    if jobs <= 1 or not can_fork():
        return [pricer.speedups(c) for c in cfgs]
    return fork_map(_speedups_at, (pricer, cfgs), range(len(cfgs)), jobs,
                    chunksize=max(1, len(cfgs) // (4 * jobs)))


def run_sensitivity(cfg: Config, designs: Sequence[str] | None = None, samples: int = 32,
                    seed: int | None = None, trace: Trace | None = None,
                    log: Callable[[str], None] | None = None, pinned: Sequence[str] = (),
                    skip_infeasible: bool = False, jobs: int = 1) -> Sensitivity:
    """Vary every range of `cfg` but the `pinned` keys (one at a time, then by Latin
    hypercube). `skip_infeasible`: a design that cannot run on `cfg` is left out and its
    reason kept in `infeasible` (a sweep's infeasible point), instead of failing the run.
    `jobs`: processes pricing the varied configs (the same result for every value)."""
    names = check_designs(cfg, designs, inputs=not skip_infeasible)
    params = [p for p in params_of(cfg) if p.key not in set(pinned)]
    if not cfg.hardware.ranges:
        raise UserError("no hardware.ranges in this config's preset: expected "
                        "{dotted.key: [low, high]} entries to vary", source=cfg.source,
                        field="hardware.ranges")
    if samples < 0:
        raise UserError(f"expected samples >= 0, got {samples}", field="--samples")
    seed = cfg.seed if seed is None else seed
    # the designs the varied configs are priced for (skip_infeasible: not those the
    # nominal config refuses, infeasible below)
    runnable = [n for n in names
                if not skip_infeasible or next(refusals(cfg, [n]), None) is None]
    check_varied(cfg, params, runnable, _lhs_configs(cfg, params, samples, seed)[1])
    trace = build_trace(cfg) if trace is None else trace
    cfg = sized_config(cfg, trace)  # exactly as `simulate` prices it
    vals, lhs_cfgs = _lhs_configs(cfg, params, samples, seed)
    if cfg.trace.path is not None:  # sizes from a trace file: every check now
        built = [n for n in runnable if next(refusals(cfg, [n], True), None) is None]
        check_varied(cfg, params, built, lhs_cfgs, build=True)
    trace = fit_trace(trace, cfg)
    pricer = Pricer(cfg, names, trace)
    infeasible = pricer.infeasible(cfg) if skip_infeasible else {}
    names = [n for n in names if n not in infeasible]
    say = log or (lambda _s: None)
    say(f"sensitivity: nominal ({len(params)} ranges, {samples} LHS samples)")
    nominal = pricer.speedups(cfg)
    # every varied config first (one at a time, then the Latin hypercube), priced together
    ends: list[Config | None] = []
    for p in params:
        for v in (p.low, p.high):
            # an end at the nominal value is the nominal run (the same config and result)
            same = v == (1.0 if p.key in CURVE_KEYS else p.nominal)
            ends.append(None if same else with_values(cfg, {p.key: v}))
    todo = [c for c in ends if c is not None] + lhs_cfgs
    reused = sum(len(pricer.reused(c)) for c in todo)
    say(f"sensitivity: {len(todo)} varied configs ({len(params)} ranges at both ends, "
        f"{len(lhs_cfgs)} LHS samples){f' in {jobs} processes' if jobs > 1 else ''}; "
        f"{reused} of {len(todo) * len(pricer.names)} design pricings reused from the "
        "nominal (the design reads none of the keys the variant changes)")
    priced = iter(price_all(pricer, todo, jobs))
    at = [dict(nominal) if c is None else next(priced) for c in ends]
    oat = {p.key: (at[2 * i], at[2 * i + 1]) for i, p in enumerate(params)}
    res = Sensitivity(names, params, nominal, oat, seed=seed,
                      pinned=sorted(k for k in cfg.hardware.ranges if k in set(pinned)),
                      infeasible=infeasible)
    if samples and params:
        res.lhs = {d: [] for d in names}
        for sp in priced:
            for d in names:
                res.lhs[d].append(sp[d])
        res.lhs_values = vals.tolist()
    return res


def _lhs_configs(cfg: Config, params: Sequence[Param], samples: int, seed: int
                 ) -> tuple[np.ndarray, list[Config]]:
    """The Latin-hypercube samples' values (samples x params) and their configs."""
    vals = np.zeros((0, len(params)))
    if samples and params:
        u = latin_hypercube(samples, len(params), seed)
        lows = np.array([p.low for p in params])
        highs = np.array([p.high for p in params])
        vals = lows + u * (highs - lows)
    return vals, [with_values(cfg, {p.key: float(v) for p, v in zip(params, row,
                                                                     strict=True)})
                  for row in vals]


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
        paths = [out / SENSITIVITY_JSON, out / "tornado.png", out / "tornado.pdf"]
        fig = tornado_figure(res)
        pictures = []
        for fmt, dpi in (("png", 150), ("pdf", None)):
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, **({"dpi": dpi} if dpi else {}))
            pictures.append(buf.getvalue())
        plt.close(fig)
        atomic_write(paths[0], jsonout.dumps(res.to_json(), indent=1))
        for path, data in zip(paths[1:], pictures, strict=True):
            atomic_write(path, data)
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}; expected a writable folder",
                        source=str(out), field="--out") from None
    return paths
