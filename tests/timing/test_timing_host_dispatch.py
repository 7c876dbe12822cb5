"""The host's critical path (timing/host_dispatch.py, joined in Machine.mlp): a launch-bound
tiny model's iteration is its ops x host_op_ns (+ its syncs), counted from the model's
structure; a compute-bound iteration is unchanged by host costs; bad framework input is one
line, exit 2."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from cli_errors import one_line_error
from small_configs import SMALL_A100

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.host_dispatch import (
    TORCHREC_FIXED_OPS,
    TORCHREC_OPS_PER_FEATURE,
    host_iteration,
    host_ops,
    host_syncs,
)

#: SMALL_A100's model, counted by hand: bottom 13-32-16 and top 19-16-1 are 4 layers of 6
#: ops, the dot interaction 12, the loss 5, inputs 3, the fused embedding 2, foreach SGD 2
SMALL_EAGER_OPS = 4 * 6 + 12 + 5 + 3 + 2 + 2
#: TorchRec adds its fixed ops and its ops per feature (2 tables; the per-feature count is
#: a fit on E3.8-sgd-256)
SMALL_TORCHREC_OPS = SMALL_EAGER_OPS + TORCHREC_FIXED_OPS + TORCHREC_OPS_PER_FEATURE * 2
#: a host slow enough that every iteration is host-bound (1 ms an op)
SLOW_HOST = {"hardware": {"cpu": {"host_op_ns": 1e6, "host_sync_ns": 3e5}}}
#: wide MLPs on a large batch: the dense GEMMs outlast the host's issue
BIG = {"model": {"batch_size": 16384, "bottom_mlp": [13, 4096, 4096, 16],
                 "top_mlp": [19, 4096, 4096, 1]}}


def cfg_of(*overs):
    d = SMALL_A100
    for o in overs:
        d = deep_merge(d, o)
    return load_config(d)


def row_of(cfg, design="gpu-only"):
    return simulate(cfg, [design])[0]


@pytest.mark.parametrize("framework,ops,syncs", [
    ("eager", SMALL_EAGER_OPS, 0), ("torchrec", SMALL_TORCHREC_OPS, 1),
    ("torchrec-unpipelined", SMALL_TORCHREC_OPS, 1), ("hugectr", 0, 0), ("none", 0, 0)])
def test_ops_counted_from_the_structure(framework, ops, syncs):
    m = cfg_of({"model": {"framework": framework}}).model
    assert sum(n for _, n in host_ops(m)) == ops
    assert host_syncs(m) == syncs


def test_per_table_embeddings_and_per_tensor_optimizer():
    m = cfg_of({"model": {"framework": "eager-per-table"}}).model
    parts = dict(host_ops(m))
    # 2 tables x 5 ops; (SGD step + zero_grad) x (8 dense tensors + 2 tables)
    assert parts["embedding"] == 10 and parts["optimizer"] == 2 * (8 + 2)
    assert parts["inputs"] == 2


def test_cuda_graphs_issue_the_dense_work_as_one_op():
    m = cfg_of({"model": {"framework": "eager"}}).model
    graphed = dict(host_ops(dataclasses.replace(m, cuda_graphs=True)))
    assert graphed["dense"] == 1 and graphed["optimizer"] == 0


@pytest.mark.parametrize("framework,design", [("eager", "gpu-only"),
                                              ("torchrec", "gpu-only"),
                                              ("eager", "scratchpipe")])
def test_launch_bound_iteration_is_ops_times_host_op_ns(framework, design):
    cfg = cfg_of(SLOW_HOST, {"model": {"framework": framework}})
    cost = host_iteration(cfg.model, cfg.hardware.cpu)
    expected = cost.op_count * 1e6 + cost.syncs * 3e5
    row = row_of(cfg, design)
    assert row["iter_ns_mean"] == pytest.approx(expected, rel=1e-9)
    assert row["host_issue_ns"] == expected and row["host_ops"] == cost.op_count
    assert row["host_wait_ns"] > 0


def test_compute_bound_iteration_is_unchanged_by_host_costs():
    eager = row_of(cfg_of(BIG, {"model": {"framework": "eager"}}))
    none = row_of(cfg_of(BIG, {"model": {"framework": "none"}}))
    assert eager["host_issue_ns"] < eager["iter_ns_mean"]
    assert eager["host_wait_ns"] == 0.0
    assert eager["iter_ns_mean"] == none["iter_ns_mean"]
    assert "host_issue_ns" not in none


def test_an_unpipelined_sync_puts_the_pre_kernel_issue_in_series():
    """torchrec-unpipelined: the sync waits for the previous iteration, so a GPU-bound
    iteration grows by exactly the host's issue before its first embedding kernel."""
    cfg = cfg_of(BIG, {"model": {"framework": "torchrec-unpipelined"}})
    cost = host_iteration(cfg.model, cfg.hardware.cpu)
    pre_ops = 3 + TORCHREC_FIXED_OPS + TORCHREC_OPS_PER_FEATURE * 2
    assert cost.drains and cost.pre_ns == pre_ops * cost.host_op_ns + cost.sync_ns
    none = row_of(cfg_of(BIG, {"model": {"framework": "hugectr"}}))
    assert row_of(cfg)["iter_ns_mean"] == pytest.approx(none["iter_ns_mean"] + cost.pre_ns,
                                                        rel=1e-9)


@pytest.mark.parametrize("key,value", [("model.framework", "pytorch"),
                                       ("hardware.cpu.host_op_ns", -1),
                                       ("hardware.cpu.host_sync_ns", -5)])
def test_bad_host_input_is_one_line_exit_2(tmp_path, capsys, key, value):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(SMALL_A100))
    one_line_error(capsys, ["run", str(path), "-q", "--out", str(tmp_path / "o"),
                            "--set", f"{key}={value}"], key)


def test_the_default_is_the_memory_system_alone():
    """The study's designs run with model.framework none (docs/timing.md says why): no host
    issue, no host columns, the same iteration as hugectr's."""
    cfg = cfg_of()
    assert cfg.model.framework == "none"
    assert host_iteration(cfg.model, cfg.hardware.cpu).total_ns == 0
    row = row_of(cfg)
    assert "host_wait_ns" not in row
    assert row["iter_ns_mean"] == row_of(cfg_of({"model": {"framework": "hugectr"}}))[
        "iter_ns_mean"]
