"""Reference CUDA path under the CUDA simulator: kernels vs numpy, the ScratchPipe pipeline
vs the numpy training reference, and the two pipeline hazards (naive orderings corrupt)."""

import importlib.util

import numpy as np
import pytest

from scratchpipe_sim.cuda import runtime

# The kernels target the numba-cuda package (extra [cuda], also in [test]); numba's own
# deprecated numba.cuda has a different simulator (timings 0.0, other scheduling).
if importlib.util.find_spec("numba_cuda") is None:
    pytest.skip("numba-cuda is not installed (pip install -e '.[test]' brings it)",
                allow_module_level=True)

# The simulator must be switched on before numba.cuda is imported in this process. If an
# earlier test imported it for a real GPU, the numeric tests run on that GPU instead and
# the two naive-ordering tests (deterministic only in the simulator's issue order) skip.
SIM = runtime.try_use_simulator()
# the simulator runs the target hash with numpy scalars, which warn on (intended) wraparound
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
needs_sim = pytest.mark.skipif(not SIM, reason="races are deterministic only in the simulator")


from scratchpipe_sim.cuda import gpu_kernels as K  # noqa: E402
from scratchpipe_sim.cuda.pipeline import (  # noqa: E402
    PipelineOptions,
    ScratchPipeReference,
    train_on_gpu,
)
from scratchpipe_sim.cuda.scratchpad_plan import ScratchpadState  # noqa: E402
from scratchpipe_sim.cuda.training import (  # noqa: E402
    BatchIds,
    TrainSpec,
    batch_target,
    initial_table,
    reference_step,
    reference_train,
    trace_batches,
)
from scratchpipe_sim.errors import UserError  # noqa: E402
from scratchpipe_sim.traces.csr_trace import Trace  # noqa: E402

cuda = runtime.cuda()


def _multi_table_trace(seed: int = 3, batches: int = 6) -> Trace:
    rng = np.random.default_rng(seed)
    per = [[rng.integers(0, 12, 5), rng.integers(0, 9, 4)] for _ in range(batches)]
    lens = [[np.array([2, 3]), np.array([1, 3])]] * batches
    return Trace.from_batches(per, [12, 9], pooling_lengths=lens)


def _period3() -> Trace:
    """Batch k = [k % 3, 3 + k]: three rows reused every third batch plus a fresh row each."""
    ids = np.array([v for k in range(8) for v in (k % 3, 3 + k)])
    return Trace.single_table(ids, 11, 2)


@needs_sim
def test_simulator_is_active_and_gives_no_timings():
    assert runtime.is_simulator()
    status = runtime.gpu_status()
    assert not status.usable and "simulator" in status.reason
    timer = runtime.EventTimer().start()
    timer.stop()
    assert timer.elapsed_s() is None


def test_forward_backward_and_updates_match_numpy():
    rng = np.random.default_rng(0)
    dim = 3
    table = rng.standard_normal((6, dim + dim)).astype(np.float32)
    table[:, dim:] = np.abs(table[:, dim:])
    ids = np.array([4, 1, 4, 0, 2], np.int64)
    offsets = np.array([0, 2, 2, 5], np.int64)  # one empty bag
    target = rng.standard_normal((3, dim)).astype(np.float32)
    uniq, inv = np.unique(ids, return_inverse=True)
    d_table = cuda.to_device(table)
    pooled = cuda.device_array((3, dim), np.float32)
    K.launch2(K.bag_forward, 3, dim, 0, cuda.to_device(ids), cuda.to_device(offsets), d_table,
              dim, pooled)
    want = np.stack([table[[4, 1], :dim].sum(0), np.zeros(dim), table[[4, 0, 2], :dim].sum(0)])
    np.testing.assert_allclose(pooled.copy_to_host(), want, rtol=1e-6)
    grad = cuda.device_array((3, dim), np.float32)
    K.launch2(K.pooled_grad, 3, dim, 0, pooled, cuda.to_device(target), grad)
    ug = cuda.device_array((len(uniq), dim), np.float32)
    K.launch2(K.fill_zero, len(uniq), dim, 0, ug)
    K.launch2(K.bag_backward, 3, dim, 0, cuda.to_device(inv.astype(np.int64)),
              cuda.to_device(offsets), grad, ug)
    g = want - target
    want_ug = np.zeros((len(uniq), dim))
    for j, bag in enumerate([0, 0, 2, 2, 2]):  # row 4 appears twice: gradients add
        want_ug[inv[j]] += g[bag]
    np.testing.assert_allclose(ug.copy_to_host(), want_ug, rtol=1e-5)
    for opt in ("sgd", "rowwise-adagrad", "adagrad"):
        spec = TrainSpec(dim=dim, optimizer=opt, lr=0.1)
        t = table[:, :spec.width].copy()
        ref = t.copy()
        reference_step(ref, BatchIds(ids, offsets), target, spec)
        d = cuda.to_device(t)
        uslots = cuda.to_device(uniq.astype(np.int64))
        if opt == "sgd":
            K.launch2(K.sgd_update, len(uniq), dim, 0, uslots, ug, d, np.float32(0.1))
        elif opt == "rowwise-adagrad":
            K.launch1(K.rowwise_adagrad_update, len(uniq), 0, uslots, ug, d, np.float32(0.1),
                      np.float32(spec.eps))
        else:
            K.launch2(K.adagrad_update, len(uniq), dim, 0, uslots, ug, d, np.float32(0.1),
                      np.float32(spec.eps))
        np.testing.assert_allclose(d.copy_to_host(), ref, rtol=1e-5, atol=1e-6)
        assert not np.allclose(ref, t)  # the step changed something


