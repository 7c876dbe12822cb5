"""The TBE batch sweep (`cuda/tbe_batch_sweep.py`): its least-squares fit against closed
forms, its report, its argument checks (one line, exit 2), and its GPU loop end to end under
the CUDA simulator (the forward exact against numpy). No timing is checked: the simulator
gives none."""

import dataclasses
import importlib.util
import json
import math

import numpy as np
import pytest
from cuda_subprocess_checks import check_ptx, refuses_without_gpu

from scratchpipe_sim.cuda import runtime

if importlib.util.find_spec("numba_cuda") is None:
    pytest.skip("numba-cuda is not installed (pip install -e '.[test]' brings it)",
                allow_module_level=True)

# as in test_cuda_published_shapes: the simulator must be on before numba.cuda is imported
SIM = runtime.try_use_simulator()

from scratchpipe_sim.cuda import tbe_backward_plan as BP  # noqa: E402
from scratchpipe_sim.cuda import tbe_batch_sweep as W  # noqa: E402
from scratchpipe_sim.errors import UserError  # noqa: E402

cuda = runtime.cuda()
TINY = ["--tables", "2", "--rows", "8", "--dim", "8", "--batches", "4,8", "--iters", "1",
        "--warmup", "0", "--id-batches", "1"]


# ---- the fit: closed forms ---------------------------------------------------------------

def test_fit_of_an_exact_line_returns_it():
    x = [1024, 4096, 16384, 65536, 262144]
    f = W.fit_line(x, [12.0 + 0.003 * v for v in x])
    assert f.intercept_us == pytest.approx(12.0, abs=1e-9)
    assert f.slope_us_per_lookup == pytest.approx(0.003, rel=1e-12)
    assert f.slope_ns_per_lookup == pytest.approx(3.0, rel=1e-12)
    assert max(map(abs, f.residuals_us)) < 1e-9
    assert f.intercept_se_us == pytest.approx(0.0, abs=1e-9)
    assert f.lookups == tuple(x)


def test_fit_of_known_points_matches_the_closed_form():
    # x = 0, 1, 2; y = 1, 3, 2: slope = Sxy / Sxx = 1 / 2, intercept = 2 - 0.5 * 1 = 1.5,
    # residuals -0.5, 1, -0.5; s^2 = 1.5 / (3 - 2), se^2 = s^2 (1/3 + 1^2 / 2) = 1.25
    f = W.fit_line([0, 1, 2], [1.0, 3.0, 2.0])
    assert (f.intercept_us, f.slope_us_per_lookup) == pytest.approx((1.5, 0.5))
    assert f.residuals_us == pytest.approx((-0.5, 1.0, -0.5))
    assert f.intercept_se_us == pytest.approx(math.sqrt(1.25))
    two = W.fit_line([10, 30], [5.0, 9.0])  # a line through two points, no s.e.
    assert (two.intercept_us, two.slope_us_per_lookup, two.intercept_se_us) == \
        pytest.approx((3.0, 0.2, None))


def test_fit_refuses_fewer_than_two_distinct_batch_sizes():
    for x in ([], [256], [256, 256, 256]):
        with pytest.raises(ValueError, match="2 distinct"):
            W.fit_line(x, [1.0] * len(x))


def _point(placement, batch, gpu_us, host_us, model_us):
    h = host_us / 1e3
    ph = {"gpu_ms": [gpu_us / 1e3] * 3, "queued_ms": [], "host_ms": [h, 1e3, h],
          "launch_ms": [host_us / 2e3], "model_ms": model_us / 1e3}
    return {"placement": placement, "batch": batch, "lookups": 4 * batch,
            "phases": {"forward": dict(ph), "backward": dict(ph)}}


def test_series_fits_and_reading_on_synthetic_points():
    """A GPU time of 80 us + 2 ns/lookup reads as a per-call GPU cost; host 30 + ... as
    nothing on the host; the model's exact line has intercept 0. The host's median ignores
    the one slow sample; a series with no samples has no fit, and says why."""
    pts = [_point("DEVICE", b, 80 + 0.002 * 4 * b, 30 + 0.001 * 4 * b, 0.0015 * 4 * b)
           for b in (256, 1024, 4096)]
    pts.append({"placement": "DEVICE", "batch": 99, "error": "boom"})
    fits = {(r["phase"], r["series"]): r for r in W.fit_series(pts)}
    assert len(fits) == 2 * len(W.SERIES)
    g = fits["forward", "gpu"]["fit"]
    assert g["intercept_us"] == pytest.approx(80) and g["slope_ns_per_lookup"] == \
        pytest.approx(2.0)
    host = fits["forward", "host"]["fit"]
    assert host["intercept_us"] == pytest.approx(30)  # the median of [t, 1 s, t]
    assert fits["forward", "model"]["fit"]["intercept_us"] == pytest.approx(0, abs=1e-9)
    assert fits["backward", "queued"]["fit"] is None
    assert "no samples" in fits["backward", "queued"]["why"]
    one = W.fit_series([_point("MANAGED", 256, 1, 1, 1), _point("MANAGED", 256, 2, 2, 2)])
    assert all(r["fit"] is None and "2 distinct" in r["why"] for r in one
               if r["series"] != "queued")
    assert "per-call GPU cost" in W.reading(g, host)
    low = dict(g, intercept_us=10.0)
    assert "host time" in W.reading(low, dict(host, intercept_us=300.0))
    assert "no fixed cost" in W.reading(low, host)
    assert "nothing to read" in W.reading(None, host)


