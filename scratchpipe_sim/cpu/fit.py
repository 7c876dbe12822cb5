"""Pure logic of `calibrate --cpu`: the CPU micro-benchmarks' samples -> hardware.cpu keys.

Fits reuse `cuda.fit` (least-squares latency + bytes / bandwidth, efficiency curves), so the
CPU and GPU halves are fitted the same way. How each key follows from the samples:

    dram_GBps               slope of a parallel read (bytes) vs time: gathers are reads
    gather_efficiency       per row size: slope of the gather + pool (bytes of rows) on every
                            thread / dram_GBps
    dram_latency_ns         a pointer chase (ns per dependent load)
    cores                   the most threads measured
    embedding_op_GBps       one thread's gather + pool of an LLC-resident hot set (the op's
                            own rate; misses are DRAM's term), best row size
    parallel_efficiency     hot-set rate on T threads / (T x one thread's), 256 B rows
    aggregate_ns_per_lookup aggregation slope (ns per lookup on T threads) x T x parallel
                            efficiency, less the r / embedding_op_GBps the model already
                            charges the cores for the lookup's row (median over row sizes)
    plan_ns_per_id          the scratchpipe policy kernel's ns per id (one thread)
    llc_MiB, llc_ways       ways: the OS (sysfs); size: the largest hot set a core still
                            gathers at >= 1.5x the cold rate (at most the OS's size)
    llc_GBps                the gather rate from a hot set half that size

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

from scratchpipe_sim.config.hardware import CpuConfig, interpolate
from scratchpipe_sim.cpu.bench import CpuMeasurements
from scratchpipe_sim.cuda.fit import efficiency_curve, fit_latency_bandwidth


@dataclass(frozen=True)
class CpuCalibration:
    """The measured hardware.cpu keys and, per key, how it was measured (a comment)."""

    values: dict[str, Any]
    how: dict[str, str]
    checks: tuple[str, ...]  # model vs measurement for what was not fitted (apply)


def _fit(samples: list[tuple[float, float]], what: str):
    x, y = np.array(samples, float).T
    return fit_latency_bandwidth(x, y, what)


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
    stream = _fit(m.stream, "stream read")
    dram = stream.GBps
    sizes = ", ".join(f"{int(b / 2**20)}" for b, _ in m.stream)
    vals["dram_GBps"] = round(dram, 3)
    how["dram_GBps"] = (f"parallel read of {sizes} MiB on {top} threads, least squares "
                        f"(R^2 {stream.r2:.4f})")
    if m.copy:
        how["dram_GBps"] += f"; a copy reaches {_fit(m.copy, 'stream copy').GBps:.2f} GB/s"
        how["dram_GBps"] += " of traffic (2x bytes)"
    rbs = sorted({g[0] for g in m.gather})
    rates, lats, r2s = [], [], []
    for rb in rbs:
        f = _fit([(b, s) for r, b, s in m.gather if r == rb], f"gather {rb:.0f} B")
        rates.append(f.GBps)
        lats.append(f.latency_ns)
        r2s.append(f.r2)
    curve = efficiency_curve(np.array(rbs), np.array(rates), dram)
    vals["gather_efficiency"] = [[round(x, 1), round(y, 4)] for x, y in curve]
    how["gather_efficiency"] = (
        f"embedding-bag gather + pool of uniform random rows on {top} threads, per row size "
        "the least-squares rate (bytes of rows) / dram_GBps: "
        + ", ".join(f"{int(r)} B {g:.2f} GB/s" for r, g in zip(rbs, rates, strict=True))
        + f" (R^2 >= {min(r2s):.3f})")
    if m.latency_ns is not None:
        vals["dram_latency_ns"] = round(m.latency_ns, 1)
        how["dram_latency_ns"] = (
            "pointer chase over the largest stream buffer (ns per dependent load); the "
            f"gather fits' intercepts (fixed cost per call) were {np.median(lats) / 1e3:.1f} "
            "us (median)")
    vals["cores"] = int(top)
    how["cores"] = f"threads used (--threads {','.join(map(str, m.threads))})"
    one = {}
    for t in sorted({int(s[0]) for s in m.scaling}):
        for rb in rbs:
            pts = [(b, s) for tt, r, b, s in m.scaling if int(tt) == t and r == rb]
            if len(pts) >= 2:
                one[(t, rb)] = _fit(pts, f"gather {rb:.0f} B on {t} threads").GBps
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
    if m.aggregate:
        per_rb = []
        for rb in sorted({a[0] for a in m.aggregate}):
            f = _fit([(n, s) for r, n, s in m.aggregate if r == rb], f"aggregate {rb:.0f} B")
            ns = 1.0 / f.GBps  # seconds per lookup x 1e9
            per_rb.append((rb, max(0.0, ns * top * pe - rb / op)))
        vals["aggregate_ns_per_lookup"] = round(float(np.median([v for _, v in per_rb])), 2)
        how["aggregate_ns_per_lookup"] = (
            f"gradient aggregation of uniform ids on {top} threads: least-squares ns per "
            f"lookup x {top} threads x parallel_efficiency - row bytes / embedding_op_GBps, "
            "median of " + ", ".join(f"{int(r)} B {v:.1f}" for r, v in per_rb))
    if m.plan_ns_per_id is not None:
        vals["plan_ns_per_id"] = round(m.plan_ns_per_id, 2)
        how["plan_ns_per_id"] = (
            f"the scratchpipe policy kernel (one thread) on a Zipf 1.05 trace, {m.plan_ids} "
            "ids of " + ("batches that evict (a full scratchpad)" if m.plan_steady else
                         "batches that never evict (the scratchpad never filled: low)")
            + f", {m.plan_fill_ratio:.2f} fills per id, next-use pass included"
            + _plan_two_terms(m.plan_batches))
    if llc is not None:
        vals["llc_MiB"] = round(llc[0], 3)
        vals["llc_ways"] = int(llc[1])
        how["llc_MiB"] = how["llc_ways"] = "the OS's last-level cache (sysfs)"
    if m.onchip:
        rb0 = sorted(m.onchip)[0][1]
        _fit_onchip(m, vals, how, [g for r, g in zip(rbs, rates, strict=True) if r == rb0]
                    or rates)
    checks = []
    cfg = _replace(base, vals)
    for opt, rb, u, R, s in m.apply:
        pred = _update_ns(cfg, u, R, top)
        checks.append(f"{opt} apply, {int(rb)} B rows ({int(R)} B moved), {int(u)} rows: "
                      f"measured {s * 1e6:.0f} us, model {pred / 1e3:.0f} us "
                      f"({(pred / 1e9 - s) / s * 100:+.0f}%)")
    return CpuCalibration(_plain(vals), how, tuple(checks))


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


def _plan_two_terms(batches: list[tuple[float, float, float]]) -> str:
    """Least squares t = a x ids + c x evictions over the planner's batches (cold ones
    included): the two-term cost the model would need (reported, not a key)."""
    if len(batches) < 3:
        return ""
    ids, ev, t = np.array(batches, float).T
    if np.ptp(ev / ids) <= 0:
        return ""
    (a, c), *_ = np.linalg.lstsq(np.stack([ids, ev], axis=1), t, rcond=None)
    return (f"; two terms (least squares over {len(t)} batches): {a * 1e9:.1f} ns per id + "
            f"{c * 1e9:.1f} ns per eviction")


def _fit_onchip(m: CpuMeasurements, vals: dict[str, Any], how: dict[str, str],
                cold: list[float]) -> None:
    """llc_MiB: the largest hot set before the first that falls below 1.5x the cold rate
    (capped at the OS's size); llc_GBps: the rate from a hot set half that size."""
    pts = sorted(m.onchip)
    rb = pts[0][1]
    cold_rate = float(np.median(cold)) if cold else min(r for _, _, r in pts)
    fits = []  # ascending sizes up to the first that falls below 1.5x the cold rate
    for mib, _, r in pts:
        if r < 1.5 * cold_rate:
            break
        fits.append((mib, r))
    curve = ", ".join(f"{int(mib)} MiB {r:.1f}" for mib, _, r in pts)
    if not fits:
        return
    eff = max(mib for mib, _ in fits)
    os_mib = vals.get("llc_MiB")
    if os_mib is not None:
        eff = min(eff, os_mib)
    half = [r for mib, r in fits if mib <= max(1.0, eff / 2)]
    vals["llc_MiB"] = float(eff)
    how["llc_MiB"] = (f"largest hot set (from 1 MiB up) gathered at >= 1.5x the cold rate "
                      f"({cold_rate:.1f} GB/s); hot-set gather + pool at {int(rb)} B: {curve} "
                      f"GB/s; the OS lists {os_mib if os_mib is not None else '?'} MiB")
    vals["llc_GBps"] = round(float(half[-1] if half else fits[0][1]), 3)
    how["llc_GBps"] = f"hot-set gather + pool rate at {int(max(1.0, eff / 2))} MiB"


def _replace(base: CpuConfig, vals: dict[str, Any]) -> CpuConfig:
    import dataclasses  # noqa: PLC0415

    v = dict(vals)
    if "gather_efficiency" in v:
        v["gather_efficiency"] = tuple(tuple(p) for p in v["gather_efficiency"])
    return dataclasses.replace(base, **v)


def _update_ns(cpu: CpuConfig, rows: float, R: float, threads: int) -> float:
    """The model's unloaded price of updating `rows` rows (2 x rows x R: DRAM || cores)."""
    nbytes = 2 * rows * R
    dram = nbytes / (cpu.dram_GBps * interpolate(cpu.gather_efficiency, R))
    cores = nbytes / cpu.embedding_op_GBps / (threads * cpu.parallel_efficiency)
    return max(dram, cores) + cpu.dram_latency_ns


def cpu_preset_yaml(cal: CpuCalibration, m: CpuMeasurements, name: str,
                    base_preset: str | None) -> str:
    """A hardware preset: `preset: BASE` (if any) with the measured `cpu:` keys over it,
    each commented with how it was measured."""
    import yaml  # noqa: PLC0415

    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Measured by `scratchpipe-sim calibrate --cpu` on {platform.node() or '?'} "
             f"({platform.processor() or platform.machine()}), {when}.",
             f"# Best of {m.reps} repetitions per point; worst spread (median - best) / best "
             f"= {m.worst_spread * 100:.0f}%.",
             "# Keys not listed under cpu come from "
             + (f"the preset {base_preset}." if base_preset else "the schema defaults.")]
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
