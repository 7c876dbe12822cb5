"""`validate --cpu`: the real CPU kernels against plain-numpy oracles, the timed planner
against the simulator's replay, and the command end to end on a tiny config (no timing
bounds: this is a shared machine)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.cpu import host_kernels as K
from scratchpipe_sim.cpu.host_validation import CPU_STAGES
from scratchpipe_sim.cpu.plan_stage import run_planner
from scratchpipe_sim.timing.counts import policy_counts
from scratchpipe_sim.traces.generators import generate_trace

TINY = {
    "name": "tiny",
    "seed": 3,
    "hardware": {"preset": "a100-gen4"},
    "model": {
        "tables": {"count": 2, "rows": 20000, "dim": 16, "bytes_per_element": 4},
        "pooling": 4,
        "batch_size": 64,
        "optimizer": "adagrad",
        "bottom_mlp": [13, 16],
        "top_mlp": [19, 1],
        "num_batches": 10,
        "warmup_batches": 2,
    },
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 2600, "warmup_batches": 4},
    "design_params": {"scratchpipe": {"lookahead": 5, "queue_depth": 2}},
    "designs": ["hybrid", "scratchpipe"],
}


def _cfg(tmp_path, **over):
    d = yaml.safe_load(yaml.safe_dump(TINY))
    d.update(over)
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_bag_pool_matches_numpy():
    rng = np.random.default_rng(0)
    store = rng.standard_normal((50, 6)).astype(np.float32)
    ids = rng.integers(0, 50, 37).astype(np.int64)
    bag_ptr = np.array([0, 5, 5, 20, 37], np.int64)
    out = np.empty((4, 4), np.float32)
    K.bag_pool(store, 4, ids, bag_ptr, out)
    want = np.array([store[ids[a:b], :4].sum(axis=0)
                     for a, b in zip(bag_ptr[:-1], bag_ptr[1:], strict=True)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise-adagrad"])
@pytest.mark.parametrize("parts", [1, 3])
def test_aggregate_and_apply_match_numpy(optimizer, parts):
    rng = np.random.default_rng(1)
    rows, dim, n = 40, 4, 200
    cols = dim + K.state_columns(optimizer, dim)
    store = rng.random((rows, cols)).astype(np.float32) + 0.5
    ids = rng.integers(0, rows, n).astype(np.int64)
    bag_ptr = np.arange(0, n + 1, 8, dtype=np.int64)
    bag_of = K.bag_of_lookups(bag_ptr)
    grads = rng.standard_normal((len(bag_ptr) - 1, dim)).astype(np.float32)
    g = np.zeros((rows, dim), np.float64)  # oracle: scatter-add per lookup
    np.add.at(g, ids, grads[bag_of])
    uniq = np.unique(ids)
    want = store.astype(np.float64).copy()
    lr, eps = 0.01, 1e-8
    if optimizer == "sgd":
        want[uniq, :dim] -= lr * g[uniq]
    elif optimizer == "adagrad":
        want[uniq, dim:] += g[uniq] ** 2
        want[uniq, :dim] -= lr * g[uniq] / (np.sqrt(want[uniq, dim:]) + eps)
    else:
        want[uniq, dim] += (g[uniq] ** 2).mean(axis=1)
        want[uniq, :dim] -= (lr / (np.sqrt(want[uniq, dim]) + eps))[:, None] * g[uniq]
    bw = K.Backward(rows, dim, n, parts)
    u = bw.aggregate(ids, bag_of, grads)
    assert u == len(uniq)
    assert sorted(bw.uniq[:u].tolist()) == uniq.tolist()
    bw.apply(optimizer, store, u)
    np.testing.assert_allclose(store, want, rtol=1e-4, atol=1e-5)
    assert (bw.slot == -1).all()  # reset for the next batch


def test_timed_planner_fills_are_the_policys():
    tr = generate_trace("zipf", [3000, 3000], 32, 12, 3, 5, alpha=1.05)
    run = run_planner(tr, 900, 3, keep_fills=True)
    w = policy_counts(tr, "scratchpipe", 900, lookahead=3)
    assert [len(f) for f in run.fills] == w.cols["fills"].tolist()
    assert run.counts[:, 6].tolist() == w.cols["writebacks"].tolist()
    assert all(len(np.unique(f)) == len(f) for f in run.fills)
    assert run.ns_per_id() > 0


def test_validate_cpu_json_has_every_cpu_stage(tmp_path, capsys):
    cfg = _cfg(tmp_path)
    assert main(["validate", "--cpu", str(cfg), "--json", "--reps", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    want = [f"{d}.{s}" for d in ("hybrid", "scratchpipe") for s in CPU_STAGES[d]]
    # then the host's drift probe: a uniform gather, measured beside every pass
    assert [r["stage"] for r in rows] == [*want, "host.uniform_gather"]
    assert rows[-1]["batches"] == 1 and rows[-1]["drift_adjusted_pct"] is None
    # every stage's error relative to the probe's: (1 + e) / (1 + e_probe) - 1
    e0 = rows[-1]["error_pct"] / 100
    for r in rows[:-1]:
        assert r["drift_adjusted_pct"] == pytest.approx(
            ((1 + r["error_pct"] / 100) / (1 + e0) - 1) * 100, rel=1e-9, abs=1e-9)
    for r in rows:
        assert {"stage", "predicted_ns", "measured_ns", "error_pct"} <= set(r)
        assert r["predicted_ns"] > 0 and r["measured_ns"] > 0, r  # every stage has work


def test_validate_cpu_table_and_one_design(tmp_path, capsys):
    cfg = _cfg(tmp_path, designs=["gpu-only", "hybrid"])
    assert main(["validate", "--cpu", str(cfg), "--reps", "1", "--batches", "2"]) == 0
    out = capsys.readouterr().out
    assert "hybrid.gather_pool" in out and "scratchpipe" not in out.split("\n", 1)[1]


@pytest.mark.parametrize("extra, over, msg", [
    ([], {"designs": ["gpu-only"]}, "designs"),
    (["--rows", "0"], {}, "--rows"),
    ([], {"model": {**TINY["model"], "tables": {**TINY["model"]["tables"],
                                                  "bytes_per_element": 2}}},
     "bytes_per_element"),
])
def test_validate_cpu_bad_input_is_one_line(extra, over, msg, tmp_path, capsys):
    cfg = _cfg(tmp_path, **over)
    assert main(["validate", "--cpu", str(cfg), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_validate_cpu_too_large_names_the_size_and_the_flag(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", str(1 << 20))
    cfg = _cfg(tmp_path)
    assert main(["validate", "--cpu", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--rows" in err and "MiB" in err and len(err.splitlines()) == 1


def test_validate_cpu_rows_scales_the_tables(tmp_path, capsys):
    cfg = _cfg(tmp_path, designs=["hybrid"])
    assert main(["validate", "--cpu", str(cfg), "--rows", "3000", "--reps", "1"]) == 0
    assert "2 x 3000 rows" in capsys.readouterr().out
