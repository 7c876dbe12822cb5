"""`plan`: the smallest cache, lookahead, PCIe bandwidth or GPU count that trains at a target
fraction of `gpu-only` throughput, and what each setup costs per million samples.

Each answer is the smallest value of a fixed grid (`grid`) whose simulated throughput
reaches target x gpu-only samples/s, found by bisection: throughput is taken to be
monotone in each axis (exact for the serial designs and a lone resource; docs/timing.md
"Assumptions" says where pipelines can break it), so about log2(grid size) + 1 simulations
per answer. The trace is built once and every simulation reuses it; policy replays repeat
only when the axis changes the policy's inputs (capacity, lookahead), otherwise the replay
cache serves them (the PCIe axis). Two short axes are not monotone and are scanned in
order instead: multi-gpu's GPU count (more GPUs, more collectives) and the lookahead (a
longer window pins or keeps more rows, which a fixed capacity may not hold). A value the
config rejects (a cache larger than HBM, a window the capacity cannot hold) counts as not
meeting the target.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from scratchpipe_sim.config import Config
from scratchpipe_sim.config.cost import usd_per_million
from scratchpipe_sim.errors import UserError

GiB = 1 << 30
AXES = ("capacity", "lookahead", "pcie", "gpus")
#: PCIe grid, GB/s per direction: 2^(k/2) from 4 to 256
PCIE_GRID = tuple(round(4 * 2 ** (k / 2), 2) for k in range(13))


@dataclass
class Answer:
    design: str
    axis: str
    unit: str
    met: bool
    value: float | None  # the smallest grid value that meets the target (None: none does)
    samples_per_s: float  # at `value`, else at the best value tried
    fraction: float  # of gpu-only throughput
    best_value: float | None  # the value with the highest throughput tried
    gpus: int = 1
    usd_per_million_samples: float | None = None
    capacity_GiB: float | None = None
    simulations: int = 0
    note: str = ""


@dataclass
class Plan:
    target: float
    gpu_only_samples_per_s: float
    gpu_only_usd_per_million_samples: float | None
    answers: list[Answer] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["answers"] = [asdict(a) for a in self.answers]
        return d


def check_target(target: float, source: str | None = None) -> float:
    if not (isinstance(target, int | float) and math.isfinite(target)) or not 0 < target <= 1:
        raise UserError(f"expected a fraction of gpu-only throughput in (0, 1], got {target}",
                        source=source, field="--target")
    return float(target)


def _design(name: str) -> Any:
    from scratchpipe_sim.timing.designs import DESIGNS

    return DESIGNS.get(name)


def variant(cfg: Config, design: str, axis: str, value: float) -> Config:
    """cfg with one axis set to `value` (and `designs` = [design]); the lookahead and gpus
    axes set `design_params.DESIGN.lookahead` / `.gpus` (and the design's
    `lookahead_settings`)."""
    d = copy.deepcopy(cfg.to_dict())
    d["designs"] = [design]
    if axis == "capacity":
        d["cache"]["capacity_rows"] = int(value)
    elif axis == "lookahead":
        cls = _design(design)
        if not cls.lookahead_grid:
            raise ValueError(design)
        own = d.setdefault("design_params", {}).setdefault(design, {})
        own["lookahead"] = int(value)
        own.update(cls.lookahead_settings)
    elif axis == "pcie":
        pcie = d["hardware"]["pcie"]
        scale = value / pcie["h2d_GBps"]
        if pcie.get("duplex_h2d_GBps") is not None:
            pcie["duplex_h2d_GBps"] *= scale
        if pcie.get("duplex_d2h_GBps") is not None:
            pcie["duplex_d2h_GBps"] *= value / pcie["d2h_GBps"]
        pcie["h2d_GBps"] = pcie["d2h_GBps"] = float(value)
    elif axis == "gpus":
        d.setdefault("design_params", {}).setdefault(design, {})["gpus"] = int(value)
    else:
        raise ValueError(axis)
    return Config.from_dict(d, source=cfg.source)


def grid(cfg: Config, design: str, axis: str) -> tuple[float, ...]:
    """The values an axis is searched over, ascending ((): the design has no such axis)."""
    if axis == "capacity":
        total = cfg.total_rows
        hbm_rows = int(cfg.hardware.gpu.hbm_capacity_GiB * GiB // cfg.model.moved_row_bytes)
        vals = {math.ceil(total * 2 ** (-i / 2)) for i in range(27)}
        return tuple(sorted(v for v in vals if 1 <= v <= min(total, hbm_rows)))
    if axis == "lookahead":
        return _design(design).lookaheads(cfg)
    if axis == "pcie":
        return PCIE_GRID
    if axis == "gpus":
        return _design(design).gpu_counts(cfg)
    raise ValueError(axis)


def smallest_meeting(values: Sequence[float], rate: Callable[[float], float], goal: float
                     ) -> tuple[int | None, dict[float, float]]:
    """Bisection: the index of the smallest value whose rate >= goal, assuming the rate is
    monotone non-decreasing in the value; None when the largest value misses. Returns the
    rates evaluated too (value -> rate)."""
    seen: dict[float, float] = {}

    def ok(i: int) -> bool:
        v = values[i]
        if v not in seen:
            seen[v] = rate(v)
        return seen[v] >= goal

    if not values or not ok(len(values) - 1):
        return None, seen
    lo, hi = -1, len(values) - 1  # values[lo] misses (virtually), values[hi] meets
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, seen


def first_meeting(values: Sequence[float], rate: Callable[[float], float], goal: float
                  ) -> tuple[int | None, dict[float, float]]:
    """A linear scan for short, non-monotone axes (the GPUs of one node)."""
    seen: dict[float, float] = {}
    for i, v in enumerate(values):
        seen[v] = rate(v)
        if seen[v] >= goal:
            return i, seen
    return None, seen


def _rate(cfg: Config, design: str, axis: str, trace) -> Callable[[float], float]:
    from scratchpipe_sim.timing.runner import simulate
    from scratchpipe_sim.timing.trace_setup import build_trace

    # `cache.warmup_batches: auto` warms a generated trace by the cache's size: each
    # capacity tried gets its own prefix (from the trace cache when an earlier run made it)
    own = (axis == "capacity" and cfg.cache.warmup_batches == "auto"
           and cfg.trace.path is None)

    def rate(value: float) -> float:
        try:
            c = variant(cfg, design, axis, value)
            t = build_trace(c) if own else trace
            return float(simulate(c, [design], trace=t)[0]["samples_per_s"])
        except UserError:
            return 0.0  # a setting the config or the policy rejects cannot meet the target

    return rate


def search(cfg: Config, design: str, axis: str, goal: float, base: float, trace
           ) -> Answer:
    """One answer: the smallest grid value of `axis` at which `design` reaches `goal`."""
    units = {"capacity": "rows", "lookahead": "batches", "pcie": "GB/s", "gpus": "GPUs"}
    values = grid(cfg, design, axis)
    if axis in ("gpus", "lookahead"):  # not monotone: scanned in order (short grids)
        idx, seen = first_meeting(values, _rate(cfg, design, axis, trace), goal)
    else:
        idx, seen = smallest_meeting(values, _rate(cfg, design, axis, trace), goal)
    best = max(seen, key=lambda v: (seen[v], -v)) if seen else None
    value = values[idx] if idx is not None else None
    at = value if value is not None else best
    sps = seen.get(at, 0.0) if at is not None else 0.0
    gpus = int(at) if axis == "gpus" and at is not None else _design(design).gpus_of(cfg)
    ans = Answer(design, axis, units[axis], idx is not None, value, sps,
                 sps / base if base > 0 else 0.0, best, gpus,
                 usd_per_million(cfg, sps, gpus), simulations=len(seen))
    if axis == "capacity" and at is not None:
        ans.capacity_GiB = at * cfg.model.moved_row_bytes / GiB
    if idx is None:
        ans.note = (f"unreachable within {values[0]:g}..{values[-1]:g} {units[axis]}" if values
                    else "no values to search")
    return ans


def cache_designs(cfg: Config, names: Sequence[str]) -> list[str]:
    """The designs among `names` that keep a cache (a policy decides what is resident)."""
    from scratchpipe_sim.timing.designs import DESIGNS

    return [n for n in names if DESIGNS.get(n, source=cfg.source, field="--design")(cfg)
            .workload_key().policy is not None]


def plan(cfg: Config, target: float = 0.95, designs: Sequence[str] | None = None,
         axes: Sequence[str] = AXES, progress: Callable[[str], None] | None = None) -> Plan:
    """Every answer for `cfg`'s trace and hardware (designs: cfg.designs and each design
    whose class is a `plan_alternative`: bagpipe, multi-gpu)."""
    from scratchpipe_sim.timing.designs import DESIGNS
    from scratchpipe_sim.timing.runner import simulate
    from scratchpipe_sim.timing.trace_setup import build_trace, sized_config

    target = check_target(target, cfg.source)
    trace = build_trace(cfg)
    cfg = sized_config(cfg, trace)
    base = float(simulate(cfg, ["gpu-only"], trace=trace)[0]["samples_per_s"])
    goal = target * base
    result = Plan(target, base, usd_per_million(cfg, base))
    from scratchpipe_sim.timing.designs.design_registry import config_designs

    names = list(config_designs(cfg) if designs is None else designs)
    if designs is None:  # the alternatives a user would weigh, even when not configured
        names += [d for d in DESIGNS.names() if DESIGNS.get(d).plan_alternative
                  and d not in names]
    for name in cache_designs(cfg, names):
        for axis in ("capacity", "lookahead", "pcie"):
            if axis in axes and grid(cfg, name, axis):
                if progress is not None:
                    progress(f"{name}: {axis}")
                result.answers.append(search(cfg, name, axis, goal, base, trace))
    for name in names:
        if "gpus" not in axes or not _design(name).scales_out:
            continue
        if progress is not None:
            progress(f"{name}: gpus")
        try:
            result.answers.append(search(cfg, name, "gpus", goal, base, trace))
        except UserError as e:  # the tables do not fit one node
            result.answers.append(Answer(name, "gpus", "GPUs", False, None, 0.0, 0.0,
                                         None, 0, note=e.message))
    if not result.answers:
        raise UserError("nothing to plan: expected a cache design (lru-cache, lru-prefetch, "
                        "static-cache, scratchpipe, bagpipe) or multi-gpu among the designs "
                        "and axes", source=cfg.source, field="designs")
    if not any(a.met for a in result.answers):
        best = max(result.answers, key=lambda a: a.fraction)
        at = ("" if best.best_value is None
              else f" at {best.axis} = {_num(best.best_value)} {best.unit}")
        raise UserError(f"no design reaches {target:.0%} of gpu-only throughput within the "
                        f"search range; best: {best.design} {best.fraction:.1%}{at}",
                        source=cfg.source, field="--target")
    return result


def _unit(unit: str, value: float | None) -> str:
    """`unit` agreeing with `value`: "1 GPU", "2 GPUs", "1 batch" (rates stay as they are)."""
    singular = {"GPUs": "GPU", "batches": "batch", "rows": "row"}
    return singular.get(unit, unit) if value == 1 else unit


def format_plan(p: Plan) -> str:
    """An aligned text table, one row per (design, axis)."""
    head = ["design", "axis", "answer", "GiB", "samples/s", "of gpu-only", "$/M samples",
            "sims"]
    rows = [["gpu-only", "-", "reference", "", f"{p.gpu_only_samples_per_s:,.0f}", "100.0%",
             _usd(p.gpu_only_usd_per_million_samples), ""]]
    for a in p.answers:
        if a.met:
            ans = f"{_num(a.value)} {_unit(a.unit, a.value)}"
        elif a.best_value is not None:
            ans = f"unreachable (best {_num(a.best_value)} {_unit(a.unit, a.best_value)})"
        else:
            ans = f"unreachable ({a.note})"
        gib = f"{a.capacity_GiB:.3f}" if a.capacity_GiB is not None else ""
        rows.append([a.design, a.axis, ans, gib, f"{a.samples_per_s:,.0f}",
                     f"{a.fraction:.1%}", _usd(a.usd_per_million_samples),
                     str(a.simulations)])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"target: {p.target:.0%} of gpu-only throughput "
             f"({p.target * p.gpu_only_samples_per_s:,.0f} samples/s); each answer varies "
             "one axis, the others as configured"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in [head, ["-" * w for w in widths], *rows]]
    return "\n".join(lines)


def _num(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


def _usd(v: float | None) -> str:
    return "" if v is None else f"{v:.4f}"