def test_insert_and_extract_move_whole_rows():
    sp = cuda.to_device(np.zeros((4, 3), np.float32))
    staged = cuda.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    K.launch2(K.scratchpad_insert, 2, 3, 0, staged, cuda.to_device(np.array([3, 1])), sp)
    host = sp.copy_to_host()
    np.testing.assert_array_equal(host[3], [0, 1, 2])
    np.testing.assert_array_equal(host[1], [3, 4, 5])
    np.testing.assert_array_equal(host[[0, 2]], 0)
    out = cuda.device_array((2, 3), np.float32)
    K.launch2(K.scratchpad_extract, 2, 3, 0, sp, cuda.to_device(np.array([1, 3])), out)
    np.testing.assert_array_equal(out.copy_to_host(), [[3, 4, 5], [0, 1, 2]])


@pytest.mark.parametrize("opt, lookahead, capacity, seed, batches", [
    ("sgd", 2, 18, 3, 6), ("rowwise-adagrad", 2, 18, 3, 6), ("adagrad", 2, 18, 3, 6),
    ("sgd", 1, 15, 3, 6),  # planned in the same step as trained: no planner thread
    ("rowwise-adagrad", 3, 19, 5, 10),
])
def test_pipeline_trains_like_the_numpy_reference(opt, lookahead, capacity, seed, batches):
    trace = _multi_table_trace(seed, batches)
    spec = TrainSpec(dim=3, optimizer=opt)
    ref = reference_train(trace, spec)
    # capacity = the largest union of a window (batches k-1 .. k+L-1) of this trace
    res = train_on_gpu(trace, spec, PipelineOptions(capacity_rows=capacity,
                                                    lookahead=lookahead))
    assert res.evictions > 0  # the scratchpad really had to swap rows (21 rows in all)
    np.testing.assert_allclose(res.table, ref, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ref, initial_table(trace.total_rows, spec))
    uniq_total = sum(len(np.unique(b.ids)) for b in trace_batches(trace))
    assert res.hits + res.misses == uniq_total
    if SIM:
        assert all(v is None for v in res.stage_s["train"])  # simulator: no timings reported
    assert len(res.stage_s["collect"]) == trace.num_batches


@needs_sim
def test_refetch_hazard_is_ordered_and_naive_fetch_corrupts():
    """A row evicted by plan(j) and needed again by batch j+1 (L = 2: collected in step j-1,
    written back in step j) is gathered again after its write-back; without that, stale."""
    # batch k = [k % 4, 4 + k % 4]: at the floor (6 rows for W = 3) plan(k) must evict the
    # pair of batch k-3, which batch k+1 needs again
    trace = Trace.single_table(np.array([v for k in range(9) for v in (k % 4, 4 + k % 4)]),
                               8, 2)
    spec = TrainSpec(dim=2)
    ref = reference_train(trace, spec)
    opts = PipelineOptions(capacity_rows=6, lookahead=2)
    pipe = ScratchPipeReference(trace, spec, opts)
    good = pipe.run()
    assert pipe.refetched_late > 0  # the policy did evict rows needed within the window
    np.testing.assert_allclose(good.table, ref, rtol=1e-6, atol=1e-7)
    naive = train_on_gpu(trace, spec, PipelineOptions(capacity_rows=6, lookahead=2,
                                                      order_refetch=False))
    assert naive.misses == good.misses  # same plans: only the order of the gathers differs
    assert np.abs(naive.table - ref).max() > 1e-2


@needs_sim
def test_in_flight_eviction_hazard_naive_window_corrupts():
    """Pinning batch k alone: insert(k) overwrites a row batch k-1 has not trained yet."""
    trace, spec = _period3(), TrainSpec(dim=2)
    ref = reference_train(trace, spec)
    naive = train_on_gpu(trace, spec, PipelineOptions(capacity_rows=4, lookahead=2,
                                                      pin_window=1))
    assert np.abs(naive.table - ref).max() > 1e-2
    with pytest.raises(UserError, match=r"cannot hold the rows of batches 0\.\.2 .*W = 3.*"
                                        r"capacity >= 6"):
        train_on_gpu(trace, spec, PipelineOptions(capacity_rows=4, lookahead=2))


