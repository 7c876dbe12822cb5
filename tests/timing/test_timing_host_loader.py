"""Two host costs of the trainer's thread (timing/host_dispatch.py, issue 43): the dense
optimizer stepped per tensor (`model.optimizer_foreach: false`, PyTorch <= 1.13) and the
batch built on the trainer's thread (`input_pipeline.loader_in_trainer`, DataLoader
num_workers=0). Closed forms of the op counts and of a loader-bound iteration; the
defaults leave the study's runs unchanged; bad input is one line naming the key."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from cli_errors import one_line_error
from small_configs import SMALL_A100

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.host_dispatch import (
    DESIGN_OPS,
    FOREACH_OPS,
    ROW_WISE_OPS,
    ROW_WISE_SYNCS,
    STEP_OPS,
    TORCHREC_GROUP_OPS,
    TORCHREC_GROUP_SYNCS,
    ZERO_GRAD_OPS,
    host_iteration,
    host_ops,
    host_syncs,
    trainer_loader_ns,
)

#: SMALL_A100's dense tensors: a weight and a bias for each of its 4 layers
DENSE_TENSORS = 8
#: a loader slow enough to bound every iteration: 10 us a sample, 1 us an id
SLOW_LOADER = {"input_pipeline": {"loader_in_trainer": True, "loader_ns_per_sample": 1e4,
                                  "loader_ns_per_id": 1e3}}


def cfg_of(*overs):
    d = SMALL_A100
    for o in overs:
        d = deep_merge(d, o)
    return load_config(d)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
@pytest.mark.parametrize("framework", ["eager", "torchrec"])
def test_a_per_tensor_optimizer_issues_its_step_per_dense_tensor(framework, optimizer):
    m = cfg_of({"model": {"framework": framework, "optimizer": optimizer}}).model
    foreach = dict(host_ops(m))
    per_tensor = dict(host_ops(dataclasses.replace(m, optimizer_foreach=False)))
    assert foreach["optimizer"] == FOREACH_OPS[optimizer]
    assert per_tensor["optimizer"] == (STEP_OPS[optimizer] + ZERO_GRAD_OPS) * DENSE_TENSORS
    # nothing else moves: the embeddings' optimizer is fused into their backward
    assert {k: v for k, v in per_tensor.items() if k != "optimizer"} == {
        k: v for k, v in foreach.items() if k != "optimizer"}


def test_per_tensor_adagrad_is_torch_optims_five_ops_a_tensor():
    """PyTorch 1.13's _single_tensor_adagrad: step_t += 1, addcmul_, sqrt, add_,
    addcdiv_; SGD without momentum: add_."""
    assert STEP_OPS["sgd"] == 1 and STEP_OPS["adagrad"] == 5


def test_the_trainer_loader_is_samples_and_ids_times_their_costs():
    cfg = cfg_of(SLOW_LOADER)
    m, p = cfg.model, cfg.input_pipeline
    ids = 32 * 2 * 3  # batch 32, 2 tables, pooling 3
    assert trainer_loader_ns(p, m, 32) == pytest.approx(32 * 1e4 + ids * 1e3)
    off = dataclasses.replace(p, loader_in_trainer=False)
    assert trainer_loader_ns(off, m, 32) == 0.0
    cost = host_iteration(m, cfg.hardware.cpu, loader_ns=5.0)
    assert cost.total_ns == 5.0 and cost.pre_ns == 5.0  # framework none: the loader alone


def test_a_loader_bound_iteration_is_the_trainers_load():
    """No host ops (framework none), the loader on the trainer's thread: the host builds
    batch after batch and the GPU waits, so the iteration is the load of one batch."""
    cfg = cfg_of(SLOW_LOADER)
    load = trainer_loader_ns(cfg.input_pipeline, cfg.model, 32)
    row = simulate(cfg, ["gpu-only"])[0]
    assert row["iter_ns_mean"] == pytest.approx(load, rel=1e-7)
    assert row["host_issue_ns"] == pytest.approx(load) and row["host_wait_ns"] > 0
    # ops and load add up on the same thread: eager's ops at 1 ms each dominate, + load
    slow = cfg_of(SLOW_LOADER, {"model": {"framework": "eager"},
                                "hardware": {"cpu": {"host_op_ns": 1e6}}})
    ops = host_iteration(slow.model, slow.hardware.cpu).op_count
    assert simulate(slow, ["gpu-only"])[0]["iter_ns_mean"] == pytest.approx(
        ops * 1e6 + load, rel=1e-7)


def test_worker_loaders_stay_off_the_trainers_thread():
    """The same loader cost in 4 prefetching workers: not on the host's path (no host
    columns), and the iteration is no slower than with the loader in the trainer."""
    workers = cfg_of(deep_merge(SLOW_LOADER, {"input_pipeline": {
        "loader_in_trainer": False}}))
    row = simulate(workers, ["gpu-only"])[0]
    assert "host_issue_ns" not in row
    assert row["iter_ns_mean"] < simulate(cfg_of(SLOW_LOADER), ["gpu-only"])[0][
        "iter_ns_mean"]


def test_the_defaults_leave_the_run_unchanged():
    cfg = cfg_of()
    assert cfg.model.optimizer_foreach and not cfg.input_pipeline.loader_in_trainer
    assert host_iteration(cfg.model, cfg.hardware.cpu).total_ns == 0
    assert "host_issue_ns" not in simulate(cfg, ["gpu-only"])[0]


@pytest.mark.parametrize("key,value", [("model.optimizer_foreach", "sometimes"),
                                       ("input_pipeline.loader_in_trainer", "3")])
def test_bad_new_keys_are_one_line_exit_2(tmp_path, capsys, key, value):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(SMALL_A100))
    one_line_error(capsys, ["run", str(path), "-q", "--out", str(tmp_path / "o"),
                            "--set", f"{key}={value}"], key)


# -- a design's own host ops (DESIGN_OPS) ---------------------------------------------------
@pytest.mark.parametrize("design,extra", [("lru-cache", 3), ("lru-prefetch", 5),
                                          ("gpu-only", 0), ("scratchpipe", 0)])
def test_a_cache_design_issues_fbgemms_cache_ops(design, extra):
    """FBGEMM's _prefetch: linearize_cache_indices, lru_cache_populate, lxu_cache_lookup;
    on a prefetch stream also record_stream and the forward stream's wait."""
    m = cfg_of({"model": {"framework": "eager"}}).model
    base = sum(n for _, n in host_ops(m))
    assert sum(n for _, n in host_ops(m, design)) == base + extra
    assert DESIGN_OPS.get(design, ()) == (() if extra == 0 else DESIGN_OPS[design])
    # without host issue (the study's default) a design adds nothing either
    assert host_ops(cfg_of().model, design) == ()


