"""ScratchPipe's design variants (issue 27): the planner on the GPU, collect by GPU loads in
place. Each is a real cost in the model: checked by the bytes each moves and by the closed
form of the GPU planner's HBM time."""

from __future__ import annotations

import pytest
import simpy
from small_configs import TWO_SMALL_TABLES, off_chip

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.designs import check_params
from scratchpipe_sim.timing.machine import Machine

BASE = {**TWO_SMALL_TABLES,
        "hardware": off_chip("a100-gen4"),
        "designs": ["scratchpipe"]}


def run(params=None):
    over = {"design_params": {"scratchpipe": params or {}}}
    return simulate(load_config(deep_merge(BASE, over)), ["scratchpipe"])[0]


def test_gpu_collect_moves_the_rows_in_place_and_no_staging_copy():
    """Same policy, same fills: the paper's collect DMA-copies F x R bytes after a CPU
    staging gather; the GPU variant loads the same rows in place (whole sectors) and
    stores the victims in place, so the link carries the same rows and host DRAM no
    staging traffic."""
    paper, gpu = run(), run({"collect": "gpu"})
    assert paper["fills"] == gpu["fills"] > 0
    assert gpu["pcie_h2d_bytes"] == paper["pcie_h2d_bytes"]  # 128 B rows: whole sectors
    assert gpu["pcie_d2h_bytes"] == paper["pcie_d2h_bytes"]
    assert gpu["dram_bytes"] < paper["dram_bytes"]  # no staging buffer write nor read
    assert gpu["busy_cpu_cores"] < paper["busy_cpu_cores"]  # no gather on the cores


def test_gpu_planner_leaves_the_cpu_cores_to_nothing():
    paper, gpu = run(), run({"planner": "gpu"})
    assert paper["busy_cpu_cores"] > 0
    assert gpu["busy_cpu_cores"] < paper["busy_cpu_cores"]
    assert gpu["stage_plan_ns"] > 0 and gpu["fills"] == paper["fills"]


def test_gpu_plan_closed_form():
    """ids / hash_lookup_Gps + evictions / hash_insert_Gps ns of HBM service, alone."""
    cfg = load_config(BASE)
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    gpu = cfg.hardware.gpu
    env.run(m.gpu_plan(0, 1_000_000, 10_000))
    busy = 1e6 / gpu.hash_lookup_Gps + 1e4 / gpu.hash_insert_Gps
    assert env.now == pytest.approx(gpu.hbm_latency_ns + busy, rel=1e-9)


@pytest.mark.parametrize("key", ["planner", "collect"])
def test_unknown_variant_names_the_key(key):
    with pytest.raises(UserError) as e:  # design params: checked by the timing layer
        check_params(load_config(deep_merge(BASE, {"design_params": {"scratchpipe": {
            key: "fpga"}}})))
    assert e.value.field == f"design_params.scratchpipe.{key}"
