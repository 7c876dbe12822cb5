"""Bad input to the timing model's config: one line naming the key, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from scratchpipe_sim.config import load_config
from scratchpipe_sim.errors import UserError

BASE = {"model": {"tables": {"count": 2, "rows": 100}, "num_batches": 4, "warmup_batches": 1,
                  "batch_size": 8}}


@pytest.mark.parametrize("sets, field, words", [
    (["hardware.cpu.llc_MiB=-1"], "hardware.cpu.llc_MiB", ">= 0"),
    (["hardware.cpu.llc_MiB=1048576", "hardware.dram_capacity_GiB=512"],
     "hardware.cpu.llc_MiB", "larger than"),
    (["hardware.gpu.l2_MiB=200000"], "hardware.gpu.l2_MiB", "larger than"),
    (["hardware.gpu.aggregate_efficiency=0"], "hardware.gpu.aggregate_efficiency", "> 0"),
    (["hardware.cpu.parallel_efficiency=1.5"], "hardware.cpu.parallel_efficiency", "<= 1"),
    (["hardware.cpu.cores=0"], "hardware.cpu.cores", ">= 1"),
    (["model.tables.rows=0"], "model.tables.rows", ">= 1"),
    (["model.index_bytes=6"], "model.index_bytes", "4 (int32) or 8"),
    (["cache.pipeline=[[plan], [collect], [exchang], [insert], [train]]"],
     "cache.pipeline[2]", "did you mean 'exchange'"),
    (["cache.pipeline=[[plan], [exchange, collect], [insert], [train]]"],
     "cache.pipeline", "in that order"),
    (["cache.pipeline=[[plan], [], [collect, exchange, insert], [train]]"],
     "cache.pipeline[1]", "non-empty"),
    (["cache.lookahead=2"], "cache.lookahead", "cache.lookahead >= 5"),
    (["cache.warmup_batches=-1"], "cache.warmup_batches", ">= 0"),
    (["cache.warmup_batches=soon"], "cache.warmup_batches", "'auto'"),
    (["hardware.ranges={cpu.dram_GBps: [200, 100]}"], "hardware.ranges.cpu.dram_GBps",
     "low <= high"),
])
def test_bad_timing_config(sets, field, words):
    with pytest.raises(UserError) as e:
        load_config(BASE, sets)
    assert e.value.field == field
    assert words in e.value.message


def test_fused_shape_allows_a_smaller_window():
    cfg = load_config(BASE, ["cache.lookahead=3",
                             "cache.pipeline=[[plan], [collect, exchange, insert], [train]]"])
    assert len(cfg.cache.pipeline) == 3
    # the window only matters when scratchpipe runs
    load_config(BASE, ["cache.lookahead=2", "designs=[hybrid]"])


def test_cli_window_below_depth_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**BASE, "cache": {"lookahead": 3}}))
    out = subprocess.run([sys.executable, "-m", "scratchpipe_sim", "run", str(cfg)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cache.lookahead" in lines[0] and ">= 5" in lines[0]
