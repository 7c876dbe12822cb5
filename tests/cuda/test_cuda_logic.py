"""CPU-only logic of `calibrate` and `validate`: fits, preset writer, comparison, CLI paths.

No numba.cuda here: these run on any machine (the GPU measurement itself is in gpu_bench.py).
"""

import csv
import json

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hst
from reference_policies_b import build_trace as ref_trace
from reference_policies_b import multi_table_batches
from reference_scratchpipe_plans import ref_plans

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config
from scratchpipe_sim.config.hardware import HardwareConfig
from scratchpipe_sim.cuda.gpu_preset_fit import Measurements, build_preset, preset_yaml
from scratchpipe_sim.cuda.runtime import gpu_status
from scratchpipe_sim.cuda.scratchpad_plan import ScratchpadState
from scratchpipe_sim.cuda.stage_errors import Row, compare, format_table, measured_stages
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.measure.fitting import efficiency_curve, fit_latency_bandwidth
from scratchpipe_sim.measure.presets import write_preset
from scratchpipe_sim.policies.engine import COUNTERS, iter_cache, make_policy
from scratchpipe_sim.policies.scratchpipe import min_scratchpipe_capacity
from scratchpipe_sim.timing import build_trace, simulate
from scratchpipe_sim.timing.stage_columns import StageNotTimed


def _gpu_here() -> bool:
    return gpu_status().usable


no_gpu = pytest.mark.skipif("_gpu_here()", reason="checks the no-GPU message")

SIZES = np.array([1 << s for s in range(12, 27, 2)], float)


