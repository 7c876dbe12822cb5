"""A TBE call's fixed cost, read as the intercept of a batch sweep:
`python -m scratchpipe_sim.cuda.tbe_batch_sweep --out DIR`.

Why (issue 43, docs/validation.md "A batch's fixed costs in the UVM phases"): the model's
embedding phases (`gpu-only` on HBM, `uvm` on host memory) are priced by their bytes alone,
with no fixed per-call cost, while TorchRec PR 2365 shows ~0.3 ms per TBE forward + backward
flat over a 64x range of bytes at small shapes. Whether that is GPU time (a per-call cost
that belongs in the kernels) or host time (the framework's ops) cannot be read from the PR.
This measures it with this project's kernels: for each placement (`DEVICE` = HBM, `MANAGED`
= host memory read in place) and each batch size, forward and backward are timed four ways,

- `gpu`: CUDA events, every iteration queued behind a blocking kernel, so the GPU runs the
  phases back to back whatever the host's launch cost (the GPU's own time per call);
- `queued`: CUDA events queued as `tbe_measure.measure` does (the published shapes' method;
  at small batches the GPU can wait on numba's launches, and this shows how much);
- `host`: host wall time of the phase with a stream sync after it (what a Python harness
  timing a synchronous call sees);
- `launch`: host time until the phase's launches returned (before the sync);

and each series is fitted to time = intercept + slope x lookups over the batch sizes (least
squares, residuals kept), next to the same fit of the model's stages for the same ids
(`tbe_shapes.predict`; today the model's intercept is ~0: that is the point).

The fit and the report are pure numpy functions (`fit_line`, `fit_series`, `markdown`),
tested without a GPU; importing this module does not import numba.cuda.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.cuda.runtime import EventTimer, cuda, gpu_status, is_simulator
from scratchpipe_sim.cuda.tbe_backward_plan import DevicePlan, plan_backward
from scratchpipe_sim.cuda.tbe_kernels import backward_sgd, fill_pattern, forward
from scratchpipe_sim.cuda.tbe_measure import measure
from scratchpipe_sim.cuda.tbe_shapes import (
    HOST_SHARE,
    PLACEMENT_POINTS,
    SEED,
    RunShape,
    predict,
    published,
)
from scratchpipe_sim.cuda.tbe_tables import allocate_table, release_gpu_memory
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.safety import memory_guard

PROG = "tbe_batch_sweep"
PHASES = ("forward", "backward")
DEFAULT_BATCHES = (256, 1024, 4096, 16384, 65536)
#: what each series is (written into the JSON and the report)
SERIES = {
    "gpu": "GPU time: CUDA events, every iteration queued behind a blocking kernel",
    "queued": "GPU time: CUDA events queued as tbe_measure.measure does (no blocker)",
    "host": "host wall time of the phase, stream synchronised after it",
    "launch": "host time until the phase's launches returned (before the sync)",
    "model": "the model's stage for the same ids",
}
#: a phase whose GPU intercept is above this has a per-call GPU cost worth pricing (us;
#: docs/validation.md: ~10 launches at 5 us would be 50 us)
FIXED_COST_US = 50.0
#: one nanosleep of the blocking kernel (PTX caps a nanosleep at 1 ms)
_SLEEP_NS = np.uint32(100_000)
#: the blocking kernel's longest wait (s): a host slower than this is not waited for
_MAX_BLOCK_S = 2.0
#: numba.cuda once `spin_kernel()` ran (the kernels' module-global pattern, tbe_kernels)
_cuda: Any = None


# ---- the fit and the report: pure numpy ------------------------------------------------

@dataclass(frozen=True)
class LineFit:
    """time_us = intercept_us + slope_us_per_lookup x lookups, least squares over the points.

    `intercept_se_us` is the intercept's standard error (None with two points: no residual
    degree of freedom); `residuals_us` are measured minus fitted, point by point.
    """

    lookups: tuple[int, ...]
    time_us: tuple[float, ...]
    intercept_us: float
    slope_us_per_lookup: float
    intercept_se_us: float | None
    residuals_us: tuple[float, ...]

    @property
    def slope_ns_per_lookup(self) -> float:
        return self.slope_us_per_lookup * 1e3

def fit_line(lookups: Sequence[float], time_us: Sequence[float]) -> LineFit:
    """Ordinary least squares of time on lookups (closed form); at least 2 distinct
    lookup counts, else ValueError (one batch size says nothing about an intercept)."""
    x = np.asarray(lookups, np.float64)
    y = np.asarray(time_us, np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"expected two equal-length lists, got {x.shape} and {y.shape}")
    if len(np.unique(x)) < 2:
        raise ValueError("a line needs at least 2 distinct batch sizes, got "
                         f"{sorted({int(v) for v in x})}")
    n = len(x)
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum()) / sxx
    intercept = float(ym - slope * xm)
    res = y - (intercept + slope * x)
    se = (math.sqrt(float((res ** 2).sum()) / (n - 2) * (1.0 / n + xm * xm / sxx))
          if n > 2 else None)
    return LineFit(tuple(int(v) for v in x), tuple(float(v) for v in y), intercept, slope,
                   se, tuple(float(v) for v in res))

def median_us(samples_ms: Sequence[float]) -> float | None:
    """A series' value at one batch: the median of its samples (robust to a stray slow
    iteration), in us; None when nothing was measured (the simulator)."""
    return float(np.median(samples_ms)) * 1e3 if len(samples_ms) else None

def series_us(point: dict[str, Any], phase: str, series: str) -> float | None:
    """One point's value of a series for a phase (us)."""
    ph = point["phases"][phase]
    if series == "model":
        return None if ph.get("model_ms") is None else ph["model_ms"] * 1e3
    return median_us(ph.get(f"{series}_ms", []))

