"""`validate --published`: the timing model against published, measured FBGEMM TBE runs.

The points (`scratchpipe_sim/data/published_points.yaml`, shipped with the package, loaded
by `config/published_points.py`) are real runs on named GPUs with their full
configuration. Each becomes a config on its hardware preset and runs through
`timing.simulate` with the design of its placement; the design's stages are summed into the
two phases the sources time (TBE only: the MLP and the input copies are left out, because
the published timings hold only the embedding op), as each design declares them
(`phase_stages`, read through `timing/stage_columns.py`: a stage the design did not time is
an error, never 0):

* `DEVICE` -> `gpu-only`: forward = `gpu_gather`, backward = `gpu_update`.
* `MANAGED` -> `uvm`: forward = `forward`, backward = `backward`.
* `MANAGED_CACHING` -> `lru-cache`: forward = `fetch` + `forward` (FBGEMM's caching forward
  runs the cache prefetch in the forward call: lookup kernels, evictions written back,
  misses filled, then the gather), backward = `backward` (sort + segment-reduce, fused
  optimizer update of cached rows, UVM read-modify-write of unplaced ones).

Each phase is the mean over the measured batches of its stages' `stage_<name>_ns` columns.

Traces: `pow-law` (NVIDIA recsys-examples' generator: the floor of a continuous power law
x^-alpha on [1, rows), per table, not permuted) is the `burst` generator with no repeats, not
permuted, and `head_scale` = 0.5 / rows: P(rank r) ∝ (r + 0.5)^-alpha is the midpoint rule
of the harness's ∫_r^{r+1} x^-alpha dx. Plain `zipf` (P ∝ r^-alpha) gives 4% fewer distinct
ids per batch than the harness published; this one 0.3% more (docs/validation.md).

Caching points: the harness sizes FBGEMM's cache at run time as (distinct ids over the
run x cfr) / rows and times a second pass over the run's batches. Here the run's
`iterations` batches are generated, their distinct (table, row) pairs counted, the cache set
to ceil(distinct x cfr) rows (`cache.capacity_rows`), and the trace replayed as that whole
run (the cache warm-up, policy only) followed by its first `TIMED_BATCHES` batches again
(the timed ones): the harness's second pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from scratchpipe_sim.config.published_points import (
    ROLES,
    TIMED_BATCHES,
    EndToEndPoint,
    PublishedPoint,
)
from scratchpipe_sim.errors import UserError, closest

if TYPE_CHECKING:
    from scratchpipe_sim.traces.csr_trace import Trace

def placement_designs() -> dict[str, str]:
    """placement (FBGEMM EmbeddingLocation) -> the design that runs it (its class's
    `embedding_location`)."""
    from scratchpipe_sim.timing.designs import DESIGNS

    out: dict[str, str] = {}
    for n in DESIGNS.names():
        loc = DESIGNS.get(n).embedding_location
        if loc is not None:
            if loc in out:
                raise RuntimeError(f"designs {out[loc]} and {n} both run placement {loc}")
            out[loc] = n
    return out


#: batches simulated before the timed ones, to fill the pipeline
FILL_BATCHES = 1


@dataclass(frozen=True)
class PhaseResult:
    """Predicted vs measured for one phase of one point (predicted None: skipped)."""

    point: PublishedPoint
    phase: str
    predicted_ms: float | None
    measured_ms: float
    skipped: str | None = None
    distinct_generated: float | None = None

    @property
    def factor(self) -> float | None:
        """predicted / measured (> 1: the model is slower than the measurement)."""
        if self.predicted_ms is None:
            return None
        return self.predicted_ms / self.measured_ms

    def as_json(self) -> dict[str, Any]:
        p = self.point
        return {"id": p.id, "gpu": p.gpu, "preset": p.preset, "placement": p.placement,
                "design": p.design, "optimizer": p.optimizer, "phase": self.phase,
                "predicted_ms": self.predicted_ms, "measured_ms": self.measured_ms,
                "factor": self.factor, "role": p.role,
                "status": "skipped" if self.skipped else "ok", "skip_reason": self.skipped,
                "distinct_ids_per_iter_published": p.trace.distinct_ids_per_iter,
                "distinct_ids_per_iter_generated": self.distinct_generated,
                "source": p.source}


# -- selecting ------------------------------------------------------------------------------
def select(points: list[PublishedPoint], only: Sequence[str] | None) -> list[PublishedPoint]:
    """The points named by `--only` (all when None), in the file's order."""
    if not only:
        return points
    ids = [p.id for p in points]
    for name in only:
        if name not in ids:
            raise UserError(f"no point '{name}'{closest(name, ids)}; expected one of: "
                            f"{', '.join(ids)}", field="--only")
    return [p for p in points if p.id in set(only)]


