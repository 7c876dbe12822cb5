"""The CXL memory tier under host DRAM (issue 27): `model.cxl_share` of every table's rows
live on `hardware.cxl`, and every design's host-row traffic (hybrid's CPU gather and update,
the caches' fills and write-backs, ScratchPipe's collect, UVM's reads in place) is priced
there for that share. A tier slower than DRAM never speeds a design up on small configs
whose host side is not DRAM-bandwidth-bound; the split adds up; share 0 is no tier."""

from __future__ import annotations

import subprocess
import sys

import pytest
import simpy
from small_configs import TWO_SMALL_TABLES

from scratchpipe_sim.config import deep_merge, load_config, tier_rows
from scratchpipe_sim.config.hardware import interpolate
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.machine import Machine, gather_core_ns

#: every design that touches host rows (gpu-only keeps every table in HBM)
HOST_DESIGNS = ["hybrid", "static-cache", "lru-cache", "lru-prefetch", "scratchpipe", "uvm",
                "bagpipe"]
BASE = {**TWO_SMALL_TABLES, "hardware": {"preset": "h100-gen5-cxl"}}


def cfg_with(share: float, over: dict | None = None):
    return load_config(deep_merge(deep_merge(BASE, {"model": {"cxl_share": share}}),
                                  over or {}))


def rows_by_design(share: float, over: dict | None = None) -> dict[str, dict]:
    cfg = cfg_with(share, over)
    return {r["design"]: r for r in simulate(cfg, HOST_DESIGNS)}


@pytest.mark.parametrize("over", [
    None,  # the preset: an LLC, DMA through DRAM
    {"hardware": {"cpu": {"llc_MiB": 0}, "pcie": {"dma_loads_dram": False}}},
])
def test_a_slower_tier_never_makes_a_design_faster(over):
    base = rows_by_design(0.0, over)
    for share in (0.25, 1.0):
        tier = rows_by_design(share, over)
        for d in HOST_DESIGNS:
            assert tier[d]["iter_ns_mean"] >= base[d]["iter_ns_mean"] * (1 - 1e-12), (d, share)
            # the same policy: the tier changes prices, never what moves
            assert tier[d]["fills"] == base[d]["fills"], d
            assert tier[d]["cxl_bytes"] > 0, d  # every design sees the tier
    # the whole tier: slower than DRAM, strictly so for the CPU-bound hybrid
    assert rows_by_design(1.0, over)["hybrid"]["iter_ns_mean"] > base["hybrid"]["iter_ns_mean"]


def test_share_zero_is_no_tier():
    """Share 0 prices exactly as a config without the tier's keys (no cxl columns)."""
    no_tier = load_config(deep_merge(BASE, {"hardware": {"preset": "h100-gen5"}}))
    zero = cfg_with(0.0)
    a = simulate(no_tier, HOST_DESIGNS)
    b = simulate(zero, HOST_DESIGNS)
    for ra, rb in zip(a, b, strict=True):
        assert "cxl_bytes" not in rb and "busy_cxl" not in rb
        def priced(r: dict) -> dict:  # wall-clock columns measure this host, not the model
            return {k: v for k, v in r.items() if not k.endswith("_wall_s")}

        assert priced(ra) == priced(rb)


@pytest.mark.parametrize("rows", [1, 7, 4000, 1_000_003])
@pytest.mark.parametrize("share", [0.0, 0.1, 1 / 3, 0.5, 0.999, 1.0])
def test_split_adds_up(rows, share):
    dram, cxl = tier_rows(rows, share)
    assert dram + cxl == rows and dram >= 0 and cxl >= 0
    assert abs(cxl - share * rows) <= 0.5


def test_config_split_and_bytes_add_up():
    cfg = cfg_with(0.3, {"model": {"tables": {"count": 3, "rows": [1000, 2001, 7]},
                                   "top_mlp": None}})
    cxl = cfg.cxl_rows_per_table
    assert cxl == (300, 600, 2)
    assert cfg.cxl_fraction == pytest.approx(902 / 3008)
    assert sum(tier_rows(n, 0.3)[0] for n in cfg.model.rows_per_table) + sum(cxl) \
        == cfg.total_rows
    r = simulate(cfg_with(0.5), ["hybrid"])[0]
    r0 = simulate(cfg_with(0.0), ["hybrid"])[0]
    # the host rows' bytes move between tiers; none is lost or added
    assert r["dram_bytes"] + r["cxl_bytes"] == pytest.approx(r0["dram_bytes"], rel=1e-12)


