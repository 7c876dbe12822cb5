"""`cache --ranges` and `run --ranges` end to end: the proof per range, `--check`'s
comparison, identical run rows, the warning for policies without a proof, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from small_configs import SMALL_A100

from scratchpipe_sim.cli import main
from scratchpipe_sim.policies import time_ranges
from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.traces.csr_trace import Trace

WALL = ("policy_wall_s", "simpy_wall_s")


@pytest.fixture
def npy(tmp_path, zipf_ids):
    path = tmp_path / "ids.npy"
    np.save(path, zipf_ids(5000, 800, 1.1, 7))
    return path


def _cache(capsys, npy, *extra):
    code = main(["cache", "--trace", str(npy), "--policy", "lru", "--capacity", "50",
                 "--batch-size", "8", "--executor", "local", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_cache_ranges_check_proves_and_equals_the_full_replay(capsys, npy):
    code, d = _cache(capsys, npy, "--ranges", "4", "--check")
    assert code == 0 and d["proven"] and d["all_equal"]
    ids = np.load(npy)
    want = run_cache(Trace.single_table(ids, int(ids.max()) + 1, 8), "lru", 50)
    assert (d["accesses"], d["hits"]) == (want.accesses, want.hits)
    assert d["full_hit_ratio"] == d["hit_ratio"] == want.hit_ratio
    assert [r["proven"] for r in d["ranges"]] == [True] * 4
    assert all(r["overlap_rows"] >= 50 for r in d["ranges"][1:])


def test_cache_ranges_short_overlap_is_not_proven_and_measured(capsys, npy):
    code, d = _cache(capsys, npy, "--ranges", "3", "--overlap", "1", "--check")
    assert code == 0 and not d["proven"]  # not proven is not an error: it is measured
    late = d["ranges"][1:]
    assert all(not r["proven"] and r["overlap_rows"] < 50 for r in late)
    assert any(not r["equal"] and r["max_abs_diff"] > 0 for r in late)
    main(["cache", "--trace", str(npy), "--policy", "lru", "--capacity", "50",
          "--batch-size", "8", "--executor", "local", "--ranges", "3", "--overlap", "1",
          "--check"])
    text = capsys.readouterr().out
    assert "not proven" in text and "differs from the full replay" in text


def test_cache_overlap_without_ranges_is_refused(capsys, npy):
    assert main(["cache", "--trace", str(npy), "--policy", "lru", "--capacity", "50",
                 "--overlap", "3"]) == 2
    assert "--overlap needs --ranges K" in capsys.readouterr().err


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(SMALL_A100))
    return p


def _rows(capsys, argv):
    assert main(argv) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    return [{k: v for k, v in r.items() if k not in WALL} for r in rows], captured.err


def test_run_ranges_gives_the_same_rows_and_names_the_policies_replayed_whole(
        cfg_file, tmp_path, capsys, monkeypatch):
    made = []
    real = time_ranges.replay_ranges

    def spy(trace, policy, *args, **kwargs):
        made.append(policy)
        return real(trace, policy, *args, **kwargs)

    monkeypatch.setattr(time_ranges, "replay_ranges", spy)
    designs = ["--design", "lru-cache", "--design", "scratchpipe"]
    base = ["run", str(cfg_file), "--no-cache", "--no-timeline", "--json", "-q", *designs]
    whole, _ = _rows(capsys, [*base, "--out", str(tmp_path / "a")])
    ranged, err = _rows(capsys, [*base, "--out", str(tmp_path / "b"), "--ranges", "3",
                                 "--executor", "local"])
    assert ranged == whole
    assert made == ["lru"]  # the lru replay was made by ranges, scratchpipe's whole
    assert "design scratchpipe's policy scratchpipe is not proven exact" in err
    assert "lru-cache" not in err


def test_run_ranges_bad_input_is_one_line(cfg_file, tmp_path, capsys):
    assert main(["run", str(cfg_file), "--ranges", "0", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ranges" in err[0]
    assert main(["run", str(cfg_file), "--ranges", "2", "--sample", "0.5",
                 "--out", str(tmp_path / "y")]) == 2
    assert "not with a sampled run" in capsys.readouterr().err