def select_all(only: Sequence[str] | None, *groups: Sequence[Any]) -> tuple[list[Any], ...]:
    """Each group of points (TBE, end-to-end, multi-GPU) cut to the ids `--only` names (all
    when None), in the file's order; an unknown id is one line naming the known ones."""
    if not only:
        return tuple(list(g) for g in groups)
    ids = [p.id for g in groups for p in g]
    for name in only:
        if name not in ids:
            raise UserError(f"no point '{name}'{closest(name, ids)}; expected one of: "
                            f"{', '.join(ids)}", field="--only")
    keep = set(only)
    return tuple([p for p in g if p.id in keep] for g in groups)


# -- configs and traces ----------------------------------------------------------------------
def trace_section(p: PublishedPoint) -> dict[str, Any]:
    """The config's `trace:` for a point's generator (see the module docstring)."""
    rows = p.model.rows_per_table
    if p.trace.generator == "pow-law":
        return {"distribution": "burst", "alpha": p.trace.alpha,
                "params": {"head_scale": 0.5 / rows, "permute": False}}
    if p.trace.generator == "zipf":
        return {"distribution": "zipf", "alpha": p.trace.alpha}
    return {"distribution": "uniform", "alpha": None}


def config_dict(p: PublishedPoint, *, num_batches: int, warmup_batches: int,
                cache_warmup: int = 0, capacity_rows: int | None = None) -> dict[str, Any]:
    """A `run` config for a point (what `config show` would print before defaults)."""
    m = p.model
    d: dict[str, Any] = {
        "name": f"published-{p.id}", "seed": p.trace.seed or 0,
        "hardware": {"preset": p.preset},
        "model": {"tables": {"count": m.tables, "rows": m.rows_per_table, "dim": m.dim,
                             "bytes_per_element": m.bytes_per_element},
                  "pooling": m.pooling, "batch_size": m.batch_size,
                  "optimizer": p.optimizer or "sgd", "num_batches": num_batches,
                  "warmup_batches": warmup_batches},
        "trace": trace_section(p),
        "cache": {"warmup_batches": cache_warmup},
        "designs": [p.design],
    }
    if p.policy is not None:
        d["cache"]["policy"] = p.policy
    if p.cache.record_miss_counter:  # a knob of the FBGEMM cache designs (lru-cache's points)
        d["design_params"] = {p.design: {"record_miss_counter": True}}
    if capacity_rows is not None:
        d["cache"].update(capacity_rows=capacity_rows, load_factor=None)
    return d


def distinct_rows(trace: Trace) -> int:
    """Distinct (table, row) pairs over every batch of a trace (a bitmap over its rows)."""
    seen = np.zeros(trace.total_rows, np.bool_)
    for k in range(trace.num_batches):
        ids, _ = trace.linear_batch(k)
        seen[ids] = True
    return int(np.count_nonzero(seen))


def second_pass(run: Trace, timed: int) -> Trace:
    """The run's batches followed by its first `timed` batches again (the harness's timed
    pass over batches it has already trained on)."""
    head = run.slice(0, timed)
    n_acc, n_bags = int(run.offsets[-1]), int(run.batch_bounds[-1])
    indices = np.concatenate([np.asarray(run.indices), np.asarray(head.indices)])
    offsets = np.concatenate([np.asarray(run.offsets, np.int64),
                              np.asarray(head.offsets[1:], np.int64) + n_acc])
    bounds = np.concatenate([np.asarray(run.batch_bounds, np.int64),
                             np.asarray(head.batch_bounds[1:], np.int64) + n_bags])
    return type(run)(run.table_rows, indices, offsets, bounds, run.batch_size,
                     {"published_second_pass": timed}, f"{run.source} (second pass)")


