"""Least-squares fits of raw measurements, shared by `calibrate` (cuda/gpu_preset_fit.py) and
`calibrate --cpu` (cpu/host_preset_fit.py): one affine latency + bandwidth model and one efficiency
curve for both, so a CPU and a GPU preset are fitted the same way.

A transfer of `s` bytes is modelled as `latency + s / bandwidth` — the same affine cost the
timing model charges per PCIe transfer — so the fit is ordinary least squares on (s, t).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratchpipe_sim.errors import UserError


@dataclass(frozen=True)
class LinkFit:
    """t = latency_ns + bytes / (GBps * 1e9) * 1e9, fitted to (bytes, seconds) samples."""

    latency_ns: float
    GBps: float
    r2: float
    #: per sample: (bytes, measured_s, predicted_s, error_pct)
    residuals: tuple[tuple[float, float, float, float], ...] = ()
    #: time did not grow with size: fitted through the origin (a rate only), not trusted
    noisy: bool = False

    def predict_s(self, nbytes: float) -> float:
        return self.latency_ns * 1e-9 + nbytes / (self.GBps * 1e9)


def fit_latency_bandwidth(nbytes: np.ndarray, seconds: np.ndarray, what: str = "link",
                          noisy_ok: bool = False) -> LinkFit:
    """Least-squares latency + bandwidth; the latency is clamped at 0 (never negative).
    Samples whose time does not grow with size are an error, or with `noisy_ok` (a busy
    host's curve, already re-measured) a rate through the origin marked `noisy`."""
    x = np.asarray(nbytes, float)
    y = np.asarray(seconds, float)
    if len(x) < 2 or len(np.unique(x)) < 2:
        raise UserError(f"{what}: expected samples at two or more sizes, got {len(x)}")
    A = np.stack([np.ones_like(x), x], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    noisy = b <= 0 and noisy_ok and float(np.dot(x, y)) > 0
    if noisy:
        a, b = 0.0, float(np.dot(x, y) / np.dot(x, x))
    elif b <= 0:
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
    return LinkFit(float(a) * 1e9, 1.0 / float(b) / 1e9, r2, res, noisy)


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
