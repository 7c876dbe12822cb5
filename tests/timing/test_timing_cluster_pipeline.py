"""The cluster's schedules across batches (`design_params.cluster.pipeline`: none,
sparse-dist, nestpipe with `microbatches`), its input pipeline, and the node's host shared by
its ranks: closed forms on tiny clusters and never-slower orderings where they hold."""

from __future__ import annotations

import json

import numpy as np
import pytest
import simpy
import yaml
from small_configs import off_chip

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.timing import cluster_pipeline as cp
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.dense_compute import dense_iteration
from scratchpipe_sim.timing.designs import cluster as cl
from scratchpipe_sim.timing.machine import Machine

BASE = {
    "hardware": deep_merge(off_chip("dgx-h100-cluster"), {"cluster": {"nodes": 2}}),
    "model": {"tables": {"count": 4, "rows": 500, "dim": 32}, "pooling": 4, "batch_size": 64,
              "num_batches": 6, "warmup_batches": 2, "bottom_mlp": [13, 64, 16],
              "interaction": "cat", "top_mlp": None},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "designs": ["cluster"],
    "seed": 5,
}
#: an exchange-bound iteration whose dense work is compute-bound: 1,024 samples a rank,
#: wide MLPs as one CUDA graph, 8 tables of dim 64 over 2 nodes of slow NICs
EXCHANGE_BOUND = {
    "hardware": {"cluster": {"nic_GBps": 4.0}},
    "model": {"batch_size": 16384, "tables": {"count": 8, "rows": 2000, "dim": 64},
              "pooling": 2, "bottom_mlp": [13, 512, 256, 64],
              "top_mlp": [576, 1024, 512, 1], "cuda_graphs": True},
}
ONE_RANK = {"hardware": {"cluster": {"nodes": 1}, "interconnect": {"gpus_per_node": 1}}}


def run(over=None, sets=(), pipeline=None, microbatches=None):
    p = {}
    if pipeline is not None:
        p["pipeline"] = pipeline
    if microbatches is not None:
        p["microbatches"] = microbatches
    cfg = load_config(deep_merge(deep_merge(BASE, over or {}),
                                 {"design_params": {"cluster": p}}), sets)
    return simulate(cfg, ["cluster"])[0]


def stages(row):
    return {k: v for k, v in row.items() if k.startswith("stage_") and k.endswith("_ns")}


def test_the_default_is_sparse_dist():
    assert run()["iter_ns_mean"] == run(pipeline="sparse-dist")["iter_ns_mean"]


def test_a_zero_time_exchange_prices_every_pipeline_alike():
    """One rank: no all-to-all moves a byte, so what the pipelines overlap is nothing and
    every schedule (one micro-batch) prices today's iteration exactly."""
    rows = [run(ONE_RANK, pipeline=p) for p in ("none", "sparse-dist", "nestpipe")]
    assert rows[0]["iter_ns_mean"] == rows[1]["iter_ns_mean"] == rows[2]["iter_ns_mean"]
    assert all(r["stage_input_dist_ns"] == 0 for r in rows)


def test_sparse_dist_hides_an_ids_all_to_all_shorter_than_the_forward_exactly():
    """One node, a heavy forward (1,024 samples x 4 tables x 64 ids): batch i+1's ids
    all-to-all (NVLink) runs during batch i's forward (HBM), no resource shared, so
    sparse-dist's iteration is none's less none's whole input_dist stage."""
    over = {"hardware": {"cluster": {"nodes": 1}},
            "model": {"pooling": 64, "batch_size": 1024}}
    none, sparse = run(over, pipeline="none"), run(over, pipeline="sparse-dist")
    assert 0 < none["stage_input_dist_ns"] < sparse["stage_emb_forward_ns"]
    assert sparse["stage_input_dist_ns"] == 0
    assert sparse["iter_ns_mean"] == pytest.approx(
        none["iter_ns_mean"] - none["stage_input_dist_ns"], rel=1e-9)


@pytest.mark.parametrize("nic", [48.0, 0.5, 0.05])
def test_sparse_dist_hides_at_most_the_all_to_all_and_the_rest(nic):
    """Whatever dominates, sparse-dist saves at most the ids all-to-all (none's
    input_dist stage) and at most the rest of the iteration it overlaps; it shares the
    NICs with batch i's collectives, so with a dominant exchange it saves less than the
    whole all-to-all (the NIC carries every batch's bytes either way)."""
    sets = [f"hardware.cluster.nic_GBps={nic}"]
    none, sparse = run(sets=sets, pipeline="none"), run(sets=sets, pipeline="sparse-dist")
    saved = none["iter_ns_mean"] - sparse["iter_ns_mean"]
    ids = none["stage_input_dist_ns"]
    assert -1e-9 * none["iter_ns_mean"] <= saved <= min(ids, none["iter_ns_mean"] - ids) * (
        1 + 1e-9)
    if nic == 0.05:  # exchange-bound: the shared NICs leave part of it exposed
        assert saved < ids * 0.9


