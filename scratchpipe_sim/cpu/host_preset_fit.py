"""Pure logic of `calibrate --cpu`: the CPU micro-benchmarks' samples -> hardware.cpu keys.

Fits reuse `measure.fitting` (least-squares latency + bytes / bandwidth, efficiency curves), so the
CPU and GPU halves are fitted the same way. How each key follows from the samples:

    dram_GBps               slope of a parallel read (bytes) vs time: gathers are reads
    gather_efficiency       per row size: slope of the gather + pool (bytes of rows) on every
                            thread / dram_GBps
    dram_latency_ns         a pointer chase (ns per dependent load)
    cores                   the most threads measured
    embedding_op_GBps       one thread's gather + pool of a hot set in the core's own caches
                            (1 MiB: the op's own rate), best row size
    core_dram_GBps          one thread's gather + pool of uniform rows (DRAM misses): the
                            least-squares rate per row size, median over row sizes
    parallel_efficiency     hot-set rate on T threads / (T x one thread's), 256 B rows
    aggregate_ns_per_lookup least squares over generated batches (uniform to Zipf 1.4, 20k
    aggregate_onchip_ns_    to 256k lookups, after warm-up batches): seconds = fixed + (a_miss x
      per_lookup            lookups off chip + a_hit x lookups on chip + c x unique rows) /
    aggregate_ns_per_row    (T x parallel efficiency), on chip = the hit fraction by the
                            model's LLC simulator at llc_MiB, coefficients >= 0; per lookup
                            a less the r / embedding_op_GBps the model charges for the
                            gradient row's op; medians over the row sizes that fit. Where
                            no row size fits (hits not varied, or a hit dearer than a
                            miss): one a for every lookup (a x lookups + c x unique rows),
                            the on-chip key unset
    plan_ns_per_id          the scratchpipe policy kernel (one thread), least squares over
    plan_ns_per_eviction    its steady batches that evict, scratchpads of 3.5-8% of rows:
                            seconds (next-use pass included) = a x ids + c x evictions
    llc_MiB, llc_ways       ways: the OS (sysfs); size: the LLC a core can use — the largest
                            hot set it still gathers at >= half the rate of the smallest
                            (1 MiB) set, at most the OS's size
    core_llc_GBps, llc_GBps one thread's / every thread's gather rate from a hot set of
                            that size; when the mix was measured, core_llc_GBps and
    core_dram_GBps          core_dram_GBps are instead [row_bytes, GBps] curves and
    core_window_rows        core_window_rows W is fitted with them: least squares of one
                            thread's ns per lookup over generated traces of varied skew =
                            t_hit x h^W + t_miss x (1 - h^W), h the trace's hit fraction by
                            the model's LLC simulator at llc_MiB (hits and misses priced as
                            the model prices them: in one stream)

The optimizer apply (SGD, Adagrad) is not fitted: it is priced by the keys above, and the
preset's comments compare the model's price with the measurement.
"""

from __future__ import annotations

import datetime as _dt
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.config.hardware import CpuConfig
from scratchpipe_sim.config.schema import build, to_plain
from scratchpipe_sim.cpu.host_bench import CpuMeasurements, PlanBatch
from scratchpipe_sim.cpu.host_reference import ReferenceSamples
from scratchpipe_sim.measure.fitting import efficiency_curve, fit_latency_bandwidth

#: the written preset's and the command's warning when a curve stayed out of order
NOISY_WARNING = ("WARNING: noisy measurements: time did not grow with size even after "
                 "re-measuring the offending points (a busy host?); calibrate again on a "
                 "quieter machine")


@dataclass(frozen=True)
class CpuCalibration:
    """The measured hardware.cpu keys and, per key, how it was measured (a comment)."""

    values: dict[str, Any]
    how: dict[str, str]
    checks: tuple[str, ...]  # model vs measurement for what was not fitted (apply)
    #: curves whose time did not grow with size even after re-measurement (a busy host):
    #: written anyway, with a warning naming them
    noisy: tuple[str, ...] = ()


def _fit(samples: list[tuple[float, float]], what: str, noisy: list[str]):
    """The latency + bandwidth fit of one curve; a curve whose time does not grow with
    size gets a rate through the origin and joins `noisy` (the preset is still written)."""
    x, y = np.array(samples, float).T
    f = fit_latency_bandwidth(x, y, what, noisy_ok=True)
    if f.noisy:
        noisy.append(f"{what}: time does not grow with size (fitted as a rate through the "
                     "origin)")
    return f


def llc_from_sysfs(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")
                   ) -> tuple[float, int] | None:
    """(size MiB, ways) of the highest-level cache the OS lists, or None."""
    best = None
    for d in sorted(root.glob("index*")):
        try:
            level = int((d / "level").read_text())
            size = (d / "size").read_text().strip()
            ways = int((d / "ways_of_associativity").read_text())
        except (OSError, ValueError):
            continue
        mult = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}.get(size[-1:], None)
        if mult is None:
            continue
        if best is None or level > best[0]:
            best = (level, float(size[:-1]) * mult, ways)
    return None if best is None else (best[1], best[2])


