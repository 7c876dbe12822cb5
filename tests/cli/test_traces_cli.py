"""`scratchpipe-sim trace gen|stats` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scratchpipe_sim.cli import main
from scratchpipe_sim.traces.generators import generate_trace
from scratchpipe_sim.traces.io import open_trace
from scratchpipe_sim.traces.stats import lru_miss_ratio_curve, read_locality_stats

TRACES = Path(__file__).resolve().parents[2] / "traces"
GEN = ["trace", "gen", "--distribution", "zipf", "--alpha", "1.1", "--rows", "400,100",
       "--batch-size", "16", "--batches", "10", "--pooling", "3,2", "--reuse", "0.25",
       "--seed", "9"]


def test_gen_writes_the_same_trace_as_the_api(tmp_path, capsys):
    out = tmp_path / "z.sptrace"
    assert main([*GEN, "--out", str(out)]) == 0
    assert "800 accesses" in capsys.readouterr().out
    t = open_trace(out)
    api = generate_trace("zipf", [400, 100], 16, 10, [3, 2], seed=9, reuse=0.25, alpha=1.1)
    assert t.linear_ids().tolist() == api.linear_ids().tolist()
    assert t.meta["generator"]["params"] == {"alpha": 1.1, "permute": True}


def test_gen_refuses_to_overwrite_without_force(tmp_path, capsys):
    out = tmp_path / "z.sptrace"
    assert main([*GEN, "--out", str(out)]) == 0
    before = open_trace(out).linear_ids().tolist()
    capsys.readouterr()
    assert main([*GEN[:-1], "10", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out) in err and "--force" in err
    assert main([*GEN[:-1], "10", "--out", str(out), "--force"]) == 0
    assert open_trace(out).linear_ids().tolist() != before


def test_gen_tables_and_hotset_and_param(tmp_path):
    out = tmp_path / "h.sptrace"
    assert main(["trace", "gen", "--distribution", "hotset", "--hot-fraction", "0.1",
                 "--hot-access-fraction", "0.7", "--rows", "1000", "--tables", "3",
                 "--batch-size", "8", "--batches", "4", "--seed", "1", "--out", str(out)]) == 0
    t = open_trace(out)
    assert t.table_rows.tolist() == [1000] * 3
    assert t.meta["generator"]["params"] == {"hot_fraction": 0.1, "hot_access_fraction": 0.7}
    out2 = tmp_path / "p.sptrace"
    assert main(["trace", "gen", "--param", "alpha=0.9", "--no-permute", "--rows", "50",
                 "--batch-size", "4", "--batches", "2", "--seed", "1", "--out",
                 str(out2)]) == 0
    assert open_trace(out2).meta["generator"]["params"] == {"alpha": 0.9, "permute": False}


def test_gen_pooling_sigma(tmp_path):
    out = tmp_path / "j.sptrace"
    assert main([*GEN, "--pooling-sigma", "1.5", "--out", str(out)]) == 0
    api = generate_trace("zipf", [400, 100], 16, 10, [3, 2], seed=9, reuse=0.25, alpha=1.1,
                         pooling_sigma=1.5)
    t = open_trace(out)
    assert np.asarray(t.offsets).tolist() == api.offsets.tolist()
    assert t.linear_ids().tolist() == api.linear_ids().tolist()


@pytest.mark.parametrize("args,expected", [
    (["--alpha", "0"], "--alpha: alpha must be > 0"),
    (["--reuse", "2"], "--reuse: expected a fraction in [0, 1]"),
    (["--pooling", "1,2,3"], "--pooling: expected one pooling factor per table"),
    (["--batch-size", "0"], "--batch-size: expected a positive integer"),
    (["--batches", "0"], "--batches: expected a positive integer"),
    (["--rows", "10,x"], "--rows: expected integers"),
    (["--rows", "10,-5"], "--rows: expected a positive integer"),
    (["--tables", "3"], "--rows: 2 row counts for 3 tables"),
    (["--distribution", "zipff"], "unknown distribution 'zipff' (did you mean 'zipf'?)"),
    (["--hot-fraction", "0.5"], "--hot-fraction: unknown parameter for distribution 'zipf'"),
    (["--param", "beta"], "--param: expected KEY=VALUE"),
    (["--pooling-sigma", "-1"], "--pooling-sigma: expected a standard deviation >= 0"),
])
def test_gen_bad_flags_exit_2_with_one_line(tmp_path, capsys, args, expected):
    argv = [*GEN, "--out", str(tmp_path / "x.sptrace"), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "x.sptrace").exists()


def test_stats_json_matches_the_library(capsys):
    path = TRACES / "zipf_small.sptrace"
    assert main(["trace", "stats", str(path), "--json", "--capacities", "15,10%,300"]) == 0
    d = json.loads(capsys.readouterr().out)
    t = open_trace(path)
    ids = t.linear_ids()
    assert d["accesses"] == 3840 and d["distinct_rows"] == len(np.unique(ids))
    assert "unique" not in d  # cache and run use unique for the per-batch sum
    assert d["tables"] == 2 and d["table_rows"] == [1000, 500] and d["batches"] == 20
    curve = lru_miss_ratio_curve(t, [15, 150, 300])
    assert [p["capacity"] for p in d["lru_mrc"]] == [15, 150, 300]
    assert [p["misses"] for p in d["lru_mrc"]] == [curve.misses_at(c) for c in (15, 150, 300)]
    h = d["histogram"]
    assert len(h["buckets"]) == 17 and sum(h["row_counts"]) == d["distinct_rows"]
    assert sum(h["access_counts"]) == 3840


def test_stats_text_report_and_no_mrc(capsys):
    assert main(["trace", "stats", str(TRACES / "ids_small.npy"), "--batch-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "accesses         2000" in out and "(0, 1]" in out and "(32768+" in out
    assert "LRU miss ratio" in out and "batches          125" in out
    assert main(["trace", "stats", str(TRACES / "trace_small.log"), "--no-mrc",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "lru_mrc" not in d and d["accesses"] == 2000


def test_stats_meta_format_parses_as_metas_file(tmp_path, capsys):
    assert main(["trace", "stats", str(TRACES / "zipf_small.sptrace"), "--meta-format"]) == 0
    (tmp_path / "s.txt").write_text(capsys.readouterr().out)
    (s,) = read_locality_stats(tmp_path / "s.txt")
    assert s.num_indices == 3840 and s.batch_size == 20 * 32


@pytest.mark.parametrize("caps", ["0", "5%,x", "-3%", ","])
def test_stats_bad_capacities(capsys, caps):
    assert main(["trace", "stats", str(TRACES / "ids_small.npy"), f"--capacities={caps}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--capacities" in err
