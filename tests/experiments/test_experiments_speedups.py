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
    assert "geomean over the 2 of 3 points where every design ran" in out[1]
    assert out[5].split() == ["0", "0.01", "1.000x", "1.100x", "-"]


def test_every_missing_value_has_its_reason_and_the_table_fits_100_columns(results, capsys):
    assert main(["compare", str(results)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(map(len, out)) <= 100
    assert "why: under the table" in out[1]
    assert out[-1].strip() == "scratchpipe error at # 0: scratchpipe needs capacity >= 50 rows"
    assert main(["compare", str(results), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["missing"] == [{"point": 0, "design": "scratchpipe", "status": "error",
                                "reason": "scratchpipe needs capacity >= 50 rows"}]


def test_nine_designs_and_a_long_swept_value_fit_100_columns_unless_wide(tmp_path, capsys):
    """Every registered design plus a swept JSON mapping: the long column is left out and
    named (printed with --wide); designs that do not fit go to a second block."""
    from scratchpipe_sim.timing.designs import design_order

    designs = list(design_order())

    def run(config, ds):
        a = config["trace"]["alpha"]
        return [{"design": d, "iter_ns_mean": 100.0 * a / (1 + i)} for i, d in enumerate(ds)]

    exp = tmp_path / "w.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "w", "base": {"model": {"num_batches": 4, "warmup_batches": 1}},
        "sweep": {"zip": {"trace.alpha": [1.0, 1.2],
                          "trace.path": ["/a/very/long/path/to/trace-one.sptrace",
                                         "/a/very/long/path/to/trace-two.sptrace"]}},
        "designs": designs, "metrics": ["iter_ns_mean"]}))
    run_sweep(load_experiment(exp), tmp_path / "out", run_point=run, quiet=True)
    assert main(["compare", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert max(map(len, text.splitlines())) <= 100
    assert "trace-one" not in text and "left out (long values; --wide prints them): " \
        "trace.path" in text
    for d in designs:
        assert d.rsplit("-", 1)[-1] in text
    assert main(["compare", str(tmp_path / "out"), "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "/a/very/long/path/to/trace-one.sptrace" in wide and "left out" not in wide
    assert all(d in wide.splitlines()[2].split() for d in designs)