def fit_cpu(m: CpuMeasurements, base: CpuConfig | None = None,
            llc: tuple[float, int] | None = None) -> CpuCalibration:
    base = base or CpuConfig()
    vals: dict[str, Any] = {}
    how: dict[str, str] = {}
    top = max(m.threads)
    noisy: list[str] = []
    stream = _fit([(p.nbytes, p.seconds) for p in m.stream], "stream read", noisy)
    dram = stream.GBps
    sizes = ", ".join(f"{int(p.nbytes / 2**20)}" for p in m.stream)
    vals["dram_GBps"] = round(dram, 3)
    how["dram_GBps"] = (f"parallel read of {sizes} MiB on {top} threads, least squares "
                        f"(R^2 {stream.r2:.4f})")
    if m.copy:
        copy = _fit([(p.nbytes, p.seconds) for p in m.copy], "stream copy", noisy)
        how["dram_GBps"] += f"; a copy reaches {copy.GBps:.2f} GB/s"
        how["dram_GBps"] += " of traffic (2x bytes)"
    rbs = sorted({g.row_bytes for g in m.gather})
    rates, lats, r2s = [], [], []
    for rb in rbs:
        f = _fit([(g.nbytes, g.seconds) for g in m.gather if g.row_bytes == rb],
                 f"gather {rb:.0f} B", noisy)
        rates.append(f.GBps)
        lats.append(f.latency_ns)
        r2s.append(f.r2)
    gathered = ", ".join(f"{int(r)} B {g:.2f} GB/s" for r, g in zip(rbs, rates, strict=True))
    notes = []
    if top > 1:
        curve = efficiency_curve(np.array(rbs), np.array(rates), dram)
        vals["gather_efficiency"] = [[round(x, 1), round(y, 4)] for x, y in curve]
        how["gather_efficiency"] = (
            f"embedding-bag gather + pool of uniform random rows on {top} threads, per row "
            f"size the least-squares rate (bytes of rows) / dram_GBps: {gathered} (R^2 >= "
            f"{min(r2s):.3f})")
    else:
        # one thread cannot load the socket's memory: its gather rate is one core's, which
        # core_dram_GBps prices; written as the socket's efficiency too, the model would take
        # the slower of two noisy measurements of the same limit (collect +38..+43% here)
        notes.append("gather_efficiency not measured (one thread cannot load the socket's "
                     f"memory; one core's uniform gather + pool: {gathered}, priced by "
                     "core_dram_GBps): the base's curve is kept")
    if m.latency_ns is not None:
        vals["dram_latency_ns"] = round(m.latency_ns, 1)
        how["dram_latency_ns"] = (
            "pointer chase over the largest stream buffer (ns per dependent load); the "
            f"gather fits' intercepts (fixed cost per call) were {np.median(lats) / 1e3:.1f} "
            "us (median)")
    vals["cores"] = int(top)
    how["cores"] = f"threads used (--threads {','.join(map(str, m.threads))})"
    one = {}
    for t in sorted({int(s.threads) for s in m.scaling}):
        for rb in rbs:
            pts = [(s.nbytes, s.seconds) for s in m.scaling
                   if int(s.threads) == t and s.row_bytes == rb]
            if len(pts) >= 2:
                one[(t, rb)] = _fit(pts, f"gather {rb:.0f} B on {t} threads", noisy).GBps
    single = {rb: one[(1, rb)] for rb in rbs if (1, rb) in one}
    if single:
        best_rb = max(single, key=single.get)
        vals["embedding_op_GBps"] = round(single[best_rb], 3)
        how["embedding_op_GBps"] = (
            "one thread's gather + pool of an LLC-resident hot set (the op, not the misses), "
            "best row size ("
            + ", ".join(f"{int(r)} B {g:.2f}" for r, g in single.items()) + " GB/s)")
    op = vals.get("embedding_op_GBps", base.embedding_op_GBps)
    ref = 256.0 if 256.0 in rbs else rbs[-1]
    pe = base.parallel_efficiency
    if top == 1:  # one thread: nothing to lose to scaling (the base's value is for many)
        pe = 1.0
        vals["parallel_efficiency"] = 1.0
        how["parallel_efficiency"] = "one thread measured (cores 1): no scaling loss"
    elif (1, ref) in one and (top, ref) in one:
        pe = min(1.0, one[(top, ref)] / (top * one[(1, ref)]))
        vals["parallel_efficiency"] = round(pe, 4)
        how["parallel_efficiency"] = (
            f"hot-set gather + pool at {int(ref)} B: {one[(top, ref)]:.2f} GB/s on {top} threads / "
            f"({top} x {one[(1, ref)]:.2f} GB/s on one)"
            + (" (clamped at 1)" if pe >= 1.0 else ""))
    one_thread = m.gather if top == 1 else m.gather_one
    if one_thread:
        per = {}
        for rb in sorted({g.row_bytes for g in one_thread}):
            pts = [(g.nbytes, g.seconds) for g in one_thread if g.row_bytes == rb]
            if len(pts) >= 2:
                per[rb] = _fit(pts, f"gather {rb:.0f} B on one thread", noisy).GBps
        if per:
            vals["core_dram_GBps"] = round(float(np.median(list(per.values()))), 3)
            how["core_dram_GBps"] = (
                "one thread's gather + pool of uniform random rows (fresh ids every "
                "repetition: DRAM misses), least-squares rate per row size, median of "
                + ", ".join(f"{int(r)} B {g:.2f}" for r, g in per.items()) + " GB/s")
    if m.plan_ns_per_id is not None:
        two = fit_planner(m.plan_batches)
        head = (f"the scratchpipe policy kernel (one thread, window 3) on a Zipf 1.05 "
                f"trace, {len(m.plan_batches)} steady batches that evict (scratchpads of "
                "3.5-8% of rows) ")
        if two is not None:
            vals["plan_ns_per_id"] = round(two[0], 2)
            vals["plan_ns_per_eviction"] = round(two[1], 2)
            how["plan_ns_per_id"] = how["plan_ns_per_eviction"] = (
                head + "least squares seconds = a x ids + c x evictions "
                f"(next-use pass spread over the ids): {two[0]:.1f} ns per id, {two[1]:.1f} "
                f"ns per eviction; one term over the 5% scratchpad's: "
                f"{m.plan_ns_per_id:.1f} ns per id ({m.plan_fill_ratio:.2f} fills per id)")
        else:
            vals["plan_ns_per_id"] = round(m.plan_ns_per_id, 2)
            vals["plan_ns_per_eviction"] = 0.0
            how["plan_ns_per_id"] = how["plan_ns_per_eviction"] = (
                head + "whose evictions per id do not vary (no two-term fit): ns per id of "
                + ("batches that evict (a full scratchpad)" if m.plan_steady else
                   "batches that never evict (the scratchpad never filled: low)")
                + f", {m.plan_fill_ratio:.2f} fills per id, next-use pass included; per "
                "eviction 0")
    if llc is not None:
        vals["llc_MiB"] = round(llc[0], 3)
        vals["llc_ways"] = int(llc[1])
        how["llc_MiB"] = how["llc_ways"] = "the OS's last-level cache (sysfs)"
    if m.onchip:
        _fit_onchip(m, vals, how)
    fwd = fit_forward(m) if m.update else None
    if m.mix:
        # FBGEMM's mix: each timed point is one call: its fixed cost comes off
        call_s = 0.0 if fwd is None else fwd[0] / 1e9
        _fit_mix(m, vals, how, vals.get("llc_MiB", base.llc_MiB), call_s)
    if m.aggregate:
        _fit_aggregates(m, vals, how, top * pe, op, vals.get("llc_MiB", base.llc_MiB))
    checks = notes
    if m.update:
        _fit_update(m, vals, how, checks, _replace(base, vals))
        if fwd is not None:
            _fit_forward(m, fwd, vals, how, checks, _replace(base, vals))
    cfg = _replace(base, vals)
    for a in m.apply:
        pred = _update_ns(cfg, a.unique_rows, a.moved_row_bytes, top)
        s = a.seconds
        checks.append(f"{a.optimizer} apply, {int(a.row_bytes)} B rows ({int(a.moved_row_bytes)}"
                      f" B moved), {int(a.unique_rows)} rows: measured {s * 1e6:.0f} us, model "
                      f"{pred / 1e3:.0f} us ({(pred / 1e9 - s) / s * 100:+.0f}%)")
    return CpuCalibration(_plain(vals), how, tuple(checks),
                          tuple(dict.fromkeys([*m.noisy, *noisy])))


