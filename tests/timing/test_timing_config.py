"""Bad input to the timing model's config: one line naming the key, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from scratchpipe_sim.config import load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.designs import check_params, design_params

BASE = {"model": {"tables": {"count": 2, "rows": 100}, "num_batches": 4, "warmup_batches": 1,
                  "batch_size": 8}}


@pytest.mark.parametrize(
    "sets, field, words",
    [
        (["hardware.cpu.llc_MiB=-1"], "hardware.cpu.llc_MiB", ">= 0"),
        (
            ["hardware.cpu.llc_MiB=1048576", "hardware.dram_capacity_GiB=512"],
            "hardware.cpu.llc_MiB",
            "larger than",
        ),
        (["hardware.gpu.l2_MiB=200000"], "hardware.gpu.l2_MiB", "larger than"),
        (["hardware.gpu.aggregate_efficiency=0"], "hardware.gpu.aggregate_efficiency", "> 0"),
        (["hardware.cpu.parallel_efficiency=1.5"], "hardware.cpu.parallel_efficiency", "<= 1"),
        (["hardware.cpu.cores=0"], "hardware.cpu.cores", ">= 1"),
        (["model.tables.rows=0"], "model.tables.rows", ">= 1"),
        (["model.index_bytes=6"], "model.index_bytes", "4 (int32) or 8"),
        (
            [
                "design_params.scratchpipe.pipeline="
                "[[plan], [collect], [exchang], [insert], [train]]"
            ],
            "design_params.scratchpipe.pipeline[2]",
            "did you mean 'exchange'",
        ),
        (
            ["design_params.scratchpipe.pipeline=[[plan], [exchange, collect], [insert], [train]]"],
            "design_params.scratchpipe.pipeline",
            "in that order",
        ),
        (
            [
                "design_params.scratchpipe.pipeline="
                "[[plan], [], [collect, exchange, insert], [train]]"
            ],
            "design_params.scratchpipe.pipeline[1]",
            "non-empty",
        ),
        (
            ["design_params.scratchpipe.lookahead=2"],
            "design_params.scratchpipe.lookahead",
            "design_params.scratchpipe.lookahead >= 5",
        ),
        (["cache.warmup_batches=-1"], "cache.warmup_batches", ">= 0"),
        (["cache.warmup_batches=soon"], "cache.warmup_batches", "'auto'"),
        (
            ["hardware.ranges={cpu.dram_GBps: [200, 100]}"],
            "hardware.ranges.cpu.dram_GBps",
            "low <= high",
        ),
        # the CPU cost terms of issue 11's model fixes
        (["hardware.cpu.aggregate_ns_per_row=-1"], "hardware.cpu.aggregate_ns_per_row", ">= 0"),
        (["hardware.cpu.plan_ns_per_eviction=-5"], "hardware.cpu.plan_ns_per_eviction", ">= 0"),
        (["hardware.cpu.core_dram_GBps=0"], "hardware.cpu.core_dram_GBps", "> 0"),
        (["hardware.cpu.core_llc_GBps=-2"], "hardware.cpu.core_llc_GBps", "> 0"),
        (
            ["hardware.cpu.core_dram_GBps=[[256, 3], [128, 4]]"],
            "hardware.cpu.core_dram_GBps",
            "increase strictly",
        ),
        (["hardware.cpu.core_llc_GBps=[[256, 0]]"], "hardware.cpu.core_llc_GBps[0]", "GBps > 0"),
        (["hardware.cpu.core_llc_GBps=[]"], "hardware.cpu.core_llc_GBps", "at least one"),
        (["hardware.cpu.core_window_rows=0.5"], "hardware.cpu.core_window_rows", ">= 1"),
        (
            ["hardware.ranges={cpu.plan_ns_per_eviction: [-10, 100]}"],
            "hardware.ranges.cpu.plan_ns_per_eviction",
            "0 <= low",
        ),
    ],
)
def test_bad_timing_config(sets, field, words):
    with pytest.raises(UserError) as e:  # design params are checked by the timing layer
        check_params(load_config(BASE, sets))
    assert e.value.field == field
    assert words in e.value.message


def test_fused_shape_allows_a_smaller_window():
    cfg = load_config(
        BASE,
        [
            "design_params.scratchpipe.lookahead=3",
            "design_params.scratchpipe.pipeline=[[plan], [collect, exchange, insert], [train]]",
        ],
    )
    assert len(design_params(cfg, "scratchpipe").pipeline) == 3
    # the window only matters when scratchpipe runs
    check_params(load_config(BASE, ["design_params.scratchpipe.lookahead=2", "designs=[hybrid]"]))


def test_cli_window_below_depth_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump({**BASE, "cache": {}, "design_params": {"scratchpipe": {"lookahead": 3}}})
    )
    out = subprocess.run([sys.executable, "-m", "scratchpipe_sim", "run", str(cfg)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and "design_params.scratchpipe.lookahead" in lines[0] and ">= 5" in lines[0]
    )


@pytest.mark.parametrize("key", ["cpu.core_dram_GBps", "cpu.core_llc_GBps",
                                 "cpu.core_window_rows",
                                 "cpu.aggregate_ns_per_row", "cpu.plan_ns_per_eviction"])
def test_new_cpu_keys_load_from_every_preset_and_round_trip(key, tmp_path):
    """Each new constant has a value and a range in every shipped preset, and survives
    `config show` -> load."""
    from pathlib import Path

    sec, name = key.split(".")
    for preset in sorted(Path("configs/hardware").glob("*.yaml")):
        cfg = load_config({**BASE, "hardware": {"preset": preset.stem}})
        raw = yaml.safe_load(preset.read_text())
        if "preset" not in raw:  # a base preset states every key itself
            assert name in raw["cpu"], preset
        assert key in cfg.hardware.ranges, preset
        lo, hi = cfg.hardware.ranges[key]
        assert lo <= getattr(cfg.hardware.cpu, name) <= hi, preset
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "hardware": {"preset": "a100-gen4",
                                                         sec: {name: 7.5}}}))
    shown = subprocess.run([sys.executable, "-m", "scratchpipe_sim", "config", "show",
                            str(path)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    again = tmp_path / "again.yaml"
    again.write_text(shown.stdout)
    assert getattr(load_config(str(again)).hardware.cpu, name) == 7.5
    assert load_config(str(again)).hardware == load_config(str(path)).hardware