# -- running ---------------------------------------------------------------------------------
def _skipped(p: PublishedPoint, reason: str) -> list[PhaseResult]:
    return [PhaseResult(p, ph, None, ms, skipped=reason) for ph, ms in p.measured_ms.items()]


def run_point(p: PublishedPoint, run_cache: dict[Any, tuple[Trace, int]] | None = None,
              replay_cache: bool = True) -> list[PhaseResult]:
    """Predict one point's phases (skipped, with the reason, when the model refuses it)."""
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.timing import build_trace, simulate
    from scratchpipe_sim.timing.stage_columns import phases_ms

    if p.skip_reason is not None:
        return _skipped(p, p.skip_reason)
    try:  # the config first: a refusal (e.g. an optimizer not modelled yet) is a skip
        cfg = load_config(config_dict(p, num_batches=TIMED_BATCHES,
                                      warmup_batches=FILL_BATCHES))
    except UserError as e:
        return _skipped(p, f"{e.field}: {e.message}" if e.field else e.message)
    if p.design != "lru-cache":
        row = simulate(cfg, [p.design], replay_cache=replay_cache)[0]
    else:
        run_cache = {} if run_cache is None else run_cache
        iters = int(p.trace.iterations or 0)
        run_cfg = load_config(config_dict(p, num_batches=iters, warmup_batches=0))
        key = (p.model, p.trace)
        if key not in run_cache:
            run_cache.clear()  # one run's trace at a time: they are large
            # not through the on-disk trace cache: a run of 100 batches of 1M ids is ~1.7 GB,
            # most of that cache's budget; generating it costs ~10 s
            run = build_trace(run_cfg, cache=False)
            run_cache[key] = (second_pass(run, TIMED_BATCHES), distinct_rows(run))
            del run
        trace, distinct = run_cache[key]
        capacity = max(1, math.ceil(distinct * float(p.cache.cfr or 0.0)))
        cfg = load_config(config_dict(p, num_batches=TIMED_BATCHES,
                                      warmup_batches=FILL_BATCHES, cache_warmup=iters,
                                      capacity_rows=capacity))
        row = simulate(cfg, [p.design], trace=trace, replay_cache=replay_cache)[0]
    phases = phases_ms(row, p.design)
    distinct_gen = float(row["unique"]) / max(int(row["measured_batches"]), 1)
    return [PhaseResult(p, ph, phases[ph], ms, distinct_generated=distinct_gen)
            for ph, ms in p.measured_ms.items()]


def run_points(points: Sequence[PublishedPoint], replay_cache: bool = True,
               log: Callable[[str], None] | None = None) -> list[PhaseResult]:
    """Every point's phases, in order (a shared trace for caching points of one run)."""
    out: list[PhaseResult] = []
    run_cache: dict[Any, tuple[Trace, int]] = {}
    for p in points:
        if log is not None:
            log(f"{p.id}: {p.design} on {p.preset or '(no preset)'}")
        out += run_point(p, run_cache, replay_cache)
    return out


# -- reporting -------------------------------------------------------------------------------
def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def format_table(results: Sequence[PhaseResult]) -> str:
    from scratchpipe_sim.experiments.run_tables import table

    rows = [[r.point.id, r.point.gpu, r.point.design, r.point.optimizer or "-", r.phase,
             _f(r.predicted_ms), _f(r.measured_ms), _f(r.factor, 2),
             r.point.role if not r.skipped else f"{r.point.role} (skipped)"]
            for r in results]
    out = [table(rows, ["id", "gpu", "design", "optimizer", "phase", "predicted_ms",
                        "measured_ms", "factor", "role"])]
    out.append("factor = predicted / measured (> 1: the model is slower than the GPU)")
    by_reason: dict[str, list[str]] = {}
    for r in results:
        ids = by_reason.setdefault(r.skipped, []) if r.skipped else []
        if r.skipped and r.point.id not in ids:
            ids.append(r.point.id)
    for reason, ids in by_reason.items():
        out.append(f"skipped {', '.join(ids)}: {reason}")
    seen: set[str] = set()
    for r in results:
        pub = r.point.trace.distinct_ids_per_iter
        if r.distinct_generated is not None and pub and r.point.id not in seen:
            seen.add(r.point.id)
            out.append(f"{r.point.id}: distinct ids per batch, generated "
                       f"{r.distinct_generated:,.0f} vs published {pub:,.2f} "
                       f"({(r.distinct_generated / pub - 1) * 100:+.1f}%)")
    out += summary_lines(results)
    return "\n".join(out)


