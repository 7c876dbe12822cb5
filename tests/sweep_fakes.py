"""A sweep's stand-in point function and its experiment files, shared by the sweep tests
(tests/experiments/test_experiments_sweep.py) and the sweep reliability tests
(tests/reliability/test_reliability_sweep.py); subprocesses import it from tests/."""

from __future__ import annotations

import csv
import io
import os
import time
from pathlib import Path

DESIGNS = ["hybrid", "lru-cache", "scratchpipe"]
METRICS = ["iter_ns_mean", "speedup_vs_hybrid", "hit_ratio"]
BASE = {"model": {"num_batches": 4, "warmup_batches": 1,
                  "tables": {"count": 1, "rows": 1000}},
        "hardware": {"preset": "a100-gen4"},
        # scratchpipe's window must cover the pipeline's batches in flight (5 stage groups)
        "cache": {}, "design_params": {"scratchpipe": {"lookahead": 5}}}


def fake_point(config: dict, designs: tuple) -> list[dict]:
    """A closed form of the swept values; sleeps FAKE_SLEEP_S; fails at load_factor 0.3."""
    time.sleep(float(os.environ.get("FAKE_SLEEP_S", "0")))
    lf = config["cache"]["load_factor"]
    alpha = config["trace"]["alpha"]
    if lf == 0.3:
        raise ValueError("boom at 0.3")
    hybrid = 1000.0 * alpha
    rows = []
    for i, d in enumerate(designs):
        t = hybrid / (1.0 + i * lf * 10)
        rows.append({"design": d, "iter_ns_mean": t, "speedup_vs_hybrid": hybrid / t,
                     "hit_ratio": 0.0 if d == "hybrid" else min(1.0, lf * alpha),
                     "unused": 1})
    return rows


def write_exp(tmp: Path, name: str = "exp", grid=None, zip_=None, **extra) -> Path:
    import yaml

    sweep = {}
    if grid is not None:
        sweep["grid"] = grid
    if zip_ is not None:
        sweep["zip"] = zip_
    doc = {"name": name, "base": BASE, "sweep": sweep, "designs": DESIGNS,
           "metrics": METRICS, **extra}
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def table(out: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO((out / "results.csv").read_text())))