def _plain(v: Any) -> Any:
    """numpy scalars -> Python numbers (YAML and JSON take only these)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def fit_aggregate(points: list[tuple[float, float, float]], core_scale: float
                  ) -> tuple[float, float]:
    """(a, c) in core-ns of seconds = fixed + (a x lookups + c x unique rows) / core_scale
    (core_scale = threads x parallel efficiency) by least squares over (lookups, unique
    rows, seconds) points; the fixed part is the call's own cost (thread start-up)."""
    n, u, t = np.array(points, float).T
    design = np.stack([np.ones_like(n), n, u], axis=1)
    if len(t) < 3 or np.linalg.matrix_rank(design) < 3:
        raise ValueError("the aggregation fit needs points of at least two repetitions and "
                         "two sizes")
    (_, a, c), *_ = np.linalg.lstsq(design, t, rcond=None)
    return float(a * core_scale * 1e9), float(c * core_scale * 1e9)


def fit_aggregate_onchip(points: list[tuple[float, float, float, float]], core_scale: float
                         ) -> tuple[float, float, float] | None:
    """(a_miss, a_hit, c) in core-ns of seconds = fixed + (a_miss x n (1 - h) + a_hit x n h
    + c x u) / core_scale over (lookups n, unique rows u, on-chip fraction h, seconds)
    points: least squares with a_miss, a_hit, c >= 0 (the best of the fits on every subset
    of them). None when h barely varies (< 0.05 apart), the terms are not independent, or
    a hit fits dearer than a miss (noise, not a cache)."""
    n, u, h, t = np.array(points, float).T
    if len(t) < 4 or np.ptp(h) < 0.05:
        return None
    terms = np.stack([n * (1 - h), n * h, u], axis=1)
    if np.linalg.matrix_rank(np.column_stack([np.ones_like(n), terms])) < 4:
        return None
    best: tuple[float, np.ndarray] | None = None
    for mask in range(1, 8):
        cols = [k for k in range(3) if mask >> k & 1]
        design = np.column_stack([np.ones_like(n), terms[:, cols]])
        coef, *_ = np.linalg.lstsq(design, t, rcond=None)
        if (coef[1:] < 0).any():
            continue
        sse = float(((design @ coef - t) ** 2).sum())
        if best is None or sse < best[0] - 1e-30:
            full = np.zeros(3)
            full[cols] = coef[1:]
            best = (sse, full)
    if best is None or best[1][1] > best[1][0]:
        return None
    a_miss, a_hit, c = (float(x * core_scale * 1e9) for x in best[1])
    return a_miss, a_hit, c


