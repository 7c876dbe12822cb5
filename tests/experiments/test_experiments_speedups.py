"""compare: geometric mean over the points where every design ran."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.experiments.spec import load_experiment
from scratchpipe_sim.experiments.sweep_runner import DESIGN_ERROR, run_sweep

DESIGNS = ["hybrid", "lru-cache", "scratchpipe"]


def point(config: dict, designs: tuple) -> list[dict]:
    """scratchpipe cannot run below 5% of rows (its window does not fit), like the model."""
    lf = config["cache"]["load_factor"]
    rows = []
    for i, d in enumerate(designs):
        if d == "scratchpipe" and lf < 0.05:
            rows.append({"design": d, DESIGN_ERROR: "scratchpipe needs capacity >= 50 rows"})
            continue
        rows.append({"design": d, "iter_ns_mean": 100.0 / (1 + i * lf * 10)})
    return rows


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cmp")
    exp = tmp / "c.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "c", "base": {"model": {"num_batches": 4, "warmup_batches": 1}},
        "sweep": {"grid": {"cache.load_factor": [0.01, 0.1, 0.2]}},
        "designs": DESIGNS, "metrics": ["iter_ns_mean"]}))
    s = run_sweep(load_experiment(exp), tmp / "out", run_point=point, quiet=True)
    assert s.failed == 1
    return tmp / "out"


def test_failed_design_row_alone_and_geomean_over_common_points(results, capsys):
    assert main(["compare", str(results), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["common_points"] == 2
    assert [p["scratchpipe"] for p in data["points"]] == [None, 3.0, 5.0]
    assert data["points"][0]["lru-cache"] == pytest.approx(1.1)
    assert data["geomean"]["scratchpipe"] == pytest.approx(math.sqrt(15.0))
    assert data["geomean"]["lru-cache"] == pytest.approx(math.sqrt(2.0 * 3.0))
    assert data["max"]["lru-cache"] == pytest.approx(3.0)
    assert main(["compare", str(results)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "geomean over the 2 of 3 points where every design ran" in out[0]
    assert out[3].split()[-1] == "-"
