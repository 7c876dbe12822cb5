"""Per-table model: sizes from the trace, per-table lists, and byte accounting that adds up
table by table (oracles: numpy over the trace and the engine's per-table counts)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import yaml
from small_configs import IDS_ONLY_INPUTS

from scratchpipe_sim.config import load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import write_trace

ROWS = (943, 1682)


def two_table_trace(batches=12, batch=32, seed=0):
    """A ratings-like two-table trace (users x items), one lookup per sample and table."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(batches):
        out.append([np.minimum(rng.zipf(1.2, batch) - 1, r - 1).astype(np.int64)
                    for r in ROWS])
    return Trace.from_batches(out, list(ROWS))


def cfg_of(model=None, cache=None, **top):
    d = {"hardware": {"preset": "a100-gen4", "cpu": {"llc_MiB": 0}, "gpu": {"l2_MiB": 0}},
         "model": {"batch_size": 32, "num_batches": 12, "warmup_batches": 0,
                   "bottom_mlp": [13, 16], "interaction": "cat", "top_mlp": None,
                   **(model or {})},
         "cache": {"load_factor": 0.05, "warmup_batches": 0, **(cache or {})},
         "input_pipeline": IDS_ONLY_INPUTS, **top}
    return load_config(d)


def test_sizes_come_from_the_trace():
    trace = two_table_trace()
    # no model.tables at all: 2 tables and their rows come from the trace
    res = {r["design"]: r for r in simulate(cfg_of(), ["hybrid", "lru-cache"], trace=trace)}
    assert res["lru-cache"]["capacity_rows"] == math.ceil(0.05 * sum(ROWS))
    # hybrid moves one pooled vector per sample and table: 2 x dim 64 x 4 B
    assert res["hybrid"]["pcie_h2d_bytes"] == 12 * 32 * 2 * 64 * 4


def test_a_config_that_contradicts_the_trace_exits_2():
    trace = two_table_trace()
    with pytest.raises(UserError) as e:
        simulate(cfg_of({"tables": {"rows": [943, 1000]}}), ["hybrid"], trace=trace)
    assert e.value.field == "model.tables.rows"
    assert "1682" in e.value.message and "1000" in e.value.message
    with pytest.raises(UserError) as e:
        simulate(cfg_of({"tables": {"count": 3}}), ["hybrid"], trace=trace)
    assert e.value.field == "model.tables.count" and "2 tables" in e.value.message
    with pytest.raises(UserError) as e:
        simulate(cfg_of({"num_batches": 13}), ["hybrid"], trace=trace)
    assert e.value.field == "model.num_batches"


@pytest.mark.parametrize("bad, field", [
    ({"tables": {"rows": [10, 0]}}, "model.tables.rows"),
    ({"tables": {"count": 3, "rows": [10, 20]}}, "model.tables.count"),
    ({"tables": {"dim": [16, 32, 8], "rows": [10, 20]}}, "model.tables.dim"),
    ({"pooling": [1, 2, 3], "tables": {"rows": [10, 20]}}, "model.pooling"),
    ({"num_batches": "some"}, "model.num_batches"),
    ({"num_batches": "all"}, "model.num_batches"),  # a generated trace has no "all"
])
def test_bad_per_table_lists(bad, field):
    with pytest.raises(UserError) as e:
        cfg_of(bad)
    assert e.value.field == field


