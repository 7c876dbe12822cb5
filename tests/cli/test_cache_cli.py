"""`scratchpipe-sim cache` end to end: JSON keys and numbers, text report, exit-2 errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from scratchpipe_sim.cli import main
from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import write_trace

KEYS = {"accesses", "hits", "misses", "evictions", "writebacks", "hit_ratio", "wall_s",
        "accesses_per_s", "fills", "unplaced", "unique", "per_table"}


@pytest.fixture
def npy(tmp_path, zipf_ids):
    path = tmp_path / "ids.npy"
    np.save(path, zipf_ids(5000, 800, 1.1, 7))
    return path


def _json(capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    return json.loads(out[0])


def test_json_lru_equals_engine_and_batching(capsys, npy):
    ids = np.load(npy)
    d = _json(capsys, ["cache", "--trace", str(npy), "--policy", "lru", "--capacity", "50",
                       "--batch-size", "16", "--json"])
    assert KEYS <= set(d)
    want = run_cache(Trace.single_table(ids, int(ids.max()) + 1, 16), "lru", 50)
    assert (d["hits"], d["misses"], d["evictions"], d["writebacks"], d["unique"]) == (
        want.hits, want.misses, want.evictions, want.writebacks, want.unique)
    assert d["accesses"] == 5000 and d["hits"] + d["misses"] == 5000
    assert d["hit_ratio"] == pytest.approx(d["hits"] / 5000)
    assert d["batch_size"] == 16 and d["capacity"] == 50
    assert d["per_table"] == [{"table": 0, "accesses": 5000, "hits": d["hits"],
                               "misses": d["misses"], "unplaced": 0}]


def test_load_factor_multi_table_and_params(capsys, tmp_path):
    t = Trace.from_batches([[np.array([0, 1, 2]), np.array([3, 3])],
                            [np.array([0, 0, 1]), np.array([4, 1])]], [5, 7],
                           [[np.array([1, 1, 1]), np.array([1, 0, 1])],
                            [np.array([2, 1, 0]), np.array([0, 2, 0])]])
    path = write_trace(t, tmp_path / "two.sptrace")
    d = _json(capsys, ["cache", "--trace", str(path), "--policy", "static",
                       "--load-factor", "0.2", "--param", "preload=true", "--json"])
    assert d["capacity"] == math.ceil(0.2 * 12) == 3
    # counts over linearized ids: 0:3, 1:2, 2:1, 5+3:2, 5+4:1, 5+1:1 -> top 3 = {0, 1, 8}
    assert (d["hits"], d["unplaced"], d["fills"]) == (7, 3, 0)
    assert [row["accesses"] for row in d["per_table"]] == [6, 4]
    assert [row["hits"] for row in d["per_table"]] == [5, 2]


def test_text_report(capsys, npy):
    assert main(["cache", "--trace", str(npy), "--policy", "belady", "--capacity", "80"]) == 0
    out = capsys.readouterr().out
    want = run_cache(Trace.single_table(np.load(npy), None, 1), "belady", 80)
    for label, value in (("accesses", 5000), ("hits", want.hits), ("misses", want.misses),
                         ("evictions", want.evictions), ("write-backs", want.writebacks)):
        assert any(line.split()[:2] == [label, str(value)] for line in out.splitlines())
    assert f"hit ratio    {want.hit_ratio:.6f}" in out
    assert "accesses/s" in out and "wall time" in out


def _fails(capsys, argv, *fragments):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse usage errors exit directly, also with status 2
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for f in fragments:
        assert f in err, err


def test_bad_inputs_exit_2(capsys, tmp_path, npy):
    base = ["cache", "--policy", "lru", "--capacity", "10", "--trace"]
    _fails(capsys, base + [str(tmp_path / "nope.npy")], "nope.npy", "no such file")
    np.save(tmp_path / "f.npy", np.array([0.5, 1.0]))
    _fails(capsys, base + [str(tmp_path / "f.npy")], "f.npy", "integer")
    np.save(tmp_path / "neg.npy", np.array([3, -1, 2]))
    _fails(capsys, base + [str(tmp_path / "neg.npy")], "neg.npy", "negative")
    np.save(tmp_path / "empty.npy", np.zeros(0, np.int64))
    _fails(capsys, base + [str(tmp_path / "empty.npy")], "empty.npy", "empty")
    bad = Trace(np.array([4], np.int64), np.array([1, 9], np.int64), np.arange(3),
                np.array([0, 2]), 2, source="x")
    path = write_trace(bad, tmp_path / "oor.sptrace")
    _fails(capsys, base + [str(path)], "oor.sptrace", "out of range")
    t = str(npy)
    _fails(capsys, ["cache", "--trace", t, "--policy", "lru", "--capacity", "0"],
           "--capacity", "positive")
    _fails(capsys, ["cache", "--trace", t, "--policy", "lru", "--capacity", "-3"],
           "--capacity")
    _fails(capsys, ["cache", "--trace", t, "--policy", "lru", "--load-factor", "0"],
           "--load-factor")
    _fails(capsys, ["cache", "--trace", t, "--policy", "lru", "--load-factor", "5"],
           "--load-factor")
    _fails(capsys, ["cache", "--trace", t, "--policy", "lruu", "--capacity", "5"],
           "unknown policy 'lruu'", "did you mean 'lru'")
    _fails(capsys, ["cache", "--trace", t, "--policy", "lru", "--capacity", "5",
                    "--ways", "4"], "--ways")
    _fails(capsys, ["cache", "--trace", t, "--policy", "belady", "--capacity", "5",
                    "--lookahead", "2"], "--lookahead")
    _fails(capsys, ["cache", "--trace", t, "--policy", "static", "--capacity", "5",
                    "--param", "fraction=0.5"], "fraction", "profile_fraction")
    _fails(capsys, ["cache", "--trace", t, "--policy", "static", "--capacity", "5",
                    "--param", "profile_fraction=2"], "profile_fraction")
    _fails(capsys, ["cache", "--trace", t, "--policy", "lru", "--capacity", "5",
                    "--param", "oops"], "KEY=VALUE")
    _fails(capsys, ["cache", "--trace", t, "--policy", "lru"], "--capacity")


def test_lookahead_and_ways_reach_their_policies(capsys, npy):
    ids = np.load(npy)
    trace = Trace.single_table(ids, None, 8)
    for flag, policy, key in (("--lookahead", "scratchpipe", "lookahead"),
                              ("--ways", "fbgemm-lru", "ways")):
        d = _json(capsys, ["cache", "--trace", str(npy), "--policy", policy, "--capacity",
                           "200", "--batch-size", "8", flag, "4", "--json"])
        want = run_cache(trace, policy, 200, **{key: 4})
        assert (d["hits"], d["misses"], d["unplaced"]) == (want.hits, want.misses,
                                                           want.unplaced), policy
        other = run_cache(trace, policy, 200)
        assert policy != "fbgemm-lru" or d["ways"] == 4 != other.extra["ways"]
