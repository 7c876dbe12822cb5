"""`design_params.scratchpipe.on_overflow`: a scratchpad smaller than its window errors
(naming the minimum) or stalls, serving the surplus rows from host memory over UVM."""

from __future__ import annotations

import pytest

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.scratchpipe import min_scratchpipe_capacity
from scratchpipe_sim.timing import build_trace, simulate

BASE = {
    "hardware": {"preset": "a100-gen4"},
    "model": {
        "tables": {"count": 2, "rows": 500, "dim": 32},
        "pooling": 4,
        "batch_size": 64,
        "num_batches": 12,
        "warmup_batches": 2,
        "bottom_mlp": [13, 64, 16],
        "interaction": "cat",
        "top_mlp": [80, 32, 1],
    },
    "trace": {"distribution": "zipf", "alpha": 1.05},
    # a fixed warm-up: `auto` lengthens a generated trace's prefix by the cache's size, so
    # the minimum found on one capacity's trace would not be another's
    "cache": {"warmup_batches": 12},
    # W = 3 needs a shape of at most 3 stage groups: plan | collect+exchange+insert | train
    "design_params": {
        "scratchpipe": {
            "lookahead": 3,
            "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]],
        }
    },
    "designs": ["scratchpipe"],
    "seed": 5,
}


def _cfg(capacity, mode):
    return load_config(
        deep_merge(
            BASE,
            {
                "cache": {"capacity_rows": capacity},
                "design_params": {"scratchpipe": {"on_overflow": mode}},
            },
        )
    )


def _min_capacity():
    cfg = _cfg(1000, "error")
    return min_scratchpipe_capacity(build_trace(cfg), 3)


def test_error_names_the_minimum_capacity():
    need = _min_capacity()
    with pytest.raises(UserError, match=f"capacity >= {need} rows for lookahead 3"):
        simulate(_cfg(need - 1, "error"))
    (row,) = simulate(_cfg(need, "error"))
    assert row["design"] == "scratchpipe"


def test_stall_serves_surplus_over_uvm_and_is_slower_than_a_fitting_scratchpad():
    need = _min_capacity()
    (fits,) = simulate(_cfg(need, "stall"))
    (stalls,) = simulate(_cfg(need // 4, "stall"))
    (fits_error_mode,) = simulate(_cfg(need, "error"))
    # With enough capacity the mode changes nothing.
    assert fits["iter_ns_mean"] == fits_error_mode["iter_ns_mean"]
    # Too small: it still runs, but surplus rows cross PCIe in place, so it is slower.
    assert stalls["iter_ns_mean"] > fits["iter_ns_mean"]
    assert stalls["hit_ratio"] < fits["hit_ratio"]


def test_bad_mode_is_one_line_exit_2(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("hardware: {preset: a100-gen4}\n"
                   "design_params: {scratchpipe: {on_overflow: wait}}\n")
    assert main(["config", "show", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "design_params.scratchpipe.on_overflow" in err and "stall" in err
