"""The simulator-backed ShardEstimator and `torchrec-plan` (issue 45): every enumerated
option priced, agreement with the simulator's per-phase figures on a one-table config, the
storage change under caching, the command end to end and its one-line errors. Needs the
`peers` extra and torchrec 1.8.0 (skips otherwise, except the missing-package test)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest
import yaml
from peer_packages import torchrec_reason

from scratchpipe_sim.cli import main

needs_torchrec = pytest.mark.skipif(torchrec_reason() is not None, reason=str(torchrec_reason()))

ROWS, DIM, POOL, BATCH, CLF = 20000, 32, 4, 512, 0.1


def _config(tables: int = 1, onchip: bool = False) -> str:
    hw = "{preset: a100-gen4}" if onchip else \
        "{preset: a100-gen4, gpu: {l2_MiB: 0}, cpu: {llc_MiB: 0}}"
    return f"""
name: trp-{tables}
seed: 1
hardware: {hw}
model:
  tables: {{count: {tables}, rows: {ROWS}, dim: {DIM}, bytes_per_element: 4}}
  pooling: {POOL}
  batch_size: {BATCH}
  optimizer: adam
  num_batches: 12
  warmup_batches: 0
trace: {{distribution: zipf, alpha: 1.05}}
cache: {{policy: fbgemm-lru, load_factor: {CLF}, warmup_batches: 12}}
designs: [gpu-only, uvm, lru-cache]
"""


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "trp.yaml"
    p.write_text(_config(2))
    return p


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _cfg_trace_stats(tables: int = 1):
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.experiments import torchrec_stats as ts
    from scratchpipe_sim.timing import build_trace

    cfg = load_config(yaml.safe_load(_config(tables)))
    trace = build_trace(cfg)
    return cfg, trace, ts.trace_stats(trace)


@needs_torchrec
def test_estimator_agrees_with_the_simulator_on_one_table():
    """Timed batches = the statistics' counted half (warm-up 12 of 24 batches), no on-chip
    caches: gpu-only and lru-cache phases equal the simulator's means; uvm's forward is
    within 10% (its page walks are not linear in the counts, so the price of the mean
    batch is not the mean of the prices)."""
    from scratchpipe_sim.experiments import torchrec_estimator as te
    from scratchpipe_sim.timing import simulate
    from scratchpipe_sim.timing.designs import DESIGNS

    cfg, trace, stats = _cfg_trace_stats(1)
    assert stats.warm_batches == cfg.model.num_batches
    rows = {r["design"]: r for r in simulate(cfg, trace=trace)}
    curve = stats.tables[0]
    for kernel, design in te.KERNEL_DESIGNS.items():
        counts = te.shard_counts(curve, kernel, "table_wise", ROWS, DIM, BATCH, 1, CLF)
        terms = te.perf_terms(te.price_shard(cfg, counts, design), design)
        sim = {ph: sum(rows[design][f"stage_{s}_ns"] for s in ss) / 1e6
               for ph, ss in DESIGNS.get(design).phase_stages.items()}
        est = {"forward": terms["fwd_compute"] + terms["prefetch_compute"],
               "backward": terms["bwd_compute"]}
        tol = 0.10 if design == "uvm" else 1e-9
        for ph in ("forward", "backward"):
            assert est[ph] == pytest.approx(sim[ph], rel=tol), (design, ph)


@needs_torchrec
def test_every_enumerated_option_is_priced_and_storage_drops_cached_state():
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.shard_estimators import (
        EmbeddingPerfEstimator,
        EmbeddingStorageEstimator,
    )
    from torchrec.distributed.planner.types import ParameterConstraints, Topology
    from torchrec.distributed.types import CacheParams

    from scratchpipe_sim.experiments import peers
    from scratchpipe_sim.experiments import torchrec_estimator as te
    from scratchpipe_sim.experiments.peers import embedding_module

    cfg, _trace, stats = _cfg_trace_stats(2)
    ebc, names = embedding_module(cfg)
    curves = dict(zip(names, stats.tables, strict=True))
    topo = Topology(world_size=2, local_world_size=2, compute_device="cuda",
                    **peers.topology_args(cfg))
    cons = {n: ParameterConstraints(pooling_factors=[float(POOL)],
                                    cache_params=CacheParams(load_factor=CLF)) for n in names}

    def enumerate_with(perf):
        est = [EmbeddingStorageEstimator(topo, constraints=cons), perf]
        return EmbeddingEnumerator(topo, batch_size=BATCH // 2, constraints=cons,
                                   estimator=est).enumerate(
            ebc, [EmbeddingBagCollectionSharder()])

    sim = te.simulator_estimator(topo, cons, cfg, curves, BATCH)
    ours = enumerate_with(sim)
    theirs = enumerate_with(EmbeddingPerfEstimator(topo, constraints=cons))
    kernels = {o.compute_kernel for o in ours}
    assert {"fused", "fused_uvm", "fused_uvm_caching"} <= kernels
    assert sim.unpriced == set()
    assert sim.priced == sum(len(o.shards) for o in ours)
    for o, t in zip(ours, theirs, strict=True):
        assert (o.name, o.compute_kernel, o.sharding_type) == (
            t.name, t.compute_kernel, t.sharding_type)
        for s, u in zip(o.shards, t.shards, strict=True):
            # the compute is the simulator's shard price; the comms stay TorchRec's
            counts = te.shard_counts(curves[o.name], o.compute_kernel, o.sharding_type,
                                     s.size[0], s.size[1], BATCH, 2, o.cache_load_factor)
            want = te.perf_terms(te.price_shard(cfg, counts, te.PRICED_KERNELS[
                o.compute_kernel]), te.PRICED_KERNELS[o.compute_kernel])
            assert s.perf.fwd_compute == pytest.approx(want["fwd_compute"])
            assert s.perf.bwd_compute == pytest.approx(want["bwd_compute"])
            assert s.perf.fwd_comms == u.perf.fwd_comms
            assert s.perf.bwd_comms == u.perf.bwd_comms
            assert s.perf.fwd_compute > 0 and s.perf.bwd_compute > 0
            drop = 0
            if o.compute_kernel == "fused_uvm_caching":
                assert s.perf.prefetch_compute > 0
                drop = math.ceil(round(s.size[0] * s.size[1] * 4 * CLF) * 2)  # Adam: 2x
            assert s.storage.hbm == u.storage.hbm - drop
            assert s.storage.ddr == u.storage.ddr


@needs_torchrec
def test_torchrec_plan_end_to_end_json(cfg_file, capsys):
    assert main(["torchrec-plan", str(cfg_file), "--world-size", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["world_size"] == 2
    for side in ("torchrec", "simulator"):
        plan = out[side]
        assert plan["planner"] == side
        assert [t["table"] for t in plan["tables"]] == ["t0", "t1"]
        for t in plan["tables"]:
            assert set(t["ranks"]) <= {0, 1}
            assert set(t["terms_ms"]) == {"torchrec", "simulator"}
        assert set(plan["iter_ms"]) == {"torchrec", "simulator"}
        assert all(v > 0 for v in plan["iter_ms"].values())
    # each planner's own pick is never slower by its own estimator than the other's
    assert out["simulator"]["iter_ms"]["simulator"] <= out["torchrec"]["iter_ms"]["simulator"] \
        * (1 + 1e-9)


@needs_torchrec
def test_torchrec_plan_with_a_stats_file(cfg_file, tmp_path, capsys):
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.experiments import torchrec_stats as ts
    from scratchpipe_sim.timing import build_trace

    cfg = load_config(str(cfg_file))
    good = ts.write_stats(ts.trace_stats(build_trace(cfg)), tmp_path / "good.json")
    assert main(["torchrec-plan", str(cfg_file), "--stats", str(good)]) == 0
    assert "simulator-backed plan" in capsys.readouterr().out
    # the same tables, another trace (another seed): refused by its digest
    other = load_config(str(cfg_file), ["seed=2"])
    bad = ts.write_stats(ts.trace_stats(build_trace(other)), tmp_path / "bad.json")
    err = _one_line_error(capsys, ["torchrec-plan", str(cfg_file), "--stats", str(bad)])
    assert "another trace" in err


@needs_torchrec
def test_bad_input_is_one_line_exit_2(cfg_file, tmp_path, capsys):
    trace = tmp_path / "t.sptrace"
    assert main(["trace", "gen", "--rows", "300,500", "--batch-size", "16", "--batches",
                 "4", "--seed", "1", "--out", str(trace)]) == 0
    capsys.readouterr()
    err = _one_line_error(capsys, ["torchrec-plan", str(cfg_file), "--trace", str(trace)])
    assert "--trace" in err and "300,500" in err
    err = _one_line_error(capsys, ["torchrec-plan", str(cfg_file), "--world-size", "12"])
    assert "--world-size" in err and "gpus_per_node" in err
    _one_line_error(capsys, ["torchrec-plan", str(cfg_file), "--world-size", "0"])


def test_missing_torchrec_is_one_line_exit_2(cfg_file, capsys, monkeypatch):
    """Without torchrec (its modules blocked in sys.modules): one line naming it and the
    extra to install; exit 2. Needs nothing installed."""
    for name in ("torchrec", "torchrec.distributed.planner.shard_estimators"):
        monkeypatch.setitem(sys.modules, name, None)
    err = _one_line_error(capsys, ["torchrec-plan", str(cfg_file)])
    assert "torchrec-plan" in err and "[peers]" in err and "pip install" in err
    if importlib.util.find_spec("torch") and importlib.util.find_spec("fbgemm_gpu"):
        assert "torchrec==1.8.0" in err
