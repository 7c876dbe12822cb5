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
from scratchpipe_sim.experiments.styles import design_style
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


def data_axes(fig):
    """The visible panels (not the "not run" strips above them)."""
    return [a for a in fig.axes if a.get_visible() and a.get_gid() != "not-run"]


def iteration_bars(fig) -> dict[str, float]:
    """The stage figure's iteration bar of each design: its length (us)."""
    return {p.get_gid().split(":", 1)[1]: p.get_width() for p in fig.axes[0].patches
            if (p.get_gid() or "").startswith("iteration:")}


def stage_bars(fig, design: str) -> list:
    return [p for p in fig.axes[0].patches if (p.get_gid() or "").startswith(
        f"stage:{design}:")]


def test_speedup_vs_cache_size_one_panel_per_alpha_one_line_per_design(results):
    fig = make_figure(load_results(results), "speedup-vs-cache-size")
    axes = data_axes(fig)
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
    assert axes[0].get_legend() is None  # the legend sits outside the panels
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == DESIGNS


def test_pcie_bytes_two_metrics_per_design(results):
    fig = make_figure(load_results(results), "pcie-bytes")
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 3 * 2
    styles = {ln.get_label(): ln.get_linestyle() for ln in lines}
    assert styles["lru-cache PCIe H2D"] == "-" and styles["lru-cache PCIe D2H"] == "--"
    assert ax.get_yscale() == "log" and "bytes/sample" in ax.get_ylabel()


def test_stage_figure_ranks_designs_as_the_table_does(results):
    """At load factor 0.01, alpha 1: scratchpipe's stages add up to 1.4 ms (gather 1.2 +
    train 0.2) but its iteration is 0.83 ms, below hybrid's 1 ms (stages 0.4 ms): stacked
    bars would reverse the two. The figure's iteration bars are the table's times."""
    res = load_results(results)
    fig = make_figure(res, "stage-breakdown")
    bars = iteration_bars(fig)
    table = res.ok().sort_values("index")
    table = table[table["point"] == table["point"].iloc[0]].set_index("design")
    assert bars == pytest.approx({d: table.at[d, "iter_ns_mean"] / 1e3 for d in DESIGNS})
    assert sorted(bars, key=bars.get) == list(table["iter_ns_mean"].sort_values().index)
    assert sorted(bars, key=bars.get) == ["scratchpipe", "lru-cache", "hybrid"]
    # hybrid's one stage (0.4 ms) fits in its iteration: drawn in series, never past its bar
    (gather,) = stage_bars(fig, "hybrid")
    assert gather.get_x() == 0 and gather.get_width() == pytest.approx(400.0)
    # scratchpipe's overlap: each stage from 0 in its own lane, none stacked on another
    lanes = stage_bars(fig, "scratchpipe")
    assert [p.get_x() for p in lanes] == [0.0, 0.0]
    assert sorted(p.get_width() for p in lanes) == pytest.approx([200.0, 1200.0])
    assert len({p.get_y() for p in lanes}) == 2
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == DESIGNS
    assert "load_factor=0.01" in fig.axes[0].get_title()


def test_a_design_looks_the_same_in_every_figure(results):
    """Every registered design has its own colour and marker, and a figure of a subset of
    the designs (or of one point) draws each in that same colour and marker."""
    from scratchpipe_sim.timing.designs import design_order

    styles = [design_style(d) for d in design_order()]
    assert len({s.color for s in styles}) == len(styles)
    assert len({s.marker for s in styles}) == len(styles)
    res = load_results(results)
    seen: dict[str, set] = {d: set() for d in DESIGNS}
    for name, over in (("speedup-vs-cache-size", {}), ("pcie-bytes", {}),
                       ("miss-ratio-curve", {"designs": ["lru-cache", "scratchpipe"]}),
                       ("hit-vs-alpha", {})):
        for ax in data_axes(make_figure(res, name, over)):
            for ln in ax.get_lines():
                d = ln.get_label().split(" ")[0].rstrip(",")
                seen[d].add((ln.get_color(), ln.get_marker()))
    for p in make_figure(res, "stage-breakdown").axes[0].patches:
        if (p.get_gid() or "").startswith("iteration:"):
            d = p.get_gid().split(":")[1]
            seen[d].add((matplotlib_hex(p.get_facecolor()), design_style(d).marker))
    for d in DESIGNS:
        assert seen[d] == {(design_style(d).color, design_style(d).marker)}, d


def matplotlib_hex(rgba) -> str:
    from matplotlib.colors import to_hex

    return to_hex(rgba).upper()


def test_points_that_did_not_run_are_not_drawn_as_values(tmp_path):
    """An infeasible design is a hollow marker in a strip above the panel, never a point in
    the data (miss ratio 0 would read as 'never misses'), with its reason in a note of at
    least 8 pt that lists every point."""
    from scratchpipe_sim.experiments.sweep_runner import DESIGN_ERROR

    def infeasible_small(config, designs):
        rows = point(config, designs)
        if config["cache"]["load_factor"] < 0.05:
            rows[-1] = {"design": "scratchpipe", DESIGN_ERROR: "window needs 50 rows"}
        return rows

    exp = tmp_path / "i.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "i", "base": BASE, "designs": DESIGNS, "metrics": METRICS,
        "sweep": {"grid": {"cache.load_factor": [0.01, 0.02, 0.05, 0.1]}}}))
    run_sweep(load_experiment(exp), tmp_path / "out", run_point=infeasible_small, quiet=True)
    fig = make_figure(load_results(tmp_path / "out"), "miss-ratio-curve")
    (ax,) = data_axes(fig)
    assert panel_lines(ax)["scratchpipe"].get_xdata().tolist() == pytest.approx([5.0, 10.0])
    (strip,) = [c for c in ax.child_axes if c.get_gid() == "not-run"]
    (marks,) = strip.get_lines()
    assert marks.get_xdata().tolist() == pytest.approx([1.0, 2.0])
    assert marks.get_markerfacecolor() == "white"
    assert marks.get_markeredgecolor() == design_style("scratchpipe").color
    fmt = ax.xaxis.get_major_formatter()  # the log axis reads 1, 2, 5, 10, never 10^0
    assert [fmt(v, 0) for v in (1.0, 2.0, 5.0, 10.0, 20.0)] == ["1", "2", "5", "10", "20"]
    (note,) = [t for t in fig.texts if t.get_gid() == "not-run-note"]
    assert note.get_fontsize() >= 8 and "at cache size = 1, 2: window needs 50 rows" in (
        note.get_text().replace("\n", " "))
    assert all(t.get_fontsize() >= 8 for t in [*fig.texts, *fig.legends[0].get_texts()])


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
    assert text[2].split() == ["#", "load_factor", "alpha", *DESIGNS]
    assert text[-2].split()[0] == "geomean" and text[-2].split()[-1] == f"{want:.3f}x"
    assert text[-1].split() == ["max", "1.000x", "2.000x", "3.000x"]
    assert len(text) == 2 + 1 + 1 + 6 + 3 and max(map(len, text)) <= 100


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