def summary_lines(results: Sequence[PhaseResult]) -> list[str]:
    """Per role: the geometric mean of |log factor| (as a factor) and the worst factor."""
    lines = []
    for role in ROLES:
        rs = [r for r in results if r.point.role == role and r.factor is not None]
        if not rs:
            continue
        logs = [abs(math.log(r.factor)) for r in rs]
        worst = max(rs, key=lambda r: abs(math.log(r.factor)))
        typical = math.exp(sum(logs) / len(logs))
        lines.append(f"{role}: {len(rs)} phases, typical factor {typical:.2f}x (geometric "
                     f"mean of |log factor|), worst {worst.factor:.2f} ({worst.point.id} "
                     f"{worst.phase})")
    return lines


def as_json(results: Sequence[PhaseResult]) -> list[dict[str, Any]]:
    return [r.as_json() for r in results]




# -- end-to-end points -----------------------------------------------------------------------
@dataclass(frozen=True)
class EndToEndResult:
    """Predicted vs measured whole iteration of one end-to-end point, with its breakdown
    (ms: embedding = every stage but the dense one, dense = MLPs + dense optimizer,
    interaction, host_wait = the GPU idle while the host issues the iteration, other =
    iteration - the stages' sum: idle or, below 0, overlap)."""

    point: EndToEndPoint
    predicted_ms: float | None
    breakdown_ms: tuple[tuple[str, float], ...] = ()
    skipped: str | None = None

    @property
    def measured_ms(self) -> float:
        return self.point.measured_ms

    @property
    def factor(self) -> float | None:
        return None if self.predicted_ms is None else self.predicted_ms / self.measured_ms

    def samples_per_s_per_gpu(self, ms: float | None) -> float | None:
        return None if ms is None else self.point.model.batch_size / ms * 1e3

    def as_json(self) -> dict[str, Any]:
        p = self.point
        return {"id": p.id, "kind": "end-to-end", "gpu": p.gpu, "preset": p.preset,
                "design": p.design, "gpus": p.gpus, "batch_per_gpu": p.model.batch_size,
                "predicted_ms": self.predicted_ms, "measured_ms": self.measured_ms,
                "factor": self.factor,
                "predicted_samples_per_s_per_gpu": self.samples_per_s_per_gpu(
                    self.predicted_ms),
                "measured_samples_per_s_per_gpu": self.samples_per_s_per_gpu(
                    self.measured_ms),
                "breakdown_ms": dict(self.breakdown_ms), "role": p.role,
                "status": "skipped" if self.skipped else "ok", "skip_reason": self.skipped,
                "source": p.source}


def end_to_end_config(p: EndToEndPoint) -> dict[str, Any]:
    """A `run` config for an end-to-end point: the whole model on its design, the global
    batch = local batch x GPUs (multi-gpu gives each GPU its share)."""
    m = p.model
    rows = list(m.rows_per_table) if isinstance(m.rows_per_table, tuple) else m.rows_per_table
    model: dict[str, Any] = {
        "tables": {"count": m.tables, "rows": rows, "dim": m.dim}, "pooling": m.pooling,
        "batch_size": m.batch_size * p.gpus, "optimizer": m.optimizer,
        "bottom_mlp": list(m.bottom_mlp), "top_mlp": list(m.top_mlp),
        "interaction": m.interaction, "precision": m.precision,
        "num_batches": TIMED_BATCHES, "warmup_batches": FILL_BATCHES}
    for key in ("dcn_layers", "dcn_rank", "framework", "optimizer_foreach"):
        if getattr(m, key) is not None:
            model[key] = getattr(m, key)
    d: dict[str, Any] = {
        "name": f"published-{p.id}", "seed": 0,
        "hardware": {"preset": p.preset, **p.hardware}, "model": model,
        "trace": {"distribution": "zipf", "alpha": p.alpha},
        # gpu-only and multi-gpu keep no cache, but the config's must fit HBM: a small one
        "cache": {"warmup_batches": 0, "load_factor": 0.01}, "designs": [p.design]}
    if p.input_pipeline:
        d["input_pipeline"] = dict(p.input_pipeline)
    if p.design == "multi-gpu":
        d["design_params"] = {"multi-gpu": {"gpus": p.gpus}}
    return d


