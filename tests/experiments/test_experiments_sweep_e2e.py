"""The sweep with the real timing model on a tiny config, end to end through the CLI."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import Config
from scratchpipe_sim.timing import simulate

DESIGNS = ["hybrid", "gpu-only", "lru-cache", "scratchpipe"]
METRICS = ["iter_ns_mean", "speedup_vs_hybrid", "hit_ratio", "pcie_h2d_bytes_per_sample"]
TINY = {"seed": 3, "hardware": {"preset": "a100-gen4"},
        "model": {"tables": {"count": 2, "rows": 2000, "dim": 16},
                  "batch_size": 64, "pooling": 4, "num_batches": 12, "warmup_batches": 2,
                  "bottom_mlp": [13, 64, 16], "top_mlp": [19, 32, 1]},
        "trace": {"distribution": "zipf", "alpha": 1.1},
        "cache": {"policy": "lru"}, "design_params": {"scratchpipe": {"lookahead": 5}}}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    exp = tmp / "tiny.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "tiny", "base": TINY, "designs": DESIGNS, "metrics": METRICS,
        "sweep": {"grid": {"cache.load_factor": [0.01, 0.3, 0.6]}}}))
    out = tmp / "out"
    assert main(["sweep", str(exp), "--out", str(out), "--quiet", "--jobs", "1"]) == 0
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    return exp, out, rows


def test_rows_match_a_direct_simulation_of_each_point(swept):
    exp, out, rows = swept
    assert len(rows) == 3 * len(DESIGNS)
    points = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    ok = [r for r in rows if r["status"] == "ok"]
    checked = 0
    for p in points:
        if p["values"]["cache.load_factor"] == 0.01:
            continue
        direct = {r["design"]: r for r in simulate(Config.from_dict(p["config"]))}
        for r in (r for r in ok if r["point"] == p["point"]):
            for m in METRICS:
                assert float(r[m]) == direct[r["design"]][m], (r["design"], m)
            checked += 1
    assert checked == 2 * len(DESIGNS)
    for r in ok:
        if r["design"] == "hybrid":
            assert float(r["speedup_vs_hybrid"]) == 1.0


def test_a_design_that_cannot_run_is_infeasible_alone(swept):
    _, _, rows = swept
    small = {r["design"]: r for r in rows if r["cache.load_factor"] == "0.01"}
    assert small["scratchpipe"]["status"] == "infeasible"
    assert "scratchpipe needs capacity >=" in small["scratchpipe"]["error"]
    for d in ("hybrid", "gpu-only", "lru-cache"):
        assert small[d]["status"] == "ok", small[d]["error"]
    # gpu-only is never slower than any design at the same point
    for lf in ("0.01", "0.3", "0.6"):
        pt = [r for r in rows if r["cache.load_factor"] == lf and r["status"] == "ok"]
        gpu = next(float(r["iter_ns_mean"]) for r in pt if r["design"] == "gpu-only")
        assert all(gpu <= float(r["iter_ns_mean"]) for r in pt)


def test_rerun_skips_and_compare_and_plot_work(swept, capsys, tmp_path):
    exp, out, _ = swept
    before = (out / "results.csv").read_bytes()
    capsys.readouterr()
    assert main(["sweep", str(exp), "--out", str(out), "--quiet"]) == 0
    assert "0 run, 3 already done" in capsys.readouterr().out
    assert (out / "results.csv").read_bytes() == before
    assert main(["compare", str(out)]) == 0
    text = capsys.readouterr().out
    assert "geomean" in text and "scratchpipe" in text
    assert main(["plot", str(out), "--figure", "speedup-vs-cache-size",
                 "--out", str(tmp_path / "f")]) == 0
    assert (tmp_path / "f.png").stat().st_size > 5_000


def test_include_with_a_relative_trace_file_runs_from_any_cwd(tmp_path, monkeypatch, capsys):
    import numpy as np

    (tmp_path / "cfg").mkdir()
    ids = np.tile(np.arange(8), 12)  # 8 rows cycled: LRU of 8 rows hits after the first lap
    np.save(tmp_path / "cfg" / "ids.npy", ids)
    (tmp_path / "cfg" / "base.yaml").write_text(yaml.safe_dump({
        "model": {"tables": {"count": 1, "rows": 8}, "batch_size": 4, "pooling": 1,
                  "num_batches": 24, "warmup_batches": 2},
        "trace": {"path": "ids.npy"}}))
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({
        "name": "rel", "include": "cfg/base.yaml", "designs": ["hybrid", "lru-cache"],
        "metrics": ["hit_ratio"], "sweep": {"grid": {"cache.capacity_rows": [4, 8]}}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["sweep", str(tmp_path / "exp.yaml"), "--out", "o", "-q"]) == 0
    rows = list(csv.DictReader(io.StringIO((elsewhere / "o" / "results.csv").read_text())))
    hits = {(r["cache.capacity_rows"], r["design"]): float(r["hit_ratio"]) for r in rows}
    # batches 2..23 are measured: capacity 8 holds every row (all hits), capacity 4 of a
    # cycle of 8 under LRU never hits
    assert hits == {("4", "hybrid"): 0.0, ("4", "lru-cache"): 0.0,
                    ("8", "hybrid"): 0.0, ("8", "lru-cache"): 1.0}


def test_figures_mark_infeasible_designs_with_the_reason(swept):
    from scratchpipe_sim.experiments.plots import make_figure
    from scratchpipe_sim.experiments.results import load_results

    _, out, _ = swept
    fig = make_figure(load_results(out), "speedup-vs-cache-size")
    ax = fig.axes[0]
    (strip,) = [c for c in ax.child_axes if c.get_gid() == "not-run"]  # above the data
    (marks,) = strip.get_lines()
    assert marks.get_gid() == "not-run:scratchpipe:infeasible"
    assert list(marks.get_xdata()) == [1.0]  # load factor 0.01 drawn as 1 % of rows
    note = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert "scratchpipe infeasible at cache size = 1: scratchpipe needs capacity >=" in note
    # the drawn scratchpipe line has only the points that ran
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "scratchpipe")
    assert list(line.get_xdata()) == [30.0, 60.0]


def test_no_cache_gives_identical_results_and_touches_no_replay_entry(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))
    exp = tmp_path / "nc.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "nc", "base": {**TINY, "seed": 11}, "designs": ["hybrid", "lru-cache"],
        "metrics": ["iter_ns_mean", "hit_ratio", "fills", "evictions"],
        "sweep": {"grid": {"cache.load_factor": [0.05, 0.2]}}}))
    replays = tmp_path / "cache" / "replays"
    assert main(["sweep", str(exp), "--out", str(tmp_path / "a"), "-q", "--no-cache"]) == 0
    assert not (tmp_path / "cache").exists()  # neither replays nor traces written
    assert main(["sweep", str(exp), "--out", str(tmp_path / "b"), "-q"]) == 0  # stores
    stored = sorted(p.name for p in replays.iterdir())
    assert stored  # one entry per (policy, capacity) at least
    assert main(["sweep", str(exp), "--out", str(tmp_path / "c"), "-q"]) == 0  # reads
    assert sorted(p.name for p in replays.iterdir()) == stored
    tables = [(tmp_path / d / "results.csv").read_text() for d in "abc"]
    assert tables[0] == tables[1] == tables[2]
    rows = list(csv.DictReader(io.StringIO(tables[0])))
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    assert int(next(r for r in rows if r["design"] == "lru-cache")["fills"]) > 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "--no-cache" in capsys.readouterr().out
