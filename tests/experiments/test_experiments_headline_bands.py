"""experiments/headline_bands.py: run order, run-by-run ratios and geometric means (closed
forms on a synthetic analysis)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "experiments" / "headline_bands.py"
_spec = importlib.util.spec_from_file_location("headline_bands", _PATH)
hb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hb)


def _sens(nominal, low, high, lhs):
    return {"nominal": nominal,
            "params": [{"key": "cpu.x", "low": 1, "high": 2, "nominal": 1.5}],
            "one_at_a_time": {"cpu.x": {"low": low, "high": high}},
            "lhs": {"speedup": {d: [r[d] for r in lhs] for d in nominal}}}


def test_runs_are_nominal_then_each_end_then_each_sample():
    n, lo, hi = {"a": 2.0, "b": 1.0}, {"a": 3.0, "b": 1.5}, {"a": 1.0, "b": 2.0}
    lhs = [{"a": 4.0, "b": 1.0}, {"a": 0.5, "b": 0.25}]
    assert hb.runs(_sens(n, lo, hi, lhs)) == [n, lo, hi, *lhs]


def test_ratio_and_geomean_are_taken_run_by_run():
    p1 = [{"a": 2.0, "b": 1.0}, {"a": 1.0, "b": 4.0}]
    p2 = [{"a": 8.0, "b": 2.0}, {"a": 1.0, "b": 1.0}]
    assert hb.ratio(p1, "a", "b") == [2.0, 0.25]
    # run 0: sqrt(2 * 4) = 2.83 (a over b); run 1: sqrt(0.25 * 1) = 0.5
    got = hb.geomean_runs([p1, p2], "a", "b")
    assert got == pytest.approx([math.sqrt(8.0), 0.5], rel=1e-12)
    assert hb.geomean_runs([p1, p2], "a") == pytest.approx([4.0, 1.0], rel=1e-12)
    # the band: the first run is the nominal, min and max over all runs
    assert hb.band([2.0, 0.5, 3.0]) == "2.00 [0.50-3.00]"
