"""The six designs: closed-form cross-checks, monotonicity, bounds, byte accounting.

Oracles are independent of the timing code: per-batch accesses and unique rows come from
numpy over the linearized trace, fills/write-backs from the policy engine, stage times from
the config's bandwidths and latencies.
"""

from __future__ import annotations

import numpy as np
import pytest
from small_configs import IDS_ONLY_INPUTS, off_chip

from scratchpipe_sim.config import deep_merge, interpolate, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.scratchpipe import min_scratchpipe_capacity
from scratchpipe_sim.timing import build_trace, simulate
from scratchpipe_sim.timing.dense_compute import dense_iteration
from scratchpipe_sim.timing.designs import design_params
from scratchpipe_sim.timing.machine import PlannerParams
from scratchpipe_sim.traces.csr_trace import Trace

ALL = ["hybrid", "gpu-only", "static-cache", "lru-cache", "lru-prefetch", "scratchpipe"]
BASE = {
    "input_pipeline": IDS_ONLY_INPUTS,
    "hardware": {"preset": "a100-gen4"},
    "model": {
        "tables": {"count": 2, "rows": 500, "dim": 32},
        "pooling": 4,
        "batch_size": 64,
        "num_batches": 16,
        "warmup_batches": 4,
        "bottom_mlp": [13, 64, 16],
        "interaction": "cat",
        "top_mlp": [80, 32, 1],
    },
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 600},
    "design_params": {
        "scratchpipe": {
            "lookahead": 3,
            "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]],
        }
    },
    "seed": 3,
}
#: on-chip caches and the DMA load off: the closed forms below price DRAM/HBM/PCIe alone
PLAIN = {"hardware": off_chip()}
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


def timed(cfg, trace):
    """The timed batches of a built trace (after the cache warm-up prefix)."""
    return trace.slice(trace.num_batches - cfg.model.num_batches, trace.num_batches)


def test_hybrid_iteration_is_the_sum_of_its_stage_times():
    cfg = cfg_of(PLAIN)
    trace = build_trace(cfg)
    acc, uniq = per_batch_au(timed(cfg, trace))
    hw, m = cfg.hardware, cfg.model
    cpu = hw.cpu
    r, R = m.row_bytes, m.moved_row_bytes
    cores = cpu.cores * cpu.parallel_efficiency  # core-ns of work per ns
    dram = lambda rows, rb: (cpu.dram_latency_ns  # noqa: E731
                             + rows * rb / (cpu.dram_GBps * interpolate(cpu.gather_efficiency, rb)))
    ops = lambda rows, rb: rows * rb / cpu.embedding_op_GBps / cores  # noqa: E731
    pooled = m.batch_size * m.tables.count * m.tables.dim * m.tables.bytes_per_element
    mlp = dense_iteration(m, hw.gpu, float(m.batch_size)).total_ns
    gather = np.maximum(dram(acc, r), ops(acc, r))
    # aggregation: the sort/hash work and the lookups' op work share the cores (processor
    # sharing: both end when their sum is done) while DRAM serves the scatter
    agg = np.maximum(dram(acc, r), acc * cpu.aggregate_ns_per_lookup / cores + ops(acc, r))
    update = np.maximum(dram(2 * uniq, R), ops(2 * uniq, R))
    expect = (gather + hw.pcie.latency_ns + pooled / hw.pcie.h2d_GBps + mlp
              + hw.pcie.latency_ns + pooled / hw.pcie.d2h_GBps + agg + update)[m.warmup_batches:]
    row = simulate(cfg, ["hybrid"], trace=trace)[0]
    assert row["iter_ns_mean"] == pytest.approx(expect.mean(), rel=1e-10)
    assert row["iter_ns_p50"] == pytest.approx(np.percentile(expect, 50), rel=1e-10)
    stages = sum(v for k, v in row.items() if k.startswith("stage_"))
    assert stages == pytest.approx(row["iter_ns_mean"], rel=1e-10)
    assert row["stage_mlp_ns"] == pytest.approx(mlp, rel=1e-12)
    assert row["pcie_h2d_bytes"] == pooled * (m.num_batches - m.warmup_batches)  # no indices


