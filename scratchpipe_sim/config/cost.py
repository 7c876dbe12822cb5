"""What a million training samples cost on a config's hardware (its `hardware.prices`).

Here, below timing, because both the timing layer (every result row's
`usd_per_million_samples`; multi-gpu prices its node) and the capacity search above it
(`experiments/capacity_search.py`) price throughput the same way.
"""

from __future__ import annotations

import math

from scratchpipe_sim.config.model import Config


def usd_per_million(cfg: Config, samples_per_s: float, gpus: int = 1) -> float | None:
    """Price of a million samples: (gpus x gpu_usd_per_hour + host_usd_per_hour) / rate."""
    p = cfg.hardware.prices
    per_hour = gpus * p.gpu_usd_per_hour + p.host_usd_per_hour
    if samples_per_s <= 0 or not math.isfinite(samples_per_s):
        return None
    return per_hour / (samples_per_s * 3600.0) * 1e6