@pytest.mark.parametrize("over", [
    {},
    {"hardware": {"cluster": {"nic_GBps": 0.5}}},
    {"model": {"pooling": 16}, "design_params": {"cluster": {"dedup": True}}},
    {"hardware": {"cluster": {"nodes": 1}}},
    {"model": {"tables": {"count": 4, "rows": 20_000, "dim": 32}, "pooling": 8},
     "cache": {"capacity_rows": 1500}, "design_params": {"cluster": {"rank_cache": "lru-cache"}}},
    EXCHANGE_BOUND,
])
def test_pipelining_the_ids_all_to_all_is_never_slower_than_none(over):
    """sparse-dist and nestpipe at one micro-batch issue the same work earlier; the
    all-to-all they overlap delays batch i's collectives by at most its own bytes (work
    conserving processor sharing), which none paid in line. Micro-batches can be slower
    (next tests)."""
    none = run(over, pipeline="none")["iter_ns_mean"]
    for p in ("sparse-dist", "nestpipe"):
        assert run(over, pipeline=p)["iter_ns_mean"] <= none * (1 + 1e-12), p


def test_stages_add_up_to_the_iteration_with_micro_batches():
    for M in (1, 2, 4):
        row = run(EXCHANGE_BOUND, pipeline="nestpipe", microbatches=M)
        assert sum(stages(row).values()) == pytest.approx(row["iter_ns_mean"], rel=1e-9)


def test_micro_batches_hide_the_dense_work_behind_an_exchange_bound_iteration():
    """Frozen-Window Pipelining: chunk k+1's output all-to-all runs during chunk k's dense
    work, so an exchange-bound iteration with compute-bound dense work gets faster, and the
    exposed exchange (output_dist + grad_dist stages) shrinks."""
    whole = run(EXCHANGE_BOUND, pipeline="nestpipe")
    two = run(EXCHANGE_BOUND, pipeline="nestpipe", microbatches=2)
    assert two["iter_ns_mean"] < whole["iter_ns_mean"] * 0.95
    exposed = [r["stage_output_dist_ns"] + r["stage_grad_dist_ns"] for r in (whole, two)]
    assert exposed[1] < exposed[0]
    assert two["exchange_share"] < whole["exchange_share"]


def test_micro_batches_can_be_slower_when_the_dense_work_is_launch_bound():
    """4 samples a rank: every dense kernel is shorter than its launch, so each
    micro-batch costs what the whole batch did; the small exchange hides no more."""
    whole = run(pipeline="nestpipe")["iter_ns_mean"]
    assert run(pipeline="nestpipe", microbatches=2)["iter_ns_mean"] > whole


def test_micro_batches_with_no_exchange_cost_their_chunks_closed_form():
    """One rank (no exchange): the dense stage is M - 1 micro-batches' forward and backward
    (their kernels' walls without the optimizer) + the last one's whole dense iteration."""
    cfg = load_config(deep_merge(BASE, ONE_RANK))
    B = cfg.model.batch_size
    whole = run(ONE_RANK, pipeline="nestpipe")
    for M in (2, 4):
        row = run(ONE_RANK, pipeline="nestpipe", microbatches=M)
        cost = dense_iteration(cfg.model, cfg.hardware.gpu, B / M)
        chunk = sum(t for part, t in cost.part_ns if part != "optimizer")
        assert row["stage_mlp_ns"] == pytest.approx((M - 1) * chunk + cost.total_ns,
                                                    rel=1e-9)
        assert row["iter_ns_mean"] - whole["iter_ns_mean"] == pytest.approx(
            row["stage_mlp_ns"] - whole["stage_mlp_ns"], rel=1e-9)