def test_one_gather_closed_form():
    """A CPU gather alone, no LLC: DRAM || CXL || cores, each at its closed form —
    (1-f) x rows x r / (dram_GBps x eff) + dram latency, f x rows x r / (cxl_GBps x eff) +
    cxl latency, and the cores' time with CXL misses at core_dram_GBps x 110 / 300."""
    cfg = cfg_with(0.25, {"hardware": {"cpu": {"llc_MiB": 0}}})
    hw = cfg.hardware
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    rows, rb = 1_000_000.0, 256.0
    env.run(m.cpu_gather(rows, rb, 0, "probe"))
    f = cfg.cxl_fraction
    assert f == 0.25
    eff = interpolate(hw.cpu.gather_efficiency, rb)
    dram = hw.cpu.dram_latency_ns + (1 - f) * rows * rb / (hw.cpu.dram_GBps * eff)
    cxl = hw.cxl.load_latency_ns + f * rows * rb / (hw.cxl.bandwidth_GBps * eff)
    cores_rate = hw.cpu.cores * hw.cpu.parallel_efficiency
    op = hw.cpu.embedding_op_GBps
    t_dram = rb / min(hw.cpu.core_dram_GBps, op)
    t_cxl = rb / min(hw.cpu.core_dram_GBps * hw.cpu.dram_latency_ns / hw.cxl.load_latency_ns,
                     op)
    cores = ((1 - f) * rows * t_dram + f * rows * t_cxl) / cores_rate
    assert cores * cores_rate == pytest.approx(
        gather_core_ns(hw.cpu, (1 - f) * rows, rb)
        + gather_core_ns(hw.cpu, f * rows, rb, miss_scale=110 / 300), rel=1e-12)
    assert t_cxl > t_dram  # a CXL row costs its core more (at nominal: the miss rate rules)
    assert env.now == pytest.approx(max(dram, cxl, cores), rel=1e-9)
    assert m.cxl.server.bytes_by_batch[0] == pytest.approx(f * rows * rb)
    assert m.dram.server.bytes_by_batch[0] == pytest.approx((1 - f) * rows * rb)


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_share_outside_0_1_names_the_key(share):
    with pytest.raises(UserError) as e:
        cfg_with(share)
    assert e.value.field == "model.cxl_share"


@pytest.mark.parametrize("key", ["bandwidth_GBps", "load_latency_ns"])
def test_a_share_without_the_tier_names_the_missing_key(key):
    with pytest.raises(UserError) as e:
        load_config(deep_merge(BASE, {"hardware": {"preset": "h100-gen5",
                                                   "cxl": {"bandwidth_GBps": 30.0,
                                                           "load_latency_ns": 300.0,
                                                           key: None}},
                                      "model": {"cxl_share": 0.5}}))
    assert e.value.field == f"hardware.cxl.{key}"
    # share 0: the tier's keys are not needed
    load_config(deep_merge(BASE, {"hardware": {"preset": "h100-gen5"}}))


def test_negative_bandwidth_names_the_key():
    with pytest.raises(UserError) as e:
        cfg_with(0.5, {"hardware": {"cxl": {"bandwidth_GBps": -3.0}}})
    assert e.value.field == "hardware.cxl.bandwidth_GBps"


def test_rows_beyond_the_capacity_name_the_share():
    with pytest.raises(UserError) as e:
        cfg_with(0.5, {"hardware": {"cxl": {"capacity_GiB": 1e-6}}})
    assert e.value.field == "model.cxl_share"


@pytest.mark.parametrize("args,key", [
    (["--set", "model.cxl_share=1.5"], "model.cxl_share"),
    (["--set", "model.cxl_share=0.5", "--set", "hardware.preset=h100-gen5"],
     "hardware.cxl.bandwidth_GBps"),
    (["--set", "model.cxl_share=0.5", "--set", "hardware.cxl.bandwidth_GBps=-1"],
     "hardware.cxl.bandwidth_GBps"),
])
def test_cli_bad_input_is_one_line_exit_2(args, key, tmp_path):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "designs": ["hybrid"]}))
    out = subprocess.run([sys.executable, "-m", "scratchpipe_sim", "run", str(path), *args,
                          "--no-cache", "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0]


def test_preset_ranges_vary_the_tier():
    """`sensitivity` varies the tier's bandwidth and latency (ranges around the nominal)."""
    hw = cfg_with(0.5).hardware
    for key in ("cxl.bandwidth_GBps", "cxl.load_latency_ns"):
        lo, hi = hw.ranges[key]
        sec, name = key.split(".")
        assert lo <= getattr(getattr(hw, sec), name) <= hi


def test_where_dram_bandwidth_is_the_wall_a_small_share_expands_it():
    """The exception the rule above leaves (docs/timing.md, "CXL memory tier"): the tier is
    a second device, so the memory side of a gather takes max((1-c) n / DRAM, c n / CXL) —
    below n / DRAM for c < CXL / (DRAM + CXL), above it beyond (Sun et al.'s interleaving
    gains). A design bound by DRAM bandwidth can speed up at a small share."""

    def memory_ns(share: float) -> float:
        cfg = cfg_with(share, {"hardware": {"cpu": {"llc_MiB": 0}}})
        env = simpy.Environment()
        m = Machine(env, cfg, 1)
        env.run(m.table_gather(1_000_000.0, 256.0, 0, "probe"))
        return env.now

    hw = cfg_with(0.0).hardware
    knee = hw.cxl.bandwidth_GBps / (hw.cxl.bandwidth_GBps + hw.cpu.dram_GBps)
    assert memory_ns(knee / 2) < memory_ns(0.0) < memory_ns(min(1.0, 2 * knee))
