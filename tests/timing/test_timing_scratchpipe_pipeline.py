"""scratchpipe's pipeline shape and refetch hazard, against closed forms.

Oracles are independent of the timing code: fills per batch come from the policy engine,
transfer times from the config's bandwidths and latencies, MLP time from the layer sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from small_configs import IDS_ONLY_INPUTS, off_chip

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.engine import COUNTERS, iter_cache, make_policy
from scratchpipe_sim.timing import build_trace, simulate
from scratchpipe_sim.timing.dense_compute import dense_iteration
from scratchpipe_sim.timing.designs import design_params
from scratchpipe_sim.traces.csr_trace import Trace

FIVE = [["plan"], ["collect"], ["exchange"], ["insert"], ["train"]]
FUSED = [["plan"], ["collect", "exchange", "insert"], ["train"]]
BASE = {
    "input_pipeline": IDS_ONLY_INPUTS,
    # on-chip caches and the DMA load off: the closed forms price PCIe alone
    "hardware": off_chip("a100-gen4"),
    "model": {"tables": {"count": 2, "rows": 5000, "dim": 32}, "pooling": 4, "batch_size": 64,
              "num_batches": 40, "warmup_batches": 8, "bottom_mlp": [13, 64, 16],
              "interaction": "cat", "top_mlp": [80, 32, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 3000},
    "designs": ["scratchpipe"],
    "seed": 3,
}
#: resident inputs: the exchange group alone crosses the link (the indices ride with the
#: batch's inputs, tests/timing/test_timing_input_pipeline.py)
PCIE_BOUND = {"hardware": {"pcie": {"h2d_GBps": 0.05, "d2h_GBps": 0.05,
                                    "duplex_h2d_GBps": None, "duplex_d2h_GBps": None}},
              "input_pipeline": {"inputs_on_gpu": True}}
COMPUTE_BOUND = {"hardware": {"gpu": {"tflops": 0.0005}}}


def cfg_of(*overs):
    d = BASE
    for o in overs:
        d = deep_merge(d, o)
    return load_config(d)


def shape(groups, w):
    return {"cache": {}, "design_params": {"scratchpipe": {"pipeline": groups, "lookahead": w}}}


def measured_fills(cfg):
    """Fills of the measured batches, from the policy engine over the whole built trace (the
    cache warm-up prefix, then the timed batches)."""
    trace = build_trace(cfg)
    pol = make_policy("scratchpipe", cfg.capacity_rows(), trace.total_rows,
                      lookahead=design_params(cfg, "scratchpipe").lookahead)
    fills = np.concatenate([bc.counts[:, COUNTERS.index("fills")]
                            for bc in iter_cache(trace, pol)])
    return fills[len(fills) - cfg.model.num_batches + cfg.model.warmup_batches:]


def exchange_closed_form(cfg):
    """Mean time of a PCIe-bound exchange: latency + fills x R / h2d per batch (victims <=
    fills go the other way at the same rate, so H2D is the longer one; the indices ride
    with the batch's inputs, resident here)."""
    m, p = cfg.model, cfg.hardware.pcie
    fills = measured_fills(cfg)
    return float(np.mean(p.latency_ns + fills * m.moved_row_bytes / p.h2d_GBps))


def mlp_closed_form(cfg):
    """The dense iteration alone (timing/dense_compute.py, tested by its closed forms)."""
    return dense_iteration(cfg.model, cfg.hardware.gpu, float(cfg.model.batch_size)).total_ns


@pytest.mark.parametrize("groups, w", [(FIVE, 5), (FUSED, 3), (FUSED, 6), (FIVE, 8)])
def test_pcie_bound_iteration_is_the_exchange_group(groups, w):
    cfg = cfg_of(PCIE_BOUND, shape(groups, w))
    row = simulate(cfg)[0]
    want = exchange_closed_form(cfg)
    assert row["iter_ns_mean"] == pytest.approx(want, rel=0.02)
    # busy all but each exchange's latency and the hand-offs between groups (with the
    # inputs resident nothing else crosses the link to hide them: 5-7% here)
    idle = cfg.hardware.pcie.latency_ns / want
    assert 1 - idle - 0.03 < row["busy_pcie_h2d"] <= 1 - idle + 1e-9


@pytest.mark.parametrize("groups, w", [(FIVE, 5), (FUSED, 3), (FUSED, 5)])
def test_compute_bound_iteration_is_the_train_group(groups, w):
    cfg = cfg_of(COMPUTE_BOUND, shape(groups, w))
    row = simulate(cfg)[0]
    mlp = mlp_closed_form(cfg)
    assert row["stage_train_ns"] == pytest.approx(mlp, rel=0.02)  # the MLP is most of it
    assert row["iter_ns_mean"] == pytest.approx(mlp, rel=0.02)
    assert row["busy_gpu_compute"] > 0.95


def test_balanced_stages_give_the_slowest_group_not_the_sum_over_the_window():
    # exchange (PCIe) and train (MLP) about equally slow: with the 3-group shape at W = 3 the
    # iteration is the slower of the two, not (sum of the five stages) / W as when the
    # window, not the shape, set the depth.
    cfg = cfg_of(PCIE_BOUND, shape(FUSED, 3))
    ex = exchange_closed_form(cfg)
    m = cfg.model
    flops = dense_iteration(m, cfg.hardware.gpu, float(m.batch_size)).flops
    tflops = flops / (0.9 * ex) / 1e3  # mlp ~ 0.9 x exchange
    cfg = cfg_of(PCIE_BOUND, shape(FUSED, 3), {"hardware": {"gpu": {"tflops": tflops}}})
    row = simulate(cfg)[0]
    assert row["iter_ns_mean"] == pytest.approx(max(ex, row["stage_train_ns"]), rel=0.02)
    assert row["iter_ns_mean"] < 0.8 * (ex + row["stage_train_ns"])


# -- the refetch hazard -------------------------------------------------------------------------
W = 5
N = 24


def period_trace():
    """Batch k = rows {k % 6, 6 + k % 6}: at the capacity floor for W = 5 (10 rows), plan(k)
    evicts the two rows of batch k-5, which batch k+1 needs: from batch 6 on, every batch
    refetches 2 rows that the previous plan evicted (distance 1)."""
    ids = np.array([v for k in range(N) for v in (k % (W + 1), W + 1 + k % (W + 1))])
    return Trace.single_table(ids, 2 * (W + 1), 2)


def hazard_cfg(refetch, groups=FIVE):
    return load_config(
        {
            "hardware": {
                "preset": "a100-gen4",
                "cpu": {"llc_MiB": 0},
                "gpu": {"l2_MiB": 0, "kernel_launch_ns": 10.0},
            },
            "model": {
                "tables": {"count": 1, "rows": 2 * (W + 1), "dim": 64},
                "pooling": 1,
                "batch_size": 2,
                "num_batches": N,
                "warmup_batches": 2,
                "bottom_mlp": [4, 8],
                "interaction": "cat",
                "top_mlp": [72, 1],
            },
            "cache": {"capacity_rows": 2 * W, "warmup_batches": 0},
            "design_params": {
                "scratchpipe": {"lookahead": W, "refetch": refetch, "pipeline": groups}
            },
            "designs": ["scratchpipe"],
        }
    )


def test_policy_reports_the_distance_one_refetches():
    trace = period_trace()
    pol = make_policy("scratchpipe", 2 * W, trace.total_rows, lookahead=W)
    for _ in iter_cache(trace, pol):
        pass
    cols = pol.batch_columns()
    assert cols["refetch_d1"].tolist() == [0] * 6 + [2] * (N - 6)
    assert all(cols[f"refetch_d{d}"].sum() == 0 for d in range(2, W))


def test_refetch_waits_for_its_write_back():
    trace = period_trace()
    wait = simulate(hazard_cfg("wait"), trace=trace)[0]
    fwd = simulate(hazard_cfg("forward"), trace=trace)[0]
    # every measured batch from 6 on refetches 2 rows whose insert(b-1) is still in flight
    assert wait["refetch_hazards"] == fwd["refetch_hazards"] == 2 * (N - 6)
    assert wait["refetch_rows"] == 2 * (N - 6)
    # wait: collect(b) waits for insert(b-1), so collect, exchange and insert serialize;
    # the collect stage shows the wait (most of an exchange)
    assert wait["stage_refetch_wait_ns"] > 0.8 * wait["stage_exchange_ns"]
    assert wait["stage_collect_ns"] > wait["stage_refetch_wait_ns"]
    assert wait["iter_ns_mean"] == pytest.approx(
        wait["stage_exchange_ns"] + wait["stage_insert_ns"], rel=0.03)
    # forward: no wait; the exchange (PCIe latency) alone sets the pace; the forwarded rows
    # cross PCIe no more
    assert "stage_refetch_wait_ns" not in fwd or fwd["stage_refetch_wait_ns"] == 0
    assert fwd["iter_ns_mean"] == pytest.approx(fwd["stage_exchange_ns"], rel=0.01)
    assert fwd["iter_ns_mean"] < wait["iter_ns_mean"]
    R = hazard_cfg("wait").model.moved_row_bytes
    assert wait["pcie_h2d_bytes"] - fwd["pcie_h2d_bytes"] == 2 * (N - 6) * R


def test_fused_collect_and_insert_have_no_hazard():
    # one group finishes insert(j) before it starts collect(j+1)
    r = simulate(hazard_cfg("wait", [["plan"], ["collect", "exchange", "insert", "train"]]),
                 trace=period_trace())[0]
    assert r["refetch_hazards"] == 0 and r["refetch_rows"] == 2 * (N - 6)
    assert r.get("stage_refetch_wait_ns", 0) == 0


def test_window_below_the_shape_is_one_line_naming_the_minimum(tmp_path, capsys):
    from scratchpipe_sim.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("hardware: {preset: a100-gen4}\ndesigns: [scratchpipe]\n"
                   "design_params: {scratchpipe: {lookahead: 3, pipeline: [[plan], [collect], "
                   "[exchange], [insert], [train]]}}\n")
    assert main(["config", "show", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "design_params.scratchpipe.lookahead" in err and ">= 5" in err
    # asked for by name while the config lists other designs: the same error, no starving
    d = deep_merge(BASE, shape(FIVE, 3))
    d["designs"] = ["hybrid"]
    with pytest.raises(UserError, match=r"design_params.scratchpipe.lookahead >= 5, got 3"):
        simulate(load_config(d), ["scratchpipe"])