def test_lru_caches_fbgemm_ops_come_before_its_lookup_kernel():
    m = cfg_of({"model": {"framework": "torchrec-unpipelined"}}).model
    cpu = cfg_of().hardware.cpu
    gpu_only = host_iteration(m, cpu)
    assert host_iteration(m, cpu, design="lru-cache").pre_ns == pytest.approx(
        gpu_only.pre_ns + 3 * cpu.host_op_ns)
    # a prefetch issued a batch ahead is not before this batch's lookup
    assert host_iteration(m, cpu, design="lru-prefetch").pre_ns == gpu_only.pre_ns


@pytest.mark.parametrize("design", ["lru-cache", "lru-prefetch"])
def test_a_host_bound_cache_design_pays_its_own_ops(design):
    cfg = cfg_of({"model": {"framework": "eager"},
                  "hardware": {"cpu": {"host_op_ns": 1e6}}})
    ops = host_iteration(cfg.model, cfg.hardware.cpu, design=design).op_count
    row = simulate(cfg, [design])[0]
    assert row["host_ops"] == ops
    assert row["iter_ns_mean"] == pytest.approx(ops * 1e6, rel=1e-7)


# -- TorchRec's sharding groups --------------------------------------------------------------
@pytest.mark.parametrize("types,ops,syncs", [
    (frozenset(), 0, 0), (frozenset({"table-wise"}), 0, 0),
    (frozenset({"row-wise"}), ROW_WISE_OPS, ROW_WISE_SYNCS),
    (frozenset({"table-wise", "row-wise"}), TORCHREC_GROUP_OPS + ROW_WISE_OPS,
     TORCHREC_GROUP_SYNCS + ROW_WISE_SYNCS),
    (frozenset({"table-row-wise"}), ROW_WISE_OPS, ROW_WISE_SYNCS),
    (frozenset({"table-wise", "column-wise"}), TORCHREC_GROUP_OPS, TORCHREC_GROUP_SYNCS)])
def test_each_sharding_group_issues_its_own_dists(types, ops, syncs):
    """One input dist, lookup and output dist per sharding type; a row-wise group
    bucketizes and syncs for its bucketized lengths."""
    m = cfg_of({"model": {"framework": "torchrec"}}).model
    base = dict(host_ops(m))["torchrec"]
    assert dict(host_ops(m, sharding_types=types))["torchrec"] == base + ops
    assert host_syncs(m, types) == host_syncs(m) + syncs
    eager = cfg_of({"model": {"framework": "eager"}}).model  # no TorchRec: no groups
    assert host_ops(eager, sharding_types=types) == host_ops(eager)
    assert host_syncs(eager, types) == 0


def test_multi_gpu_tells_the_host_its_placement():
    cfg = cfg_of({"model": {"framework": "torchrec"}, "designs": ["multi-gpu"],
                  "design_params": {"multi-gpu": {"gpus": 2, "sharding": "row-wise"}}})
    rw = host_iteration(cfg.model, cfg.hardware.cpu, sharding_types=frozenset({"row-wise"}))
    row = simulate(cfg, ["multi-gpu"])[0]
    assert row["host_ops"] == rw.op_count and row["host_issue_ns"] == rw.total_ns


@pytest.mark.parametrize("cluster,types", [
    ({"sharding": "row-wise"}, {"row-wise"}),
    ({"sharding": "table-wise"}, {"table-wise"}),
    ({"placement": {"0": [0, 1]}, "sharding": "table-wise"}, {"table-wise", "table-row-wise"}),
    ({"placement": {"0": [0, 1, 2, 3]}, "sharding": "table-wise"}, {"table-wise", "row-wise"}),
])
def test_the_cluster_tells_the_host_its_sharding_groups(cluster, types):
    """As multi-gpu: TorchRec's trainer issues one group's dists per sharding type of the
    cluster's layout (a span over the whole shard group row-wise, over part of it
    table-row-wise)."""
    cfg = load_config(deep_merge(SMALL_A100, {
        "model": {"framework": "torchrec"}, "designs": ["cluster"],
        "hardware": {"preset": "dgx-h100-cluster", "cluster": {"nodes": 1},
                     "interconnect": {"gpus_per_node": 4}},
        "design_params": {"cluster": cluster}}))
    expected = host_iteration(cfg.model, cfg.hardware.cpu, sharding_types=frozenset(types))
    row = simulate(cfg, ["cluster"])[0]
    assert row["host_ops"] == expected.op_count
    assert row["host_issue_ns"] == pytest.approx(expected.total_ns)
