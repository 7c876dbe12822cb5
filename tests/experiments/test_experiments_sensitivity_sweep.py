"""`sensitivity SWEEP.yaml`: one band row per (point, design), the nominal column is what
`sweep` reports, seeded runs are identical, a zero-width range moves nothing, a range key the
sweep sets is pinned, bad selectors and an existing --out are one line (exit 2)."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import yaml
from small_configs import SENSITIVITY_BASE

import scratchpipe_sim.experiments.sensitivity_analysis as sens
from scratchpipe_sim.cli import main
from scratchpipe_sim.experiments.band_plots import band_axes, plot_bands
from scratchpipe_sim.experiments.bands import load_bands, run_bands
from scratchpipe_sim.experiments.spec import load_experiment

DESIGNS = ["hybrid", "gpu-only", "lru-cache", "scratchpipe"]
SPEC = {
    "name": "tiny-bands",
    "base": SENSITIVITY_BASE,
    # 0.002 of 40k rows = 80 rows: scratchpipe's window does not fit (an infeasible point)
    "sweep": {"grid": {"cache.load_factor": [0.002, 0.2], "trace.alpha": [1.05, 1.2]}},
    "designs": DESIGNS,
}


def _write(tmp: Path, spec: dict, name: str = "exp.yaml") -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump(spec))
    return p


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def bands_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bands")
    exp = _write(tmp, SPEC)
    out = tmp / "out"
    assert main(["sensitivity", str(exp), "--samples", "3", "--seed", "5", "--out", str(out),
                 "--plot"]) == 0
    return tmp, exp, out


def test_one_row_per_point_and_design(bands_dir):
    _, _, out = bands_dir
    rows = _csv(out / "bands.csv")
    assert [(r["index"], r["design"]) for r in rows] == [
        (str(i), d) for i in range(4) for d in DESIGNS]
    data = load_bands(out)
    assert data["rows"] == json.loads((out / "bands.json").read_text())["rows"]
    for r in data["rows"]:
        if r["design"] == "scratchpipe" and r["cache.load_factor"] == 0.002:
            assert r["status"] == "infeasible" and "capacity" in r["error"]
            continue
        assert r["status"] == "ok"
        assert r["min"] <= r["nominal"] <= r["max"]
        n_params = 3
        assert r["runs"] == 1 + 2 * n_params + 3
        if r["design"] == "hybrid":
            assert r["nominal"] == r["min"] == r["max"] == 1.0
        else:  # the ranges move every other design's speedup
            assert r["min"] < r["max"] and r["top_param"] in SPEC["base"]["hardware"]["ranges"]
    # each point's full analysis is kept: its band is its runs' min and max
    for pt in data["points"]:
        s = pt["sensitivity"]
        for d in s["designs"]:
            runs = [s["nominal"][d]] + [v[d] for lh in s["one_at_a_time"].values()
                                        for v in (lh["low"], lh["high"])] + s["lhs"]["speedup"][d]
            row = next(r for r in data["rows"] if r["index"] == pt["index"] and r["design"] == d)
            assert (row["min"], row["max"]) == (min(runs), max(runs))


def test_nominal_is_what_sweep_reports(bands_dir):
    tmp, exp, out = bands_dir
    assert main(["sweep", str(exp), "--out", str(tmp / "sweep"), "--quiet"]) == 0
    swept = {(r["index"], r["design"]): r for r in _csv(tmp / "sweep" / "results.csv")}
    bands = _csv(out / "bands.csv")
    assert len(swept) == len(bands)
    for b in bands:
        s = swept[(b["index"], b["design"])]
        assert s["status"] == b["status"]
        if b["status"] == "ok":  # the same replays and SimPy run: the same float
            assert float(b["nominal"]) == float(s["speedup_vs_hybrid"])


def test_seeded_runs_are_identical_and_the_seed_matters(tmp_path):
    spec = load_experiment(_write(tmp_path, SPEC))
    a = run_bands(spec, ["2"], samples=3, seed=9).to_json()
    b = run_bands(spec, ["2"], samples=3, seed=9).to_json()
    c = run_bands(spec, ["2"], samples=3, seed=10).to_json()
    assert a == b
    lhs = [p["sensitivity"]["lhs"]["values"] for p in (a["points"][0], c["points"][0])]
    assert lhs[0] != lhs[1]
    assert [r["nominal"] for r in a["rows"]] == [r["nominal"] for r in c["rows"]]


def test_parallel_points_give_the_same_table(tmp_path):
    exp = _write(tmp_path, SPEC)
    for jobs, name in (("1", "one"), ("2", "two")):
        assert main(["sensitivity", str(exp), "--points", "2-3", "--samples", "2",
                     "--seed", "1", "--jobs", jobs, "--out", str(tmp_path / name)]) == 0
    assert (tmp_path / "one" / "bands.csv").read_bytes() == \
        (tmp_path / "two" / "bands.csv").read_bytes()


def test_a_single_point_is_priced_in_the_processes_asked(tmp_path, monkeypatch):
    """One selected point and --jobs 2: no second point to run beside it, so its varied
    configs are priced in two processes (the same table as --jobs 1)."""
    exp = _write(tmp_path, SPEC)
    asked = []
    real = sens.price_all

    def spy(pricer, cfgs, jobs=1):
        asked.append(jobs)
        return real(pricer, cfgs, jobs)

    monkeypatch.setattr(sens, "price_all", spy)
    for jobs, name in (("1", "one"), ("2", "two")):
        asked.clear()
        assert main(["sensitivity", str(exp), "--points", "3", "--samples", "2",
                     "--seed", "1", "--jobs", jobs, "--out", str(tmp_path / name)]) == 0
    assert asked == [2]  # priced in this process (not a point worker's), in 2 processes
    assert (tmp_path / "one" / "bands.csv").read_bytes() == \
        (tmp_path / "two" / "bands.csv").read_bytes()


def test_zero_width_ranges_move_nothing(tmp_path):
    spec = copy.deepcopy(SPEC)
    # the schema defaults: 0.4 and 100 GB/s (pinning at the nominal value)
    spec["base"]["hardware"]["ranges"] = {"gpu.aggregate_efficiency": [0.4, 0.4],
                                          "cpu.dram_GBps": [50, 300]}
    res = run_bands(load_experiment(_write(tmp_path, spec)), ["cache.load_factor=0.2"],
                    samples=3, seed=2)
    for pt in res.points:
        s = pt["sensitivity"]
        lohi = s["one_at_a_time"]["gpu.aggregate_efficiency"]
        assert lohi["low"] == lohi["high"] == s["nominal"]  # exactly
    spec["base"]["hardware"]["ranges"] = {"gpu.aggregate_efficiency": [0.4, 0.4]}
    pinned = run_bands(load_experiment(_write(tmp_path, spec, "pinned.yaml")),
                       ["cache.load_factor=0.2"], samples=3, seed=2)
    assert len(pinned.rows) == 2 * len(DESIGNS)
    for r in pinned.rows:
        assert r["min"] == r["nominal"] == r["max"]
        assert r["top_param"] is None and r["overtaken_runs"] == 0
        assert r["order_changed_runs"] == 0


def test_a_range_key_the_sweep_sets_is_pinned(tmp_path):
    spec = copy.deepcopy(SPEC)
    spec["sweep"] = {"grid": {"hardware.cpu.dram_GBps": [50.0, 300.0]}}
    res = run_bands(load_experiment(_write(tmp_path, spec)), samples=2, seed=1,
                    designs=["hybrid", "gpu-only"])
    for pt in res.points:
        s = pt["sensitivity"]
        assert s["pinned"] == ["cpu.dram_GBps"]
        assert "cpu.dram_GBps" not in s["one_at_a_time"]
        assert len(s["lhs"]["values"][0]) == 2
    slow_host, fast_host = (r["nominal"] for r in res.rows if r["design"] == "gpu-only")
    # the point's own value is priced, not a sample of the range: a faster host DRAM
    # speeds hybrid up, so gpu-only's speedup over it falls
    assert fast_host < slow_host


@pytest.mark.parametrize("selector, expect", [
    ("cache.load_factor=0.2", [2, 3]),
    ("trace.alpha=1.2,cache.load_factor=0.002", [1]),
    ("0,3", [0, 3]),
    ("1-2", [1, 2]),
])
def test_selectors_pick_points(selector, expect, tmp_path):
    spec = load_experiment(_write(tmp_path, SPEC))
    res = run_bands(spec, [selector], samples=0, designs=["hybrid", "gpu-only"])
    assert [p["index"] for p in res.points] == expect


@pytest.mark.parametrize("extra, msg", [
    (["--points", "cache.load_fctor=0.2"], "did you mean 'cache.load_factor'"),
    (["--points", "cache.load_factor=0.3"], "matches no point"),
    (["--points", "7"], "out of range"),
    (["--points", "1,trace.alpha=1.2"], "mixes indices"),
    (["--points", "x"], "bad point index"),
    (["--points", ""], "empty selector"),
    (["--set", "seed=1"], "--set"),
    ([], "expected --out"),
])
def test_bad_sweep_input_is_one_line(extra, msg, tmp_path, capsys):
    exp = _write(tmp_path, SPEC)
    out = [] if msg == "expected --out" else ["--out", str(tmp_path / "o")]
    assert main(["sensitivity", str(exp), "--samples", "0", *out, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0] and "--" in err[0]
    assert not (tmp_path / "o").exists()  # nothing made before the input is checked


def test_existing_out_is_never_written_over(tmp_path, capsys):
    exp = _write(tmp_path, SPEC)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "bands.csv").write_text("an earlier result")
    assert main(["sensitivity", str(exp), "--samples", "0", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "never written over" in err[0]
    assert (tmp_path / "o" / "bands.csv").read_text() == "an earlier result"


def test_sweep_flags_on_a_config_are_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**SPEC["base"], "designs": DESIGNS}))
    assert main(["sensitivity", str(cfg), "--points", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--points applies to an experiment" in err[0]


def test_the_bands_figure(bands_dir, tmp_path):
    _, _, out = bands_dir
    assert (out / "bands.png").stat().st_size > 0 and (out / "bands.pdf").stat().st_size > 0
    data = load_bands(out)
    assert band_axes(data) == ("cache.load_factor", ["trace.alpha"])
    paths = plot_bands(out, tmp_path / "fig" / "b", formats=("png",))
    assert paths == [tmp_path / "fig" / "b.png"] and paths[0].stat().st_size > 0
    # and through the CLI: `plot DIR` on a bands folder draws its one figure
    assert main(["plot", str(out), "--out", str(tmp_path / "c"), "--format", "png"]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0