def run_end_to_end(p: EndToEndPoint, replay_cache: bool = True) -> EndToEndResult:
    """Predict one end-to-end point's iteration (skipped, with the reason, when the model
    refuses its config)."""
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.timing import simulate
    from scratchpipe_sim.timing.dense_compute import dense_iteration

    if p.skip_reason is not None:
        return EndToEndResult(p, None, skipped=p.skip_reason)
    try:
        cfg = load_config(end_to_end_config(p))
    except UserError as e:
        return EndToEndResult(p, None, skipped=f"{e.field}: {e.message}" if e.field
                              else e.message)
    row = simulate(cfg, [p.design], replay_cache=replay_cache)[0]
    iteration = float(row["iter_ns_mean"])
    stages = {k[len("stage_"):-len("_ns")]: float(v) for k, v in row.items()
              if k.startswith("stage_") and k.endswith("_ns") and v is not None}
    mlp = stages.pop("mlp", 0.0)
    # the GPU waiting for the host to issue the iteration (timing/host_dispatch.py) is
    # inside the mlp stage: its own part
    host = float(row.get("host_wait_ns") or 0.0)
    parts = dict(dense_iteration(cfg.model, cfg.hardware.gpu,
                                 float(p.model.batch_size)).part_ns)
    whole = sum(parts.values())
    inter = (mlp - host) * parts["interaction"] / whole if whole > 0 else 0.0
    breakdown = (("embedding", sum(stages.values()) / 1e6),
                 ("dense", (mlp - host - inter) / 1e6), ("interaction", inter / 1e6),
                 ("host_wait", host / 1e6),
                 ("other", (iteration - mlp - sum(stages.values())) / 1e6))
    return EndToEndResult(p, iteration / 1e6, breakdown)


def run_end_to_end_points(points: Sequence[EndToEndPoint], replay_cache: bool = True,
                          log: Callable[[str], None] | None = None) -> list[EndToEndResult]:
    out = []
    for p in points:
        if log is not None:
            log(f"{p.id}: {p.design} x {p.gpus} on {p.preset or '(no preset)'}")
        out.append(run_end_to_end(p, replay_cache))
    return out


def format_end_to_end(results: Sequence[EndToEndResult]) -> str:
    from scratchpipe_sim.experiments.run_tables import table

    def rate(r: EndToEndResult, ms: float | None) -> str:
        v = r.samples_per_s_per_gpu(ms)
        return "-" if v is None else f"{v:,.0f}"

    rows = [[r.point.id, r.point.gpu, f"{r.point.design} x {r.point.gpus}",
             str(r.point.model.batch_size), _f(r.predicted_ms), _f(r.measured_ms),
             _f(r.factor, 2), rate(r, r.predicted_ms), rate(r, r.measured_ms),
             r.point.role if not r.skipped else f"{r.point.role} (skipped)"]
            for r in results]
    out = [table(rows, ["id", "gpu", "design", "batch/GPU", "predicted_ms", "measured_ms",
                        "factor", "pred samples/s/GPU", "meas samples/s/GPU", "role"])]
    out.append("whole iteration; factor = predicted / measured (> 1: the model is slower)")
    for r in results:
        if r.skipped:
            out.append(f"skipped {r.point.id}: {r.skipped}")
        else:
            parts = ", ".join(f"{k} {v if abs(v) >= 5e-4 else 0.0:.3f}"
                              for k, v in r.breakdown_ms)
            out.append(f"{r.point.id} breakdown (ms): {parts}")
    for role in ROLES:
        rs = [r for r in results if r.point.role == role and r.factor is not None]
        if rs:
            logs = [abs(math.log(r.factor)) for r in rs]
            worst = max(rs, key=lambda r: abs(math.log(r.factor or 1.0)))
            out.append(f"end-to-end {role}: {len(rs)} points, typical factor "
                       f"{math.exp(sum(logs) / len(logs)):.2f}x, worst {worst.factor:.2f} "
                       f"({worst.point.id})")
    return "\n".join(out)