def fit_series(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per placement, phase and series: the line over the batch sizes (or why there is none:
    fewer than 2 distinct batch sizes with a value)."""
    out = []
    for placement in dict.fromkeys(p["placement"] for p in points):
        mine = [p for p in points if p["placement"] == placement and "phases" in p]
        for phase in PHASES:
            for series in SERIES:
                xy = [(p["lookups"], v) for p in mine
                      if (v := series_us(p, phase, series)) is not None]
                row: dict[str, Any] = {"placement": placement, "phase": phase,
                                       "series": series}
                if not xy:
                    out.append({**row, "fit": None, "why": "no samples (nothing timed)"})
                    continue
                try:
                    f = fit_line([x for x, _ in xy], [y for _, y in xy])
                except ValueError as e:
                    out.append({**row, "fit": None, "why": str(e)})
                    continue
                out.append({**row, "fit": {**dataclasses.asdict(f),
                                           "slope_ns_per_lookup": f.slope_ns_per_lookup}})
    return out

def reading(gpu: dict[str, Any] | None, host: dict[str, Any] | None,
            threshold_us: float = FIXED_COST_US) -> str:
    """What one phase's intercepts say (docs/validation.md): a GPU intercept above the
    threshold is a per-call GPU cost; a host one alone is the host's (numba's launches here,
    the framework's ops in a PyTorch trainer)."""
    if gpu is None:
        return "no GPU time measured: nothing to read"
    g = gpu["intercept_us"]
    if g > threshold_us:
        return (f"GPU intercept {g:.1f} us > {threshold_us:.0f}: a per-call GPU cost, which "
                "belongs in every design's embedding kernels")
    h = None if host is None else host["intercept_us"]
    if h is not None and h > threshold_us:
        return (f"GPU intercept {g:.1f} us <= {threshold_us:.0f}, host {h:.1f} us: the fixed "
                "cost is host time (the framework's host ops in the model)")
    return (f"GPU intercept {g:.1f} us, host {'-' if h is None else format(h, '.1f')} us: "
            f"no fixed cost above {threshold_us:.0f} us")

def _f(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)

def markdown(doc: dict[str, Any]) -> str:
    """The sweep as markdown: medians per batch, the fits, and each phase's reading."""
    pts = [p for p in doc["points"] if "phases" in p]
    out = [f"TBE batch sweep on {doc['device']}: {doc['tables']} tables x "
           f"{doc['rows_per_table']:,} rows, dim {doc['dim']} fp32, pooling {doc['pooling']} "
           f"(unpooled forward), Zipf {doc['alpha']}, EXACT_SGD; median of {doc['iters']} "
           f"iterations after {doc['warmup']} warm-up; model `{doc['preset']}`",
           "",
           "| placement | phase | batch | lookups | GPU (us) | GPU queued (us) | "
           "host wall (us) | host launch (us) | model (us) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in pts:
        for phase in PHASES:
            out.append("| " + " | ".join(
                [p["placement"], phase, f"{p['batch']:,}", f"{p['lookups']:,}"]
                + [_f(series_us(p, phase, s)) for s in SERIES]) + " |")
    late = [f"{p['placement']} {p['batch']:,}" for p in pts if p.get("queued_ahead") is False]
    if late:
        out.append(f"\nThe blocking kernel ended before the last phase was queued at: "
                   f"{', '.join(late)}; there the GPU series may hold launch gaps (fewer "
                   "--iters queue sooner; blocked_ms in the JSON is how long it held)")
    for p in doc["points"]:
        if "error" in p:
            out.append(f"\n{p['placement']} batch {p['batch']:,}: failed: {p['error']}")
    out += ["", "time = intercept + slope x lookups, least squares over the batch sizes "
            "(residual = value - line)", "",
            "| placement | phase | series | intercept (us) | s.e. (us) | slope (ns/lookup) "
            "| residuals (us) |", "|---|---|---|---:|---:|---:|---|"]
    by_key = {}
    for r in doc["fits"]:
        by_key[r["placement"], r["phase"], r["series"]] = r["fit"]
        f = r["fit"]
        if f is None:
            out.append(f"| {r['placement']} | {r['phase']} | {r['series']} | - | - | - | "
                       f"{r['why']} |")
            continue
        out.append("| " + " | ".join([
            r["placement"], r["phase"], r["series"], _f(f["intercept_us"]),
            _f(f["intercept_se_us"]), _f(f["slope_ns_per_lookup"], ".4f"),
            ", ".join(format(v, ".1f") for v in f["residuals_us"])]) + " |")
    out += ["", f"Reading (a GPU intercept above {FIXED_COST_US:.0f} us is a per-call GPU "
            "cost; a host one alone is host time):", ""]
    for placement, phase in dict.fromkeys((r["placement"], r["phase"]) for r in doc["fits"]):
        model = by_key.get((placement, phase, "model"))
        out.append(f"- {placement} {phase}: " + reading(
            by_key.get((placement, phase, "gpu")), by_key.get((placement, phase, "host")))
            + f"; the model's intercept {_f(None if model is None else model['intercept_us'])}"
            " us")
    return "\n".join(out)


# ---- the arguments ---------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line (a UserError), not usage + message."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(message)

def parse_batches(text: str) -> tuple[int, ...]:
    """'256,1024' -> (256, 1024): positive integers, at least 2 distinct, sorted, once each."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise UserError(f"expected positive integers separated by commas, got {text!r}",
                        field="--batches") from None
    if any(v <= 0 for v in values):
        raise UserError(f"expected batch sizes > 0, got {text!r}", field="--batches")
    distinct = tuple(sorted(set(values)))
    if len(distinct) < 2:
        raise UserError(f"expected at least 2 distinct batch sizes (a line needs two), got "
                        f"{text!r}", field="--batches")
    return distinct

def check_host_memory(tables: int, rows: int, dim: int) -> None:
    """The MANAGED table must fit in HOST_SHARE of the memory available (the memory guard's,
    $SCRATCHPIPE_MEMORY_BYTES included), as for the published shapes."""
    nbytes = tables * rows * dim * 4
    memory_guard.check(math.ceil(nbytes / HOST_SHARE),
                       f"the MANAGED table ({memory_guard.human(nbytes)}, at most "
                       f"{HOST_SHARE:.0%} of the memory available)",
                       "lower --tables, --rows or --dim, or leave out MANAGED (--placements)",
                       source=PROG, field="--rows")

def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments, checked; any mistake is a UserError (one line, exit 2)."""
    p = _Parser(prog=f"python -m scratchpipe_sim.cuda.{PROG}",
                description="Time FBGEMM-like TBE forward and EXACT_SGD backward (this "
                            "project's numba-cuda kernels) at several batch sizes, on HBM "
                            "(DEVICE) and host memory (MANAGED), as GPU time and host time, "
                            "and fit time = intercept + slope x lookups, next to the model's "
                            "prediction for the same ids. Needs a CUDA GPU.")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="folder for tbe_batch_sweep.json and tbe_batch_sweep.md")
    p.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), metavar="B,B,..",
                   help="samples per table, comma-separated (default %(default)s)")
    p.add_argument("--tables", type=int, default=4, metavar="T")
    p.add_argument("--rows", type=int, default=100_000, metavar="R", help="rows per table")
    p.add_argument("--dim", type=int, default=128, metavar="D")
    p.add_argument("--pooling", type=int, default=1, metavar="L",
                   help="ids per sample and table (the forward is unpooled: each lookup's "
                        "row is written; the model prices a pooled forward)")
    p.add_argument("--iters", type=int, default=20, metavar="N",
                   help="timed iterations per batch size and method (default 20)")
    p.add_argument("--warmup", type=int, default=3, metavar="N")
    p.add_argument("--id-batches", type=int, default=2, metavar="K",
                   help="distinct id batches cycled through (the model's trace batches)")
    p.add_argument("--placements", nargs="+", choices=list(PLACEMENT_POINTS),
                   default=list(PLACEMENT_POINTS))
    p.add_argument("--managed-alloc", choices=("managed", "mapped"), default="managed")
    p.add_argument("--preset", default="h200-gen5", help="hardware preset of the prediction")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args(argv)
    a.batches = parse_batches(a.batches)
    for k in ("tables", "rows", "dim", "pooling", "iters", "id_batches"):
        if getattr(a, k) < 1:
            raise UserError(f"expected >= 1, got {getattr(a, k)}",
                            field=f"--{k.replace('_', '-')}")
    if a.warmup < 0:
        raise UserError(f"expected >= 0, got {a.warmup}", field="--warmup")
    if a.tables * a.rows >= 2**31:
        raise UserError(f"{a.tables} x {a.rows} rows: linear ids must fit int32",
                        field="--rows")
    from scratchpipe_sim.config.published_points import known_presets  # noqa: PLC0415

    if a.preset not in known_presets():
        raise UserError(f"unknown preset {a.preset!r}{closest(a.preset, known_presets())}",
                        field="--preset")
    if "MANAGED" in a.placements:
        check_host_memory(a.tables, a.rows, a.dim)
    return a