def _hits_at(hits: list[list[float]], llc_MiB: float) -> tuple[float, float]:
    """(MiB, hits) at the largest counted cache size <= llc_MiB (the LLC the model
    simulates), else the smallest counted."""
    at = [(mib, x) for mib, x in hits if mib <= llc_MiB] or [tuple(hits[0])]
    return max(at)


def _fit_aggregates(m: CpuMeasurements, vals: dict[str, Any], how: dict[str, str],
                    core_scale: float, op: float, llc_MiB: float) -> None:
    """aggregate_ns_per_lookup, aggregate_onchip_ns_per_lookup, aggregate_ns_per_row from
    the aggregation points (see the module docstring)."""
    rbs = sorted({a.row_bytes for a in m.aggregate})
    onchip, label = {}, 0.0
    for rb in rbs:
        pts = []
        for a in m.aggregate:
            if a.row_bytes == rb and a.hits:
                label, x = _hits_at(a.hits, llc_MiB)
                pts.append((a.lookups, a.unique_rows, x / a.lookups, a.seconds))
        onchip[rb] = fit_aggregate_onchip(pts, core_scale)
    share = [a.unique_rows / a.lookups for a in m.aggregate if a.lookups > 0]
    sizes = [int(a.lookups) for a in m.aggregate]
    what = (f"gradient aggregation on {max(m.threads)} thread(s) of {len(m.aggregate)} "
            f"generated batches ({min(sizes)}-{max(sizes)} lookups, {min(share):.2f}-"
            f"{max(share):.2f} unique rows per lookup, after warm-up batches), least squares "
            "seconds = fixed + (")
    fitted = [rb for rb in rbs if onchip[rb] is not None]
    if fitted:
        miss = [(rb, max(0.0, onchip[rb][0] - rb / op)) for rb in fitted]
        hit = [(rb, max(0.0, onchip[rb][1] - rb / op)) for rb in fitted]
        row = [(rb, onchip[rb][2]) for rb in fitted]
        what += (f"a_miss x lookups off chip + a_hit x lookups on chip + c x unique rows) / "
                 f"(threads x parallel_efficiency), on chip by the model's LLC simulator at "
                 f"{label:g} MiB, coefficients >= 0")
        if len(fitted) < len(rbs):
            what += ("; no split at " + ", ".join(f"{int(rb)} B" for rb in rbs
                                                  if rb not in fitted)
                     + " (a hit fitted dearer than a miss): the other sizes'")
        vals["aggregate_onchip_ns_per_lookup"] = round(float(np.median([v for _, v in hit])),
                                                       2)
        how["aggregate_onchip_ns_per_lookup"] = (
            what + "; a_hit less row bytes / embedding_op_GBps (charged apart), median of "
            + ", ".join(f"{int(r)} B {v:.1f}" for r, v in hit))
        name = "a_miss"
    else:
        fits = {rb: fit_aggregate([(a.lookups, a.unique_rows, a.seconds)
                                   for a in m.aggregate if a.row_bytes == rb], core_scale)
                for rb in rbs}
        miss = [(rb, max(0.0, fits[rb][0] - rb / op)) for rb in rbs]
        row = [(rb, max(0.0, fits[rb][1])) for rb in rbs]
        what += ("a x lookups + c x unique rows) / (threads x parallel_efficiency); the "
                 "on-chip split did not fit (hits not varied, or a hit dearer than a miss)")
        name = "a"
    vals["aggregate_ns_per_lookup"] = round(float(np.median([v for _, v in miss])), 2)
    vals["aggregate_ns_per_row"] = round(float(np.median([v for _, v in row])), 2)
    how["aggregate_ns_per_lookup"] = (
        what + f"; {name} less row bytes / embedding_op_GBps (charged apart), median of "
        + ", ".join(f"{int(r)} B {v:.1f}" for r, v in miss))
    how["aggregate_ns_per_row"] = (what + "; c, median of "
                                   + ", ".join(f"{int(r)} B {v:.1f}" for r, v in row))