def test_planner_never_evicts_a_row_of_its_window():
    """Oracle: for every plan(k), victims are not in the pinned batches k-W+1 .. k."""
    trace, W = _multi_table_trace(seed=5, batches=10), 3
    batches = trace_batches(trace)
    st = ScratchpadState(trace, 19, W)
    resident: set[int] = set()
    for k, b in enumerate(batches):
        uniq = np.unique(b.ids)
        p = st.plan(k)
        window = set(np.concatenate([batches[j].ids for j in range(max(0, k - W + 1), k + 1)]))
        assert not set(p.victim_rows.tolist()) & window
        assert set(p.miss_rows.tolist()) == set(uniq.tolist()) - resident
        np.testing.assert_array_equal(p.uniq[p.inv], b.ids)
        resident = (resident - set(p.victim_rows.tolist())) | set(uniq.tolist())
        assert len(resident) <= 19
        assert sorted(st.resident()[0].tolist()) == sorted(resident)
        np.testing.assert_array_equal(np.sort(p.uslots), np.sort(np.unique(p.uslots)))
    assert st.train_misses == 0


def test_targets_and_init_are_seeded():
    spec = TrainSpec(dim=2, seed=7)
    np.testing.assert_array_equal(batch_target(3, 4, spec), batch_target(3, 4, spec))
    assert not np.array_equal(batch_target(3, 4, spec), batch_target(4, 4, spec))
    np.testing.assert_array_equal(initial_table(5, spec), initial_table(5, spec))
    with pytest.raises(UserError, match="unknown optimizer"):
        TrainSpec(optimizer="adam")


def test_gemm_kernel_matches_numpy():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 18)).astype(np.float32)  # not a multiple of the tile
    b = rng.standard_normal((18, 3)).astype(np.float32)
    out = cuda.device_array((5, 3), np.float32)
    K.launch_gemm(cuda.to_device(a), cuda.to_device(b), out)
    np.testing.assert_allclose(out.copy_to_host(), a @ b, rtol=1e-5, atol=1e-5)


@needs_sim
def test_microbenchmarks_run_and_report_no_gpu_numbers_in_the_simulator():
    from scratchpipe_sim.cuda import gpu_bench as bench

    m = bench.measure_all(bench.TINY, log=lambda s: None)
    assert m.h2d == [] and m.d2h == [] and m.hbm_gather == [] and m.gemm_tflops is None
    assert m.hbm_stream_GBps is None and m.kernel_launch_ns is None
    assert m.dram_stream_GBps > 0 and len(m.dram_gather) == 2  # host timing is real
    assert m.plan_ns_per_id > 0


@needs_sim
def test_validation_workload_runs_the_config_through_the_pipeline():
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.cuda.gpu_validation import measure_on_gpu, workload_of

    cfg = load_config(
        {
            "seed": 1,
            "hardware": {"preset": "h200-gen5"},
            "model": {
                "tables": {"count": 2, "rows": 40, "dim": 2},
                "pooling": 2,
                "batch_size": 3,
                "bottom_mlp": [2, 3],
                "interaction": "cat",
                "top_mlp": [7, 1],
                "num_batches": 4,
                "warmup_batches": 1,
                "optimizer": "rowwise-adagrad",
            },
            "cache": {"capacity_rows": 40},
            "design_params": {
                "scratchpipe": {
                    "lookahead": 3,
                    "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]],
                }
            },
            "designs": ["scratchpipe"],
        }
    )
    w = workload_of(cfg)
    assert w.lookahead == 2 and w.capacity_rows == 40 and w.spec.width == 3
    assert w.mlp == ((3, 2, 3), (3, 7, 1))  # cat: 3 + 2 tables x dim 2
    from scratchpipe_sim.timing import build_trace

    measured = measure_on_gpu(cfg, build_trace(cfg))
    assert set(measured) == {"plan", "collect", "insert"}  # GPU stages untimed here
    assert all(v >= 0 for v in measured.values())


def test_first_access_unique_matches_numpy():
    st = ScratchpadState(Trace.single_table(np.arange(8), 50, 4), 4, 2)
    rng = np.random.default_rng(8)
    for k in range(3):  # the stamp array is reused across batches
        ids = rng.integers(0, 50, 40)
        u, inv = st.unique(ids, k)
        np.testing.assert_array_equal(np.sort(u), np.unique(ids))
        np.testing.assert_array_equal(u[inv], ids)
        first = [int(x) for x in dict.fromkeys(ids.tolist())]
        assert u.tolist() == first
