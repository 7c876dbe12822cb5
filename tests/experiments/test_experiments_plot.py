"""Figures from a small results table: lines / bars counted and their data checked."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.experiments.plots import OKABE_ITO, make_figure
from scratchpipe_sim.experiments.results import load_results
from scratchpipe_sim.experiments.spec import load_experiment
from scratchpipe_sim.experiments.sweep_runner import run_sweep

DESIGNS = ["hybrid", "lru-cache", "scratchpipe"]
METRICS = ["iter_ns_mean", "speedup_vs_hybrid", "hit_ratio", "pcie_h2d_bytes_per_sample",
           "pcie_d2h_bytes_per_sample", "stage_gather_ns", "stage_train_ns"]
BASE = {"model": {"num_batches": 4, "warmup_batches": 1, "tables": {"count": 1, "rows": 1000}}}


def point(config: dict, designs: tuple) -> list[dict]:
    lf, alpha = config["cache"]["load_factor"], config["trace"]["alpha"]
    out = []
    for i, d in enumerate(designs):
        t = 1e6 * alpha / (1 + i * lf * 10)
        out.append({"design": d, "iter_ns_mean": t, "speedup_vs_hybrid": 1 + i * lf * 10,
                    "hit_ratio": i * lf, "pcie_h2d_bytes_per_sample": 100.0 * (i + 1) * alpha,
                    "pcie_d2h_bytes_per_sample": 10.0 * (i + 1),
                    "stage_gather_ns": 4e5 * (i + 1),
                    "stage_train_ns": None if d == "hybrid" else 2e5})
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plot")
    doc = {"name": "plots", "base": BASE,
           "sweep": {"grid": {"cache.load_factor": [0.01, 0.05, 0.1],
                              "trace.alpha": [1.0, 1.2]}},
           "designs": DESIGNS, "metrics": METRICS,
           "figures": {"hit-vs-alpha": {"kind": "line", "x": "trace.alpha", "y": "hit_ratio",
                                        "where": {"cache.load_factor": 0.05}}}}
    exp = tmp / "plots.yaml"
    exp.write_text(yaml.safe_dump(doc))
    run_sweep(load_experiment(exp), tmp / "out", run_point=point, quiet=True)
    return tmp / "out"


def panel_lines(ax):
    return {ln.get_label(): ln for ln in ax.get_lines()}


def test_speedup_vs_cache_size_one_panel_per_alpha_one_line_per_design(results):
    fig = make_figure(load_results(results), "speedup-vs-cache-size")
    axes = [a for a in fig.axes if a.get_visible()]
    assert len(axes) == 2
    assert [a.get_title() for a in axes] == ["Zipf alpha = 1.0", "Zipf alpha = 1.2"]
    for ax in axes:
        lines = panel_lines(ax)
        assert sorted(lines) == sorted(DESIGNS)
        ln = lines["scratchpipe"]
        assert ln.get_xdata().tolist() == pytest.approx([1.0, 5.0, 10.0])  # percent of rows
        assert ln.get_ydata().tolist() == pytest.approx([1.2, 2.0, 3.0])
        assert ln.get_color() == OKABE_ITO[5]
        assert "%" in ax.get_xlabel()
    assert "(x)" in axes[0].get_ylabel()
    assert len(axes[0].get_legend().get_texts()) == 3


def test_pcie_bytes_two_metrics_per_design(results):
    fig = make_figure(load_results(results), "pcie-bytes")
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 3 * 2
    styles = {ln.get_label(): ln.get_linestyle() for ln in lines}
    assert styles["lru-cache PCIe H2D"] == "-" and styles["lru-cache PCIe D2H"] == "--"
    assert ax.get_yscale() == "log" and "bytes/sample" in ax.get_ylabel()


def test_stage_breakdown_bars_are_designs_times_stages(results):
    fig = make_figure(load_results(results), "stage-breakdown")
    ax = fig.axes[0]
    assert len(ax.containers) == 2  # gather, train
    gather, train = ax.containers
    assert [p.get_height() for p in gather] == pytest.approx([0.4, 0.8, 1.2])
    assert [p.get_height() for p in train] == pytest.approx([0.0, 0.2, 0.2])
    assert [p.get_y() for p in train] == pytest.approx([0.4, 0.8, 1.2])
    assert [t.get_text() for t in ax.get_xticklabels()] == DESIGNS
    assert "ms" in ax.get_ylabel()
    assert "load_factor=0.01" in ax.get_title()


def test_miss_ratio_curve_is_one_minus_hit_ratio(results):
    fig = make_figure(load_results(results), "miss-ratio-curve")
    ln = panel_lines(fig.axes[0])["lru-cache"]
    assert ln.get_ydata().tolist() == pytest.approx([0.99, 0.95, 0.9])
    assert fig.axes[0].get_xscale() == "log"


def test_declared_figure_with_where(results):
    fig = make_figure(load_results(results), "hit-vs-alpha")
    lines = panel_lines(fig.axes[0])
    assert len(lines) == 3
    assert lines["scratchpipe"].get_ydata().tolist() == pytest.approx([0.1, 0.1])
    assert lines["scratchpipe"].get_xdata().tolist() == [1.0, 1.2]


def test_cli_writes_png_and_pdf(results, tmp_path, capsys):
    assert main(["plot", str(results), "--figure", "speedup-vs-cache-size",
                 "--out", str(tmp_path / "fig")]) == 0
    png, pdf = tmp_path / "fig.png", tmp_path / "fig.pdf"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < png.stat().st_size < 200_000
    assert pdf.read_bytes()[:5] == b"%PDF-"
    # no --figure: the experiment's declared figures, under RESULTS/figures/
    assert main(["plot", str(results)]) == 0
    assert (results / "figures" / "hit-vs-alpha.png").stat().st_size > 5_000


def test_cli_bad_figure_exits_2(results, capsys):
    rc = main(["plot", str(results), "--figure", "speedup-vs-cache-sise"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "unknown figure 'speedup-vs-cache-sise' (did you mean 'speedup-vs-cache-size'?)" in err


def test_cli_missing_results_exits_2(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "nope"), "--figure", "pcie-bytes"]) == 2
    assert "no such results folder or file" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nope")]) == 2


def test_compare_speedups_and_geomean(results, capsys):
    assert main(["compare", str(results), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    pts = data["points"]
    assert len(pts) == 6
    for p in pts:
        assert p["hybrid"] == 1.0
        assert p["scratchpipe"] == pytest.approx(1 + 2 * p["cache.load_factor"] * 10)
    want = math.exp(np.mean(np.log([1 + 2 * lf * 10 for lf in (0.01, 0.05, 0.1)] * 2)))
    assert data["geomean"]["scratchpipe"] == pytest.approx(want)
    assert data["max"]["lru-cache"] == pytest.approx(2.0)
    assert main(["compare", str(results)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("speedup over hybrid")
    assert text[1].split() == ["#", "load_factor", "alpha", *DESIGNS]
    assert text[-2].split()[0] == "geomean" and text[-2].split()[-1] == f"{want:.3f}x"
    assert len(text) == 3 + 6 + 3


def test_compare_against_another_baseline_and_bad_baseline(results, capsys):
    assert main(["compare", str(results / "results.csv"), "--baseline", "lru-cache",
                 "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "cache.load_factor,trace.alpha,hybrid,lru-cache,scratchpipe"
    assert [float(x) for x in lines[1].split(",")[2:]] == pytest.approx(
        [1 / 1.1, 1.0, 1.2 / 1.1])
    assert main(["compare", str(results), "--baseline", "hybird"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(did you mean 'hybrid'?)" in err
    assert main(["compare", str(results), "--metric", "iter_ns_maen"]) == 2


def test_a_key_zipped_with_x_does_not_split_lines(tmp_path):
    exp = tmp_path / "z.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "z", "base": BASE, "designs": DESIGNS, "metrics": METRICS,
        "sweep": {"zip": {"cache.load_factor": [0.01, 0.05, 0.1],
                          "trace.alpha": [1.0, 1.1, 1.2]}}}))
    run_sweep(load_experiment(exp), tmp_path / "out", run_point=point, quiet=True)
    fig = make_figure(load_results(tmp_path / "out"), "speedup-vs-cache-size")
    visible = [a for a in fig.axes if a.get_visible()]
    assert len(visible) == 1 and len(visible[0].get_lines()) == 3


def test_cli_figures_from_an_edited_experiment_file(results, tmp_path, capsys):
    exp = tmp_path / "edited.yaml"
    exp.write_text(yaml.safe_dump({
        "base": BASE, "sweep": {"grid": {"cache.load_factor": [0.01]}},
        "figures": {"h2d-only": {"kind": "line", "x": "cache.load_factor",
                                 "y": "pcie_h2d_bytes_per_sample"}}}))
    assert main(["plot", str(results), "--experiment", str(exp), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "h2d-only.png"),
                                               str(tmp_path / "h2d-only.pdf")]