def gpu_only_expect(cfg, acc, uniq):
    hw, m = cfg.hardware, cfg.model
    bw = lambda rb: hw.gpu.hbm_GBps * interpolate(hw.gpu.gather_efficiency, rb)  # noqa: E731
    mlp = dense_iteration(m, hw.gpu, float(m.batch_size)).total_ns
    sort = acc * (m.row_bytes + 2 * m.index_bytes) / (hw.gpu.hbm_GBps
                                                      * hw.gpu.aggregate_efficiency)
    # the forward's output rows (one pooled vector per sample and table) stream to HBM beside
    # the gather, on the same server: their times add
    out = m.batch_size * m.sample_output_bytes / hw.gpu.hbm_GBps
    return (3 * hw.gpu.hbm_latency_ns + acc * m.row_bytes / bw(m.row_bytes) + out + mlp + sort
            + 2 * uniq * m.moved_row_bytes / bw(m.moved_row_bytes))


def index_bytes(cfg, acc):
    m = cfg.model
    return (acc + m.batch_size * m.tables.count + 1) * m.index_bytes


def test_gpu_only_closed_form():
    cfg = cfg_of(PLAIN)
    trace = build_trace(cfg)
    acc, uniq = per_batch_au(timed(cfg, trace))
    wu = cfg.model.warmup_batches
    expect = gpu_only_expect(cfg, acc, uniq)[wu:]
    row = simulate(cfg, ["gpu-only"], trace=trace)[0]
    assert row["iter_ns_mean"] == pytest.approx(expect.mean(), rel=1e-10)
    # only the indices and offsets cross PCIe (copied one batch ahead: no wait once running)
    assert row["pcie_h2d_bytes"] == index_bytes(cfg, acc)[wu:].sum()
    assert row["hit_ratio"] == 1.0 and row["stage_input_wait_ns"] == 0.0


def test_static_cache_with_every_row_pinned_is_gpu_only_plus_its_lookup_kernel():
    # static-cache preloads its rows: no fills, hits counted and charged as HBM gathers only
    cfg = cfg_of(
        deep_merge(
            PLAIN,
            {
                "cache": {"capacity_rows": 1000},
                "design_params": {"static-cache": {"profile": "oracle"}},
            },
        )
    )
    trace = build_trace(cfg)
    acc, uniq = per_batch_au(timed(cfg, trace))
    res = by_design(simulate(cfg, ["gpu-only", "static-cache"], trace=trace))
    s, g = res["static-cache"], res["gpu-only"]
    assert s["fills"] == 0 and s["unplaced"] == 0 and s["hit_ratio"] == 1.0
    hw, wu = cfg.hardware, cfg.model.warmup_batches
    # the lookup kernel probes every lookup's slot: a gather of cache_probe_bytes rows
    probe = hw.gpu.cache_probe_bytes
    eff = interpolate(hw.gpu.gather_efficiency, probe)
    lookup = hw.gpu.hbm_latency_ns + acc * probe / (hw.gpu.hbm_GBps * eff)
    assert s["iter_ns_mean"] == pytest.approx(g["iter_ns_mean"] + lookup[wu:].mean(), rel=1e-10)
    assert s["pcie_h2d_bytes"] == g["pcie_h2d_bytes"] and s["pcie_d2h_bytes"] == 0


