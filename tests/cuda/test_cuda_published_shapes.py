"""The published-shapes kernels under the CUDA simulator (exact against numpy), the host
sort plan, the model config of a shape, and the CLI's one-line refusal without a GPU.
No timing is checked: the simulator gives none."""

import dataclasses
import importlib.util
import json

import numpy as np
import pytest
from cuda_subprocess_checks import check_ptx, refuses_without_gpu

from scratchpipe_sim.cuda import runtime

if importlib.util.find_spec("numba_cuda") is None:
    pytest.skip("numba-cuda is not installed (pip install -e '.[test]' brings it)",
                allow_module_level=True)

# as in test_cuda_pipeline: the simulator must be on before numba.cuda is imported here
SIM = runtime.try_use_simulator()

from scratchpipe_sim.cuda import published_shapes as P  # noqa: E402
from scratchpipe_sim.cuda import tbe_backward_plan as BP  # noqa: E402
from scratchpipe_sim.cuda import tbe_kernels as K  # noqa: E402
from scratchpipe_sim.cuda import tbe_measure as M  # noqa: E402
from scratchpipe_sim.cuda import tbe_shapes as S  # noqa: E402
from scratchpipe_sim.cuda import tbe_tables as TT  # noqa: E402

cuda = runtime.cuda()
T, ROWS, D, N = 3, 50, 8, 64
LR = 0.1


def _ids(seed: int = 0) -> np.ndarray:
    """64 linear ids over 3 x 50 rows: a few hot rows (one looked up 12 times), the rest
    spread, so both the short-segment and the chunked long-segment paths run."""
    rng = np.random.default_rng(seed)
    ids = np.concatenate([rng.integers(0, 4, 20), np.full(12, 77),
                          rng.integers(0, T * ROWS, N - 32)])
    return rng.permutation(ids)


