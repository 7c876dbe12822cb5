"""`simulate(cfg, designs)`: one trace, every design, one flat metrics dict per design.

Steps: build (or take) the trace and check it against the model's tables; run each distinct
cache policy once over it (designs sharing a policy share its counts); run each design as a
SimPy process on a fresh `Machine`; summarise batches `warmup_batches..` into metrics.
Deterministic: the trace comes from the config's seed; SimPy and the policies are
deterministic; nothing depends on wall time except the `wall_s` fields.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.counts import (
    Workload,
    access_unique,
    policy_counts,
    uncached_counts,
)
from scratchpipe_sim.timing.designs import DESIGNS, WorkloadKey
from scratchpipe_sim.timing.machine import Machine
from scratchpipe_sim.timing.timeline import write_timeline
from scratchpipe_sim.traces.trace import Trace


def build_trace(cfg: Config) -> Trace:
    """The config's trace: read `trace.path` or generate it; checked against model.tables."""
    t, m = cfg.trace, cfg.model
    if t.path is not None:
        from scratchpipe_sim.traces.io import open_trace

        path = Path(t.path)
        if not path.is_absolute() and cfg.source and Path(cfg.source).exists():
            cand = Path(cfg.source).resolve().parent / path
            path = cand if cand.exists() else path
        from scratchpipe_sim.traces.store import is_store

        if is_store(path):  # a store keeps its own mini-batches: they must be the model's
            trace = open_trace(path, fmt=t.format)
            if trace.batch_size != m.batch_size:
                raise UserError(
                    f"the trace {path} has batch size {trace.batch_size}; expected "
                    f"model.batch_size to match (e.g. --set model.batch_size="
                    f"{trace.batch_size})", source=cfg.source, field="model.batch_size")
        else:  # flat id streams are cut into the model's mini-batches
            trace = open_trace(path, batch_size=m.batch_size, fmt=t.format)
        return fit_trace(trace, cfg)
    from scratchpipe_sim.traces.generators import DISTRIBUTIONS, generate_trace, load_distributions

    load_distributions()  # calibrated, reuse-distance register on import
    factory = DISTRIBUTIONS.get(t.distribution, source=cfg.source, field="trace.distribution")
    params = dict(t.params)
    if t.alpha is not None and "alpha" in getattr(factory, "PARAMS", {}):
        params.setdefault("alpha", t.alpha)
    seed = cfg.seed if t.seed is None else t.seed
    return generate_trace(t.distribution, [m.tables.rows] * m.tables.count, m.batch_size,
                          m.num_batches, m.pooling, seed, reuse=t.reuse, source=cfg.source,
                          field_prefix="trace.params.", **params)


def fit_trace(trace: Trace, cfg: Config) -> Trace:
    """Check a trace against the model (tables, rows) and cut it to model.num_batches."""
    m = cfg.model
    src = trace.source
    if trace.num_tables != m.tables.count:
        raise UserError(f"the trace has {trace.num_tables} tables but model.tables.count is "
                        f"{m.tables.count}: expected equal", source=src,
                        field="model.tables.count")
    rows = np.full(trace.num_tables, m.tables.rows, np.int64)
    if np.any(np.asarray(trace.table_rows) != rows):
        trace = dataclasses.replace(trace, table_rows=rows)
    try:
        trace.validate()
    except UserError as e:
        raise UserError(f"{e.message} (model.tables.rows = {m.tables.rows})", source=src,
                        field="model.tables.rows") from None
    if trace.num_batches > m.num_batches:
        n = m.num_batches
        bounds = np.asarray(trace.batch_bounds[: n + 1], np.int64)
        offsets = trace.offsets[: int(bounds[-1]) + 1]
        trace = dataclasses.replace(trace, batch_bounds=bounds, offsets=offsets)
    if trace.num_batches <= m.warmup_batches:
        raise UserError(f"the trace has {trace.num_batches} batches, expected more than "
                        f"model.warmup_batches = {m.warmup_batches}", source=src,
                        field="model.warmup_batches")
    return trace


def check_designs(cfg: Config, designs: Sequence[str] | None) -> list[str]:
    names = list(cfg.designs if designs is None else designs)
    for n in names:
        DESIGNS.get(n, source=cfg.source, field="designs")
    return names


def workload(trace: Trace, key: WorkloadKey, cfg: Config,
             memo: dict | None = None) -> Workload:
    if key.policy is None:
        memo = {} if memo is None else memo
        if "access_unique" not in memo:
            memo["access_unique"] = access_unique(trace)
        return uncached_counts(trace, key.where, memo["access_unique"])
    try:
        return policy_counts(trace, key.policy, key.capacity, **dict(key.params))
    except UserError as e:
        field = e.field
        if field in (None, "capacity"):
            field = "cache.capacity_rows"
        elif field == "policy":
            field = key.policy_field
        elif not field.startswith("cache."):
            field = f"cache.{field}"
        raise UserError(e.message, source=cfg.source, field=field) from None