def test_static_cache_profiles_the_prefix_and_charges_what_it_misses():
    cfg = cfg_of({"cache": {"capacity_rows": 200}})
    r = simulate(cfg, ["static-cache"])[0]
    assert r["fills"] == 0 and r["evictions"] == 0  # preloaded from the prefix profile
    assert r["hit_ratio"] == pytest.approx(1 - r["unplaced"] / r["accesses"])
    assert r["unplaced"] > 0 and r["pcie_d2h_bytes"] > 0  # host rows: partial gradients
    with pytest.raises(UserError, match="warm-up prefix"):
        simulate(cfg_of({"cache": {"capacity_rows": 200, "warmup_batches": 0}}),
                 ["static-cache"])
    oracle = simulate(
        cfg_of(
            {
                "cache": {"capacity_rows": 200},
                "design_params": {"static-cache": {"profile": "oracle"}},
            }
        ),
        ["static-cache"],
    )[0]
    assert oracle["hit_ratio"] >= r["hit_ratio"]


def test_scratchpipe_converges_to_its_slowest_stage():
    # PCIe made the bottleneck: steady-state iteration == exchange stage time.
    cfg = cfg_of(
        deep_merge(
            PLAIN,
            {
                "hardware": {
                    "pcie": {"h2d_GBps": 0.01, "d2h_GBps": 0.01, "duplex_h2d_GBps": None},
                    "gpu": {"kernel_launch_ns": 1000.0},
                },
                "model": {"num_batches": 40, "warmup_batches": 8},
                "cache": {"capacity_rows": 800},
                # resident inputs: the exchange group alone crosses the link
                "input_pipeline": {"inputs_on_gpu": True},
                "design_params": {
                    "scratchpipe": {
                        "lookahead": 6,
                        "queue_depth": 2,
                        "pipeline": [["plan"], ["collect"], ["exchange"], ["insert"], ["train"]],
                    }
                },
            },
        )
    )
    row = simulate(cfg, ["scratchpipe"])[0]
    stages = {k: v for k, v in row.items() if k.startswith("stage_")}
    slowest = max(stages, key=stages.get)
    assert slowest == "stage_exchange_ns"
    assert row["iter_ns_mean"] == pytest.approx(stages[slowest], rel=0.02)
    assert row["busy_pcie_h2d"] > 0.9


def test_full_capacity_lru_cache_matches_gpu_only_after_warmup():
    # the cache warm-up replays the prefix (batches 0..15, the first four of which touch
    # every row), so the timed batches start with every row cached: no fills at all
    trace = covering_trace(batches=32)
    cfg = cfg_of(deep_merge(PLAIN, {"cache": {"capacity_rows": 1000}}))
    res = by_design(simulate(cfg, ["gpu-only", "lru-cache", "lru-prefetch"], trace=trace))
    assert res["lru-cache"]["fills"] == 0 and res["lru-cache"]["hit_ratio"] == 1.0
    assert res["lru-cache"]["cache_warmup_batches"] > 0
    assert res["lru-cache"]["cold_miss_share"] == 0.0 and res["lru-cache"]["steady_state"]
    for name in ("lru-cache", "lru-prefetch"):
        # what remains is the cache's own lookup kernel
        assert res[name]["iter_ns_mean"] == pytest.approx(res["gpu-only"]["iter_ns_mean"],
                                                          rel=0.05)
        assert res[name]["iter_ns_mean"] >= res["gpu-only"]["iter_ns_mean"] * (1 - 1e-12)
    # on demand, the lookup kernel is on the critical path; prefetched, it hides under mlp
    assert res["lru-cache"]["iter_ns_mean"] > res["gpu-only"]["iter_ns_mean"]


def test_auto_warmup_makes_its_whole_trace_passes_only_when_the_prefix_cannot_fill(
        monkeypatch):
    """A prefix that touches `capacity` rows decides alone; a cache larger than every row
    the prefix touches needs the first-touch rate (and gets the same answer as before)."""
    import scratchpipe_sim.timing.trace_setup as setup_mod

    calls = []
    real = setup_mod.first_touches

    def counted(trace):
        calls.append(1)
        return real(trace)

    monkeypatch.setattr(setup_mod, "first_touches", counted)
    small = cfg_of({"cache": {"capacity_rows": 100}})
    trace = setup_mod.auto_warmup_trace(small, replay_cache=False)
    assert calls == [] and trace.meta[setup_mod.AUTO_PREFIX] == small.model.num_batches
    large = cfg_of({"cache": {"capacity_rows": 1000}})  # every row of the two tables
    trace = setup_mod.auto_warmup_trace(large, replay_cache=False)
    assert calls and trace.meta[setup_mod.AUTO_PREFIX] >= large.model.num_batches