def test_heterogeneous_dims_add_up_table_by_table():
    trace = two_table_trace()
    dims = (16, 48)
    # enforce_hbm: the adagrad state moves with each filled row (FBGEMM's default would
    # leave it in UVM: tests/timing/test_timing_uvm_optimizers.py)
    cfg = cfg_of({"tables": {"dim": list(dims)}, "optimizer": "adagrad"},
                 design_params={"lru-cache": {"enforce_hbm": True}})
    r_t = [d * 4 for d in dims]
    R_t = [d * 4 + 4 * d for d in dims]
    res = {r["design"]: r for r in simulate(cfg, ["hybrid", "gpu-only", "lru-cache"],
                                            trace=trace)}
    # pooled vectors: one per table per sample, each of its own table's dim
    assert res["hybrid"]["pcie_h2d_bytes"] == 12 * 32 * sum(r_t)
    # lru-cache fills: each table's filled rows at its own row size (+ the index copies)
    per = run_cache(trace, "lru", math.ceil(0.05 * sum(ROWS))).per_table
    fill_bytes = sum(p["misses"] * R for p, R in zip(per, R_t, strict=True))
    n_idx = (12 * 32 * 2 + 12 * (32 * 2 + 1)) * 8
    assert res["lru-cache"]["pcie_h2d_bytes"] == pytest.approx(fill_bytes + n_idx, rel=1e-12)
    # gpu-only HBM: lookups at their tables' row bytes, exactly
    cfg_plain = cfg_of({"tables": {"dim": list(dims)}, "optimizer": "adagrad"},
                       hardware={"preset": "a100-gen4", "cpu": {"llc_MiB": 0},
                                 "gpu": {"l2_MiB": 0, "gather_efficiency": [[64, 1.0]]}})
    g = simulate(cfg_plain, ["gpu-only"], trace=trace)[0]
    ids = trace.linear_ids()
    lookup = 12 * 32 * sum(r_t)
    uniq = 0
    ptr = trace.batch_access_ptr()
    off = trace.table_offsets
    for a, b in zip(ptr[:-1], ptr[1:], strict=True):
        u = np.unique(ids[a:b])
        uniq += sum(int(((u >= off[t]) & (u < off[t] + ROWS[t])).sum()) * R_t[t]
                    for t in range(2))
    sort = 12 * 32 * 2 * 2 * 8 + lookup  # lookups x (r + 2 index bytes)
    out = 12 * 32 * sum(r_t)  # the forward's output rows: one per sample and table
    assert g["hbm_bytes"] == pytest.approx(lookup + out + sort + 2 * uniq, rel=1e-12)


def test_run_cli_takes_sizes_from_a_trace_file(tmp_path):
    path = write_trace(two_table_trace(), tmp_path / "ratings.sptrace")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "trace": {"path": str(path)},
        "model": {"batch_size": 32, "num_batches": "all", "warmup_batches": 2,
                  "bottom_mlp": [13, 16], "interaction": "cat"},
        "cache": {"load_factor": 0.05, "warmup_batches": 0},
        "designs": ["hybrid", "lru-cache"]}))
    out = subprocess.run([sys.executable, "-m", "scratchpipe_sim", "run", str(cfg), "--json",
                          "--no-timeline", "--out", str(tmp_path / "res")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import json

    rows = json.loads(out.stdout)
    rows = rows["results"] if isinstance(rows, dict) else rows
    lru = next(r for r in rows if r["design"] == "lru-cache")
    assert lru["capacity_rows"] == math.ceil(0.05 * sum(ROWS))
    assert lru["batches"] == 12


@pytest.mark.parametrize("preset", ["criteo-kaggle", "criteo-terabyte", "deeprecsys-rm1",
                                    "deeprecsys-rm2", "deeprecsys-rm3"])
def test_model_presets_load(preset):
    cfg = load_config({"model": {"preset": preset}, "designs": ["hybrid"]})
    m = cfg.model
    assert m.table_count == len(m.rows_per_table) >= 1
    if preset == "criteo-terabyte":
        assert m.table_count == 26 and cfg.total_rows == 187_767_399
        assert m.sample_output_bytes == 26 * 128 * 4


def test_scaled_down_criteo_terabyte_runs_every_design():
    # the production-size path (26 heterogeneous-row tables, dim 128), rows / 10,000
    base = load_config({"model": {"preset": "criteo-terabyte"}, "designs": ["hybrid"]})
    rows = [max(1, r // 10_000) for r in base.model.rows_per_table]
    cfg = load_config(
        {
            "model": {
                "preset": "criteo-terabyte",
                "tables": {"rows": rows},
                "batch_size": 64,
                "num_batches": 6,
                "warmup_batches": 1,
            },
            "cache": {"load_factor": 0.2},
            "design_params": {"scratchpipe": {"lookahead": 5}},
        }
    )
    res = {r["design"]: r for r in simulate(cfg)}
    assert len(res) == 6
    assert res["lru-cache"]["capacity_rows"] == math.ceil(0.2 * sum(rows))
    for r in res.values():
        assert r["iter_ns_mean"] > 0