#: progress(event, design, done, total): event is "policy" (a replay starts), "design" (a
#: design's SimPy run ends: done = designs finished of total).
Progress = Callable[[str, str, int, int], None]


def simulate(cfg: Config, designs: Sequence[str] | None = None,
             timeline_dir: Path | None = None, trace: Trace | None = None,
             progress: Progress | None = None) -> list[dict]:
    """Run `designs` (default: cfg.designs) on one trace; one flat metrics dict per design."""
    names = check_designs(cfg, designs)
    trace = build_trace(cfg) if trace is None else fit_trace(trace, cfg)
    cache: dict[WorkloadKey, tuple[Workload, float]] = {}
    memo: dict = {}
    rows = []
    for name in names:
        design = DESIGNS.get(name)(cfg)
        key = design.workload_key()
        if key not in cache:
            if progress is not None:
                progress("policy", name, len(rows), len(names))
            t0 = time.perf_counter()
            w = workload(trace, key, cfg, memo)
            cache[key] = (w, time.perf_counter() - t0)
        w, policy_s = cache[key]
        t0 = time.perf_counter()
        env = simpy.Environment()
        m = Machine(env, cfg, w.num_batches, keep_spans=timeline_dir is not None)
        env.process(design.run(m, w))
        env.run()
        done = m.done
        sim_s = time.perf_counter() - t0
        if np.isnan(done).any():
            raise RuntimeError(f"design {name} did not finish every batch")
        row = summarize(cfg, name, m, w)
        row.update(policy_wall_s=policy_s, simpy_wall_s=sim_s)
        rows.append(row)
        if progress is not None:
            progress("design", name, len(rows), len(names))
        if timeline_dir is not None:
            write_timeline(Path(timeline_dir) / f"timeline_{name}.json", name, m)
    base = next((r for r in rows if r["design"] == "hybrid"), None)
    for r in rows:
        r["speedup_vs_hybrid"] = (base["iter_ns_mean"] / r["iter_ns_mean"]
                                  if base is not None else None)
    return rows


def summarize(cfg: Config, name: str, m: Machine, w: Workload) -> dict[str, Any]:
    """Metrics over the measured batches (warmup_batches onward)."""
    done = m.done
    wu = cfg.model.warmup_batches
    prev = np.concatenate(([0.0], done[:-1]))
    it = (done - prev)[wu:]
    samples = int(w.cols["samples"][wu:].sum())
    span_ns = float(done[-1] - (done[wu - 1] if wu > 0 else 0.0))
    hw = cfg.hardware
    row: dict[str, Any] = {
        "design": name,
        "policy": w.policy,
        "capacity_rows": w.capacity,
        "batches": int(w.num_batches),
        "measured_batches": int(len(it)),
        "iter_ns_mean": float(it.mean()),
        "iter_ns_p50": float(np.percentile(it, 50)),
        "iter_ns_p99": float(np.percentile(it, 99)),
        "iter_cycles_mean": float(it.mean() * hw.clock_GHz),
        "samples_per_s": samples / span_ns * 1e9 if span_ns > 0 else float("inf"),
        "hit_ratio": w.total("hits", wu) / max(w.total("accesses", wu), 1),
        "pcie_h2d_bytes_per_sample": float(m.pcie.h2d_bytes[wu:].sum()) / samples,
        "pcie_d2h_bytes_per_sample": float(m.pcie.d2h_bytes[wu:].sum()) / samples,
        "pcie_h2d_bytes": float(m.pcie.h2d_bytes[wu:].sum()),
        "pcie_d2h_bytes": float(m.pcie.d2h_bytes[wu:].sum()),
        "dram_bytes": float(m.dram.server.bytes_by_batch[wu:].sum()),
        "hbm_bytes": float(m.hbm.server.bytes_by_batch[wu:].sum()),
    }
    for col in ("accesses", "unique", "hits", "fills", "evictions", "writebacks", "unplaced",
                "unique_unplaced"):
        row[col] = w.total(col, wu)
    end = float(done[-1])
    window = end - m.window_start_ns
    for s in m.servers:
        busy = s.busy_now() - m.busy_at_window_start[s.name]
        row[f"busy_{s.name}"] = busy / window if window > 0 else 0.0
    for st in m.stage_order:
        row[f"stage_{st}_ns"] = float(m.stage_ns[st][wu:].mean())
    for k, v in w.extra.items():
        row[f"policy_{k}"] = v
    return row
