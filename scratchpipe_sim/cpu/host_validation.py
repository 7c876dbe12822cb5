"""`validate --cpu`: the CPU stages run for real on a config's trace vs the timing model.

Measured (real tables in DRAM: one float32 row store of total rows x R bytes, the embedding
then its optimizer state; threads = hardware.cpu.cores, at most what Numba may use):

    hybrid       gather_pool        embedding-bag gather + pool of every lookup
                 aggregate_update   lookups' gradients -> unique-row gradients, optimizer apply
    scratchpipe  plan               the real `scratchpipe` policy kernel (one thread)
                 collect            the batch's fill rows gathered into a staging buffer
                 write_back         W rows scattered back into the table

Predicted: the same per-batch counts the simulator prices (`timing.replay_passes.Replays`: policy
replay, warm-up prefix, LLC hits), each stage alone on a fresh SimPy environment and
`Machine`, priced by the Machine's own helpers (`cpu_gather`, `cpu_backward`, `plan` with
the batch's evictions, `collect` and `write_back` with their staging-buffer side) — the
formulas are not copied here, and the designs price the same stages with the same helpers.
The planner runs on one thread, so predictions use cache.plan_threads = 1. A pass runs a
stage's batches in trace order (the LLC holds what the previous batch left, as in
training); passes are interleaved — pass k of every stage, then pass k + 1, `reps` in all —
so a slow minute of a shared host lands on every stage alike; a batch's time is its median
(or, with statistic="best", its best) over the passes. On one thread the clock is the
thread's CPU time (cpu/measure.py).
Victim ids are not reported by the policy: write-back scatters, per batch, the policy's
count of rows taken oldest-fill-first from the rows it filled.

The host's drift: at the start of every pass of every stage a probe gathers + pools
PROBE_LOOKUPS uniform random rows of the same table (fresh ids each time: the misses
calibrate's `core_dram_GBps` prices), reported as the stage `host.uniform_gather` with the
model's price (`cpu_gather`, nothing on chip). Why: on a shared host the same gather moves
20-40% between runs minutes apart, so a stage's error is the model's plus the host's drift
since calibration; the probe measures the second beside the first, and each stage also
reports its error relative to the probe's (`drift_adjusted_pct`). The raw error stays the
result; the adjusted one says how much of it the host's state explains.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import numba as nb
import numpy as np
import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.cpu import host_kernels as K
from scratchpipe_sim.cpu.measure import summarize
from scratchpipe_sim.cpu.measure import timed as _timed
from scratchpipe_sim.cpu.plan_stage import run_planner
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.measure import host
from scratchpipe_sim.policies.engine import COUNTERS
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.designs.design_registry import config_designs
from scratchpipe_sim.timing.machine import Machine, price_alone
from scratchpipe_sim.timing.replay_passes import Replays
from scratchpipe_sim.timing.trace_setup import build_trace
from scratchpipe_sim.traces.csr_trace import Trace

#: lookups of one drift probe (uniform rows, pooled 20 to a bag)
PROBE_LOOKUPS = 32768
PROBE_POOLING = 20

#: the CPU stages of each design that has any (in pipeline order)
CPU_STAGES = {"hybrid": ("gather_pool", "aggregate_update"),
              "scratchpipe": ("plan", "collect", "write_back")}


@dataclass(frozen=True)
class StageResult:
    design: str
    stage: str
    predicted_ns: float
    measured_ns: float
    error_pct: float  # (predicted - measured) / measured
    batches: int
    spread_pct: float  # mean over batches of (median - best) / best of the passes
    #: the error with the host's drift since calibration taken out: (1 + error) / (1 + the
    #: drift probe's error) - 1 (None for the probe itself)
    drift_adjusted_pct: float | None = None

    def as_json(self) -> dict:
        d = asdict(self)
        d["stage"] = f"{self.design}.{self.stage}"
        del d["design"]
        return d


def cpu_designs(cfg: Config) -> list[str]:
    """The config's designs (the registry's defaults when it lists none) that have CPU
    stages measured here."""
    configured = config_designs(cfg)
    names = [d for d in configured if d in CPU_STAGES]
    if not names:
        raise UserError(f"designs {list(configured)} run no CPU stage here: expected hybrid "
                        "or scratchpipe among them", source=cfg.source, field="designs")
    return names


def memory_needed(cfg: Config) -> int:
    """Bytes the run allocates: the row store, per-row arrays (aggregation slots, the
    policy's and the replay's state) and the trace with its per-access arrays."""
    m = cfg.model
    rows = cfg.total_rows
    per_row = m.moved_row_bytes + 8 + memory_guard.RUN_BYTES_PER_ROW
    batches = m.num_batches * 2  # the timed batches and at most as many warm-up ones
    accesses = batches * m.batch_size * sum(m.poolings)
    return rows * per_row + accesses * memory_guard.BYTES_PER_ACCESS


def check_size(cfg: Config, available: int | None = None) -> None:
    if cfg.model.tables.bytes_per_element != 4:
        raise UserError("validate --cpu runs float32 tables: expected "
                        f"model.tables.bytes_per_element 4, got "
                        f"{cfg.model.tables.bytes_per_element}", source=cfg.source,
                        field="model.tables.bytes_per_element")
    if len(set(cfg.model.dims)) != 1:
        raise UserError("validate --cpu runs one row store of one dim: expected equal "
                        f"model.tables.dim, got {sorted(set(cfg.model.dims))}",
                        source=cfg.source, field="model.tables.dim")
    need = memory_needed(cfg)
    have = memory_guard.available_bytes() if available is None else available
    if have is not None and need > have * 0.8:
        m = cfg.model
        rows = max(m.rows_per_table)
        fit_rows = max(1, int(rows * have * 0.5 / need))
        raise UserError(
            f"running {m.table_count} tables x {rows} rows x "
            f"{m.moved_row_bytes} B for real needs about {memory_guard.human(need)}, more "
            f"than 80% of the {memory_guard.human(have)} available; expected a smaller "
            f"table: scale it with --rows {fit_rows} (rows per table; the trace is generated "
            "for that size) or fewer batches (--set model.num_batches=N)",
            source=cfg.source, field="model.tables.rows")


class _Stage(NamedTuple):
    design: str
    stage: str
    one_pass: Callable[[], np.ndarray]  # one timed pass: seconds per measured batch
    predicted_ns: np.ndarray  # the model's price per measured batch


@dataclass
class _Run:
    """What every stage of one validation shares: the config, its trace and replays, the
    measured batches (their ids and bag offsets) and the row store in DRAM."""

    cfg: Config
    trace: Trace
    replays: Replays
    measured: list[int]
    store: np.ndarray
    threads: int
    batch_data: dict[int, tuple[np.ndarray, np.ndarray]]

    def predicted(self, part: Callable[[Machine, int], simpy.Event | None]) -> np.ndarray:
        """The model's time of `part` per measured batch, priced alone (price_alone)."""
        return price_alone(self.cfg, self.cfg.model.num_batches, part, self.measured)

    def per_batch(self, fn: Callable[[int], float]) -> Callable[[], np.ndarray]:
        """One pass of `fn` over the measured batches, in trace order."""
        return lambda: np.array([fn(b) for b in self.measured])