# ---- the GPU loop ------------------------------------------------------------------------

@cache
def spin_kernel() -> Any:
    """A one-thread kernel that sleeps `sleeps` x 100 us: the stream is held while the host
    queues every timed iteration, so the events then time GPU work back to back (nvbench's
    blocking kernel, with a bounded sleep instead of a host flag). Real GPUs only: the
    simulator has no nanosleep."""
    global _cuda
    _cuda = c = cuda()

    @c.jit
    def spin(sleeps, out):
        for _ in range(sleeps):
            _cuda.nanosleep(_SLEEP_NS)
        out[0] = sleeps

    return spin

@dataclass
class Prepared:
    """One batch size's table, ids, backward plans and buffers, on the GPU before timing."""

    table: Any
    d_ids: list[Any]
    plans: list[DevicePlan]
    emb: Any
    grad: Any
    stream: Any
    lr: float

    def run(self, phase: str, k: int) -> None:
        """Queue one phase of id batch k."""
        if phase == "forward":
            forward(self.table, self.d_ids[k], self.emb, self.stream)
        else:
            backward_sgd(self.table, self.grad, self.plans[k], self.lr, self.stream)

def prepare(table: Any, batches: Sequence[np.ndarray], dim: int, lr: float,
            stream: Any) -> Prepared:
    """The ids, sorted-ids plans and gradient on the GPU (the gradient is fill_pattern's)."""
    c = cuda()
    plans = [DevicePlan(plan_backward(ids), dim, stream) for ids in batches]
    d_ids = [c.to_device(np.asarray(ids, np.int32), stream=stream) for ids in batches]
    n = len(batches[0])
    emb = c.device_array((n, dim), np.float32, stream=stream)
    grad = c.device_array((n, dim), np.float32, stream=stream)
    fill_pattern(grad, 1e-3, stream=stream)
    stream.synchronize()
    return Prepared(table, d_ids, plans, emb, grad, stream, lr)

