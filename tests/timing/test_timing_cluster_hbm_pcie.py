"""The cluster's HBM beside its shards (the batches in flight: ids, routed ids, outputs and
their gradients, activations, by pipeline depth) and a PCIe switch's uplink shared by the
GPUs behind it (DGX A100): closed forms, orderings and bad input."""

from __future__ import annotations

import math

import pytest
import simpy
import yaml
from small_configs import off_chip

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import cluster_pipeline as cp
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.dense_compute import saved_activation_bytes
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.designs import cluster as cl
from scratchpipe_sim.timing.machine import Machine

GiB = 1 << 30
#: 2 nodes x 8 GPUs, 4 tables of 500 rows x 32 fp32 (128 B), 64 samples: 4 a rank
BASE = {
    "hardware": deep_merge(off_chip("dgx-h100-cluster"), {"cluster": {"nodes": 2}}),
    "model": {"tables": {"count": 4, "rows": 500, "dim": 32}, "pooling": 4, "batch_size": 64,
              "num_batches": 6, "warmup_batches": 2, "bottom_mlp": [13, 64, 16],
              "interaction": "cat", "top_mlp": [144, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "designs": ["cluster"],
    "seed": 5,
}
TABLE_WISE = {"design_params": {"cluster": {"sharding": "table-wise"}}}


def cfg_of(*overs, sets=()):
    d = BASE
    for o in overs:
        d = deep_merge(d, o)
    return load_config(d, sets)


def design(*overs, sets=()):
    return DESIGNS.get("cluster")(cfg_of(*overs, sets=sets))


def pipeline(mode):
    return {"design_params": {"cluster": {"pipeline": mode}}}


# -- the batches in flight -------------------------------------------------------------------
def test_saved_activations_closed_form():
    """Each MLP's input + 2 x each layer's width (GEMM and activation outputs) + the
    concatenation, fp32: bottom 13 + 2 (64 + 16), top 144 + 2 x 1, cat 16 + 4 x 32."""
    m = cfg_of().model
    assert saved_activation_bytes(m, 4) == 4 * 4 * (13 + 2 * 80 + 144 + 2 + 16 + 128)


@pytest.mark.parametrize("mode,on_gpu,routed", [("none", 2, 1), ("sparse-dist", 3, 2),
                                                ("nestpipe", 4, 3)])
def test_in_flight_bytes_closed_form_per_pipeline(mode, on_gpu, routed):
    """Table-wise, 4 tables on 4 of 16 ranks, B = 4 a rank, L B = 64 a group, int64 ids:
    ids (4 x 16 ids + 4 x 4 + 1 offsets) x 8 B; a table's rank gets 64 x (4 ids + 1
    length) x 8 B routed and sends 64 pooled vectors of 128 B; every rank receives
    4 x 4 x 128 B. TrainPipelineSparseDist holds three batches (one training, one in
    input_dist, one copied), two routed; TrainPipelineBase two, one; NestPipe four, three."""
    assert cp.batches_in_flight(mode) == (on_gpu, routed)
    d = design(TABLE_WISE, pipeline(mode))
    ids, got, out, sent = 648.0, 64 * 5 * 8.0, 4 * 4 * 128.0, 64 * 128.0
    act = saved_activation_bytes(d.cfg.model, 4)
    holder = on_gpu * ids + routed * got + 2 * (out + sent) + act
    other = on_gpu * ids + 2 * out + act
    held = d.holds.sum(axis=1)
    assert sorted(held.tolist()) == [0] * 12 + [1] * 4
    assert d.in_flight.tolist() == [holder if h else other for h in held]


def test_more_batches_in_flight_never_give_more_cache_capacity():
    """Per-rank caches (load_factor 0.5 of a 2,000-row shard) on a GPU whose HBM is what
    sparse-dist's batches in flight hold plus 500 rows: it gets 500 rows, nestpipe fewer
    (its batch more in flight: 51,208 B = 400 rows), none more, and none of them more than
    the load factor's 1,000."""
    over = {"model": {"batch_size": 1024, "tables": {"rows": 2000}},
            "cache": {"load_factor": 0.5},
            "design_params": {"cluster": {"sharding": "table-wise",
                                          "rank_cache": "lru-cache"}}}
    R = design(over).rank_R
    g = int(design(over).in_flight.argmax())
    room = {m: design(over, pipeline(m)).in_flight[g] for m in ("none", "sparse-dist",
                                                                "nestpipe")}
    assert room["none"] < room["sparse-dist"] < room["nestpipe"]
    small = {"hardware": {"gpu": {"hbm_capacity_GiB": (room["sparse-dist"] + 500 * R) / GiB}}}
    caps = [design(over, small, pipeline(m)).rank_cache_capacity(g)
            for m in ("none", "sparse-dist", "nestpipe")]
    assert caps[1] == 500 and caps[2] == 500 - math.ceil(51_208 / R) and caps[0] >= caps[1]
    assert caps[0] <= 1000
    # reported: the smallest rank's cache (a rank holding no table has one row)
    row = simulate(cfg_of(over, small), ["cluster"])[0]
    assert row["rank_cache_rows"] == min(design(over, small).rank_cache_capacity(r)
                                         for r in range(16))


def test_tables_that_fit_only_without_the_batches_in_flight_are_refused():
    """Shards in HBM: a GPU of the largest rank's tables + half its batches in flight
    holds the tables alone but not with the batches; refused naming model.batch_size."""
    d = design(TABLE_WISE)
    need = max(d.layout.used_bytes)
    g = int(d.in_flight.argmax())
    assert d.layout.used_bytes[g] == need
    tight = {"hardware": {"gpu": {"hbm_capacity_GiB": (need + d.in_flight[g] / 2) / GiB}}}
    with pytest.raises(UserError) as e:
        design(TABLE_WISE, tight)
    assert e.value.field == "model.batch_size" and "in flight" in e.value.message
    # the shards alone fit: pipeline none's fewer batches in flight fit too when they do
    roomy = {"hardware": {"gpu": {"hbm_capacity_GiB": (need + d.in_flight[g]) / GiB}}}
    assert max(design(TABLE_WISE, roomy).layout.used_bytes) == need


def test_a_cache_that_fits_only_without_the_batches_in_flight_is_refused():
    over = {"cache": {"capacity_rows": 200},
            "design_params": {"cluster": {"sharding": "table-wise", "rank_cache": "lru-cache"}}}
    d = design(over)
    hbm = (200 * d.rank_R + d.in_flight.max() / 2) / GiB
    with pytest.raises(UserError) as e:
        design(over, {"hardware": {"gpu": {"hbm_capacity_GiB": hbm}}})
    assert e.value.field == "cache.capacity_rows"


def test_batches_larger_than_hbm_exit_2_naming_the_key(tmp_path, capsys):
    cfg = deep_merge(BASE, {"hardware": {"gpu": {"hbm_capacity_GiB": 1e-6}},
                            "cache": {"capacity_rows": 1}})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.batch_size" in err and "in flight" in err


def test_the_report_says_what_the_batches_hold_and_the_model_that_fits():
    cfg = cfg_of(TABLE_WISE)
    row = simulate(cfg, ["cluster"])[0]
    d = DESIGNS.get("cluster")(cfg)
    assert row["hbm_in_flight_GiB"] == d.in_flight.max() / GiB > 0
    assert row["max_model_GiB"] == 16 * (cfg.hardware.gpu.hbm_capacity_GiB
                                         - d.in_flight.max() / GiB)


# -- the PCIe switch's uplink ----------------------------------------------------------------
A100 = {"hardware": deep_merge(off_chip("dgx-a100-cluster"), {"cluster": {"nodes": 1}})}


def h2d_ns(cfg, nbytes):
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    cp.share_pcie_switch(m)
    env.run(m.pcie.h2d(nbytes, 0, "rank fill", dma=False))
    return env.now


def test_dgx_a100_puts_two_gpus_behind_a_switch_and_dgx_h100_one():
    a, h = cfg_of(A100).hardware.pcie, cfg_of().hardware.pcie
    assert (a.gpus_per_switch, a.switch_uplink_GBps) == (2, 25.0)
    assert (h.gpus_per_switch, h.switch_uplink_GBps) == (1, None)


def test_two_gpus_behind_one_switch_copy_at_half_the_uplink():
    """The uplink (25 GB/s) no faster than a GPU's link (25): two GPUs copying the same
    bytes at once take 2 x one GPU's transfer time (beyond the latency)."""
    N = 1e9
    lat = cfg_of(A100).hardware.pcie.latency_ns
    two = h2d_ns(cfg_of(A100), N) - lat
    one = h2d_ns(cfg_of(A100, sets=["hardware.pcie.gpus_per_switch=1"]), N) - lat
    assert one == pytest.approx(N / 25.0, rel=1e-12)
    assert two == pytest.approx(2 * one, rel=1e-12)
    # a wide uplink leaves the GPU's own link the bottleneck
    wide = cfg_of(A100, sets=["hardware.pcie.switch_uplink_GBps=100"])
    assert h2d_ns(wide, N) - lat == pytest.approx(one, rel=1e-12)


def test_a_rank_fetch_over_a_shared_uplink_is_slower_by_at_most_2x():
    """Per-rank lru-caches on DGX A100 nodes over a fast host, no duplex drop: the on-demand
    rank fetch with two GPUs a switch is slower than with the uplink to each GPU alone, by
    at most 2x (only its copies' part doubles: the cache lookup kernels and the HBM writes
    do not); a DGX H100 node has no uplink server."""
    over = {"hardware": {"cpu": {"dram_GBps": 1e5, "cores": 4096},
                         "pcie": {"duplex_h2d_GBps": None}},
            "model": {"tables": {"count": 4, "rows": 20_000, "dim": 32}, "pooling": 8,
                      "batch_size": 512},
            "cache": {"capacity_rows": 1500},
            "design_params": {"cluster": {"rank_cache": "lru-cache"}}}
    shared = simulate(cfg_of(A100, over), ["cluster"])[0]
    alone = simulate(cfg_of(A100, over, sets=["hardware.pcie.gpus_per_switch=1"]),
                     ["cluster"])[0]
    assert 1.0 < shared["stage_rank_fetch_ns"] / alone["stage_rank_fetch_ns"] <= 2.0
    assert shared["busy_pcie_uplink_h2d"] > 0 and "busy_pcie_uplink_h2d" not in (
        simulate(cfg_of(over), ["cluster"])[0])


def test_dgx_h100_is_unchanged_bit_for_bit(monkeypatch):
    """One GPU a switch and no uplink set: the same row as without the uplink's model."""
    over = {"design_params": {"cluster": {"rank_cache": "scratchpipe"}},
            "cache": {"capacity_rows": 300}}
    def result():
        row = simulate(cfg_of(over), ["cluster"])[0]
        return {k: v for k, v in row.items() if not k.endswith("_wall_s")}  # host clock

    with_uplink = result()
    monkeypatch.setattr(cl, "share_pcie_switch", lambda m: None)
    assert result() == with_uplink


@pytest.mark.parametrize("key,value", [("hardware.pcie.gpus_per_switch", 3),
                                       ("hardware.pcie.switch_uplink_GBps", 0)])
def test_bad_switch_figures_exit_2_naming_the_key(tmp_path, capsys, key, value):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(deep_merge(BASE, A100)))
    assert main(["run", str(path), "--set", f"{key}={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err


def test_only_the_cluster_reads_the_switch():
    """A one-GPU node of dgx-a100 (two GPUs a switch) loads: the check is the cluster's."""
    cfg = cfg_of(A100, sets=["hardware.interconnect.gpus_per_node=1"])
    assert cfg.hardware.pcie.gpus_per_switch == 2
    with pytest.raises(UserError) as e:
        design(A100, sets=["hardware.interconnect.gpus_per_node=1"])
    assert e.value.field == "hardware.pcie.gpus_per_switch"