def validate_cpu(cfg: Config, reps: int = 3, max_batches: int | None = None,
                 log: Callable[[str], None] = print, statistic: str = "median"
                 ) -> list[StageResult]:
    """Measure and predict every CPU stage of the config's hybrid / scratchpipe designs."""
    names = cpu_designs(cfg)
    check_size(cfg)
    trace = build_trace(cfg)
    m = cfg.model
    threads = max(1, min(cfg.hardware.cpu.cores, nb.config.NUMBA_NUM_THREADS))
    nb.set_num_threads(threads)
    replays = Replays(cfg, trace, cached=any(
        DESIGNS.get(n)(cfg).workload_key().policy is not None for n in names))
    measured = list(range(m.warmup_batches, m.num_batches))
    if max_batches is not None:
        measured = measured[:max_batches]
    store = np.full((trace.total_rows, m.moved_row_bytes // 4), 0.01, np.float32)
    run = _Run(cfg, trace, replays, measured, store, threads,
               {b: trace.linear_batch(replays.prefix + b) for b in measured})
    probe = Probe(store, m.dims[0], min(PROBE_LOOKUPS, trace.total_rows),
                   seed=len(measured))
    builders = {"hybrid": _hybrid_stages, "scratchpipe": _scratchpipe_stages}
    stages = [st for d in CPU_STAGES if d in names for st in builders[d](run)]
    # interleaved: pass k of every stage, then pass k + 1; the probe before each stage's
    # pass. A slow minute of the host then lands on every stage and on the probe alike.
    times: list[list[np.ndarray]] = [[] for _ in stages]
    for _ in range(max(1, reps)):
        for st, t in zip(stages, times, strict=True):
            probe.sample()
            t.append(st.one_pass())

    def result(design: str, stage: str, p: np.ndarray, t: np.ndarray) -> StageResult:
        best, med = t.min(axis=0), np.median(t, axis=0)
        pm = float(p.mean())
        mm = float(summarize(t, statistic).mean()) * 1e9  # calibrate's estimator
        busy = best > 0
        spread = (float(np.mean((med[busy] - best[busy]) / best[busy])) * 100
                  if busy.any() else 0.0)
        err = (pm - mm) / mm * 100 if mm > 0 else (0.0 if pm == 0 else float("inf"))
        log(f"validate --cpu: {design}.{stage} measured {mm / 1e3:.0f} us, predicted "
            f"{pm / 1e3:.0f} us")
        return StageResult(design, stage, pm, mm, err, len(best), spread)

    out = [result(st.design, st.stage, st.predicted_ns, np.array(t))
           for st, t in zip(stages, times, strict=True)]
    n, r = probe.lookups, m.row_bytes
    drift = result("host", "uniform_gather",
                   run.predicted(lambda mm, b: mm.cpu_gather(n, r, b, "probe"))[:1],
                   np.array(probe.seconds)[:, None])
    scale = 1.0 + drift.error_pct / 100
    return [replace(x, drift_adjusted_pct=((1 + x.error_pct / 100) / scale - 1) * 100)
            for x in out] + [drift]


def _hybrid_stages(run: _Run) -> list[_Stage]:
    """hybrid's gather_pool (embedding-bag gather + pool) and aggregate_update (the
    aggregation, then the config's optimizer on the unique rows)."""
    cfg, store, measured, data = run.cfg, run.store, run.measured, run.batch_data
    m = cfg.model
    dim = m.dims[0]
    hybrid = DESIGNS.get("hybrid")(cfg)
    c = hybrid.columns(run.replays.get(hybrid.workload_key())[0])
    r = m.row_bytes
    maxbags = max(len(bp) - 1 for _, bp in data.values())
    pooled = np.empty((maxbags, dim), np.float32)
    grads = np.full((maxbags, dim), 1e-4, np.float32)
    bw = K.Backward(run.trace.total_rows, dim, max(len(ids) for ids, _ in data.values()),
                    run.threads)
    bag_of = {b: K.bag_of_lookups(bp) for b, (_, bp) in data.items()}

    def gather(b: int) -> float:
        ids, bp = data[b]
        return _timed(lambda: K.bag_pool(store, dim, ids, bp, pooled))

    state = {"n": 0}

    def backward(b: int) -> float:
        ids, _ = data[b]

        def work() -> None:
            state["n"] = bw.aggregate(ids, bag_of[b], grads)
            K.apply(m.optimizer, store, bw.uniq, bw.grad_rows, state["n"])

        t = _timed(work)
        K.reset_slots(bw.slot, bw.uniq, state["n"])
        return t

    out = []
    for stage, fn, part in (
            ("gather_pool", gather,
             lambda mm, b: mm.cpu_gather(c.accesses[b], r, b, "gather", c.llc[b])),
            ("aggregate_update", backward,
             lambda mm, b: mm.cpu_backward(b, c.accesses[b], c.unique[b],
                                           c.llc_update[b], lookup_onchip=c.llc[b],
                                           bags=c.samples[b] * mm.tables))):
        for b in measured[:2]:  # compile (and touch) before timing
            fn(b)
        out.append(_Stage("hybrid", stage, run.per_batch(fn), run.predicted(part)))
    return out


def _scratchpipe_stages(run: _Run) -> list[_Stage]:
    """scratchpipe's plan (the policy kernel, timed per batch), collect (the fill rows into
    a staging buffer) and write_back (the batch's write-back count scattered back)."""
    cfg, store, measured, replays = run.cfg, run.store, run.measured, run.replays
    R = cfg.model.moved_row_bytes
    sp = DESIGNS.get("scratchpipe")(cfg)
    w = replays.get(sp.workload_key())[0]
    c = sp.columns(w)
    run_trace = run.trace.slice(replays.prefix - replays.warm, run.trace.num_batches)

    def plan_run(keep_fills: bool = False):
        return run_planner(run_trace, cfg.capacity_rows(), sp.params.lookahead,
                           keep_fills=keep_fills, on_overflow=sp.params.on_overflow)

    first = plan_run(keep_fills=True)  # untimed: compiles, and gives the fill rows
    skip = replays.warm
    fills = first.counts[skip:, COUNTERS.index("fills")] if first.counts is not None else None
    if fills is None or not np.array_equal(fills, np.asarray(w.cols["fills"])):
        raise RuntimeError("the timed planner's fills differ from the simulator's replay")

    def plan_pass() -> np.ndarray:
        """One timed planner run: per batch its seconds and its share of the next-use
        pass (by accesses)."""
        p = plan_run()
        share = p.next_use_s / max(float(p.accesses.sum()), 1.0)
        return np.array([p.seconds[skip + b] + share * p.accesses[skip + b]
                         for b in measured])

    out = [_Stage("scratchpipe", "plan", plan_pass,
                  run.predicted(lambda mm, b: mm.plan(b, c.accesses[b], c.evictions[b],
                                                         sp.params)))]
    staging = np.zeros((max(1, max(len(f) for f in first.fills)), R // 4), np.float32)
    victims = _victims(first, skip, set(measured))
    fills_of = {b: first.fills[skip + b] for b in measured}

    # a batch with nothing to move skips the stage (the model charges it nothing too)
    def collect(b: int) -> float:
        rows = fills_of[b]
        return _timed(lambda: host.gather_rows(store, rows, staging)) if len(rows) else 0.0

    def write_back(b: int) -> float:
        rows = victims[b]
        return _timed(lambda: host.scatter_rows(store, rows, staging)) if len(rows) else 0.0

    for stage, fn, part in (
            ("collect", collect, lambda mm, b: mm.collect(b, c.fills[b], R)),
            ("write_back", write_back, lambda mm, b: mm.write_back(b, c.writebacks[b], R))):
        for b in measured:
            if fn(b) > 0:  # compile once on a batch with work
                break
        out.append(_Stage("scratchpipe", stage, run.per_batch(fn), run.predicted(part)))
    return out


def _victims(plan, skip: int, batches: set[int]) -> dict[int, np.ndarray]:
    """Per measured batch, the rows written back: the policy's count per batch, taken
    oldest fill first from the rows it filled (the policy does not report victim ids)."""
    wi = COUNTERS.index("writebacks")
    victims: dict[int, np.ndarray] = {}
    queue: deque[np.ndarray] = deque()
    for k, f in enumerate(plan.fills):
        take, need = [], int(plan.counts[k, wi])
        while need > 0 and queue:
            head = queue[0]
            if len(head) <= need:
                take.append(queue.popleft())
                need -= len(head)
            else:
                take.append(head[:need])
                queue[0] = head[need:]
                need = 0
        if k - skip in batches:
            victims[k - skip] = np.concatenate(take) if take else np.zeros(0, np.int64)
        queue.append(f)
    return victims


class Probe:
    """The drift probe (module docstring): gather + pool of `lookups` uniform random rows
    of `store`, fresh ids (drawn untimed) each sample."""

    def __init__(self, store: np.ndarray, dim: int, lookups: int, seed: int):
        self.store, self.dim, self.lookups = store, dim, lookups
        self.rng = np.random.default_rng(seed)
        self.bags = np.arange(0, lookups + PROBE_POOLING, PROBE_POOLING, dtype=np.int64)
        self.bags[-1] = lookups
        self.out = np.empty((len(self.bags) - 1, dim), np.float32)
        self.seconds: list[float] = []
        self.sample()  # compile and touch: the first sample is not kept
        self.seconds.clear()

    def sample(self) -> None:
        ids = self.rng.integers(0, self.store.shape[0], self.lookups).astype(np.int64)
        self.seconds.append(_timed(lambda: K.bag_pool(self.store, self.dim, ids, self.bags,
                                                      self.out)))


def format_table(results: list[StageResult]) -> str:
    head = (f"{'stage':<30} {'predicted us':>13} {'measured us':>12} {'error':>8} "
            f"{'spread':>7} {'vs drift':>9}")
    lines = [head, "-" * len(head)]
    for r in results:
        adj = "" if r.drift_adjusted_pct is None else f"{r.drift_adjusted_pct:+.1f}%"
        lines.append(f"{r.design + '.' + r.stage:<30} {r.predicted_ns / 1e3:>13.1f} "
                     f"{r.measured_ns / 1e3:>12.1f} {r.error_pct:>+7.1f}% "
                     f"{r.spread_pct:>6.1f}% {adj:>9}")
    lines.append("vs drift: the error relative to host.uniform_gather's (the host's drift since "
                 "calibration: the same gather the calibration priced)")
    return "\n".join(lines)