# -- the node's host shared by its ranks ------------------------------------------------------
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_node_shared_dram_closed_form(ranks):
    """A DRAM-bound gather with r ranks of a node gathering at once takes r x one rank's
    alone (beyond the latency): each sees 1/r of the node's DRAM bandwidth."""
    cfg = load_config(BASE)
    rows, rb = 100_000, 128.0

    def one(r):
        env = simpy.Environment()
        m = Machine(env, cfg, 1)
        cp.share_node_host(m, r)
        ev = m.dram.gather(rows, rb, 0, "rank fill")
        env.run(ev)
        return env.now

    lat = cfg.hardware.cpu.dram_latency_ns
    eff = Machine(simpy.Environment(), cfg, 1).dram.gather_eff(rb)
    assert one(1) - lat == pytest.approx(rows * rb / (cfg.hardware.cpu.dram_GBps * eff),
                                         rel=1e-12)
    assert one(ranks) - lat == pytest.approx(ranks * (one(1) - lat), rel=1e-12)


def test_a_dram_bound_rank_fetch_takes_r_times_one_rank_s(monkeypatch):
    """Per-rank caches over a slow host DRAM, fetched on demand (lru-cache: the stage is
    the whole fetch): the rank fetch with the node's 4 ranks fetching in phase is ~4x the
    fetch with the host to itself (the rest of the fetch, its lookup kernels and its PCIe
    latency, is small beside it)."""
    over = {"hardware": {"cluster": {"nodes": 1}, "interconnect": {"gpus_per_node": 4},
                         "cpu": {"dram_GBps": 0.5}},
            "model": {"tables": {"count": 4, "rows": 20_000, "dim": 32}, "pooling": 8},
            "cache": {"capacity_rows": 1500},
            "design_params": {"cluster": {"rank_cache": "lru-cache"}}}
    shared = run(over)["stage_rank_fetch_ns"]
    monkeypatch.setattr(cl, "share_node_host", lambda m, r: None)
    alone = run(over)["stage_rank_fetch_ns"]
    assert shared / alone == pytest.approx(4.0, rel=0.03)


def test_pcie_stays_each_gpu_s_own():
    """Only host DRAM and cores are split: a PCIe-bound copy prices alike for any G."""
    cfg = load_config(BASE)
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    before = m.pcie.h2d_server.GBps
    cp.share_node_host(m, 8)
    assert m.pcie.h2d_server.GBps == before
    assert m.dram.server.GBps == cfg.hardware.cpu.dram_GBps / 8


# -- the input pipeline --------------------------------------------------------------------------
def test_an_input_bound_cluster_says_input_bound():
    """A slow loader (1 ms a sample on one core) holds every batch back: the cluster waits
    for its inputs (stage input_wait), and the run says input-bound."""
    slow = run({"input_pipeline": {"loader_ns_per_sample": 1e6}})
    assert slow["input_bound"] and slow["input_stall_ns"] > 0
    assert slow["stage_input_wait_ns"] > 0
    fast = run()
    assert not fast["input_bound"] and fast["stage_input_wait_ns"] == 0


def test_a_rank_loads_its_share_on_one_whole_core():
    """Each rank's loader builds its B/n samples on one core of its share of the node's
    cores: with cores to spare a load is exactly B/n x loader_ns_per_sample; with one core
    per rank its 4 workers share it and each load takes longer."""
    over = {"input_pipeline": {"loader_ns_per_id": 0, "loader_ns_per_sample": 1000}}
    many = run(deep_merge(over, {"hardware": {"cpu": {"cores": 1024}}}))
    assert many["input_load_ns"] == pytest.approx(64 / 16 * 1000, rel=1e-12)
    few = run(deep_merge(over, {"hardware": {"cpu": {"cores": 8}}}))
    assert few["input_load_ns"] > many["input_load_ns"]


def test_inputs_on_gpu_load_and_copy_nothing():
    row = run({"input_pipeline": {"inputs_on_gpu": True}})
    assert row["input_load_ns"] == row["input_copy_ns"] == 0
    assert not row["input_bound"]


# -- end to end ------------------------------------------------------------------------------------
@pytest.mark.parametrize("pipeline,M", [("none", 1), ("sparse-dist", 1), ("nestpipe", 2)])
def test_cli_runs_each_pipeline(tmp_path, capsys, pipeline, M):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    rc = main(["run", str(path), "--design", "cluster", "--json", "-q", "--no-timeline",
               "--out", str(tmp_path / "o"),
               "--set", f"design_params.cluster.pipeline={pipeline}",
               "--set", f"design_params.cluster.microbatches={M}"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    (row,) = [r for r in rows if r["design"] == "cluster"]
    assert np.isfinite(row["iter_ns_mean"]) and row["iter_ns_mean"] > 0
    assert row["iter_ns_mean"] == pytest.approx(
        run(pipeline=pipeline, microbatches=M)["iter_ns_mean"], rel=1e-12)
