"""`sensitivity`: seeded and deterministic, a zero-width range moves nothing, the ranges move
what they must, the Latin hypercube is stratified, bad input is one line."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import yaml
from small_configs import SENSITIVITY_BASE

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config
from scratchpipe_sim.experiments.sensitivity_analysis import (
    latin_hypercube,
    run_sensitivity,
    with_values,
)
from scratchpipe_sim.timing import build_trace

BASE = {"name": "sens", **SENSITIVITY_BASE,
        "designs": ["hybrid", "gpu-only", "lru-cache", "scratchpipe"]}


def _cfg(ranges=None):
    d = copy.deepcopy(BASE)
    if ranges is not None:
        d["hardware"]["ranges"] = ranges
    return load_config(d)


@pytest.fixture(scope="module")
def trace():
    return build_trace(_cfg())


def test_same_seed_same_result_other_seed_other_points(trace):
    a = run_sensitivity(_cfg(), samples=5, seed=7, trace=trace).to_json()
    b = run_sensitivity(_cfg(), samples=5, seed=7, trace=trace).to_json()
    c = run_sensitivity(_cfg(), samples=5, seed=8, trace=trace).to_json()
    assert a == b
    assert a["lhs"]["values"] != c["lhs"]["values"]
    assert a["nominal"] == c["nominal"]


def test_zero_width_range_moves_nothing(trace):
    cfg = _cfg({"gpu.aggregate_efficiency": [0.4, 0.4], "cpu.dram_GBps": [50, 300]})
    assert cfg.hardware.gpu.aggregate_efficiency == 0.4
    res = run_sensitivity(cfg, samples=4, seed=1, trace=trace)
    lo, hi = res.oat["gpu.aggregate_efficiency"]
    assert lo == res.nominal and hi == res.nominal  # exactly: nothing moved
    pinned = run_sensitivity(_cfg({"gpu.aggregate_efficiency": [0.4, 0.4]}), samples=3,
                             seed=1, trace=trace)
    assert all(run == pinned.nominal for run in pinned.runs())
    for d in pinned.designs:
        assert pinned.band(d) == (pinned.nominal[d], pinned.nominal[d])


def test_faster_host_dram_lowers_every_gpu_designs_speedup(trace):
    res = run_sensitivity(_cfg(), samples=0, trace=trace)
    lo, hi = res.oat["cpu.dram_GBps"]
    assert lo["hybrid"] == hi["hybrid"] == 1.0
    assert hi["gpu-only"] < lo["gpu-only"]  # hybrid gets faster, gpu-only does not
    ranked = [k for k, _, _ in res.swings("gpu-only")]
    assert ranked[0] == "cpu.dram_GBps"
    for d in res.designs:
        a, b = res.band(d)
        assert a <= res.nominal[d] <= b


def test_curve_range_scales_every_point_clamped_at_one():
    cfg = _cfg()
    scaled = with_values(cfg, {"gpu.gather_efficiency": 1.5})
    for (x0, y0), (x1, y1) in zip(cfg.hardware.gpu.gather_efficiency,
                                  scaled.hardware.gpu.gather_efficiency, strict=True):
        assert x0 == x1 and y1 == pytest.approx(min(1.0, 1.5 * y0))


def test_a_calibrated_rate_curve_is_varied_as_one_rate(trace):
    """calibrate --cpu writes core_dram_GBps as a [row_bytes, GBps] curve: its range's
    numbers replace it, and the slowest end makes hybrid (the CPU gather) no faster."""
    d = copy.deepcopy(BASE)
    d["hardware"]["cpu"] = {"core_dram_GBps": [[64, 2.0], [512, 4.0]],
                            "embedding_op_GBps": 50.0}
    d["hardware"]["ranges"] = {"cpu.core_dram_GBps": [0.5, 8.0]}
    cfg = load_config(d)
    assert with_values(cfg, {"cpu.core_dram_GBps": 0.5}).hardware.cpu.core_dram_GBps == 0.5
    res = run_sensitivity(cfg, samples=0, trace=trace)
    lo, hi = res.oat["cpu.core_dram_GBps"]
    assert lo["gpu-only"] >= hi["gpu-only"]  # speedup over a slower hybrid is larger


def test_latin_hypercube_hits_every_stratum_once():
    u = latin_hypercube(16, 3, 5)
    assert u.shape == (16, 3) and (u >= 0).all() and (u < 1).all()
    for j in range(3):
        assert sorted(np.floor(u[:, j] * 16).astype(int).tolist()) == list(range(16))
    assert np.array_equal(u, latin_hypercube(16, 3, 5))


def test_cli_json_and_tornado_files(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(BASE))
    out = tmp_path / "out"
    assert main(["sensitivity", str(p), "--json", "--samples", "2", "--seed", "4",
                 "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["seed"] == 4 and len(data["lhs"]["values"]) == 2
    assert set(data["summary"]) == set(BASE["designs"])
    assert data["runs"] == 1 + 2 * 3 + 2
    for name in ("sensitivity.json", "tornado.png", "tornado.pdf"):
        assert (out / name).stat().st_size > 0
    # the result round-trips, and `plot DIR` redraws the tornado from it
    from scratchpipe_sim.experiments.sensitivity_analysis import load_sensitivity

    written = json.loads((out / "sensitivity.json").read_text())
    assert load_sensitivity(out).to_json() == written
    assert main(["plot", str(out), "--out", str(tmp_path / "t"), "--format", "png"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "t.png")]
    assert (tmp_path / "t.png").stat().st_size > 0
    assert main(["plot", str(out / "sensitivity.json"), "--format", "png"]) == 0
    assert (out / "figures" / "tornado.png").stat().st_size > 0
    # one figure only; a damaged result is one line
    assert main(["plot", str(out), "--figure", "fig1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--figure" in err[0] and "tornado" in err[0]
    (out / "sensitivity.json").write_text('{"designs": []}')
    assert main(["plot", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a sensitivity result" in err[0]


@pytest.mark.parametrize("ranges, extra, msg", [
    ({"cpu.dram_GBps": [-1, 5]}, [], "hardware.ranges.cpu.dram_GBps"),
    ({"cpu.dram_GBps": [5, 1]}, [], "hardware.ranges.cpu.dram_GBps"),
    ({"cpu.nope": [1, 2]}, [], "hardware.ranges.cpu.nope"),
    ({"name": [1, 2]}, [], "hardware.ranges.name"),
    ("no preset", [], "hardware.ranges"),
    (None, ["--samples", "-1"], "--samples"),
    (None, ["--set", "hardware.preset=/no/such/preset.yaml"], "preset.yaml"),
])
def test_bad_input_is_one_line(ranges, extra, msg, tmp_path, capsys):
    d = copy.deepcopy(BASE)
    if ranges == "no preset":  # schema defaults: no ranges at all
        d["hardware"] = {}
    elif ranges is not None:
        d["hardware"]["ranges"] = ranges
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    assert main(["sensitivity", str(p), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0]


def test_out_that_is_a_file_is_one_line(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(BASE))
    (tmp_path / "taken").write_text("a file")
    assert main(["sensitivity", str(p), "--samples", "0", "--out",
                 str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0]