def time_synced(p: Prepared, iters: int, warmup: int) -> dict[str, list[float]]:
    """Host wall time of each phase with a stream sync after it, and the time until its
    launches returned (ms). Empty under the simulator: its Python run is no host time."""
    out: dict[str, list[float]] = {f"{ph}_{s}": [] for ph in PHASES for s in ("host", "launch")}
    keep = not is_simulator()
    for it in range(warmup + iters):
        for phase in PHASES:
            t0 = time.perf_counter()
            p.run(phase, it % len(p.d_ids))
            t1 = time.perf_counter()
            p.stream.synchronize()
            t2 = time.perf_counter()
            if it >= warmup and keep:
                out[f"{phase}_launch"].append((t1 - t0) * 1e3)
                out[f"{phase}_host"].append((t2 - t0) * 1e3)
    return out

def block_ns(synced: dict[str, list[float]], iterations: int) -> int:
    """How long the blocking kernel holds the stream: 3x the host's measured launch time of
    every iteration (events included by the factor) plus 2 ms, at most _MAX_BLOCK_S."""
    per_iter_ms = sum(float(np.median(synced[f"{ph}_launch"])) if synced[f"{ph}_launch"]
                      else 0.1 for ph in PHASES)
    return int(min(_MAX_BLOCK_S * 1e9, (3 * iterations * per_iter_ms + 2.0) * 1e6))