def fit_update_terms(rows: list[tuple[float, ...]], seconds: list[float]
                     ) -> tuple[float, ...]:
    """Core-ns terms (TERM_NAMES' order) of seconds = design row . terms by least squares
    with every term >= 0: the best fit over every subset of the terms (the others 0), as
    fit_aggregate_onchip. Why non-negative: a cost is never negative, and on a shared host
    a noisy point can buy a better fit with a negative term that would price a larger
    batch below a smaller one."""
    x = np.array(rows, float)
    t = np.array(seconds, float) * 1e9
    k = x.shape[1]
    best: tuple[float, np.ndarray] | None = None
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        coef, *_ = np.linalg.lstsq(x[:, cols], t, rcond=None)
        if (coef < 0).any():
            continue
        sse = float(((x[:, cols] @ coef - t) ** 2).sum())
        if best is None or sse < best[0] * (1 - 1e-9):
            full = np.zeros(k)
            full[cols] = coef
            best = (sse, full)
    if best is None:
        raise ValueError("no non-negative fit of the update terms")
    return tuple(float(v) for v in best[1])


def _fit_update(m: CpuMeasurements, vals: dict[str, Any], how: dict[str, str],
                checks: list[str], cpu: CpuConfig | None = None) -> None:
    """cpu.update.<optimizer>: the terms of timing/cpu_update_cost.py fitted on FBGEMM's
    backward (fit points), then the check points priced by the fitted terms. With `cpu`
    (the fitted rates and LLC), each point's grad_output misses (`grad_output_miss_ns`,
    priced by those, not fitted) come off before the fit and back on in the checks."""
    from scratchpipe_sim.timing.cpu_update_cost import (  # noqa: PLC0415
        TERM_NAMES,
        design_row,
    )
    from scratchpipe_sim.timing.machine import grad_output_miss_ns  # noqa: PLC0415

    def grad_s(p) -> float:
        if cpu is None:
            return 0.0
        return grad_output_miss_ns(cpu, p.batch * p.tables, p.dim * 4, p.unique_rows) / 1e9

    update: dict[str, Any] = {}
    notes = []
    for opt in dict.fromkeys(p.optimizer for p in m.update):
        pts = [p for p in m.update if p.optimizer == opt]
        fit = [p for p in pts if p.role == "fit"]
        if len(fit) < len(TERM_NAMES):
            continue
        terms = fit_update_terms([design_row(p.lookups, p.unique_rows, p.dim, int(p.tables),
                                             p.batch * p.tables, p.table_bytes)
                                  for p in fit], [p.seconds - grad_s(p) for p in fit])
        key = opt.replace("-", "_")
        update[key] = {name: round(v, 4) for name, v in zip(TERM_NAMES, terms, strict=True)}
        update[key]["parallel"] = opt == "rowwise-adagrad"

        def err(p, terms=terms) -> float:
            pred = float(np.dot(design_row(p.lookups, p.unique_rows, p.dim, int(p.tables),
                                           p.batch * p.tables, p.table_bytes),
                                terms)) / 1e9 + grad_s(p)
            return (pred - p.seconds) / p.seconds * 100

        fe = [abs(err(p)) for p in fit]
        chk = [p for p in pts if p.role == "check"]
        notes.append(f"{opt}: " + ", ".join(f"{n} {v:.3g}" for n, v in
                                            zip(TERM_NAMES, terms, strict=True))
                     + f"; fit points |error| median {np.median(fe):.0f}%, max "
                     f"{max(fe):.0f}% ({len(fit)} points)")
        for p in chk:
            checks.append(
                f"update {opt}, {int(p.tables)} table(s) x {int(p.batch)} x pooling "
                f"{int(p.pooling)}, dim {int(p.dim)}, {int(p.unique_rows)} unique rows of "
                f"{int(p.lookups)} lookups: FBGEMM {p.seconds * 1e6:.0f} us, terms "
                f"{err(p):+.0f}% (held out)")
    if update:
        vals["update"] = update
        how["update"] = (
            "FBGEMM's CPU backward (fused optimizer, one thread, huge pages) per optimizer "
            "at shapes of dim 32/64/128, pooling 2/8/32 (and 1 at 8x the batch, and at 8 "
            "tables), each row used ~1, ~3 or ~8 times, 1, 4 and 8 tables, tables of 32 MiB "
            "to 1 GiB; least squares of ns = call + T x table + n x lookup + n D x "
            "lookup_element + U x (row + doublings x row_doubling) + U D x row_element + "
            "bags D x bag_element (doublings: log2 of a table's bytes / 32 MiB, "
            "at least 0), terms >= 0, after each point's grad_output "
            "rows beyond the LLC (grad_output_miss_ns, at the fitted rates) come off; "
            "parallel: FBGEMM's source (rowwise Adagrad's JIT path is at::parallel_for, "
            "SGD's and Adagrad's loop is serial). " + "; ".join(notes))