def _sgd_reference(table: np.ndarray, ids: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """EXACT_SGD as FBGEMM applies it: per unique row, w -= lr * (sum of its grad rows)."""
    g = np.zeros_like(table, dtype=np.float64)
    np.add.at(g, ids, grad.astype(np.float64))
    return (table - LR * g).astype(np.float32)


def test_forward_rows_equal_table_rows():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((T * ROWS, D)).astype(np.float32)
    ids = _ids()
    out = cuda.device_array((N, D), np.float32)
    K.forward(cuda.to_device(table), cuda.to_device(ids.astype(np.int32)), out)
    assert np.array_equal(out.copy_to_host(), table[ids])


@pytest.mark.parametrize("chunk_rows", [4, 32])
def test_backward_sgd_matches_numpy(chunk_rows):
    rng = np.random.default_rng(2)
    table = rng.standard_normal((T * ROWS, D)).astype(np.float32)
    grad = rng.standard_normal((N, D)).astype(np.float32)
    ids = _ids(3)
    plan = BP.plan_backward(ids, chunk_rows)
    if chunk_rows == 4:
        assert len(plan.long_rows) >= 2 and len(plan.chunk_lo) > len(plan.long_rows)
    else:
        assert len(plan.long_rows) == 0
    d_table = cuda.to_device(table)
    K.backward_sgd(d_table, cuda.to_device(grad), BP.DevicePlan(plan, D), LR)
    got = d_table.copy_to_host()
    np.testing.assert_allclose(got, _sgd_reference(table, ids, grad), rtol=1e-6, atol=1e-6)
    untouched = np.setdiff1d(np.arange(T * ROWS), ids)
    assert len(untouched) > 0
    assert np.array_equal(got[untouched], table[untouched])


def test_plan_covers_every_lookup_once():
    ids = _ids(4)
    plan = BP.plan_backward(ids, 4)
    assert plan.unique_rows == len(np.unique(ids))
    assert np.array_equal(np.sort(plan.order), np.arange(N))
    ranges = [(lo, hi, r) for lo, hi, r in zip(plan.short_lo, plan.short_hi, plan.short_rows,
                                                strict=True)]
    for u, r in enumerate(plan.long_rows):
        for k in range(plan.long_chunk_ptr[u], plan.long_chunk_ptr[u + 1]):
            assert plan.chunk_hi[k] - plan.chunk_lo[k] <= 4
            ranges.append((plan.chunk_lo[k], plan.chunk_hi[k], r))
    covered = np.zeros(N, int)
    for lo, hi, r in ranges:
        covered[lo:hi] += 1
        assert (ids[plan.order[lo:hi]] == r).all()
    assert (covered == 1).all()
    empty = BP.plan_backward(np.zeros(0, np.int64))
    assert empty.unique_rows == 0 and len(empty.order) == 0


@pytest.mark.parametrize("placement,alloc", [("DEVICE", "managed"), ("MANAGED", "managed"),
                                             ("MANAGED", "mapped")])
def test_measure_path_runs(placement, alloc):
    """The CLI's measurement loop on a tiny shape: placement, plans, warm-up and timed
    iterations run (the kernels' numbers are checked above; the simulator has no timing)."""
    base = dataclasses.replace(S.published()[placement], rows_per_table=ROWS,
                               samples_per_table=20, dim=D)
    shape = S.RunShape(base, T, 1.0)
    rng = np.random.default_rng(5)
    batches = [rng.integers(0, T * ROWS, shape.lookups) for _ in range(2)]
    times = M.measure(shape, batches, iters=2, warmup_iters=1, lr=LR, alloc=alloc)
    assert times.forward_ms == [] and times.backward_ms == []
    assert times.distinct_ids == [len(np.unique(b)) for b in batches]
    assert len(times.host_sort_ms) == 2
    assert ("simulator" in times.placed) == (placement == "MANAGED")


def test_allocated_table_holds_value_and_kernels_update_it():
    t, how = TT.allocate_table(ROWS, D, "MANAGED", "managed", value=0.5)
    assert "simulator" in how
    ids = _ids(6) % ROWS
    grad = np.ones((N, D), np.float32)
    K.backward_sgd(t, cuda.to_device(grad), BP.DevicePlan(BP.plan_backward(ids), D), LR)
    host = t if isinstance(t, np.ndarray) else t.copy_to_host()
    counts = np.bincount(ids, minlength=ROWS).astype(np.float32)
    np.testing.assert_allclose(host, 0.5 - LR * counts[:, None] * np.ones((1, D)), rtol=1e-6)


def test_pattern_twin():
    a = cuda.device_array((9, 40), np.float32)
    K.fill_pattern(a, 1e-3, 0.25)
    assert np.array_equal(a.copy_to_host(), K.pattern(9, 40, 1e-3, 0.25))


def test_model_prediction_uses_the_measured_ids():
    shape = S.RunShape(S.published()["DEVICE"], 2, 1e-4)
    assert (shape.rows_per_table, shape.samples_per_table) == (168, 10)
    ids, pred = S.predict(shape, 3, "h200-gen5")
    assert len(ids) == 3 and all(len(b) == 20 for b in ids)
    assert all(b[:10].max() < 168 <= b[10:].min() for b in ids)  # table 1 after table 0
    assert pred["forward"] > 0 and pred["backward"] > 0
    rows = P.result_rows(shape, None, pred, "h200-gen5")
    assert [r["model"] for r in rows] == ["gpu-only stage_gpu_gather",
                                          "gpu-only stage_gpu_update"]
    assert all(r["measured_ms"] is None and not r["published_shape"] for r in rows)
    md = P.markdown(rows, "nowhere")
    assert "T1.2-like | DEVICE | forward" in md and "0.345" in md


def test_published_defaults():
    dev, man = S.published()["DEVICE"], S.published()["MANAGED"]
    assert (dev.tables, dev.rows_per_table, dev.samples_per_table, dev.dim) == \
        (10, 1_677_721, 104_857, 128)
    assert man.rows_per_table == 26_843_545
    assert S.RunShape(dev, 10, 1.0).lookups == 1_048_570
    assert S.RunShape(dev, 10, 1.0).is_published and not S.RunShape(man, 2, 1.0).is_published


def test_published_shapes_are_the_data_files_points():
    """Each placement's shape is its point of the shipped data file (one source), with its
    design's declared stage per phase."""
    from scratchpipe_sim.config.published_points import load_points
    from scratchpipe_sim.timing.designs import DESIGNS

    points = {p.id: p for p in load_points()}
    for placement, shape in S.published().items():
        pt = points[S.PLACEMENT_POINTS[placement]]
        assert (shape.point, shape.placement, shape.design) == (pt.id, pt.placement, pt.design)
        assert (shape.tables, shape.rows_per_table, shape.samples_per_table, shape.dim) == \
            (pt.model.tables, pt.model.rows_per_table, pt.model.batch_size, pt.model.dim)
        assert (shape.forward_ms, shape.backward_ms) == (pt.measured_ms.forward,
                                                         pt.measured_ms.backward)
        assert shape.alpha == pt.trace.alpha
        assert shape.distinct_ids_per_iter == pt.trace.distinct_ids_per_iter
        declared = DESIGNS.get(pt.design).phase_stages
        assert shape.stages == (*declared["forward"], *declared["backward"])


def test_managed_table_over_the_memory_guards_budget_is_refused(monkeypatch):
    """The MANAGED table's check is the memory guard's: SCRATCHPIPE_MEMORY_BYTES caps it."""
    from scratchpipe_sim.errors import UserError

    shape = S.RunShape(S.published()["MANAGED"], 1, 1e-3)  # 26,844 rows x 512 B
    need = shape.table_bytes
    assert need == 26_844 * 128 * 4
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", str(need))  # 80% of it: too little
    with pytest.raises(UserError, match="MANAGED table"):
        S.check_host_memory(shape)
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", str(int(need / 0.8) + 1))
    S.check_host_memory(shape)


@pytest.mark.skipif("runtime.gpu_status().usable and not SIM",
                    reason="checks the no-GPU refusal")
def test_cli_without_gpu_exits_2_with_one_line(tmp_path):
    refuses_without_gpu("published_shapes", ["--scale", "0.001"], tmp_path / "o")


def test_cli_end_to_end_under_the_simulator(tmp_path, monkeypatch, capsys):
    """main() with the GPU check passed: JSON rows and the markdown table are written; the
    simulator measures nothing, so measured_ms is null and the prediction is there."""
    monkeypatch.setattr(P, "gpu_status", lambda: runtime.GpuStatus(True, "simulated GPU"))
    rc = P.main(["--out", str(tmp_path), "--scale", "1e-5", "--iters", "2",
                 "--warmup-iters", "0", "--id-batches", "2", "--device-tables", "2",
                 "--placements", "DEVICE"])
    assert rc == 0
    doc = json.loads((tmp_path / "published_shapes.json").read_text())
    assert doc["scale"] == 1e-5 and doc["device"] == "simulated GPU"
    assert [(r["placement"], r["phase"]) for r in doc["rows"]] == [("DEVICE", "forward"),
                                                                   ("DEVICE", "backward")]
    assert all(r["measured_ms"] is None and r["predicted_ms"] > 0 for r in doc["rows"])
    assert doc["rows"][0]["lookups"] == 2 and doc["rows"][0]["rows_per_table"] == 17
    md = (tmp_path / "published_shapes.md").read_text()
    assert "| T1.2-like | DEVICE | backward |" in md and md.strip() in capsys.readouterr().out


def test_cli_rejects_bad_arguments(capsys):
    for argv in (["--out", "x", "--scale", "2"], ["--out", "x", "--iters", "0"]):
        with pytest.raises(SystemExit) as e:
            P.main(argv)
        assert e.value.code == 2
    assert "expected" in capsys.readouterr().err


@pytest.mark.skipif("runtime._driver_present()", reason="checks the no-driver fallback")
def test_advice_without_a_driver_says_why():
    assert "not found" in TT._advise_host_resident(0, 0, 0)


PTX_CHECK = """
import sys
from numba import cuda, float32, int32
from scratchpipe_sim.cuda import tbe_kernels
try:
    K = tbe_kernels.kernels()
    f2, i1 = float32[:, ::1], int32[::1]
    sigs = {"gather_unpooled": (f2, i1, f2), "sgd_short": (f2, f2, i1, i1, i1, i1, float32),
            "chunk_sums": (f2, i1, i1, i1, f2), "sgd_long": (f2, f2, i1, i1, float32),
            "fill_pattern": (f2, float32, float32)}
    cuda.compile_ptx(K.gather_unpooled.py_func, sigs["gather_unpooled"], cc=(9, 0))
except Exception as e:  # no NVVM / NVRTC here: nothing to check
    if "Typing" in type(e).__name__ or "Lowering" in type(e).__name__:
        raise
    print(type(e).__name__, e)
    sys.exit(77)
for name, sig in sigs.items():
    cuda.compile_ptx(getattr(K, name).py_func, sig, cc=(9, 0))
print("ok")
"""


def test_kernels_compile_for_sm90_where_nvvm_is_here():
    """The simulator runs the kernels as Python; this types and lowers them for a real GPU
    (numba-cuda + NVVM + NVRTC, no driver needed), which catches what the simulator cannot."""
    check_ptx(PTX_CHECK)
