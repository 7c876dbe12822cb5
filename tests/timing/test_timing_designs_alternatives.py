"""The systems users would pick instead: multi-gpu, uvm, bagpipe (closed forms, an exact
reference for Bagpipe's policy, bad input)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from reference_bagpipe import bagpipe_reference, random_trace
from small_configs import IDS_ONLY_INPUTS, off_chip

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import build_trace, simulate
from scratchpipe_sim.timing.counts import Where, Workload, policy_counts, uncached_counts
from scratchpipe_sim.timing.designs import DESIGNS, check_params, default_designs
from scratchpipe_sim.timing.designs.multi_gpu import PARAMS_KEY
from scratchpipe_sim.timing.machine import Collective, Machine
from scratchpipe_sim.timing.placement import gpus_to_hold, shard
from scratchpipe_sim.timing.trace_setup import fit_trace, sized_config

BASE = {
    "input_pipeline": IDS_ONLY_INPUTS,
    "hardware": off_chip("dgx-a100"),
    "model": {"tables": {"count": 4, "rows": 500, "dim": 32}, "pooling": 4, "batch_size": 64,
              "num_batches": 12, "warmup_batches": 3, "bottom_mlp": [13, 64, 16],
              "interaction": "cat", "top_mlp": None},  # derived: tests vary the tables
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 600},
    "designs": ["gpu-only"],
    "seed": 5,
}


def cfg_of(over=None, sets=()):
    return load_config(deep_merge(BASE, over or {}), sets)


def run_on(cfg, name, w):
    """One design's SimPy run over workload `w` on a fresh Machine."""
    env = simpy.Environment()
    m = Machine(env, cfg, w.num_batches)
    env.process(DESIGNS.get(name)(cfg).run(m, w))
    env.run()
    return m


def timed_trace(cfg):
    trace = build_trace(cfg)
    cfg = sized_config(cfg, trace)
    trace = fit_trace(trace, cfg)
    return cfg, trace.slice(trace.num_batches - cfg.model.num_batches, trace.num_batches)


def test_new_designs_are_registered_but_not_on_by_default():
    for name in ("multi-gpu", "uvm", "bagpipe"):
        assert name in DESIGNS and name not in default_designs()


# -- multi-gpu ---------------------------------------------------------------------------------
@pytest.mark.parametrize("gpus", [2, 4])
def test_multi_gpu_with_an_infinitely_fast_interconnect_is_gpu_only_on_a_1_over_n_share(gpus):
    cfg = cfg_of({"design_params": {"multi-gpu": {"gpus": gpus, "sharding": "row-wise"}},
                  "hardware": {"interconnect": {"nvlink_GBps": 1e15, "nvlink_latency_ns": 0}}})
    cfg, trace = timed_trace(cfg)
    w = uncached_counts(trace, Where.DEVICE)
    share = {k: (v / gpus if k in ("accesses", "unique", "samples") else v).astype(float)
             for k, v in w.cols.items()}
    w_n = Workload(w.policy, w.capacity, share, {})
    multi = run_on(cfg, "multi-gpu", w)
    single = run_on(cfg, "gpu-only", w_n)
    np.testing.assert_allclose(multi.done, single.done, rtol=1e-9)
    assert multi.counters["gpus"] == gpus and multi.counters["lookup_share_per_gpu"] == 1 / gpus


def test_multi_gpu_on_one_gpu_is_gpu_only():
    cfg = cfg_of({"design_params": {"multi-gpu": {"gpus": 1}}})
    rows = {r["design"]: r for r in simulate(cfg, ["gpu-only", "multi-gpu"])}
    assert rows["multi-gpu"]["iter_ns_mean"] == rows["gpu-only"]["iter_ns_mean"]
    assert rows["multi-gpu"]["samples_per_s_per_gpu"] == rows["gpu-only"]["samples_per_s"]


@pytest.mark.parametrize("gpus,sharding", [(4, "row-wise"), (2, "table-wise"),
                                           (4, "table-wise")])