def _forward_points(m: CpuMeasurements) -> list:
    """The update benchmark's forwards whose rows are used once (uniform over tables far
    above the LLC: every row a miss): more unique rows than half the lookups; not the
    shapes of other table sizes (`rows_scale`, there for the update's per-doubling term:
    the forward's rates are priced at the mix's one table size)."""
    return [p for p in m.update if p.forward_seconds > 0 and p.unique_rows > 0.5 * p.lookups
            and p.rows_scale == 1.0]


def fit_forward(m: CpuMeasurements) -> tuple[float, ...] | None:
    """FORWARD_TERM_NAMES' terms of FBGEMM's forward by least squares (terms >= 0) over the
    fit shapes' forwards whose rows all miss: seconds = call + n x lookup + n D x
    lookup_element + bags x bag + bags D x bag_element + strided bags x (strided_bag + D x
    strided_bag_element) (a call of more than one table: `strided_bags`). None without
    such points."""
    from scratchpipe_sim.timing.cpu_update_cost import (  # noqa: PLC0415
        FORWARD_TERM_NAMES,
        forward_row,
    )

    fit = [p for p in _forward_points(m) if p.role == "fit"]
    if len(fit) < len(FORWARD_TERM_NAMES):
        return None
    return fit_update_terms([forward_row(p.lookups, p.batch * p.tables, p.dim,
                                         int(p.tables))
                             for p in fit],
                            [p.forward_seconds for p in fit])


def _fit_forward(m: CpuMeasurements, terms: tuple[float, ...], vals: dict[str, Any],
                 how: dict[str, str], checks: list[str], cpu: CpuConfig) -> None:
    """cpu.forward from `fit_forward`'s terms: the call's and bag's (the
    per-lookup ones are FBGEMM's own miss cost, reported beside the mix's); the held-out
    forwards priced as the model prices hybrid's (rows at the fitted rates + the rest)."""
    from scratchpipe_sim.config.hardware import ForwardTerms  # noqa: PLC0415
    from scratchpipe_sim.timing.cpu_update_cost import (  # noqa: PLC0415
        FORWARD_TERM_NAMES,
        forward_overhead_ns,
    )
    from scratchpipe_sim.timing.machine import gather_core_ns  # noqa: PLC0415

    t = dict(zip(FORWARD_TERM_NAMES, terms, strict=True))
    fwd = {k: round(t[k], 4) for k in ("ns_per_call", "ns_per_bag", "ns_per_bag_element",
                                       "ns_per_strided_bag", "ns_per_strided_bag_element")}
    fwd["rates_pooling"] = float(m.mix_pooling)
    vals["forward"] = fwd
    ft = ForwardTerms(**fwd)

    def err(p) -> float:
        pred = (gather_core_ns(cpu, p.lookups, p.dim * 4)
                + forward_overhead_ns(ft, p.lookups, p.batch * p.tables, p.dim,
                                      int(p.tables)))
        return (pred / 1e9 - p.forward_seconds) / p.forward_seconds * 100

    pts = _forward_points(m)
    fe = [abs(err(p)) for p in pts if p.role == "fit"]
    own = t["ns_per_lookup"] + 64 * t["ns_per_lookup_element"]
    how["forward"] = (
        "FBGEMM's CPU forward (one thread, huge pages), timed before each backward of the "
        "update's fit shapes whose rows are used once (all misses), least squares "
        "(terms >= 0) of ns = call + n x lookup + n D x lookup_element + bags x bag + "
        "bags D x bag_element + strided bags x (strided_bag + D x strided_bag_element) "
        "(a call of more than one table writes each bag's output run at a stride; no term "
        "per table: not told apart from the call's here): "
        + ", ".join(f"{n} {v:.3g}" for n, v in t.items())
        + f" (its own miss: {own:.1f} ns per 256 B row); kept: the call's and "
        f"bags', the bags beyond one per {m.mix_pooling:g} lookups (the mix's pooling, "
        "whose rates carry those); the call's fixed cost is taken out of the mix's points "
        f"before its rates are fitted. The model's forward (rates + these) |error| median "
        f"{np.median(fe):.0f}%, max {max(fe):.0f}% over {len(fe)} fit points")
    seen = set()
    for p in pts:
        key = (p.tables, p.batch, p.pooling, p.dim)
        if p.role != "check" or key in seen:
            continue
        seen.add(key)
        checks.append(f"forward, {int(p.tables)} table(s) x {int(p.batch)} x pooling "
                      f"{int(p.pooling)}, dim {int(p.dim)}: FBGEMM "
                      f"{p.forward_seconds * 1e6:.0f} us, model {err(p):+.0f}% (held out)")


def fit_planner(batches: list[PlanBatch]) -> tuple[float, float] | None:
    """(ns per id, ns per eviction) of seconds = a x ids + c x evictions by least squares
    over the planner's steady batches that evict (the next-use pass is already spread over
    the ids), or None when the evictions per id do not vary (the terms cannot be told
    apart). A negative coefficient (noise) is refitted as zero with the other alone."""
    if len(batches) < 3:
        return None
    ids = np.array([b.ids for b in batches], float)
    ev = np.array([b.evictions for b in batches], float)
    t = np.array([b.seconds for b in batches], float)
    if np.ptp(ev / ids) <= 0:
        return None
    (a, c), *_ = np.linalg.lstsq(np.stack([ids, ev], axis=1), t, rcond=None)
    if c < 0:
        a, c = float(ids @ t / (ids @ ids)), 0.0
    elif a < 0:
        a, c = 0.0, float(ev @ t / (ev @ ev))
    return float(a * 1e9), float(c * 1e9)