def time_blocked(p: Prepared, iters: int, warmup: int, wait_ns: int) -> dict[str, Any]:
    """Every iteration queued behind the blocking kernel, each phase between CUDA events.

    `queued_ahead` is whether the blocker was still running when the last phase was queued
    (then the events time GPU work only); `blocked_ms` the blocker's own time. Under the
    simulator there is no blocker and no timing (empty lists, None)."""
    c, s = cuda(), p.stream
    real = not is_simulator() and wait_ns > 0
    out: dict[str, Any] = {"forward_gpu": [], "backward_gpu": [], "queued_ahead": None,
                           "blocked_ms": None}
    flag = None
    if real:
        flag = c.device_array(1, np.int64, stream=s)
        spin_kernel()[1, 1, s](np.int64(0), flag)  # compiled before anything is timed
    timers = [(EventTimer(s), EventTimer(s)) for _ in range(warmup + iters)]
    block, done = EventTimer(s), c.event()
    s.synchronize()
    block.start()
    if real:
        spin_kernel()[1, 1, s](np.int64(math.ceil(wait_ns / int(_SLEEP_NS))), flag)
    block.stop()
    done.record(s)
    for it, (tf, tb) in enumerate(timers):
        k = it % len(p.d_ids)
        tf.start()
        p.run("forward", k)
        tf.stop()
        tb.start()
        p.run("backward", k)
        tb.stop()
    if real:
        out["queued_ahead"] = not done.query()
    s.synchronize()
    b = block.elapsed_s()
    out["blocked_ms"] = None if b is None else b * 1e3
    for tf, tb in timers[warmup:]:
        f_s, b_s = tf.elapsed_s(), tb.elapsed_s()
        if f_s is not None and b_s is not None:
            out["forward_gpu"].append(f_s * 1e3)
            out["backward_gpu"].append(b_s * 1e3)
    return out

def sweep_shape(placement: str, tables: int, rows: int, dim: int, batch: int) -> RunShape:
    """The published placement's shape (its design, stages and Zipf alpha) at these sizes."""
    base = dataclasses.replace(published()[placement], point=f"sweep-{placement}",
                               tables=tables, rows_per_table=rows, samples_per_table=batch,
                               dim=dim)
    return RunShape(base, tables, 1.0)