def test_markdown_has_every_point_fit_and_reading():
    pts = [_point(p, b, 80 + b, 30, b) for p in ("DEVICE", "MANAGED") for b in (256, 1024)]
    doc = {"device": "nowhere", "tables": 4, "rows_per_table": 100_000, "dim": 128,
           "pooling": 1, "alpha": 1.05, "iters": 3, "warmup": 1, "preset": "h200-gen5",
           "points": pts}
    pts[1]["queued_ahead"] = False
    doc["fits"] = W.fit_series(pts)
    md = W.markdown(doc)
    assert "ended before the last phase was queued at: DEVICE 1,024;" in md
    assert "| MANAGED | backward | 1,024 | 4,096 |" in md
    assert "| DEVICE | forward | gpu | 80.0 | - | 250.0000 | 0.0, 0.0 |" in md  # 80 + b us
    assert md.count("- DEVICE") == 2 and md.count("- MANAGED") == 2
    assert "the model's intercept 0.0 us" in md


# ---- the arguments: one line, exit 2 -----------------------------------------------------

def test_batches_are_parsed_and_checked():
    assert W.parse_batches("1024,256,1024") == (256, 1024)
    for text, what in (("256,0", "> 0"), ("256,-4", "> 0"), ("256,1.5", "integers"),
                       ("256,x", "integers"), ("", "integers"), ("512", "2 distinct"),
                       ("512,512", "2 distinct")):
        with pytest.raises(UserError, match=what) as e:
            W.parse_batches(text)
        assert e.value.field == "--batches"