def test_alltoall_moves_the_closed_form_per_gpu_each_way(gpus, sharding):
    cfg = cfg_of({"design_params": {"multi-gpu": {"gpus": gpus, "sharding": sharding}}})
    row = simulate(cfg, ["multi-gpu"])[0]
    m = cfg.model
    B, T, dim, b = m.batch_size, m.table_count, 32, 4
    k = (gpus - 1) / gpus
    # row-wise: every GPU reduce-scatters partial sums of every table: B T dim bytes (N-1)/N;
    # table-wise (T/N tables each): the owner sends its tables' B rows to N-1 others
    expect = B * T * dim * b * k if sharding == "row-wise" else B * T * dim * b * k / gpus
    assert row["alltoall_bytes_per_gpu"] == pytest.approx(expect, rel=1e-12)
    s = shard(cfg, gpus, sharding, PARAMS_KEY)
    assert s.alltoall_bytes(B, (dim * b,) * T) == pytest.approx((expect, expect), rel=1e-12)
    assert row["samples_per_s_per_gpu"] == pytest.approx(row["samples_per_s"] / gpus)
    assert row["gpus"] == gpus and row["gpus_to_hold_tables"] == 1


def test_a_collective_is_named_by_its_enum_and_priced_at_its_own_efficiency():
    cfg = cfg_of({}, ["hardware.interconnect.nvlink_latency_ns=0"])
    ic = cfg.hardware.interconnect
    for kind, eff in ((Collective.ALL_TO_ALL, ic.alltoall_efficiency),
                      (Collective.ALL_REDUCE, ic.allreduce_efficiency)):
        m = Machine(simpy.Environment(), cfg, 1)
        m.env.process(_wait(m.collective(0, 1e9, 1e9, "x", kind)))
        m.env.run()
        assert m.env.now == pytest.approx(1e9 / (ic.nvlink_GBps * eff), rel=1e-9)
    m = Machine(simpy.Environment(), cfg, 1)
    with pytest.raises(TypeError, match="expected a Collective"):
        m.collective(0, 1.0, 1.0, "x", "alltoall")


def _wait(ev):
    yield ev


def test_a_slower_interconnect_is_never_faster():
    times = [simulate(cfg_of({"design_params": {"multi-gpu": {"gpus": 4}}}, [
        f"hardware.interconnect.nvlink_GBps={bw}"]), ["multi-gpu"])[0]["iter_ns_mean"]
        for bw in (10, 50, 300)]
    assert times[0] > times[1] > times[2]


def test_gpus_to_hold_the_tables_and_the_table_that_cannot_fit():
    # 4 tables x 1M rows x dim 64 x 4 B x (1 + adagrad 1) = 0.48 GiB each; 1 GiB GPUs
    big = {"model": {"tables": {"rows": 1_000_000, "dim": 64}, "optimizer": "adagrad"},
           "hardware": {"gpu": {"hbm_capacity_GiB": 1.0, "l2_MiB": 0}},
           "cache": {"capacity_rows": 1000}}
    assert gpus_to_hold(cfg_of(big), "auto", PARAMS_KEY) == 2
    tiny = deep_merge(big, {"hardware": {"gpu": {"hbm_capacity_GiB": 0.4}},
                            "design_params": {"multi-gpu": {"sharding": "table-wise",
                                                            "gpus": 8}}})
    with pytest.raises(UserError, match=r"table 0 needs 0\.48 GiB") as e:
        shard(cfg_of(tiny), 8, "table-wise", PARAMS_KEY)
    assert e.value.field == "design_params.multi-gpu.sharding"
    # auto splits the too-large tables row-wise instead
    assert all(shard(cfg_of(tiny), 8, "auto", PARAMS_KEY).row_wise)