def _fit_onchip(m: CpuMeasurements, vals: dict[str, Any], how: dict[str, str]) -> None:
    """llc_MiB: the largest hot set (1 MiB up) one core still gathers at >= half the rate
    of the smallest set — the LLC it keeps at on-chip speed (on a shared host far less
    than the OS lists) — capped at the OS's size. core_llc_GBps: one thread's rate from the
    smallest hot set; llc_GBps: every thread's. Why the smallest: the model's LLC is one
    tier, and a skewed trace's hits are mostly its hottest rows, which sit in the nearest
    caches (on the quickstart's Zipf 1.05 trace the model's own replay gives 0.59 of
    lookups hitting a 1 MiB LLC and 0.64 a 4 MiB one), while a hot set as large as the
    LLC is a uniform draw over all of it (the farthest lines and most TLB misses). The hot
    rows are scattered over the table, as a trace's are, so the rates include the hits'
    TLB misses."""
    threads = sorted({int(p.threads) for p in m.onchip})
    curve = {t: sorted((p.hot_MiB, p.GBps) for p in m.onchip if int(p.threads) == t)
             for t in threads}
    one = curve[threads[0]]  # one thread when measured, else the only curve
    rb = m.onchip[0].row_bytes
    fast = one[0][1] / 2
    eff = one[0][0]
    for mib, g in one:
        if g < fast:
            break
        eff = mib
    os_mib = vals.get("llc_MiB")
    if os_mib is not None:
        eff = min(eff, os_mib)
    at = one[0]  # the smallest hot set: where a skewed trace's hits are (see docstring)
    at_top = curve[threads[-1]][0]
    text = "; ".join(f"{t} thread{'s' if t > 1 else ''}: "
                     + ", ".join(f"{int(mib)} MiB {g:.1f}" for mib, g in curve[t])
                     for t in threads)
    vals["llc_MiB"] = float(eff)
    how["llc_MiB"] = (f"the LLC a core keeps at on-chip speed: the largest hot set (from "
                      f"{int(one[0][0])} MiB up) gathered at >= half the smallest set's rate "
                      f"({one[0][1]:.1f} GB/s); hot-set gather + pool at {int(rb)} B, "
                      f"{text} GB/s; the OS lists "
                      f"{os_mib if os_mib is not None else '?'} MiB")
    vals["core_llc_GBps"] = round(float(at[1]), 3)
    how["core_llc_GBps"] = (f"one thread's gather + pool rate from the smallest hot set "
                            f"({int(at[0])} MiB, rows scattered over the table): where a "
                            "skewed trace's LLC hits are" if threads[0] == 1 else
                            f"hot-set rate at {int(at[0])} MiB on {threads[0]} threads (one "
                            "thread not measured)")
    vals["llc_GBps"] = round(float(at_top[1]), 3)
    how["llc_GBps"] = (f"gather + pool rate from the smallest hot set ({int(at_top[0])} MiB) "
                       f"on {threads[-1]} thread" + ("s" if threads[-1] > 1 else ""))


#: the window sizes `fit_mix` tries (rows a core overlaps; 1 = each row at its own rate)
WINDOWS = tuple(1.0 + 0.25 * k for k in range(61))


def fit_mix(points: dict[float, list[tuple[float, float]]]
            ) -> tuple[float, dict[float, tuple[float, float]], float] | None:
    """(W, {row_bytes: (t_hit, t_miss)}, rmse) of t = t_hit x h^W + t_miss x (1 - h^W) by
    least squares: per row size, (hit fraction h, ns per lookup t) points; W shared by the
    row sizes (a core's window), chosen from WINDOWS by the smallest summed squared error
    among those where every row size fits 0 < t_hit <= t_miss, (t_hit, t_miss) per row
    size linear least squares at that W. Row sizes whose hit fractions do not vary are
    left out; None when no W fits."""
    usable = {rb: np.array(p, float).T for rb, p in points.items()
              if len(p) >= 2 and np.ptp([h for h, _ in p]) > 0.05}
    best = None
    for w in WINDOWS:
        sse, fits = 0.0, {}
        for rb, (h, t) in usable.items():
            design = np.stack([h ** w, 1 - h ** w], axis=1)
            (th, tm), *_ = np.linalg.lstsq(design, t, rcond=None)
            if not 0 < th <= tm:  # a hit dearer than a miss: noise, not a cache
                break
            fits[rb] = (float(th), float(tm))
            sse += float(((t - design @ [th, tm]) ** 2).sum())
        else:
            if fits and (best is None or sse < best[0] - 1e-12):
                best = (sse, w, fits)
    if best is None:
        return None
    sse, w, fits = best
    n = sum(len(h) for h, _ in usable.values())
    return w, fits, float(np.sqrt(sse / n))


