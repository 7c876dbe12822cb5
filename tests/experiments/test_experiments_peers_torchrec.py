"""compare-peers (issue 25): TorchRec's planner estimator beside the simulator.

Shapes and units of both sides on a small config, TorchRec's storage estimate against the
closed form of its own formula (shard_estimators.calculate_shard_storages), and the one-line
errors. No timing thresholds. Needs the `peers` extra and torchrec 1.8.0; skips otherwise
(except the missing-package test, which needs nothing).
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest

from scratchpipe_sim.cli import main

TABLES, ROWS, DIM, POOLING, BATCH, CLF = 2, 4000, 32, 4, 256, 0.1

CONFIG = f"""
name: peers-small
seed: 1
hardware: {{preset: a100-gen4}}
model:
  tables: {{count: {TABLES}, rows: {ROWS}, dim: {DIM}, bytes_per_element: 4}}
  pooling: {POOLING}
  batch_size: {BATCH}
  optimizer: adam
  num_batches: 4
  warmup_batches: 1
trace: {{distribution: zipf, alpha: 1.05}}
cache: {{policy: lru, load_factor: {CLF}}}
designs: [gpu-only]
"""


def _torchrec_reason() -> str | None:
    for mod in ("torch", "fbgemm_gpu", "torchrec"):
        if importlib.util.find_spec(mod) is None:
            return (f"{mod} is not installed (pip install -e '.[peers]' then "
                    "pip install --no-deps torchrec==1.8.0)")
    try:
        import torchrec.distributed.planner.shard_estimators  # noqa: F401
    except Exception as e:  # a broken install (e.g. a torch it cannot load against)
        return f"torchrec's planner does not import: {type(e).__name__}: {e}"
    return None


needs_torchrec = pytest.mark.skipif(_torchrec_reason() is not None,
                                    reason=str(_torchrec_reason()))


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "peers.yaml"
    p.write_text(CONFIG)
    return p


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@needs_torchrec
def test_compare_peers_end_to_end_json(cfg_file, capsys):
    assert main(["compare-peers", str(cfg_file), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    got = {(r["design"], r["kernel"], r["phase"]) for r in rows}
    assert got == {(d, k, ph) for d, k in (("gpu-only", "fused"), ("uvm", "fused_uvm"),
                                          ("lru-cache", "fused_uvm_caching"))
                   for ph in ("forward", "backward")}
    for r in rows:
        for key in ("torchrec_ms", "simulated_ms", "ratio"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
        assert r["measured_ms"] is None and r["closer"] is None
        # per batch, ms: a few thousand lookups price in micro- to milliseconds, not seconds
        assert 1e-5 < r["torchrec_ms"] < 1e3 and 1e-5 < r["simulated_ms"] < 1e3


@needs_torchrec
def test_text_table(cfg_file, capsys):
    assert main(["compare-peers", str(cfg_file)]) == 0
    out = capsys.readouterr().out
    assert "torchrec_ms" in out and "fused_uvm_caching" in out and "sim/trc" in out


@needs_torchrec
def test_storage_matches_torchrec_closed_form():
    """TorchRec's storage (calculate_shard_storages, TABLE_WISE, training, pipeline NONE):
    weights x (1 + optimizer multiplier: 2 for Adam) where the table lives, plus on HBM the
    batch's input ids (8 B each) and pooled outputs (dim x the table's element bytes); a
    cached table's HBM holds round(weights x clf) x (1 + 2) and the cache state
    rows x (4 + 16 clf)."""
    import yaml

    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.experiments.peers import torchrec_estimates

    cfg = load_config(yaml.safe_load(CONFIG))
    est = torchrec_estimates(cfg)
    weights = ROWS * DIM * 4
    io = BATCH * POOLING * 8 + BATCH * DIM * 4
    per_table_state = weights * 3
    assert est["fused"]["hbm_bytes"] == TABLES * (per_table_state + io)
    assert est["fused"]["ddr_bytes"] == 0
    assert est["fused_uvm"]["ddr_bytes"] == TABLES * per_table_state
    assert est["fused_uvm"]["hbm_bytes"] == TABLES * io
    cached = math.ceil(round(weights * CLF) * 3) + math.ceil(ROWS * (4 + CLF * 16))
    assert est["fused_uvm_caching"]["ddr_bytes"] == TABLES * per_table_state
    assert abs(est["fused_uvm_caching"]["hbm_bytes"] - TABLES * (cached + io)) <= 2 * TABLES


@needs_torchrec
def test_topology_is_the_preset_in_bytes_per_ms():
    import yaml

    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.experiments.peers import topology_args

    cfg = load_config(yaml.safe_load(CONFIG))
    t = topology_args(cfg)
    hw = cfg.hardware
    assert t["hbm_mem_bw"] == pytest.approx(hw.gpu.hbm_GBps * 1e6)
    assert t["ddr_mem_bw"] == pytest.approx(hw.cpu.dram_GBps * 1e6)
    assert t["hbm_to_ddr_mem_bw"] == pytest.approx(hw.pcie.h2d_GBps * 1e6)
    assert t["hbm_cap"] == int(hw.gpu.hbm_capacity_GiB * 1024**3)


def test_missing_torchrec_is_one_line_exit_2(cfg_file, capsys, monkeypatch):
    """Without torchrec (simulated: its modules blocked in sys.modules), one line naming it
    and the extra to install; exit 2. Needs nothing installed."""
    for name in ("torchrec", "torchrec.distributed.planner.shard_estimators"):
        monkeypatch.setitem(sys.modules, name, None)
    err = _one_line_error(capsys, ["compare-peers", str(cfg_file)])
    assert "compare-peers" in err and "peers" in err
    if importlib.util.find_spec("torch") and importlib.util.find_spec("fbgemm_gpu"):
        assert "torchrec" in err


@needs_torchrec
@pytest.mark.parametrize("argv", [
    ["--published", "T9.99"],                         # no such point
    ["CFG", "--published", "T1.2"],                   # both
    [],                                                # neither
    ["CFG", "--set", "model.tables.bytes_per_element=3"],  # no TorchRec dtype
])
def test_bad_input_is_one_line_exit_2(argv, cfg_file, capsys):
    argv = [str(cfg_file) if a == "CFG" else a for a in argv]
    _one_line_error(capsys, ["compare-peers", *argv])
