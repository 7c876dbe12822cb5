"""Pure logic of `calibrate`: fits of raw measurements, and the hardware preset they make.

Kept apart from the GPU measurement (bench.py) so it is tested on CPU with synthetic samples.
A transfer of `s` bytes is modelled as `latency + s / bandwidth` — the same affine cost the
timing model charges per PCIe transfer — so the fit is ordinary least squares on (s, t).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.config.hardware import HardwareConfig
from scratchpipe_sim.config.schema import to_plain
from scratchpipe_sim.errors import UserError


@dataclass(frozen=True)
class LinkFit:
    """t = latency_ns + bytes / (GBps * 1e9) * 1e9, fitted to (bytes, seconds) samples."""

    latency_ns: float
    GBps: float
    r2: float
    #: per sample: (bytes, measured_s, predicted_s, error_pct)
    residuals: tuple[tuple[float, float, float, float], ...] = ()

    def predict_s(self, nbytes: float) -> float:
        return self.latency_ns * 1e-9 + nbytes / (self.GBps * 1e9)


def fit_latency_bandwidth(nbytes: np.ndarray, seconds: np.ndarray, what: str = "link"
                          ) -> LinkFit:
    """Least-squares latency + bandwidth; the latency is clamped at 0 (never negative)."""
    x = np.asarray(nbytes, float)
    y = np.asarray(seconds, float)
    if len(x) < 2 or len(np.unique(x)) < 2:
        raise UserError(f"{what}: expected samples at two or more sizes, got {len(x)}")
    A = np.stack([np.ones_like(x), x], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    if b <= 0:
        raise UserError(f"{what}: time does not grow with size (slope {b:.3g} s/B); "
                        "expected larger transfers to take longer")
    if a < 0:  # refit through the origin: bandwidth only
        a, b = 0.0, float(np.dot(x, y) / np.dot(x, x))
    pred = a + b * x
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    res = tuple((float(s), float(t), float(p), float((p - t) / t * 100.0))
                for s, t, p in zip(x, y, pred, strict=True))
    return LinkFit(float(a) * 1e9, 1.0 / float(b) / 1e9, r2, res)


def efficiency_curve(row_bytes: np.ndarray, achieved_GBps: np.ndarray, peak_GBps: float
                     ) -> tuple[tuple[float, float], ...]:
    """[row_bytes, achieved/peak] points, sorted, clamped into (0, 1] as the schema needs."""
    rb = np.asarray(row_bytes, float)
    eff = np.asarray(achieved_GBps, float) / float(peak_GBps)
    order = np.argsort(rb)
    pts = []
    for i in order:
        if pts and rb[i] == pts[-1][0]:
            continue
        pts.append((float(rb[i]), float(min(max(eff[i], 1e-3), 1.0))))
    return tuple(pts)


@dataclass
class Measurements:
    """Raw calibration samples (what bench.py measures; JSON-serialisable)."""

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
    #: hardware schema: `validate` passes it as cache.plan_ns_per_id with plan_threads 1)
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
                    "(use as cache.plan_ns_per_id with cache.plan_threads 1).")
    return "\n".join(head) + "\n" + dump_yaml(cal.preset)


def write_preset(path: Path, text: str) -> None:
    """Write atomically (a temp file renamed into place); a folder that cannot be created or
    written is one UserError line (calibrate --cpu and the GPU calibrate share this)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        if tmp.parent.is_dir():
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        raise UserError(f"cannot write the preset: {e.strerror or e}; expected a writable "
                        "folder (--out)", source=str(path)) from None


def check_writable(path: Path) -> None:
    """Fail before measuring (minutes) when `path`'s folder cannot be written."""
    folder = path.parent
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"cannot write into {folder}: expected a writable folder (--out)",
                        source=str(path))