def _fit_mix(m: CpuMeasurements, vals: dict[str, Any], how: dict[str, str],
             llc_MiB: float, call_s: float = 0.0) -> None:
    """core_llc_GBps, core_dram_GBps ([row_bytes, GBps] curves) and core_window_rows from
    the mix (see the module docstring): hits counted at the largest measured hot-set size
    <= llc_MiB (the LLC the model simulates)."""
    points: dict[float, list[tuple[float, float]]] = {}
    label = 0.0
    for p in m.mix:
        if p.lookups <= 0:
            continue
        label, h = _hits_at(p.hits, llc_MiB)
        secs = max(p.seconds - call_s, 0.5 * p.seconds)  # a call's fixed cost taken out
        points.setdefault(p.row_bytes, []).append((h / p.lookups, secs / p.lookups * 1e9))
    fit = fit_mix(points)
    if fit is None:
        return
    w, fits, rmse = fit
    rbs = sorted(fits)
    alphas = "/".join(f"{a:g}" for a in sorted({p.alpha for p in m.mix}))
    kernel = ("FBGEMM's CPU TBE forward (calibrate --cpu --kernel fbgemm)"
              if getattr(m, "mix_kernel", "numba") == "fbgemm" else "gather + pool")
    what = (f"one thread's {kernel} of generated traces (Zipf " + alphas + "; 0 = "
            f"uniform), least squares of ns per lookup = t_hit x h^W + t_miss x (1 - h^W), h "
            f"the hit fraction by the model's LLC simulator at {label:g} MiB, W shared, "
            "(t_hit, t_miss) per row size; rate = row bytes / t: "
            + "; ".join(f"{int(rb)} B: hit {fits[rb][0]:.1f} ns, miss {fits[rb][1]:.1f} ns "
                        "(h " + ", ".join(f"{h:.2f}" for h, _ in points[rb]) + ")"
                        for rb in rbs)
            + f"; rmse {rmse:.1f} ns per lookup")
    vals["core_llc_GBps"] = [[round(rb, 1), round(rb / fits[rb][0], 3)] for rb in rbs]
    vals["core_dram_GBps"] = [[round(rb, 1), round(rb / fits[rb][1], 3)] for rb in rbs]
    vals["core_window_rows"] = w
    how["core_llc_GBps"] = "hit: " + what
    how["core_dram_GBps"] = "miss: " + what
    how["core_window_rows"] = f"W = {w:g}: " + what


def _replace(base: CpuConfig, vals: dict[str, Any]) -> CpuConfig:
    """`base` with the fitted values, built by the config schema (lists become the
    tuples and curves the loader makes of a preset)."""
    return build(CpuConfig, {**to_plain(base), **vals}, None, "hardware.cpu")


def _update_ns(cpu: CpuConfig, rows: float, R: float, threads: int) -> float:
    """The model's unloaded price of updating `rows` uniform (DRAM-resident) rows: the
    Machine's `cpu_gather` of 2 x rows (a read and a write each), on `threads` cores."""
    from scratchpipe_sim.config import load_config  # noqa: PLC0415
    from scratchpipe_sim.timing.machine import price_alone  # noqa: PLC0415

    d = to_plain(cpu)
    d["cores"] = threads
    cfg = load_config({"hardware": {"cpu": d}, "designs": ["hybrid"]})
    return float(price_alone(cfg, 1, lambda mm, b: mm.cpu_gather(2 * rows, R, b, "update"),
                             [0])[0])


def cpu_preset_yaml(cal: CpuCalibration, m: CpuMeasurements, name: str,
                    base_preset: str | None) -> str:
    """A hardware preset: `preset: BASE` (if any) with the measured `cpu:` keys over it,
    each commented with how it was measured."""
    import yaml  # noqa: PLC0415

    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Measured by `scratchpipe-sim calibrate --cpu` on {platform.node() or '?'} "
             f"({platform.processor() or platform.machine()}), {when}.",
             f"# {m.statistic.capitalize()} of {m.reps} repetitions per point; worst spread "
             "(median - best) / best "
             f"= {m.worst_spread * 100:.0f}%.",
             "# Keys not listed under cpu come from "
             + (f"the preset {base_preset}." if base_preset else "the schema defaults.")]
    if m.host_reference:
        lines.append("# " + ReferenceSamples.from_json(m.host_reference).comment() + ".")
    if cal.noisy:
        lines.append(f"# {NOISY_WARNING} ({m.remeasured} point re-measurements); the keys "
                     "fitted from these curves are less certain:")
        lines += [f"# noisy: {n}" for n in cal.noisy]
    lines += [f"# check: {c}" for c in cal.checks]
    lines.append(f"name: {yaml.safe_dump(name, default_style=None).splitlines()[0]}")
    if base_preset:
        lines.append(f"preset: {base_preset}")
    lines.append("cpu:")
    for key, value in cal.values.items():
        text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip()
        if text.endswith("\n..."):
            text = text[:-4].strip()
        lines.append(f"  # {cal.how[key]}")
        lines.append(f"  {key}: {text}")
    return "\n".join(lines) + "\n"