def test_without_warmup_the_cold_start_shows():
    trace = covering_trace(batches=32)
    cfg = cfg_of(deep_merge(PLAIN, {"cache": {"capacity_rows": 1000, "warmup_batches": 0},
                                    "model": {"warmup_batches": 0}}))
    r = simulate(cfg, ["lru-cache"], trace=trace)[0]
    # every row is filled once, and every miss is a first touch: all of it cold start
    assert r["cache_warmup_batches"] == 0 and r["fills"] == 1000
    assert r["cold_miss_share"] == 1.0 and not r["steady_state"]


def test_gpu_side_designs_copy_their_indices():
    cfg = cfg_of(PLAIN)
    trace = build_trace(cfg)
    acc, _ = per_batch_au(timed(cfg, trace))
    wu = cfg.model.warmup_batches
    idx = index_bytes(cfg, acc)[wu:].sum()
    res = by_design(simulate(cfg, ALL, trace=trace))
    R = cfg.model.moved_row_bytes
    for d in ("lru-cache", "lru-prefetch", "scratchpipe"):
        assert res[d]["pcie_h2d_bytes"] == res[d]["fills"] * R + idx, d
    assert res["gpu-only"]["pcie_h2d_bytes"] == idx
    assert res["static-cache"]["pcie_h2d_bytes"] >= idx
    cfg4 = cfg_of(deep_merge(PLAIN, {"model": {"index_bytes": 4}}))
    assert simulate(cfg4, ["gpu-only"], trace=trace)[0]["pcie_h2d_bytes"] == idx / 2


def bags_trace(repeat: int, rows=400, batches=12):
    """Every batch looks up the same 256 distinct rows, each `repeat` times."""
    out, lens = [], []
    for k in range(batches):
        ids = (np.arange(256, dtype=np.int64) * 7 + k) % rows
        out.append([np.repeat(ids, repeat)])
        lens.append([np.full(64, 4 * repeat, np.int64)])
    return Trace.from_batches(out, [rows], lens)


def test_more_lookups_at_fixed_unique_rows_cost_more_to_update():
    over = deep_merge(PLAIN, {"model": {"tables": {"count": 1, "rows": 400}, "num_batches": 12,
                                        "pooling": 4, "top_mlp": None},
                              "cache": {"warmup_batches": 0}})
    res = []
    for rep in (1, 2):
        cfg = cfg_of(deep_merge(over, {"model": {"pooling": 4 * rep}}))
        res.append(by_design(simulate(cfg, ["hybrid", "gpu-only"], trace=bags_trace(rep))))
    for d, stage in (("hybrid", "stage_cpu_update_ns"), ("gpu-only", "stage_gpu_update_ns")):
        assert res[0][d]["unique"] == res[1][d]["unique"]
        assert res[1][d][stage] > res[0][d][stage], d


