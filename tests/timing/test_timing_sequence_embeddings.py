"""Sequence (unpooled) embeddings, `model.pooling_mode: none` (TorchRec's EmbeddingCollection):
each lookup outputs its own row, so the forward's writes, hybrid's link traffic and
multi-gpu's all-to-alls grow with the pooling factor; pooled and unpooled tables mix."""

from __future__ import annotations

import pytest
from small_configs import IDS_ONLY_INPUTS, off_chip

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import simulate

BASE = {
    "input_pipeline": IDS_ONLY_INPUTS,
    "hardware": off_chip("a100-gen4"),
    "model": {"tables": {"count": 2, "rows": 2000, "dim": 16}, "pooling": 4, "batch_size": 32,
              "num_batches": 6, "warmup_batches": 2, "bottom_mlp": [13, 16],
              "top_mlp": [19, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 400},
    "seed": 3,
}


def cfg_of(over=None):
    return load_config(deep_merge(BASE, over or {}))


@pytest.mark.parametrize("mode,rows_per_sample", [("sum", 2), ("mean", 2), ("none", 8),
                                                  (["none", "sum"], 5)])
def test_hybrid_sends_one_row_per_output(mode, rows_per_sample):
    """hybrid's H2D (outputs) and D2H (their gradients): B x output rows x 64 B each way."""
    cfg = cfg_of({"model": {"pooling_mode": mode}})
    assert sum(cfg.model.output_rows_per_table) == rows_per_sample
    row = simulate(cfg, ["hybrid"])[0]
    timed = cfg.model.num_batches - cfg.model.warmup_batches
    expect = timed * 32 * rows_per_sample * 64
    assert row["pcie_h2d_bytes"] == row["pcie_d2h_bytes"] == expect


def test_unpooled_forward_writes_one_row_per_lookup_to_hbm():
    """gpu-only's HBM bytes grow by exactly the extra output rows: B x T x (L - 1) x r."""
    pooled = simulate(cfg_of(), ["gpu-only"])[0]
    seq = simulate(cfg_of({"model": {"pooling_mode": "none"}}), ["gpu-only"])[0]
    timed = 4
    assert seq["hbm_bytes"] - pooled["hbm_bytes"] == pytest.approx(timed * 32 * 2 * 3 * 64)
    assert seq["stage_gpu_gather_ns"] > pooled["stage_gpu_gather_ns"]


def test_multi_gpu_all_to_all_grows_with_unpooled_tables():
    over = {"design_params": {"multi-gpu": {"gpus": 2, "sharding": "table-wise"}}}
    pooled = simulate(cfg_of(over), ["multi-gpu"])[0]
    seq = simulate(cfg_of(deep_merge(over, {"model": {"pooling_mode": "none"}})),
                   ["multi-gpu"])[0]
    assert seq["stage_output_dist_ns"] > pooled["stage_output_dist_ns"]


@pytest.mark.parametrize("mode,field", [("concat", "model.pooling_mode"),
                                        (["sum", "max"], "model.pooling_mode[1]"),
                                        (["sum"], "model.pooling_mode")])
def test_bad_pooling_mode_names_the_key(mode, field):
    with pytest.raises(UserError) as e:
        cfg_of({"model": {"pooling_mode": mode}})
    assert e.value.field == field


def test_bad_pooling_mode_is_one_line_exit_2(tmp_path, capsys):
    import yaml

    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(deep_merge(BASE, {"model": {"pooling_mode": "nonee"}})))
    assert main(["config", "show", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean 'none'" in err