def _samples(lat_ns, gbps, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    t = lat_ns * 1e-9 + SIZES / (gbps * 1e9)
    return t * (1 + noise * rng.uniform(-1, 1, len(t)))


def test_fit_recovers_exact_latency_and_bandwidth():
    f = fit_latency_bandwidth(SIZES, _samples(9000.0, 24.0))
    assert f.latency_ns == pytest.approx(9000.0, rel=1e-6)
    assert f.GBps == pytest.approx(24.0, rel=1e-9)
    assert f.r2 == pytest.approx(1.0)
    assert max(abs(r[3]) for r in f.residuals) < 1e-6
    assert f.predict_s(1e9) == pytest.approx(9e-6 + 1 / 24)


def test_fit_with_noise_stays_close_and_latency_never_negative():
    f = fit_latency_bandwidth(SIZES, _samples(5000.0, 50.0, noise=0.02, seed=3))
    assert f.GBps == pytest.approx(50.0, rel=0.03)
    assert f.latency_ns == pytest.approx(5000.0, rel=0.15)
    # pure bandwidth with a negative intercept by noise: clamped to 0, refit through origin
    t = SIZES / 10e9
    t[0] *= 0.5
    g = fit_latency_bandwidth(SIZES, t)
    assert g.latency_ns == 0.0 and g.GBps == pytest.approx(10.0, rel=1e-3)
    with pytest.raises(UserError, match="two or more sizes"):
        fit_latency_bandwidth(np.array([4096.0]), np.array([1e-5]))
    with pytest.raises(UserError, match="does not grow"):
        fit_latency_bandwidth(SIZES, np.full(len(SIZES), 1e-3)[::-1] - SIZES * 1e-12)


def test_efficiency_curve_sorted_clamped():
    c = efficiency_curve(np.array([256, 64, 128]), np.array([1500.0, 600.0, 5000.0]), 3000.0)
    assert c == ((64.0, 0.2), (128.0, 1.0), (256.0, 0.5))


def _measurements():
    h2d = [(float(s), float(t)) for s, t in zip(SIZES, _samples(8000.0, 25.0), strict=True)]
    d2h = [(float(s), float(t)) for s, t in zip(SIZES, _samples(12000.0, 40.0), strict=True)]
    return Measurements(device="Test GPU", h2d=h2d, d2h=d2h, duplex_GBps=(20.0, 30.0),
                        hbm_stream_GBps=4000.0,
                        hbm_gather=[(64.0, 1200.0), (128.0, 2000.0), (256.0, 2800.0)],
                        hbm_gather_hot=[(64.0, 3000.0)], dram_stream_GBps=200.0,
                        dram_gather=[(64.0, 40.0), (256.0, 100.0)], cores=16,
                        dram_gather_1core_GBps=3.5, gemm_tflops=12.5, kernel_launch_ns=3200.0)


def test_preset_has_measured_values_and_loads(tmp_path):
    m = _measurements()
    cal = build_preset(m, HardwareConfig(), "measured-test")
    p = cal.preset
    assert p["pcie"]["h2d_GBps"] == pytest.approx(25.0, abs=1e-3)
    assert p["pcie"]["d2h_GBps"] == pytest.approx(40.0, abs=1e-3)
    assert p["pcie"]["latency_ns"] == pytest.approx(10000.0, abs=0.1)  # mean of 8000, 12000
    assert p["gpu"]["gather_efficiency"] == [[64.0, 0.3], [128.0, 0.5], [256.0, 0.7]]
    assert p["cpu"]["gather_efficiency"] == [[64.0, 0.2], [256.0, 0.5]]
    assert p["gpu"]["tflops"] == 12.5 and p["cpu"]["cores"] == 16
    assert p["gpu"]["hbm_capacity_GiB"] == HardwareConfig().gpu.hbm_capacity_GiB  # not measured
    assert "gpu.hbm_capacity_GiB" not in cal.measured_keys
    out = tmp_path / "hw" / "measured-test.yaml"
    write_preset(out, preset_yaml(cal, m, "schema defaults"))
    text = out.read_text()
    assert text.startswith("# Measured by `scratchpipe-sim calibrate` on Test GPU")
    hw = load_config({"hardware": {"preset": str(out)}}).hardware
    assert hw.name == "measured-test"
    assert hw.pcie.d2h_GBps == pytest.approx(40.0, abs=1e-3)
    assert hw.pcie.duplex_h2d_GBps == 20.0
    assert hw.gpu.gather_efficiency == ((64.0, 0.3), (128.0, 0.5), (256.0, 0.7))
    assert hw.gpu.kernel_launch_ns == 3200.0 and hw.cpu.embedding_op_GBps == 3.5


def test_cli_calibrate_from_json_writes_a_loadable_preset(tmp_path, capsys):
    src = tmp_path / "meas.json"
    src.write_text(_measurements().to_json())
    out = tmp_path / "measured-x.yaml"
    assert main(["calibrate", "--from-json", str(src), "--out", str(out),
                 "--base", "h200-gen5", "--name", "measured-x"]) == 0
    printed = capsys.readouterr().out
    assert "h2d: latency 8000 ns, 25.00 GB/s" in printed and f"wrote {out}" in printed
    cfg = load_config({"hardware": {"preset": str(out)}})
    assert cfg.hardware.gpu.hbm_capacity_GiB == 139.0  # from the base preset
    assert cfg.hardware.gpu.hbm_GBps == 4000.0  # measured
    assert yaml.safe_load(out.read_text())["name"] == "measured-x"


@pytest.mark.parametrize("argv, msg", [
    (["calibrate", "--from-json", "nope.json"], "nope.json: --from-json: no such JSON file"),
    (["calibrate", "--base", "h200-gne5", "--from-json", "x"], "did you mean 'h200-gen5'"),
    pytest.param(["calibrate"], "needs an NVIDIA GPU", marks=no_gpu),
])
def test_cli_calibrate_errors_are_one_line(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_calibrate_rejects_unknown_measurement_keys(tmp_path, capsys):
    src = tmp_path / "m.json"
    src.write_text(json.dumps({"device": "x", "h2d_gbps": 3}))
    assert main(["calibrate", "--from-json", str(src), "--out", str(tmp_path / "o.yaml")]) == 2
    assert "unknown measurement keys ['h2d_gbps']" in capsys.readouterr().err


def test_measured_stages_maps_pipeline_timers_to_model_stages():
    st = {"plan": [9.0, 1e-6, 3e-6], "collect": [9.0, 2e-6, 4e-6],
          "h2d": [None, 5e-6, 1e-6], "d2h": [None, 2e-6, 7e-6],
          "insert": [None, 1e-6, 1e-6], "writeback": [9.0, 3e-6, 0.0],
          "train": [None, 10e-6, 20e-6]}
    m = measured_stages(st, [None, 30e-6, 50e-6], warmup=1)
    assert m["plan"] == pytest.approx(2000.0)
    assert m["exchange"] == pytest.approx(6000.0)  # mean(max(5,2), max(1,7)) us
    assert m["insert"] == pytest.approx(2000.0)  # mean(max(1,3), max(1,0))
    assert m["train"] == pytest.approx(15000.0) and m["iteration"] == pytest.approx(40000.0)
    sim_only = measured_stages({k: [None, None] if k in ("h2d", "d2h", "insert", "train")
                                else [1e-6, 1e-6] for k in st}, [None, None], warmup=0)
    assert set(sim_only) == {"plan", "collect", "insert"}  # no GPU timing, no GPU stage


def test_compare_error_percent_and_targets():
    pred = {"design": "scratchpipe", "stage_plan_ns": 110.0, "stage_train_ns": 50.0,
            "iter_ns_mean": 230.0}
    rows = compare(pred, {"plan": 100.0, "train": 100.0, "iteration": 200.0})
    assert [r.item for r in rows] == ["plan", "train", "iteration"]
    assert rows[0].error_pct == pytest.approx(10.0) and rows[0].ok
    assert rows[1].error_pct == pytest.approx(-50.0) and not rows[1].ok
    assert rows[2].error_pct == pytest.approx(15.0) and rows[2].ok  # e2e target is 15%
    assert Row("x", 1.0, 0.0, 10).error_pct == float("inf")
    table = format_table(rows)
    assert "plan" in table and "+10.0" in table and "NO" in table
    # a measured stage the prediction did not time (a renamed stage): an error, not skipped
    with pytest.raises(StageNotTimed, match="design 'scratchpipe' timed no stage 'collect'"):
        compare(pred, {"plan": 100.0, "collect": 5.0})


SMALL = {
    "name": "tiny",
    "seed": 2,
    "hardware": {"preset": "h200-gen5"},
    "model": {
        "tables": {"count": 2, "rows": 500, "dim": 16},
        "pooling": 2,
        "batch_size": 32,
        "bottom_mlp": [4, 8],
        "interaction": "cat",
        "top_mlp": [40, 1],
        "num_batches": 12,
        "warmup_batches": 2,
    },
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 600},
    "design_params": {
        "scratchpipe": {
            "lookahead": 3,
            "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]],
        }
    },
    "designs": ["scratchpipe"],
}


def test_cli_validate_with_saved_measurements(tmp_path, capsys):
    cfgp = tmp_path / "tiny.yaml"
    cfgp.write_text(yaml.safe_dump(SMALL))
    meas = {"plan": 20000.0, "collect": 15000.0, "exchange": 30000.0, "insert": 5000.0,
            "train": 40000.0, "iteration": 60000.0}
    mp = tmp_path / "m.json"
    mp.write_text(json.dumps({"measured_ns": meas, "meta": {"device": "H200 (test)"}}))
    out = tmp_path / "v.csv"
    assert main(["validate", str(cfgp), "--measured", str(mp), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "validate tiny on H200 (test)" in printed and "iteration" in printed
    cfg = load_config(cfgp)
    pred = simulate(cfg, ["scratchpipe"], trace=build_trace(cfg))[0]  # independent run
    with open(out) as f:
        got = {r["stage"]: r for r in csv.DictReader(f)}
    assert set(got) == set(meas)
    for st, m in meas.items():
        p = pred["iter_ns_mean"] if st == "iteration" else pred[f"stage_{st}_ns"]
        assert float(got[st]["predicted_ns"]) == pytest.approx(p, abs=0.1)
        assert float(got[st]["error_pct"]) == pytest.approx((p - m) / m * 100, abs=0.01)
        assert got[st]["device"] == "H200 (test)"


def test_cli_validate_errors_are_one_line(tmp_path, capsys):
    cfgp = tmp_path / "tiny.yaml"
    cfgp.write_text(yaml.safe_dump(SMALL))
    bad = dict(SMALL, cache={"capacity_rows": 600},
               design_params={"scratchpipe": {"lookahead": 1,  # one stage group
                                              "pipeline": [["plan", "collect", "exchange",
                                                            "insert", "train"]]}})
    badp = tmp_path / "bad.yaml"
    badp.write_text(yaml.safe_dump(bad))
    fp16 = tmp_path / "fp16.yaml"
    fp16.write_text(yaml.safe_dump(SMALL))
    cases = [] if _gpu_here() else [(["validate", str(cfgp)], "needs an NVIDIA GPU")]
    cases += [
        (
            ["validate", str(badp)],
            "design_params.scratchpipe.lookahead: the reference pipeline needs",
        ),
        (
            ["validate", str(fp16), "--set", "model.tables.bytes_per_element=2"],
            "model.tables.bytes_per_element",
        ),
        (["validate", str(cfgp), "--measured", str(tmp_path / "none.json")], "no such JSON file"),
        (["validate", str(tmp_path / "missing.yaml")], "no such config file"),
    ]
    (tmp_path / "j.json").write_text('{"measured_ns": {"plan": -1}}')
    cases.append((["validate", str(cfgp), "--measured", str(tmp_path / "j.json")],
                  "measured_ns.plan"))
    for argv, msg in cases:
        assert main(argv + ["--out", str(tmp_path / "o.csv")]) == 2, argv
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)


@no_gpu
def test_no_gpu_status_has_a_reason_and_keeps_numba_cuda_unimported():
    import sys

    st = gpu_status()
    assert not st.usable and st.reason
    if "numba.cuda" not in sys.modules:  # asked without importing it (simulator still possible)
        gpu_status()
        assert "numba.cuda" not in sys.modules


@pytest.mark.skipif("not _gpu_here()", reason="needs a real NVIDIA GPU for event timing")
def test_pcie_microbenchmark_times_grow_with_size_on_a_gpu():
    from scratchpipe_sim.cuda import gpu_bench as bench

    m = Measurements()
    bench.measure_pcie(m, bench.BenchSizes(pcie_bytes=(1 << 16, 1 << 22, 1 << 26), reps=3))
    assert len(m.h2d) == 3 and len(m.d2h) == 3
    f = fit_latency_bandwidth(*np.array(m.h2d).T)
    assert 1.0 < f.GBps < 200.0 and f.r2 > 0.9


# -- one planner: the reference path plans with the simulator's policy ---------------------------
@settings(max_examples=80, deadline=None)
@given(data=hst.data())
def test_reference_planner_gives_the_policys_fills_and_victims(data):
    """The CUDA path's planner (cuda/scratchpad_plan.py, one batch at a time) against the rules of
    docs/policies.md in pure Python (tests/reference_scratchpipe_plans.py) and the
    `scratchpipe` policy run by the engine in chunks: identical fills and victims per batch,
    at the capacity floor and above."""
    per_batch, rows = multi_table_batches(data.draw, hst)
    w = data.draw(hst.integers(1, 4))
    trace, ids, ptr = ref_trace(per_batch, rows)
    floor = min_scratchpipe_capacity(trace, w)
    cap = floor + data.draw(hst.sampled_from([0, 0, 1, 4]))
    _, victims, fills = ref_plans(ids, ptr, cap, w)
    planner = ScratchpadState(trace, cap, w)
    pol = make_policy("scratchpipe", cap, trace.total_rows, lookahead=w)
    counts = np.concatenate([bc.counts for bc in iter_cache(trace, pol,
                                                            data.draw(hst.integers(1, 30)))])
    for k in range(trace.num_batches):
        p = planner.plan(k)
        assert p.miss_rows.tolist() == fills[k]  # in first-access order
        assert sorted(p.victim_rows.tolist()) == sorted(victims[k])
        assert counts[k, COUNTERS.index("fills")] == len(p.miss_rows)
        assert counts[k, COUNTERS.index("evictions")] == len(p.victim_rows)
        slot_of = dict(zip(p.uniq.tolist(), p.uslots.tolist(), strict=True))
        for r, s in zip(p.victim_rows.tolist(), p.victim_slots.tolist(), strict=True):
            assert r not in slot_of and s in p.miss_slots.tolist()
    assert sorted(planner.resident()[0].tolist()) == pol.resident().tolist()
    assert planner.train_misses == 0