def test_zero_gpus_and_a_table_too_large_are_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    import yaml

    path.write_text(yaml.safe_dump(deep_merge(BASE, {
        "model": {"tables": {"rows": 1_000_000, "dim": 64}},
        "hardware": {"gpu": {"hbm_capacity_GiB": 0.2, "l2_MiB": 0}},
        "cache": {"capacity_rows": 1000},
        "design_params": {"multi-gpu": {"sharding": "table-wise"}}})))
    out = tmp_path / "o"
    assert main(["run", str(path), "--design", "multi-gpu", "-q", "--out", str(out),
                 "--set", "design_params.multi-gpu.gpus=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "design_params.multi-gpu.gpus" in err
    assert main(["run", str(path), "--design", "multi-gpu", "-q", "--out", str(out),
                 "--set", "design_params.multi-gpu.gpus=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "table 0 needs 0.24 GiB" in err


def test_the_old_multi_gpu_section_is_refused_naming_its_new_key(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    import yaml

    path.write_text(yaml.safe_dump(deep_merge(BASE, {"multi_gpu": {"gpus": 2}})))
    assert main(["run", str(path), "--design", "multi-gpu", "-q", "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "multi_gpu" in err and "design_params.multi-gpu" in err


# -- uvm ---------------------------------------------------------------------------------------
def test_uvm_reads_each_distinct_row_once_at_the_in_place_rate():
    """Closed form of the UVM forward: each batch's U distinct rows cross the link once
    (duplicates hit the sectors the first load brought into L2) at uvm_read_share x h2d_GBps; the
    backward reads and writes each distinct row with its state. The tables fit the TLB
    reach here: no page walks."""
    cfg = cfg_of({"hardware": {"cpu": {"dram_GBps": 1e9}}})
    cfg_s, trace = timed_trace(cfg)
    w = uncached_counts(trace, Where.HOST)
    A, U = w.cols["accesses"].astype(float), w.cols["unique"].astype(float)
    row = simulate(cfg, ["uvm"])[0]
    m, p = cfg.model, cfg.hardware.pcie
    r, R, wu = m.row_bytes, m.moved_row_bytes, m.warmup_batches
    idx = (A + m.batch_size * m.table_count + 1) * m.index_bytes
    assert row["pcie_h2d_bytes"] == pytest.approx((U * r + U * R + idx)[wu:].sum(), rel=1e-12)
    assert row["pcie_d2h_bytes"] == pytest.approx((U * R)[wu:].sum(), rel=1e-12)
    assert row["busy_gpu_mmu"] == 0.0
    # forward: the link at uvm_read_share x h2d_GBps, shared (processor sharing) with the
    # next batch's index copy issued at the same instant (at h2d_GBps); DRAM is made too fast
    # to matter.
    # The output rows' HBM writes end long before.
    nxt = np.append(idx[1:], 0.0)
    t_rows, t_idx = U * r / (p.uvm_read_share * p.h2d_GBps), nxt / p.h2d_GBps
    # PS: both progress at half speed until the shorter ends; the stage waits for the rows
    fwd = p.latency_ns + np.where(t_rows >= t_idx, t_rows + t_idx, 2 * t_rows)
    assert row["stage_forward_ns"] == pytest.approx(fwd[wu:].mean(), rel=1e-6)
    assert row["hit_ratio"] == 0.0


# -- bagpipe -----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed,capacity,lookahead,ttl", [
    (0, 10_000, 200, -1), (1, 60, 5, -1), (2, 25, 20, 3), (3, 40, 1, -1), (4, 80, 8, 0),
    (5, 30, 200, -1)])
def test_bagpipe_policy_is_exact_against_the_reference(seed, capacity, lookahead, ttl):
    trace = random_trace(seed)
    ids, ptr = trace.linear_ids(), trace.batch_access_ptr()
    batches = [ids[a:b] for a, b in zip(ptr[:-1], ptr[1:], strict=True)]
    window = lookahead if ttl < 0 else min(lookahead, ttl)
    ref = bagpipe_reference(batches, min(capacity, trace.total_rows), window)
    w = policy_counts(trace, "bagpipe", capacity, replay_cache=False, lookahead=lookahead,
                      ttl_batches=ttl)
    got = np.stack([w.cols["hits"], w.cols["fills"], w.cols["evictions"], w.cols["unplaced"]],
                   axis=1)
    np.testing.assert_array_equal(got, ref)
    assert (w.cols["writebacks"] == w.cols["evictions"]).all()


def test_bagpipe_with_a_window_of_1_and_ttl_0_is_an_on_demand_cache():
    trace = random_trace(7)
    w = policy_counts(trace, "bagpipe", 10_000, replay_cache=False, lookahead=1,
                      ttl_batches=0)
    au = uncached_counts(trace, Where.DEVICE)
    # every batch fetches exactly its unique rows and writes them all back after training
    assert (w.cols["fills"] == au.cols["unique"]).all()
    assert (w.cols["evictions"] == au.cols["unique"]).all()
    assert (w.cols["hits"] == au.cols["accesses"] - au.cols["unique"]).all()


def test_a_longer_bagpipe_window_keeps_more_and_fetches_less():
    trace = random_trace(8)
    fills = [policy_counts(trace, "bagpipe", 10_000, replay_cache=False, lookahead=L)
             .total("fills") for L in (1, 4, 29)]
    assert fills[0] > fills[1] > fills[2]
    assert fills[2] == len(np.unique(trace.linear_ids()))  # every row fetched once


def test_bagpipe_design_prefetch_overlaps_training():
    cfg = cfg_of({"cache": {}, "design_params": {"bagpipe": {"lookahead": 4}}})
    rows = {r["design"]: r for r in simulate(cfg, ["gpu-only", "lru-cache", "bagpipe"])}
    bp = rows["bagpipe"]
    assert bp["fills"] > 0 and bp["unplaced"] == 0
    # training waits only for what prefetch could not hide: iteration < the sum of stages
    serial = sum(bp[f"stage_{s}_ns"] for s in ("oracle", "prefetch", "forward", "mlp",
                                                "backward", "writeback"))
    assert bp["iter_ns_mean"] < serial
    assert rows["gpu-only"]["iter_ns_mean"] <= bp["iter_ns_mean"]


def test_bagpipe_bad_window_is_a_config_error():
    with pytest.raises(UserError) as e:  # design params: checked by the timing layer
        check_params(cfg_of({"design_params": {"bagpipe": {"lookahead": 0}}}))
    assert e.value.field == "design_params.bagpipe.lookahead"


def test_bagpipe_on_demand_moves_each_batchs_unique_rows_both_ways():
    cfg = cfg_of(
        {
            "cache": {"capacity_rows": 2000},
            "design_params": {"bagpipe": {"lookahead": 1, "ttl_batches": 0}},
        }
    )
    _, trace = timed_trace(cfg)
    U = uncached_counts(trace, Where.DEVICE).cols["unique"].astype(float)
    A = uncached_counts(trace, Where.DEVICE).cols["accesses"].astype(float)
    m, wu = cfg.model, cfg.model.warmup_batches
    R = m.moved_row_bytes
    idx = (A + m.batch_size * m.table_count + 1) * m.index_bytes
    row = simulate(cfg, ["bagpipe"])[0]
    assert row["fills"] == U[wu:].sum() and row["writebacks"] == U[wu:].sum()
    assert row["pcie_h2d_bytes"] == pytest.approx((U * R + idx)[wu:].sum(), rel=1e-12)
    assert row["pcie_d2h_bytes"] == pytest.approx((U * R)[wu:].sum(), rel=1e-12)


def test_tables_larger_than_a_node_name_the_node():
    big = {"model": {"tables": {"rows": 1_000_000, "dim": 64}, "optimizer": "adagrad"},
           "hardware": {"gpu": {"hbm_capacity_GiB": 0.1, "l2_MiB": 0}},
           "cache": {"capacity_rows": 1000}}
    with pytest.raises(UserError, match=r"need 1\.91 GiB but .*gpus_per_node = 8") as e:
        gpus_to_hold(cfg_of(big), "auto", PARAMS_KEY)
    assert e.value.field == "design_params.multi-gpu.gpus"