@pytest.mark.parametrize("argv,needle", [
    (["--batches", "256,0"], "--batches"), (["--batches", "256,1e3"], "--batches"),
    (["--batches", "256"], "2 distinct"), (["--tables", "0"], "--tables"),
    (["--warmup", "-1"], "--warmup"), (["--iters", "x"], "invalid int"),
    (["--preset", "h100"], "did you mean"), (["--rows", str(2**31)], "int32"),
])
def test_cli_refuses_bad_arguments_in_one_line(argv, needle, tmp_path, capsys):
    assert W.main(["--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert err.startswith("tbe_batch_sweep: ")
    assert not (tmp_path / "o").exists()


def test_a_managed_table_over_host_memory_is_refused(monkeypatch, tmp_path, capsys):
    # 4 x 100,000 x 128 x 4 B = 204.8 MB; 80% of 100 MB is far too little
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", str(100_000_000))
    assert W.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "MANAGED table" in err and "--rows" in err
    W.parse_args(["--out", str(tmp_path), "--placements", "DEVICE"])  # HBM only: no check


@pytest.mark.skipif("runtime.gpu_status().usable and not SIM",
                    reason="checks the no-GPU refusal")
def test_cli_without_gpu_exits_2_with_one_line(tmp_path):
    refuses_without_gpu("tbe_batch_sweep", [*TINY], tmp_path / "o")


# ---- the GPU loop under the simulator ----------------------------------------------------

def test_loops_forward_exact_and_backward_sgd():
    """One host-synced iteration: the forward's output is table[ids] exactly (read before
    the backward changed the table), then every looked-up row is w - lr * sum g."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal((100, 8)).astype(np.float32)
    ids = rng.integers(0, 100, 40)
    ids[:9] = 3  # a hot row
    d_table = cuda.to_device(table)
    p = W.prepare(d_table, [ids], 8, 0.1, cuda.stream())
    synced = W.time_synced(p, iters=1, warmup=0)
    assert np.array_equal(p.emb.copy_to_host(), table[ids])
    grad = p.grad.copy_to_host()
    g = np.zeros((100, 8))
    np.add.at(g, ids, grad.astype(np.float64))
    np.testing.assert_allclose(d_table.copy_to_host(), (table - 0.1 * g).astype(np.float32),
                               rtol=1e-6, atol=1e-6)
    assert all(v == [] for v in synced.values())  # the simulator's run is no host time
    blocked = W.time_blocked(p, iters=1, warmup=0, wait_ns=W.block_ns(synced, 1))
    assert (blocked["forward_gpu"], blocked["queued_ahead"]) == ([], None)
    assert W.block_ns({"forward_launch": [0.05], "backward_launch": [0.15]}, 10) == \
        int((3 * 10 * 0.2 + 2.0) * 1e6)
    assert BP.plan_backward(ids).unique_rows == len(np.unique(ids))


def test_sweep_end_to_end_under_the_simulator(tmp_path, monkeypatch, capsys):
    """main() with the GPU check passed, on 2 tables x 8 rows, batches 4 and 8: every
    placement x batch x phase is in the JSON with the model's stage; nothing is timed, so
    only the model's series is fitted (two points, no s.e.)."""
    monkeypatch.setattr(W, "gpu_status", lambda: runtime.GpuStatus(True, "simulated GPU"))
    assert W.main(["--out", str(tmp_path), *TINY]) == 0
    doc = json.loads((tmp_path / "tbe_batch_sweep.json").read_text())
    assert doc["device"] == "simulated GPU" and doc["batches"] == [4, 8]
    assert [(p["placement"], p["batch"], p["lookups"]) for p in doc["points"]] == [
        ("DEVICE", 4, 8), ("DEVICE", 8, 16), ("MANAGED", 4, 8), ("MANAGED", 8, 16)]
    for p in doc["points"]:
        assert set(p["phases"]) == {"forward", "backward"}
        for ph in p["phases"].values():
            assert ph["model_ms"] > 0
            assert all(ph[f"{s}_ms"] == [] for s in W.SERIES if s != "model")
        assert len(p["distinct_ids"]) == 1 and p["queued_ahead"] is None
    stages = {p["placement"]: [p["phases"][ph]["model_stage"] for ph in W.PHASES]
              for p in doc["points"]}
    assert stages == {"DEVICE": ["gpu-only stage_gpu_gather", "gpu-only stage_gpu_update"],
                      "MANAGED": ["uvm stage_forward", "uvm stage_backward"]}
    fitted = {(r["placement"], r["phase"], r["series"]) for r in doc["fits"] if r["fit"]}
    assert fitted == {(pl, ph, "model") for pl in ("DEVICE", "MANAGED") for ph in W.PHASES}
    assert all(r["fit"]["intercept_se_us"] is None for r in doc["fits"] if r["fit"])
    md = (tmp_path / "tbe_batch_sweep.md").read_text()
    assert "| MANAGED | backward | 8 | 16 |" in md
    assert md.strip() in capsys.readouterr().out


def test_sweep_shape_keeps_the_placements_design():
    s = W.sweep_shape("MANAGED", 4, 1000, 64, 256)
    assert (s.tables, s.rows_per_table, s.samples_per_table, s.base.dim) == (4, 1000, 256, 64)
    assert s.base.design == "uvm" and s.base.alpha == 1.05


SPIN_PTX = """
import sys
from numba import cuda, int64
from scratchpipe_sim.cuda import tbe_batch_sweep as W
try:
    ptx, _ = cuda.compile_ptx(W.spin_kernel().py_func, (int64, int64[::1]), cc=(9, 0))
except Exception as e:  # no NVVM / NVRTC here: nothing to check
    if "Typing" in type(e).__name__ or "Lowering" in type(e).__name__:
        raise
    print(type(e).__name__, e)
    sys.exit(77)
assert "nanosleep.u32" in ptx
print("ok")
"""


def test_blocking_kernel_compiles_for_sm90_where_nvvm_is_here():
    """The blocking kernel cannot run under the simulator (no nanosleep): type and lower it
    for a real GPU instead (skips without NVVM, as the TBE kernels' check does)."""
    check_ptx(SPIN_PTX)


def test_placements_default_to_both_published_ones():
    a = W.parse_args(["--out", "x"])
    assert a.placements == ["DEVICE", "MANAGED"] and a.batches == W.DEFAULT_BATCHES
    assert (a.tables, a.rows, a.dim, a.pooling, a.preset) == (4, 100_000, 128, 1, "h200-gen5")
    assert dataclasses.is_dataclass(W.LineFit)


def test_pooling_reaches_the_model_and_the_ids():
    """--pooling L: L ids per sample and table in the model's config and in the ids timed;
    the published shapes keep pooling 1."""
    from scratchpipe_sim.cuda import tbe_shapes as S

    shape = W.sweep_shape("DEVICE", 2, 50, 8, 4)
    assert S.model_config(shape, 1, "h200-gen5")["model"]["pooling"] == 1
    assert S.model_config(shape, 1, "h200-gen5", pooling=3)["model"]["pooling"] == 3
    ids, pred = S.predict(shape, 1, "h200-gen5", pooling=3)
    assert len(ids) == 1 and len(ids[0]) == 2 * 4 * 3
    assert ids[0][:12].max() < 50 <= ids[0][12:].min()  # table 1's ids after table 0's
    assert pred["forward"] > 0 and pred["backward"] > 0
