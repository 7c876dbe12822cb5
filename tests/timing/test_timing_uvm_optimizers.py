"""The GPU half's mechanisms fitted on FBGEMM's published runs (docs/validation.md): UVM reads
and writes in place (closed forms at the extremes of duplication, the page-walk count), the
optimizers' state bytes, and where each design keeps the state."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from small_configs import H100_OFF_CHIP

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.config.model import GiB
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.machine import Machine
from scratchpipe_sim.timing.trace_setup import FIRST_TOUCH_TARGET
from scratchpipe_sim.traces.csr_trace import Trace

BASE = {**H100_OFF_CHIP, "designs": ["uvm"]}


def cfg_of(over=None):
    return load_config(deep_merge(BASE, over or {}))


def trace_of(make_ids, batches=6, tables=2, rows=4000, batch=64, pooling=4):
    out = [[make_ids(k, t, batch * pooling) for t in range(tables)] for k in range(batches)]
    lens = [[np.full(batch, pooling, np.int64)] * tables for _ in range(batches)]
    return Trace.from_batches(out, [rows] * tables, lens)


@pytest.mark.parametrize("case", ["distinct", "equal"])
def test_uvm_link_bytes_at_the_extremes_of_duplication(case):
    """All ids distinct: every lookup's row crosses the link (U = A); all ids equal: one row
    per table and batch, however many lookups."""
    cfg = cfg_of()
    m = cfg.model
    A = m.batch_size * m.poolings[0]
    if case == "distinct":
        tr = trace_of(lambda k, t, n: (np.arange(n) + k * n).astype(np.int64) % 4000)
        U = A
    else:
        tr = trace_of(lambda k, t, n: np.full(n, 7, np.int64))
        U = 1
    row = simulate(cfg, ["uvm"], trace=tr)[0]
    timed = m.num_batches - m.warmup_batches
    tables, r, R = m.table_count, m.row_bytes, m.moved_row_bytes
    idx = (A * tables + m.batch_size * tables + 1) * m.index_bytes
    assert row["unique"] == U * tables * timed
    # forward reads each distinct row once; the backward reads and writes it (SGD: R = r)
    assert row["pcie_h2d_bytes"] == timed * (U * tables * (r + R) + idx)
    assert row["pcie_d2h_bytes"] == timed * U * tables * R


def test_a_row_moves_in_whole_sectors():
    """rowwise-adagrad's 132 B rows (128 B weights + one fp32) cross as 160 B; its 4 B state
    alone as one 32 B sector. Rows of whole sectors move exactly their bytes."""
    m = Machine(simpy.Environment(), cfg_of({"model": {"optimizer": "rowwise-adagrad"}}), 1)
    assert m.link_bytes(10, 4) == 10 * 32
    assert m.link_bytes(3, 132) == 3 * 160
    assert m.link_bytes(2, 512) == 1024
    aligned = Machine(simpy.Environment(), cfg_of(), 1)
    assert aligned.link_bytes(3, 128) == 384


def test_page_walks_closed_form():
    """Random order: each row misses the TLB with probability 1 - reach / table bytes;
    sorted order: one walk per distinct page touched; a table within the reach: none."""
    cfg = cfg_of()
    m = Machine(simpy.Environment(), cfg, 1)
    gpu = cfg.hardware.gpu
    table = 64 * GiB
    miss = 1 - gpu.tlb_reach_GiB * GiB / table
    assert m.uvm_walks(1000, table, sorted_ids=False) == pytest.approx(1000 * miss)
    pages = table / gpu.uvm_page_bytes
    assert m.uvm_walks(1000, table, sorted_ids=True) == pytest.approx(
        pages * (1 - math.exp(-1000 / pages)) * miss)
    # many more sorted rows than pages: every page once
    assert m.uvm_walks(1e9, table, sorted_ids=True) == pytest.approx(pages * miss)
    assert m.uvm_walks(1000, gpu.tlb_reach_GiB * GiB / 2, sorted_ids=False) == 0.0


def test_page_walks_price_a_uvm_read_when_they_bind():
    """uvm_read = max(link, walks x uvm_translation_ns): a 1 TB allocation read randomly."""
    cfg = cfg_of({"hardware": {"cpu": {"dram_GBps": 1e9}, "pcie": {"h2d_GBps": 1e6,
                                                                    "latency_ns": 0}}})
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    rows, table = 10_000, 1024 * GiB
    ev = m.uvm_read(0, rows, 512, "x", table_bytes=table)
    env.run(ev)
    walks = m.uvm_walks(rows, table, sorted_ids=False)
    dram = cfg.hardware.cpu.dram_latency_ns
    assert env.now == pytest.approx(max(walks * cfg.hardware.gpu.uvm_translation_ns,
                                        dram), rel=1e-9)


@pytest.mark.parametrize("optimizer,state", [("sgd", 0), ("adagrad", 128), ("adam", 256),
                                             ("rowwise-adagrad", 4)])
def test_optimizer_state_bytes_per_row(optimizer, state):
    """FBGEMM's split_optimizer_states for D = 32 fp32: adagrad D floats, adam 2D, rowwise
    one float."""
    m = cfg_of({"model": {"optimizer": optimizer}}).model
    assert m.state_bytes == state and m.moved_row_bytes == 128 + state


def test_adam_state_crosses_the_link_under_lru_cache_unless_enforce_hbm():
    over = {"model": {"optimizer": "adam"}, "designs": ["lru-cache"]}
    cfg = cfg_of(over)
    uvm = simulate(cfg, ["lru-cache"])[0]
    hbm = simulate(
        cfg_of(
            deep_merge(
                over,
                {
                    "cache": {},
                    "design_params": {
                        "lru-cache": {"enforce_hbm": True},
                        "lru-prefetch": {"enforce_hbm": True},
                    },
                },
            )
        ),
        ["lru-cache"],
    )[0]
    m = cfg.model
    assert uvm["fills"] == hbm["fills"] and uvm["fills"] > 0
    # the state in UVM: weights fill; each unique row's m and v read and written in place
    assert uvm["pcie_d2h_bytes"] == uvm["writebacks"] * m.row_bytes + uvm["unique"] * 256
    # enforce_hbm: the state moves with the row, and only on fills and write-backs
    assert hbm["pcie_d2h_bytes"] == hbm["writebacks"] * m.moved_row_bytes
    assert uvm["stage_backward_ns"] > hbm["stage_backward_ns"]


def test_removed_uvm_efficiency_names_its_replacement(tmp_path, capsys):
    import yaml

    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(deep_merge(BASE, {"hardware": {"pcie": {"uvm_efficiency": 0.1}}})))
    assert main(["config", "show", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "uvm_read_share" in err
    assert "hardware.pcie.uvm_efficiency" in err


COLD = {"hardware": {"preset": "a100-gen4"},
        "model": {"tables": {"count": 8, "rows": 250_000, "dim": 64}, "pooling": 20,
                  "batch_size": 2048, "num_batches": 60, "warmup_batches": 8},
        "trace": {"distribution": "zipf", "alpha": 1.05},
        "cache": {"policy": "lru", "load_factor": 1.0}, "designs": ["gpu-only", "lru-cache"],
        "seed": 1}


def test_a_cold_cache_warns_and_auto_warms_it(tmp_path, capsys):
    """The issue's cold case: a cache as large as the tables, warmed by 2 batches, still
    misses rows it has never seen (one line on stderr saying so, with their share); `auto`
    replays until they are below 1% of the measured lookups."""
    import yaml

    p = tmp_path / "cold.yaml"
    short = deep_merge(COLD, {"model": {"num_batches": 20, "warmup_batches": 2},
                              "cache": {"warmup_batches": 2}})
    p.write_text(yaml.safe_dump(short))
    assert main(["run", str(p), "--quiet", "--no-timeline", "--out",
                 str(tmp_path / "a")]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if "steady state" in ln]
    assert len(err) == 1 and "lru-cache" in err[0] and "are first touches" in err[0]
    rows = {r["design"]: r for r in simulate(load_config(COLD), ["lru-cache"])}
    assert rows["lru-cache"]["steady_state"] is True
    assert rows["lru-cache"]["first_touch_share"] < FIRST_TOUCH_TARGET
    assert rows["lru-cache"]["cache_warmup_batches"] >= 20
