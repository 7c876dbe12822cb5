"""Column-wise sharding of the cluster design from the command line: a config that runs it end
to end (`run CONFIG --design cluster`) against hand-derived exchange bytes and HBM, its keys
in `config describe`, and every bad column split as one line naming the key, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_errors import one_line_error

from scratchpipe_sim.cli import main

CONFIG = Path(__file__).parent / "configs" / "cluster_column_wise.yaml"


def _run(tmp_path: Path, *sets: str) -> list[str]:
    return ["run", str(CONFIG), "--design", "cluster", "--no-cache", "-q",
            "--out", str(tmp_path / "out"), *(a for s in sets for a in ("--set", s))]


def test_the_column_wise_config_runs_end_to_end(tmp_path, capsys):
    """16 ranks, B = 128; tables 0-2 in 4 slices of 32 columns (v / 4 = 128 B), table 3 in
    2 slices of 64 columns each row-wise over 4 ranks of node 1 (its grid). The busiest rank
    holds a CW slice and a quarter of a grid slice: it sends 128 x 128 x 15/16 = 15,360 B
    (its slice to the 15 other ranks' samples) + 128 x 256 x 15 / (16 x 4) = 7,680 B (its
    grid part after the node's reduce, 128 x 256 x 3/4 = 24,576 B over NVLink), and
    receives less (14,848 B): 47,616 B a batch. HBM: a CW slice is 2,000 rows x (32 x 4 B
    + rowwise-adagrad's 4 B, kept on every slice) = 264,000 B, a grid part 2,000 / 4 x
    (64 x 4 + 4) = 130,000 B."""
    assert main(_run(tmp_path)) == 0
    capsys.readouterr()
    row = json.loads((tmp_path / "out" / "results.json").read_text())[0]
    assert row["design"] == "cluster" and row["gpus"] == 16
    assert row["alltoall_bytes_per_gpu"] == 47_616.0
    assert row["shard_GiB_per_gpu"] * 2**30 == pytest.approx(264_000 + 130_000)
    assert row["samples_per_s"] > 0 and 0 < row["exchange_share"] < 1


def test_slices_on_reused_ranks_run_end_to_end(tmp_path, capsys):
    """Table 0's four slices on ranks 5, 5, 5, 6 (TorchRec's column_wise(ranks=[...]) reusing
    a rank): rank 5 holds three CW slices (3 x 264,000 B), the most of any rank (tables 1
    and 2 go on the runs 0-3 and 7-10 with the least load, table 3's grid on 8-15)."""
    assert main(_run(tmp_path, "design_params.cluster.placement={0: [5, 5, 5, 6], "
                               "3: [8, 9, 10, 11, 12, 13, 14, 15]}")) == 0
    capsys.readouterr()
    row = json.loads((tmp_path / "out" / "results.json").read_text())[0]
    assert row["shard_GiB_per_gpu"] * 2**30 == pytest.approx(3 * 264_000)
    assert row["samples_per_s"] > 0


def test_describe_shows_the_column_keys(capsys):
    assert main(["config", "describe", "design_params.cluster"]) == 0
    out = capsys.readouterr().out
    for words in ("design_params.cluster.column_shard_dim", "MIN_CW_DIM",
                  "design_params.cluster.columns", "column_wise(ranks)",
                  "design_params.cluster.sharding", "column-wise"):
        assert words in out


@pytest.mark.parametrize("sets, words", [
    (["design_params.cluster.columns={0: 3}"],
     ["design_params.cluster.columns.0", "3 column shards", "expected a divisor of 128"]),
    (["design_params.cluster.columns={0: 8}"],
     ["design_params.cluster.columns.0", "16 columns wide", "at least column_shard_dim = 32"]),
    (["design_params.cluster.column_shard_dim=4", "design_params.cluster.sharding=auto",
      "design_params.cluster.columns={1: 64}"],
     ["design_params.cluster.columns.1", "2 columns wide", "multiple of 4"]),
    (["design_params.cluster.column_shard_dim=4", "design_params.cluster.sharding=table-wise",
      "design_params.cluster.columns={0: 32}"],
     ["design_params.cluster.columns.0", "32 column shards", "a shard group has 16 ranks"]),
    (["design_params.cluster.shard_group=8", "design_params.cluster.columns={0: 16}",
      "design_params.cluster.column_shard_dim=8", "design_params.cluster.sharding=row-wise"],
     ["design_params.cluster.columns.0", "a shard group has 8 ranks"]),
    (["design_params.cluster.column_shard_dim=4"],
     ["design_params.cluster.column_shard_dim", "32 column shards", "at least 8"]),
    (["design_params.cluster.column_shard_dim=2"],
     ["design_params.cluster.column_shard_dim", ">= 4"]),
    (["design_params.cluster.columns={9: 2}"],
     ["design_params.cluster.columns.9", "no table '9'"]),
    (["design_params.cluster.columns={3: 2, 1: 4}",
      "design_params.cluster.placement={3: [8, 9, 10]}"],
     ["design_params.cluster.placement.3", "3 ranks", "expected a multiple of 2 ranks"]),
    (["design_params.cluster.columns={0: -1}"],
     ["design_params.cluster.columns.0", "expected a divisor of 128"]),
    (["design_params.cluster.placement={0: [3, 3, 16, 1]}"],
     ["design_params.cluster.placement.0", "rank 16 is beyond the shard group's 16 ranks"]),
    (["design_params.cluster.placement={0: [3, 3, 1]}"],
     ["design_params.cluster.placement.0", "3 ranks", "expected a multiple of 4 ranks"]),
    (["design_params.cluster.placement={3: [8, 10, 12, 14]}"],
     ["design_params.cluster.placement.3", "slice 0 of table 3 on ranks [8, 10]",
      "expected 2 consecutive ascending ranks"]),
])
def test_bad_column_shards(tmp_path, capsys, sets, words):
    one_line_error(capsys, _run(tmp_path, *sets), str(CONFIG), *words)
    assert not (tmp_path / "out").exists()


def test_a_column_shard_that_cannot_fit_names_its_key(tmp_path, capsys):
    """GPUs of 0.0004 GiB (429,497 B): a 32-column slice (264,000 B) fits one a rank, two
    placed on rank 0 by `placement` do not; a 64-column slice (2,000 x (256 + 4) = 520,000
    B) fits nowhere. (The tables stay small: a trace of tables that large would not fit in
    this machine's memory, which is checked first.)"""
    tiny = ["hardware.gpu.hbm_capacity_GiB=0.0004", "hardware.gpu.l2_MiB=0.1",
            "cache.capacity_rows=1"]
    one_line_error(capsys, _run(tmp_path, *tiny, "design_params.cluster.columns={0: 4, 1: 4}",
                                "design_params.cluster.placement={0: [0, 1, 2, 3], "
                                "1: [0, 1, 2, 3]}"),
                   str(CONFIG), "design_params.cluster.placement", "rank 0 holds",
                   "expected a placement that fits")
    one_line_error(capsys, _run(tmp_path, *tiny, "design_params.cluster.column_shard_dim=64",
                                "design_params.cluster.columns={0: 2}"),
                   str(CONFIG), "design_params.cluster.columns.0", "fit on no run of 2",
                   "narrower slices")
    assert not (tmp_path / "out").exists()
