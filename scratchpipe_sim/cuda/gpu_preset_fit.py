"""Pure logic of `calibrate`: the GPU measurements, their fits and the hardware preset they
make (the fits themselves, shared with `calibrate --cpu`, are measure/fitting.py).

Kept apart from the GPU measurement (gpu_bench.py) so it is tested on CPU with synthetic samples.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scratchpipe_sim.config.hardware import HardwareConfig
from scratchpipe_sim.config.schema import to_plain
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.measure.fitting import LinkFit, efficiency_curve, fit_latency_bandwidth


@dataclass
class Measurements:
    """Raw calibration samples (what gpu_bench.py measures; JSON-serialisable)."""

    device: str = ""
    h2d: list[tuple[float, float]] = field(default_factory=list)  # (bytes, seconds)
    d2h: list[tuple[float, float]] = field(default_factory=list)
    duplex_GBps: tuple[float, float] | None = None  # (h2d, d2h) while both run
    hbm_stream_GBps: float | None = None
    #: (row_bytes, GBps) random-row gathers on the GPU, uniform ids
    hbm_gather: list[tuple[float, float]] = field(default_factory=list)
    #: (row_bytes, GBps) gathers from a small hot set (locality; reported, not in the schema)
    hbm_gather_hot: list[tuple[float, float]] = field(default_factory=list)
    dram_stream_GBps: float | None = None
    dram_gather: list[tuple[float, float]] = field(default_factory=list)
    dram_gather_hot: list[tuple[float, float]] = field(default_factory=list)
    dram_gather_1core_GBps: float | None = None
    cores: int | None = None
    gemm_tflops: float | None = None
    kernel_launch_ns: float | None = None
    #: the reference planner's cost per looked-up id on one host thread (not in the
    #: hardware schema: `validate` passes it as design_params.scratchpipe.plan_ns_per_id
    #: with plan_threads 1)
    plan_ns_per_id: float | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> Measurements:
        d = json.loads(text)
        known = {f.name for f in dataclasses.fields(Measurements)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"unknown measurement keys {unknown}", field=unknown[0])
        return Measurements(**d)


@dataclass(frozen=True)
class Calibration:
    """The preset dict (hardware schema) plus the fits and which keys were measured."""

    preset: dict[str, Any]
    measured_keys: tuple[str, ...]
    h2d: LinkFit | None
    d2h: LinkFit | None


def build_preset(m: Measurements, base: HardwareConfig, name: str) -> Calibration:
    """A hardware preset: `base` with every measured field replaced by its measurement."""
    hw = to_plain(base)
    hw["name"] = name
    measured: list[str] = []

    def put(path: str, value: Any) -> None:
        sec, key = path.split(".")
        hw[sec][key] = value
        measured.append(path)

    h2d = d2h = None
    if m.h2d:
        s, t = np.array(m.h2d, float).T
        h2d = fit_latency_bandwidth(s, t, "h2d")
        put("pcie.h2d_GBps", round(h2d.GBps, 3))
    if m.d2h:
        s, t = np.array(m.d2h, float).T
        d2h = fit_latency_bandwidth(s, t, "d2h")
        put("pcie.d2h_GBps", round(d2h.GBps, 3))
    lats = [f.latency_ns for f in (h2d, d2h) if f is not None]
    if lats:
        put("pcie.latency_ns", round(float(np.mean(lats)), 1))
    if m.duplex_GBps is not None:
        put("pcie.duplex_h2d_GBps", round(float(m.duplex_GBps[0]), 3))
        put("pcie.duplex_d2h_GBps", round(float(m.duplex_GBps[1]), 3))
    if m.hbm_stream_GBps:
        put("gpu.hbm_GBps", round(m.hbm_stream_GBps, 1))
        if m.hbm_gather:
            rb, bw = np.array(m.hbm_gather, float).T
            put("gpu.gather_efficiency", [list(p) for p in _rounded(
                efficiency_curve(rb, bw, m.hbm_stream_GBps))])
    if m.dram_stream_GBps:
        put("cpu.dram_GBps", round(m.dram_stream_GBps, 2))
        if m.dram_gather:
            rb, bw = np.array(m.dram_gather, float).T
            put("cpu.gather_efficiency", [list(p) for p in _rounded(
                efficiency_curve(rb, bw, m.dram_stream_GBps))])
    if m.cores:
        put("cpu.cores", int(m.cores))
    if m.dram_gather_1core_GBps:
        put("cpu.embedding_op_GBps", round(m.dram_gather_1core_GBps, 3))
    if m.gemm_tflops:
        put("gpu.tflops", round(m.gemm_tflops, 3))
    if m.kernel_launch_ns:
        put("gpu.kernel_launch_ns", round(m.kernel_launch_ns, 1))
    return Calibration(hw, tuple(measured), h2d, d2h)


def _rounded(curve: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    return tuple((round(x, 1), round(y, 4)) for x, y in curve)


def preset_yaml(cal: Calibration, m: Measurements, base_name: str) -> str:
    """YAML text of the preset, with a header saying what was measured, where and when."""
    from scratchpipe_sim.config import dump_yaml  # noqa: PLC0415

    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [f"# Measured by `scratchpipe-sim calibrate` on {m.device or 'unknown device'}, {when}.",
            "# Measured keys: " + (", ".join(cal.measured_keys) or "(none)") + ".",
            f"# Every other key comes from the base preset: {base_name}."]
    for label, f in (("H2D", cal.h2d), ("D2H", cal.d2h)):
        if f is not None:
            worst = max((abs(r[3]) for r in f.residuals), default=0.0)
            head.append(f"# {label} fit: latency {f.latency_ns:.0f} ns, {f.GBps:.2f} GB/s, "
                        f"R^2 {f.r2:.4f}, worst sample error {worst:.1f}%.")
    if m.hbm_gather_hot:
        head.append("# HBM gathers from a hot set (GB/s by row bytes): "
                    + ", ".join(f"{int(a)}B {b:.0f}" for a, b in m.hbm_gather_hot) + ".")
    if m.dram_gather_hot:
        head.append("# DRAM gathers from a hot set (GB/s by row bytes): "
                    + ", ".join(f"{int(a)}B {b:.1f}" for a, b in m.dram_gather_hot) + ".")
    if m.plan_ns_per_id:
        head.append(f"# Reference planner: {m.plan_ns_per_id:.1f} ns per id on one thread "
                    "(use as design_params.scratchpipe.plan_ns_per_id with plan_threads 1).")
    return "\n".join(head) + "\n" + dump_yaml(cal.preset)
