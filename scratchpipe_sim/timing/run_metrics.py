"""A design's metrics from its priced run: percentiles, the flat row `summarize` makes over
the measured batches, each design's speedup over the baseline and the steady-state
warnings (returned: the caller decides where they are shown).

Why apart from the runner: the sensitivity analysis and the host validation summarise runs
they price themselves, and no on-disk cache is keyed by this module's code, so editing a
metric never invalidates a cached trace pass or warm-up decision.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scratchpipe_sim.config import Config
from scratchpipe_sim.timing.counts import Workload
from scratchpipe_sim.timing.designs.design_registry import baseline_design
from scratchpipe_sim.timing.input_pipeline import WAIT_STAGES
from scratchpipe_sim.timing.machine import Machine
from scratchpipe_sim.timing.stage_columns import stage_key
from scratchpipe_sim.timing.trace_setup import (
    AUTO_WARMUP_MAX_ACCESSES,
    FIRST_TOUCH_TARGET,
    STEADY_TOL,
    steady,
)


def steady_state_warning(cfg: Config, row: dict[str, Any]) -> str:
    """One line: a design whose fill rate still drifts over the measured batches."""
    wb = cfg.cache.warmup_batches
    need = ("cache.warmup_batches: auto lengthens the warm-up up to "
            f"{AUTO_WARMUP_MAX_ACCESSES:,} accesses" if wb != "auto" else
            f"auto stopped at its cap of {AUTO_WARMUP_MAX_ACCESSES:,} accesses")
    return (f"{row['design']} did not reach steady state: its fill rate drifts "
            f"{row['fill_rate_drift']:+.0%} over the measured batches, cold-miss share "
            f"{row['cold_miss_share']:.2f} after a warm-up of {row['cache_warmup_batches']} "
            f"batches; a longer warm-up is needed (more batches than the "
            f"{row['cache_warmup_batches']} replayed: {need}; or more model.num_batches)")


def first_touch_warning(cfg: Config, row: dict[str, Any]) -> str | None:
    """One line when a cache design's result still holds cold-start misses: on a generated
    (stationary) trace, a first-touch share of the measured lookups at or above
    FIRST_TOUCH_TARGET; on a recorded one, where new ids keep arriving as in production and
    the share is the trace's own, only while that share still falls over the measured
    batches (`first_touch_drift` > STEADY_TOL: the warm-up ended too early). None else."""
    share = row.get("first_touch_share")
    if share is None or share < FIRST_TOUCH_TARGET:
        return None
    head = (f"{row['design']} did not reach steady state: {share:.1%} of the measured "
            "lookups are first touches a warm cache would not miss (after a warm-up of "
            f"{row['cache_warmup_batches']} batches")
    if cfg.trace.path is not None:
        drift = row.get("first_touch_drift", 0.0)
        if drift <= STEADY_TOL:
            return None
        return (f"{head}; still falling, {drift:+.0%} from the first half of the measured "
                "batches to the second): the recorded trace allows no longer warm-up here; "
                "a larger cache.warmup_batches (if the trace has the batches) or fewer "
                "model.num_batches")
    if cfg.cache.warmup_batches == "auto":
        return (f"{head}; auto stopped at its cap of {AUTO_WARMUP_MAX_ACCESSES:,} accesses "
                f"in the trace, short of its target of {FIRST_TOUCH_TARGET:.0%})")
    return (f"{head}, above {FIRST_TOUCH_TARGET:.0%}); cache.warmup_batches: auto warms "
            "until it is below")


def percentile(values: np.ndarray, q: float) -> float:
    """`np.percentile(values, q)` (method "linear") bit for bit, for a 1-d array without
    NaNs: numpy's first `percentile` call imports `numpy.ma` (~7 ms of a fully cached run).
    numpy's steps: index (n - 1) x q / 100, its floor and the next, `_lerp`'s two forms."""
    s = np.sort(values)
    n = len(s)
    virtual = (n - 1) * (q / 100)
    below = float(np.floor(virtual))
    lo = min(int(below), n - 1)
    hi = min(lo + 1, n - 1)
    gamma = virtual - below
    a, b = s[lo], s[hi]
    diff = b - a
    return float(b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma)


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
        "iter_ns_p50": percentile(it, 50),
        "iter_ns_p99": percentile(it, 99),
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
    if m.cxl is not None:  # only with a CXL tier: runs without one keep their columns
        row["cxl_bytes"] = float(m.cxl.server.bytes_by_batch[wu:].sum())
    for col in ("accesses", "unique", "hits", "fills", "evictions", "writebacks", "unplaced",
                "unique_unplaced"):
        row[col] = w.total(col, wu)
    end = float(done[-1])
    window = end - m.window_start_ns
    for s in m.servers:
        busy = s.busy_now() - m.busy_at_window_start[s.name]
        row[f"busy_{s.name}"] = busy / window if window > 0 else 0.0
    for st in m.stage_order:
        row[stage_key(st)] = float(m.stage_ns[st][wu:].mean())
    row.update(input_stall(m, wu))
    for k, v in w.extra.items():
        row[f"policy_{k}"] = v
    for k, v in m.counters.items():
        row[k] = v
    row.update(input_bound(cfg, row))
    if "usd_per_million_samples" not in row:  # what a million samples cost on this hardware
        from scratchpipe_sim.config.cost import usd_per_million

        row["usd_per_million_samples"] = usd_per_million(cfg, row["samples_per_s"],
                                                         int(m.counters.get("gpus", 1)))
    for chip in ("l2", "llc"):  # lookups that hit on chip (only where the design has one)
        if f"{chip}_hits" in w.cols:
            row[f"{chip}_hit_ratio"] = (w.total(f"{chip}_hits", wu)
                                        / max(w.total("accesses", wu), 1))
    if "first_touches" in w.cols:  # a cache design: how much of the result is cold start
        misses = w.total("misses", wu)
        row["cold_miss_share"] = w.total("first_touches", wu) / misses if misses else 0.0
        ok, drift = steady(w.cols["fills"][wu:], w.cols["unique"][wu:])
        row["steady_state"] = ok
        row["fill_rate_drift"] = drift
    if "cold_touches" in w.cols:  # a cache design: lookups only a cold cache misses
        row["first_touch_share"] = w.total("cold_touches", wu) / max(w.total("accesses", wu), 1)
        row["first_touch_drift"] = first_touch_drift(w.cols["cold_touches"][wu:],
                                                     w.cols["accesses"][wu:])
    return row


def first_touch_drift(cold: np.ndarray, accesses: np.ndarray) -> float:
    """How far the first-touch share of the lookups falls from the first half of the
    measured batches to the second, relative to the first half's (0 when it has none;
    negative when it rises)."""
    n = len(cold)
    if n < 2:
        return 0.0
    a = float(cold[: n // 2].sum()) / max(float(accesses[: n // 2].sum()), 1.0)
    b = float(cold[n // 2 :].sum()) / max(float(accesses[n // 2 :].sum()), 1.0)
    return (a - b) / a if a > 0 else 0.0


def input_stall(m: Machine, wu: int) -> dict[str, float]:
    """How input-bound the run was over the measured batches: `input_stall_ns`, the mean
    time per batch its consumers waited for the input pipeline (stages `input_wait` +
    `loader_wait`), and `input_bound_share`, the share of batches that waited at all (a
    wait is exactly 0 while the pipeline keeps ahead)."""
    waits = [m.stage_ns[s][wu:] for s in WAIT_STAGES if s in m.stage_ns]
    if not waits or len(waits[0]) == 0:
        return {"input_stall_ns": 0.0, "input_bound_share": 0.0}
    stall = np.sum(waits, axis=0)
    return {"input_stall_ns": float(stall.mean()),
            "input_bound_share": float(np.count_nonzero(stall > 0) / len(stall))}


#: a run whose batches waited for their inputs this often is input-bound
INPUT_BOUND_SHARE = 0.5
#: ... and so is one whose iteration is within this fraction of the input pipeline's period
INPUT_BOUND_SLACK = 0.02


def input_bound(cfg: Config, row: dict[str, Any]) -> dict[str, Any]:
    """`input_period_ns`, the fastest the input pipeline delivers a batch: its load time
    over the workers that can load at once (loader_workers, at most prefetch_batches + 1),
    or its copy, whichever is slower; and `input_bound`: most batches waited for their
    inputs, or the iteration is the pipeline's period (workers of equal batches stay in
    phase, so at the period only the first of each burst of batches waits)."""
    p = cfg.input_pipeline
    at_once = min(p.loader_workers, p.prefetch_batches + 1)
    period = max(row.get("input_load_ns", 0.0) / at_once, row.get("input_copy_ns", 0.0))
    it = row["iter_ns_mean"]
    bound = (row["input_bound_share"] >= INPUT_BOUND_SHARE
             or period > 0 and period >= it * (1 - INPUT_BOUND_SLACK))
    return {"input_period_ns": period, "input_bound": bool(bound)}


def input_bound_warnings(rows: list[dict[str, Any]]) -> list[str]:
    """One line per input-bound design: the data loader or the input copy, not the
    design, sets its iteration time."""
    return [f"{r['design']} is input-bound: the input pipeline delivers a batch every "
            f"{r['input_period_ns'] / 1e3:.1f} us (iteration {r['iter_ns_mean'] / 1e3:.1f} "
            f"us), {r['input_bound_share']:.0%} of the measured batches waited for their "
            f"inputs ({r['input_stall_ns'] / 1e3:.1f} us per batch on average); raise "
            f"input_pipeline.loader_workers or prefetch_batches, or set "
            f"input_pipeline.inputs_on_gpu for a benchmark whose inputs are resident"
            for r in rows if r.get("input_bound")]


def steady_state_warnings(cfg: Config, rows: list[dict[str, Any]]) -> list[str]:
    """One warning per row whose cache is not warm (never silently: a cold cache prices
    its cold start), in row order; the caller shows them: `first_touch_warning` where the
    first touches decide, else `steady_state_warning` of a cache still filling."""
    out = []
    for r in rows:
        line = first_touch_warning(cfg, r)
        if line is None and r.get("steady_state") is False:
            line = steady_state_warning(cfg, r)
        if line is not None:
            out.append(line)
    return out


def speedups_vs_baseline(rows: list[dict[str, Any]]) -> list[float | None]:
    """Each row's speedup (mean iteration time) over the baseline design's row among
    `rows` (the column keeps its stable name speedup_vs_hybrid); None without it."""
    base = next((r for r in rows if r["design"] == baseline_design()), None)
    return [base["iter_ns_mean"] / r["iter_ns_mean"] if base is not None else None
            for r in rows]