def test_a_working_set_that_fits_on_chip_costs_on_chip_bandwidth():
    cfg_off = cfg_of(PLAIN)
    cfg_on = cfg_of(deep_merge(PLAIN, {"hardware": {"cpu": {"llc_MiB": 64},
                                                    "gpu": {"l2_MiB": 64}}}))
    trace = build_trace(cfg_off)
    off = by_design(simulate(cfg_off, ["hybrid", "gpu-only"], trace=trace))
    on = by_design(simulate(cfg_on, ["hybrid", "gpu-only"], trace=trace))
    # 1000 rows x 128 B fit: after the first touches every lookup and update hits on chip
    assert on["gpu-only"]["busy_gpu_l2"] > 0 and on["hybrid"]["busy_cpu_llc"] > 0
    assert on["gpu-only"]["l2_hit_ratio"] > 0.9 and on["hybrid"]["llc_hit_ratio"] > 0.9
    for d, mem in (("gpu-only", "hbm_bytes"), ("hybrid", "dram_bytes")):
        assert on[d][mem] < 0.5 * off[d][mem], d
        assert on[d]["iter_ns_mean"] < off[d]["iter_ns_mean"], d


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
    trace = timed(cfg0, build_trace(cfg0))
    need = min_scratchpipe_capacity(trace, 3)
    prev = None
    for cap in (need, need + 50, need + 200, 1000):
        sets = [f"cache.capacity_rows={cap}"] + ([f"cache.policy={policy}"] if policy else [])
        row = simulate(cfg_of(sets=sets + ["cache.warmup_batches=0"]), [design],
                       trace=trace)[0]
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


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise-adagrad", "adam"])
def test_pcie_bytes_are_fills_and_writebacks_times_row_bytes(optimizer):
    """FBGEMM's managed cache leaves the optimizer state in UVM (cacheable=False): fills and
    write-backs move the weights (r), and each updated row's state (S, in whole 32 B
    sectors) is read and written in place over the link; enforce_hbm and ScratchPipe move
    the row with its state (R)."""
    cfg = cfg_of({"model": {"optimizer": optimizer}})
    trace = build_trace(cfg)
    acc, _ = per_batch_au(timed(cfg, trace))
    idx = index_bytes(cfg, acc)[cfg.model.warmup_batches:].sum()
    m = cfg.model
    r_w, R, S = m.row_bytes, m.moved_row_bytes, m.state_bytes
    S_link = -(-S // 32) * 32
    res = by_design(simulate(cfg, ["lru-cache", "lru-prefetch", "scratchpipe", "hybrid"],
                             trace=trace))
    for d in ("lru-cache", "lru-prefetch"):
        r = res[d]
        assert r["unplaced"] == 0 and r["fills"] > 0
        assert r["pcie_h2d_bytes"] == r["fills"] * r_w + r["unique"] * S_link + idx
        assert r["pcie_d2h_bytes"] == r["writebacks"] * r_w + r["unique"] * S_link
    hbm = by_design(
        simulate(
            cfg_of(
                {
                    "model": {"optimizer": optimizer},
                    "cache": {},
                    "design_params": {
                        "lru-cache": {"enforce_hbm": True},
                        "lru-prefetch": {"enforce_hbm": True},
                    },
                }
            ),
            ["lru-cache", "lru-prefetch", "scratchpipe"],
            trace=trace,
        )
    )
    for d in ("lru-cache", "lru-prefetch", "scratchpipe"):
        # FBGEMM's fill kernel loads host rows in whole sectors; ScratchPipe's copies are DMA
        R_link = R if d == "scratchpipe" else -(-R // 32) * 32
        r = hbm[d]
        assert r["pcie_h2d_bytes"] == r["fills"] * R_link + idx
        assert r["pcie_d2h_bytes"] == r["writebacks"] * R_link
    assert res["scratchpipe"]["pcie_h2d_bytes"] == res["scratchpipe"]["fills"] * R + idx
    h = res["hybrid"]
    samples = 64 * (16 - 4)
    assert h["pcie_h2d_bytes"] == h["pcie_d2h_bytes"] == samples * 2 * 32 * 4


def test_conflict_misses_travel_over_uvm():
    cfg = cfg_of({"cache": {"policy": "fbgemm-lru", "capacity_rows": 64, "params": {"ways": 2}}})
    trace = build_trace(cfg)
    acc, _ = per_batch_au(timed(cfg, trace))
    idx = index_bytes(cfg, acc)[cfg.model.warmup_batches:].sum()
    r = simulate(cfg, ["lru-cache"], trace=trace)[0]
    assert r["unplaced"] > 0
    R, row = cfg.model.moved_row_bytes, cfg.model.row_bytes
    # a batch's unplaced lookups read each distinct row once (duplicates hit its sectors in
    # L2), then the backward reads and writes each in place
    assert r["pcie_h2d_bytes"] == (r["fills"] * R + r["unique_unplaced"] * row
                                   + r["unique_unplaced"] * R + idx)
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
    trace = covering_trace(rows=600, batches=32)
    with pytest.raises(UserError) as e:
        simulate(cfg_of(), ["hybrid"], trace=trace)
    assert e.value.field == "model.tables.rows"
    assert "600 rows in the trace" in e.value.message and "500 in the config" in e.value.message


def test_scratchpipe_capacity_too_small_names_the_minimum():
    cfg0 = cfg_of({"cache": {"warmup_batches": 0}})
    trace = timed(cfg0, build_trace(cfg0))
    need = min_scratchpipe_capacity(trace, 3)
    with pytest.raises(UserError) as e:
        simulate(cfg_of({"cache": {"warmup_batches": 0, "capacity_rows": need - 1}}),
                 ["scratchpipe"], trace=trace)
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
    assert {"cpu_dram", "cpu_cores", "pcie_h2d", "pcie_d2h", "hbm", "gpu_compute",
            "stages"} <= names
    stages = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 2}
    # its own stages and the input pipeline's (timing/input_pipeline.py)
    assert stages == {"plan", "collect", "exchange", "insert", "train", "input_wait"}
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


# -- the CPU cost terms of the Machine, in closed form ----------------------------------------
CPU_TERMS = {"cores": 4, "parallel_efficiency": 0.5, "embedding_op_GBps": 10.0,
             "core_dram_GBps": 2.0, "core_llc_GBps": 5.0, "dram_GBps": 100.0,
             "dram_latency_ns": 0.0, "gather_efficiency": [[64, 0.5], [512, 0.5]],
             "llc_MiB": 8.0, "llc_GBps": 50.0, "aggregate_ns_per_lookup": 6.0,
             "aggregate_ns_per_row": 20.0, "plan_ns_per_id": 10.0,
             "plan_ns_per_eviction": 50.0, "core_window_rows": 1.0}


def lone_time(part, cpu=None):
    """Time of one Machine helper alone on a fresh SimPy environment."""
    from scratchpipe_sim.timing.machine import price_alone

    cfg = load_config({"hardware": {"preset": "a100-gen4", "cpu": {**CPU_TERMS, **(cpu or {})}},
                       "designs": ["hybrid"]})
    return float(price_alone(cfg, 1, part, [0])[0])


def test_cpu_gather_charges_hits_and_misses_in_sequence_on_the_cores():
    # 1000 rows of 256 B, a quarter LLC hits: core-ns = 250 x 256 / 5 + 750 x 256 / 2;
    # the cores do 4 x 0.5 = 2 core-ns per ns; DRAM (750 x 256 / 50) and LLC are faster
    t = lone_time(lambda m, b: m.cpu_gather(1000, 256, b, "x", 0.25))
    assert t == pytest.approx((250 * 256 / 5 + 750 * 256 / 2) / 2, rel=1e-12)
    # a core never gathers faster than the op: op 1 GB/s caps both rates
    t = lone_time(lambda m, b: m.cpu_gather(1000, 256, b, "x", 0.25),
                  {"embedding_op_GBps": 1.0})
    assert t == pytest.approx(1000 * 256 / 1.0 / 2, rel=1e-12)
    # no LLC: every row is a miss, whatever the fraction says
    t = lone_time(lambda m, b: m.cpu_gather(1000, 256, b, "x", 0.25), {"llc_MiB": 0})
    assert t == pytest.approx(1000 * 256 / 2 / 2, rel=1e-12)
    # fast cores: DRAM's misses (at dram_GBps x gather efficiency) set the time
    t = lone_time(lambda m, b: m.cpu_gather(1000, 256, b, "x", 0.25),
                  {"cores": 400, "dram_GBps": 1.0})
    assert t == pytest.approx(750 * 256 / 0.5, rel=1e-12)


def test_cpu_gather_window_and_per_row_size_rates():
    # W = 2: a row costs t_hit x h^2 + t_miss x (1 - h^2); h = 0.5 -> 0.25 hit-priced
    t = lone_time(lambda m, b: m.cpu_gather(1000, 256, b, "x", 0.5), {"core_window_rows": 2})
    assert t == pytest.approx(1000 * (0.25 * 256 / 5 + 0.75 * 256 / 2) / 2, rel=1e-12)
    # W = 1 is each row at its own rate (the linear model)
    t = lone_time(lambda m, b: m.cpu_gather(1000, 256, b, "x", 0.5), {"core_window_rows": 1})
    assert t == pytest.approx((500 * 256 / 5 + 500 * 256 / 2) / 2, rel=1e-12)
    # rates as [row_bytes, GBps] curves: interpolated at the row size (256 B: 3 and 6),
    # clamped beyond the ends (1024 B: 4 and 8)
    curves = {"core_dram_GBps": [[128, 2.0], [512, 4.0]],
              "core_llc_GBps": [[128, 4.0], [512, 8.0]]}
    rate = 2.0 + (256 - 128) / (512 - 128) * 2.0
    t = lone_time(lambda m, b: m.cpu_gather(1000, 256, b, "x", 0.0), curves)
    assert t == pytest.approx(1000 * 256 / rate / 2, rel=1e-12)
    t = lone_time(lambda m, b: m.cpu_gather(1000, 1024, b, "x", 1.0), curves)
    assert t == pytest.approx(1000 * 1024 / 8.0 / 2, rel=1e-12)


def test_aggregation_has_a_per_lookup_and_a_per_unique_row_term():
    # aggregation: A x (r / op + 6) + U x 20 core-ns (DRAM: A x r / 50, faster); then the
    # update: 2U rows of R missed (core rate 2 GB/s)
    A, U, r = 1000, 300, 256
    t = lone_time(lambda m, b: m.cpu_backward(b, A, U, 0.0, r, r))
    agg = (A * (r / 10 + 6) + U * 20) / 2
    assert t == pytest.approx(agg + 2 * U * r / 2 / 2, rel=1e-12)
    # doubling the unique rows at equal lookups adds exactly the per-row and update terms
    t2 = lone_time(lambda m, b: m.cpu_backward(b, A, 2 * U, 0.0, r, r))
    assert t2 - t == pytest.approx((U * 20 + 2 * U * r / 2) / 2, rel=1e-9)
    # no on-chip cost set: the lookups' on-chip fraction changes nothing
    t3 = lone_time(lambda m, b: m.cpu_backward(b, A, U, 0.0, r, r, lookup_onchip=0.7))
    assert t3 == t


def test_aggregation_prices_on_chip_lookups_at_their_own_cost():
    # a_miss 6, a_hit 1 core-ns: A x (r / op + 6 x (1 - h) + 1 x h) + U x 20, h = 0.7
    A, U, r, h = 1000, 300, 256, 0.7
    t = lone_time(lambda m, b: m.cpu_backward(b, A, U, 0.0, r, r, lookup_onchip=h),
                  {"aggregate_onchip_ns_per_lookup": 1.0})
    agg = (A * (r / 10 + 6 * (1 - h) + 1 * h) + U * 20) / 2
    assert t == pytest.approx(agg + 2 * U * r / 2 / 2, rel=1e-12)
    # all on chip: every lookup at a_hit; more on chip never costs more
    ts = [lone_time(lambda m, b, f=f: m.cpu_backward(b, A, U, 0.0, r, r, lookup_onchip=f),
                    {"aggregate_onchip_ns_per_lookup": 1.0}) for f in (0.0, 0.5, 1.0)]
    assert ts[2] == pytest.approx((A * (r / 10 + 1) + U * 20) / 2 + 2 * U * r / 2 / 2)
    assert ts[0] > ts[1] > ts[2]
    # no LLC: nothing is on chip, whatever the fraction says
    t0 = lone_time(lambda m, b: m.cpu_backward(b, A, U, 0.0, r, r, lookup_onchip=h),
                   {"aggregate_onchip_ns_per_lookup": 1.0, "llc_MiB": 0})
    assert t0 == pytest.approx((A * (r / 10 + 6) + U * 20) / 2 + 2 * U * r / 2 / 2)


@pytest.mark.parametrize("threads, share", [(1, 1.0), (2, 1.0), (4, 2.0)])
def test_plan_costs_ids_and_evictions_and_one_thread_keeps_a_whole_core(threads, share):
    # 1000 ids x 10 + 100 evictions x 50 = 15000 core-ns. One thread runs at a whole core
    # (no parallel efficiency); T > 1 threads at T x 0.5 cores.
    t = lone_time(lambda m, b: m.plan(b, 1000, 100, PlannerParams(plan_threads=threads)))
    assert t == pytest.approx(15000 / share, rel=1e-12)
    # the design's per-id knob wins over the hardware's
    t = lone_time(lambda m, b: m.plan(b, 1000, 100,
                                      PlannerParams(plan_threads=1, plan_ns_per_id=1.0)))
    assert t == pytest.approx(1000 * 1.0 + 100 * 50, rel=1e-12)
    # ... and so does its per-eviction twin
    t = lone_time(lambda m, b: m.plan(b, 1000, 100,
                                      PlannerParams(plan_threads=1, plan_ns_per_eviction=2.0)))
    assert t == pytest.approx(1000 * 10 + 100 * 2.0, rel=1e-12)
    # without knobs: every one from the hardware (all cores, here 4 x 0.5)
    assert lone_time(lambda m, b: m.plan(b, 1000, 100)) == pytest.approx(15000 / 2.0,
                                                                          rel=1e-12)


@pytest.mark.parametrize("helper", ["collect", "write_back"])
def test_collect_and_write_back_charge_the_staging_buffer(helper):
    F, R = 500, 256
    # core-bound: the F random rows at the core's miss rate (the staging side streams)
    t = lone_time(lambda m, b: getattr(m, helper)(b, F, R))
    assert t == pytest.approx(F * R / 2 / 2, rel=1e-12)
    # DRAM-bound: the random rows at the gather efficiency plus F x R streamed through the
    # same server (processor sharing: the work adds up), after one latency
    cpu = {"cores": 400, "dram_GBps": 1.0, "dram_latency_ns": 100.0}
    t = lone_time(lambda m, b: getattr(m, helper)(b, F, R), cpu)
    assert t == pytest.approx(100.0 + F * R / 0.5 + F * R / 1.0, rel=1e-12)


def test_scratchpipe_plan_stage_charges_the_policys_evictions():
    # the planner alone in its group on one core (4 cores, plan_threads 1): its stage time is
    # its work; the difference of two per-eviction prices is the batches' evictions x 1000
    from scratchpipe_sim.timing.counts import policy_counts

    def run(per_ev):
        cfg = cfg_of(PLAIN, [f"hardware.cpu.plan_ns_per_eviction={per_ev}",
                             "hardware.cpu.cores=4", "hardware.cpu.parallel_efficiency=1.0",
                             "design_params.scratchpipe.plan_threads=1"])
        return cfg, simulate(cfg, ["scratchpipe"])[0]

    cfg, lo = run(0.0)
    _, hi = run(1000.0)
    trace = build_trace(cfg)
    ev = policy_counts(trace, "scratchpipe", cfg.capacity_rows(),
                       lookahead=design_params(cfg, "scratchpipe").lookahead).cols["evictions"]
    ev = ev[len(ev) - cfg.model.num_batches + cfg.model.warmup_batches:]
    assert ev.sum() > 0
    assert hi["stage_plan_ns"] - lo["stage_plan_ns"] == pytest.approx(1000 * ev.mean(),
                                                                       rel=1e-9)
