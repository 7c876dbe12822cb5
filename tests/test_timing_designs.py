"""The six designs: closed-form cross-checks, monotonicity, bounds, byte accounting.

Oracles are independent of the timing code: per-batch accesses and unique rows come from
numpy over the linearized trace, fills/write-backs from the policy engine, stage times from
the config's bandwidths and latencies.
"""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.config import deep_merge, interpolate, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.engine import COUNTERS, iter_cache, make_policy
from scratchpipe_sim.policies.scratchpipe import min_scratchpipe_capacity
from scratchpipe_sim.timing import build_trace, simulate
from scratchpipe_sim.traces.trace import Trace

ALL = ["hybrid", "gpu-only", "static-cache", "lru-cache", "lru-prefetch", "scratchpipe"]
BASE = {
    "hardware": {"preset": "a100-gen4"},
    "model": {"tables": {"count": 2, "rows": 500, "dim": 32}, "pooling": 4, "batch_size": 64,
              "num_batches": 16, "warmup_batches": 4, "bottom_mlp": [13, 64, 16],
              "top_mlp": [20, 32, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 600, "lookahead": 3},
    "seed": 3,
}
WALL = ("policy_wall_s", "simpy_wall_s")


def cfg_of(over=None, sets=()):
    return load_config(deep_merge(BASE, over or {}), sets)


def covering_trace(rows=500, tables=2, batch=64, pooling=4, batches=16, cover=4, seed=0):
    """Batches 0..cover-1 touch every row; later batches draw from the same rows (Zipf-ish)."""
    rng = np.random.default_rng(seed)
    n = batch * pooling
    out, lens = [], []
    perms = [rng.permutation(rows) for _ in range(tables)]
    for k in range(batches):
        per = []
        for t in range(tables):
            if k < cover:
                ids = np.resize(np.roll(perms[t], -k * n), n)
            else:
                ids = np.minimum(rng.zipf(1.3, n) - 1, rows - 1)
            per.append(ids.astype(np.int64))
        out.append(per)
        lens.append([np.full(batch, pooling, np.int64)] * tables)
    return Trace.from_batches(out, [rows] * tables, lens)


def per_batch_au(trace):
    ids = trace.linear_ids()
    ptr = trace.batch_access_ptr()
    acc = np.diff(ptr)
    uniq = np.array([len(np.unique(ids[a:b])) for a, b in zip(ptr[:-1], ptr[1:], strict=True)])
    return acc, uniq


def by_design(rows):
    return {r["design"]: r for r in rows}


def test_hybrid_iteration_is_the_sum_of_its_stage_times():
    cfg = cfg_of()
    trace = build_trace(cfg)
    acc, uniq = per_batch_au(trace)
    hw, m = cfg.hardware, cfg.model
    r, R = m.row_bytes, m.moved_row_bytes
    cpu_bw = min(hw.cpu.dram_GBps * interpolate(hw.cpu.gather_efficiency, r),
                 hw.cpu.cores * hw.cpu.embedding_op_GBps)
    cpu_bw_R = min(hw.cpu.dram_GBps * interpolate(hw.cpu.gather_efficiency, R),
                   hw.cpu.cores * hw.cpu.embedding_op_GBps)
    pooled = m.batch_size * m.tables.count * m.tables.dim * m.tables.bytes_per_element
    mlp = m.mlp_kernels * hw.gpu.kernel_launch_ns + m.mlp_flops / (hw.gpu.tflops * 1e3)
    expect = (hw.cpu.dram_latency_ns + acc * r / cpu_bw
              + hw.pcie.latency_ns + pooled / hw.pcie.h2d_GBps + mlp
              + hw.pcie.latency_ns + pooled / hw.pcie.d2h_GBps
              + hw.cpu.dram_latency_ns + 2 * uniq * R / cpu_bw_R)[m.warmup_batches:]
    row = simulate(cfg, ["hybrid"], trace=trace)[0]
    assert row["iter_ns_mean"] == pytest.approx(expect.mean(), rel=1e-10)
    assert row["iter_ns_p50"] == pytest.approx(np.percentile(expect, 50), rel=1e-10)
    stages = sum(v for k, v in row.items() if k.startswith("stage_"))
    assert stages == pytest.approx(row["iter_ns_mean"], rel=1e-10)
    assert row["stage_mlp_ns"] == pytest.approx(mlp, rel=1e-12)


def test_gpu_only_closed_form():
    cfg = cfg_of()
    trace = build_trace(cfg)
    acc, uniq = per_batch_au(trace)
    hw, m = cfg.hardware, cfg.model
    bw = lambda rb: hw.gpu.hbm_GBps * interpolate(hw.gpu.gather_efficiency, rb)  # noqa: E731
    mlp = m.mlp_kernels * hw.gpu.kernel_launch_ns + m.mlp_flops / (hw.gpu.tflops * 1e3)
    expect = (2 * hw.gpu.hbm_latency_ns + acc * m.row_bytes / bw(m.row_bytes) + mlp
              + 2 * uniq * m.moved_row_bytes / bw(m.moved_row_bytes))[m.warmup_batches:]
    row = simulate(cfg, ["gpu-only"], trace=trace)[0]
    assert row["iter_ns_mean"] == pytest.approx(expect.mean(), rel=1e-10)
    assert row["pcie_h2d_bytes"] == 0 and row["hit_ratio"] == 1.0


def test_scratchpipe_converges_to_its_slowest_stage():
    # PCIe made the bottleneck: steady-state iteration == exchange stage time.
    cfg = cfg_of({"hardware": {"pcie": {"h2d_GBps": 0.01, "d2h_GBps": 0.01,
                                        "duplex_h2d_GBps": None},
                               "gpu": {"kernel_launch_ns": 1000.0}},
                  "model": {"num_batches": 40, "warmup_batches": 8},
                  "cache": {"lookahead": 6, "queue_depth": 2, "capacity_rows": 800}})
    trace = build_trace(cfg)
    row = simulate(cfg, ["scratchpipe"], trace=trace)[0]
    stages = {k: v for k, v in row.items() if k.startswith("stage_")}
    slowest = max(stages, key=stages.get)
    assert slowest == "stage_exchange_ns"
    # the closed form of the exchange stage from the engine's own fill/write-back counts
    pol = make_policy("scratchpipe", 800, trace.total_rows, lookahead=6)
    counts = np.concatenate([bc.counts for bc in iter_cache(trace, pol)])
    F = counts[:, COUNTERS.index("fills")]
    W = counts[:, COUNTERS.index("writebacks")]
    R, lat = cfg.model.moved_row_bytes, cfg.hardware.pcie.latency_ns
    ex = np.maximum(np.where(F > 0, lat + F * R / 0.01, 0),
                    np.where(W > 0, lat + W * R / 0.01, 0))
    assert stages[slowest] == pytest.approx(ex[8:].mean(), rel=1e-9)
    assert row["iter_ns_mean"] == pytest.approx(stages[slowest], rel=0.02)
    assert row["busy_pcie_h2d"] > 0.9


def test_full_capacity_lru_cache_matches_gpu_only_after_warmup():
    trace = covering_trace()
    cfg = cfg_of({"cache": {"capacity_rows": 1000}})
    res = by_design(simulate(cfg, ["gpu-only", "lru-cache", "lru-prefetch"], trace=trace))
    assert res["lru-cache"]["fills"] == 0 and res["lru-cache"]["hit_ratio"] == 1.0
    for name in ("lru-cache", "lru-prefetch"):
        for k in ("iter_ns_mean", "iter_ns_p50", "iter_ns_p99"):
            assert res[name][k] == pytest.approx(res["gpu-only"][k], rel=1e-12)


@pytest.mark.parametrize("key", ["pcie", "dram"])
def test_more_bandwidth_never_slower(key):
    cfg0 = cfg_of()
    trace = build_trace(cfg0)
    prev = None
    for scale in (0.5, 1.0, 2.0, 8.0):
        if key == "pcie":
            sets = [f"hardware.pcie.h2d_GBps={25 * scale}", f"hardware.pcie.d2h_GBps={25 * scale}",
                    f"hardware.pcie.duplex_h2d_GBps={11 * scale}"]
        else:
            sets = [f"hardware.cpu.dram_GBps={150 * scale}",
                    f"hardware.cpu.embedding_op_GBps={3 * scale}"]
        res = by_design(simulate(cfg_of(sets=sets), ALL, trace=trace))
        if prev is not None:
            for d in ALL:
                assert res[d]["iter_ns_mean"] <= prev[d]["iter_ns_mean"] * (1 + 1e-12), (d, scale)
        prev = res


@pytest.mark.parametrize("design, policy", [("lru-cache", "belady"), ("scratchpipe", None)])
def test_larger_future_aware_cache_never_moves_more_pcie_bytes(design, policy):
    cfg0 = cfg_of()
    trace = build_trace(cfg0)
    need = min_scratchpipe_capacity(trace, 3)
    prev = None
    for cap in (need, need + 50, need + 200, 1000):
        sets = [f"cache.capacity_rows={cap}"] + ([f"cache.policy={policy}"] if policy else [])
        row = simulate(cfg_of(sets=sets), [design], trace=trace)[0]
        total = row["pcie_h2d_bytes"] + row["pcie_d2h_bytes"]
        if prev is not None:
            assert total <= prev
        prev = total


@pytest.mark.parametrize("preset", ["v100-gen3", "a100-gen4", "h100-gen5", "h200-gen5"])
def test_gpu_only_is_never_slower(preset):
    cfg = cfg_of({"hardware": {"preset": preset}})
    res = by_design(simulate(cfg, ALL))
    for d in ALL:
        assert res["gpu-only"]["iter_ns_mean"] <= res[d]["iter_ns_mean"] * (1 + 1e-12), d


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise-adagrad"])
def test_pcie_bytes_are_fills_and_writebacks_times_row_bytes(optimizer):
    cfg = cfg_of({"model": {"optimizer": optimizer}})
    R = cfg.model.moved_row_bytes
    res = by_design(simulate(cfg, ["lru-cache", "lru-prefetch", "scratchpipe", "hybrid"]))
    for d in ("lru-cache", "lru-prefetch", "scratchpipe"):
        r = res[d]
        assert r["unplaced"] == 0 and r["fills"] > 0
        assert r["pcie_h2d_bytes"] == r["fills"] * R
        assert r["pcie_d2h_bytes"] == r["writebacks"] * R
    h = res["hybrid"]
    samples = 64 * (16 - 4)
    assert h["pcie_h2d_bytes"] == h["pcie_d2h_bytes"] == samples * 2 * 32 * 4


def test_conflict_misses_travel_over_uvm():
    cfg = cfg_of({"cache": {"policy": "fbgemm-lru", "ways": 2, "capacity_rows": 64}})
    r = simulate(cfg, ["lru-cache"])[0]
    assert r["unplaced"] > 0
    R, row = cfg.model.moved_row_bytes, cfg.model.row_bytes
    assert r["pcie_h2d_bytes"] == r["fills"] * R + r["unplaced"] * row + r["unique_unplaced"] * R
    assert r["pcie_d2h_bytes"] == r["writebacks"] * R + r["unique_unplaced"] * R


def test_deterministic():
    cfg = cfg_of()
    a = simulate(cfg)
    b = simulate(load_config(deep_merge(BASE, {})))
    strip = lambda rows: [{k: v for k, v in r.items() if k not in WALL} for r in rows]  # noqa: E731
    assert strip(a) == strip(b)
    c = simulate(cfg_of({"seed": 4}))
    assert strip(c) != strip(a)


def test_trace_ids_beyond_table_rows():
    trace = covering_trace(rows=600)
    with pytest.raises(UserError) as e:
        simulate(cfg_of(), ["hybrid"], trace=trace)
    assert e.value.field == "model.tables.rows" and "expected 0 <= id < 500" in e.value.message


def test_scratchpipe_capacity_too_small_names_the_minimum():
    cfg0 = cfg_of()
    need = min_scratchpipe_capacity(build_trace(cfg0), 3)
    with pytest.raises(UserError) as e:
        simulate(cfg_of(sets=[f"cache.capacity_rows={need - 1}"]), ["scratchpipe"])
    assert e.value.field == "cache.capacity_rows"
    assert f"capacity >= {need} rows" in e.value.message


def test_unknown_design():
    with pytest.raises(UserError, match="did you mean 'scratchpipe'"):
        simulate(cfg_of(), ["scratchpip"])


def test_timelines_cover_every_resource_and_stage(tmp_path):
    import json

    simulate(cfg_of(), ["scratchpipe", "hybrid"], timeline_dir=tmp_path)
    doc = json.loads((tmp_path / "timeline_scratchpipe.json").read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"cpu_dram", "pcie_h2d", "pcie_d2h", "hbm", "gpu_compute", "cpu_plan",
            "stages"} <= names
    stages = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 2}
    assert stages == {"plan", "collect", "exchange", "insert", "train"}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            assert e["dur"] >= 0


def test_deterministic_across_processes_and_hash_seeds(tmp_path):
    # Same config + seed in fresh interpreters with different hash seeds: identical numbers
    # (catches state carried between runs in one process and set/dict-order dependence).
    import json
    import os
    import subprocess
    import sys

    import yaml

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(BASE))
    outs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run(
            [sys.executable, "-m", "scratchpipe_sim", "run", str(cfg), "--json",
             "--out", str(tmp_path / f"out{hash_seed}")],
            capture_output=True, text=True, env=env, timeout=300, check=True)
        rows = json.loads(proc.stdout)
        rows = rows["results"] if isinstance(rows, dict) else rows
        outs.append([{k: v for k, v in r.items() if k not in WALL} for r in rows])
    assert outs[0] == outs[1]
    assert len(outs[0]) == len(ALL)