def sweep_point(placement: str, batch: int, a: argparse.Namespace, log: Any = None
                ) -> dict[str, Any]:
    """One placement and batch size: the model's ids and stages, then the three timed loops
    (measure()'s queued events on its own table; host-synced and blocked on a fresh one)."""
    shape = sweep_shape(placement, a.tables, a.rows, a.dim, batch)
    ids, predicted = predict(shape, a.id_batches, a.preset, a.seed, a.pooling)
    times = measure(shape, ids, a.iters, a.warmup, a.lr, a.managed_alloc)
    release_gpu_memory()
    table, placed = allocate_table(a.tables * a.rows, a.dim, placement, a.managed_alloc)
    p = prepare(table, ids, a.dim, a.lr, cuda().stream())
    synced = time_synced(p, a.iters, a.warmup)
    blocked = time_blocked(p, a.iters, a.warmup, block_ns(synced, a.iters + a.warmup))
    del p, table
    release_gpu_memory()
    phases = {ph: {"gpu_ms": blocked[f"{ph}_gpu"], "queued_ms": getattr(times, f"{ph}_ms"),
                   "host_ms": synced[f"{ph}_host"], "launch_ms": synced[f"{ph}_launch"],
                   "model_ms": predicted.get(ph),
                   "model_stage": f"{shape.base.design} stage_{stage}"}
              for ph, stage in zip(PHASES, shape.base.stages, strict=True)}
    point = {"placement": placement, "batch": batch, "lookups": len(ids[0]),
             "distinct_ids": times.distinct_ids, "placed": placed,
             "host_sort_ms": times.host_sort_ms, "index_h2d_ms": times.index_h2d_ms,
             "queued_ahead": blocked["queued_ahead"], "blocked_ms": blocked["blocked_ms"],
             "phases": phases}
    if log:
        log(f"{placement} batch {batch:,}: " + ", ".join(
            f"{ph} GPU {_f(series_us(point, ph, 'gpu'))} us host "
            f"{_f(series_us(point, ph, 'host'))} us model {_f(series_us(point, ph, 'model'))}"
            " us" for ph in PHASES) + f"; queued ahead: {blocked['queued_ahead']}")
    return point

def write(doc: dict[str, Any], out: Path) -> str:
    """Refit and write the JSON and the markdown (after every point: a timeout keeps what
    was measured); returns the markdown."""
    doc["fits"] = fit_series(doc["points"])
    (out / f"{PROG}.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    md = markdown(doc)
    (out / f"{PROG}.md").write_text(md + "\n", encoding="utf-8")
    return md

def main(argv: Sequence[str] | None = None) -> int:
    try:
        a = parse_args(argv)
    except UserError as e:
        print(f"{PROG}: {e.line()}", file=sys.stderr)
        return 2
    st = gpu_status()
    if not st.usable:
        print(f"{PROG}: no usable GPU ({st.reason}); nothing measured", file=sys.stderr)
        return 2
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{PROG} {time.perf_counter() - t_start:6.1f} s] {msg}", file=sys.stderr,
              flush=True)

    a.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "device": st.reason, "batches": list(a.batches), "tables": a.tables,
        "rows_per_table": a.rows, "dim": a.dim, "pooling": a.pooling,
        "alpha": published()[a.placements[0]].alpha, "iters": a.iters, "warmup": a.warmup,
        "id_batches": a.id_batches, "seed": a.seed, "lr": a.lr, "preset": a.preset,
        "managed_alloc": a.managed_alloc, "series": SERIES, "fixed_cost_us": FIXED_COST_US,
        "statistic": "median of the iterations after warm-up, per batch size",
        "sort": "host numpy argsort per id batch, outside every timed phase",
        "points": []}
    md = ""
    for placement in a.placements:
        for batch in a.batches:
            try:
                doc["points"].append(sweep_point(placement, batch, a, log))
            except Exception as e:  # noqa: BLE001  (keep the other points' measurements)
                error = f"{type(e).__name__}: {e}"
                log(f"{placement} batch {batch:,}: failed: {error}")
                doc["points"].append({"placement": placement, "batch": batch, "error": error})
                release_gpu_memory()
            md = write(doc, a.out)
    print(md)
    return 0 if all("error" not in p for p in doc["points"]) else 1


if __name__ == "__main__":
    sys.exit(main())
