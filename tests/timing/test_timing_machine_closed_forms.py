"""`Machine`'s per-operation prices as closed forms (timing/machine.py), read off the bytes
and core-ns each operation hands its servers (a recorder stands in for the server, so no
queueing is involved): the index bytes, the UVM page walks, the GPU planner's hash work,
CUB's radix-sort passes and the populate sorts' key bits, the miss counter's passes, the
per-row core cost of a gather with on-chip hits, and the gradient aggregation's on-chip
lookups."""

from __future__ import annotations

import dataclasses
import math

import pytest
import simpy

from scratchpipe_sim.config import load_config
from scratchpipe_sim.config.hardware import rate_at
from scratchpipe_sim.config.model import GiB
from scratchpipe_sim.timing.machine import Machine, aggregate_core_ns, gather_core_ns


def machine(rows: int = 255, **model) -> Machine:
    cfg = load_config({"model": {"tables": {"count": 1, "rows": rows, "dim": 16},
                                 "batch_size": 8, "num_batches": 4, "warmup_batches": 1,
                                 **model}})
    return Machine(simpy.Environment(), cfg, 4)


def record(server) -> list[tuple[str, float, float]]:
    """Replace `server.transfer` by a recorder of (label, amount, efficiency)."""
    calls: list[tuple[str, float, float]] = []

    def transfer(nbytes, batch, label="", efficiency=1.0, **kw):
        calls.append((label, nbytes, efficiency))

    server.transfer = transfer
    return calls


def test_index_bytes_are_lookups_and_one_offset_per_bag_plus_one():
    m = machine()
    assert m.id_bytes(100.0, 8.0) == (100 + 8 * m.tables + 1) * m.index_bytes


def test_uvm_walks_miss_the_tlb_beyond_its_reach():
    m = machine()
    gpu = m.cfg.hardware.gpu
    tb = 4 * gpu.tlb_reach_GiB * GiB  # a quarter of the table within the TLB's reach
    assert m.uvm_walks(1000.0, tb, sorted_ids=False) == pytest.approx(1000 * 0.75)
    pages = tb / gpu.uvm_page_bytes
    assert m.uvm_walks(1000.0, tb, sorted_ids=True) == pytest.approx(
        pages * (1 - math.exp(-1000 / pages)) * 0.75)
    assert m.uvm_walks(1000.0, gpu.tlb_reach_GiB * GiB / 2, sorted_ids=False) == 0.0


def test_gpu_plan_is_its_hash_work_as_hbm_time():
    m = machine()
    gpu = m.cfg.hardware.gpu
    calls = record(m.hbm.server)
    m.gpu_plan(0, 3001.0, 701.0)  # not whole multiples of the rates
    busy_ns = 3001 / gpu.hash_lookup_Gps + 701 / gpu.hash_insert_Gps
    assert calls == [("gpu plan", pytest.approx(busy_ns * gpu.hbm_GBps), 1.0)]


def test_radix_sort_reads_keys_once_then_reads_and_writes_per_8_bit_pass():
    m = machine()
    calls = record(m.hbm.server)
    m.radix_sort(0, 1000.0, 8, 4, 20, "s")  # 3 passes of 8 bits
    eff = m.cfg.hardware.gpu.aggregate_efficiency
    assert calls == [("s", 1000 * (8 + 3 * 2 * (8 + 4)), eff)]


def test_populate_sorts_key_bits_cover_every_row_id():
    """255 rows: ids 0..254 plus the sentinel 255 need 8 bits, +1: 9 (2 passes)."""
    m = machine(rows=255)
    bits = []
    m.radix_sort = lambda batch, n, kb, vb, key_bits, label: bits.append(key_bits)
    m.cache_populate_sorts(0, 64.0, sets=31)
    m.env.run()
    assert bits == [9, 6]  # log2(256) + 1, log2(32) + 1


def test_miss_counter_streams_where_and_unique_and_sorts_64_bit_keys():
    m = machine()
    calls = record(m.hbm.server)
    ib = m.index_bytes
    m.cache_miss_counter(0, 1000.0)
    m.env.run()
    by = {label: n for label, n, _ in calls}
    assert by["miss counter where"] == 1000 * (4 + 2 * ib)
    assert by["miss counter unique"] == 1000 * 2 * ib
    assert by["miss counter sort"] == 1000 * (ib + math.ceil(8 * ib / 8) * 2 * ib)
    assert by["miss counter lookup"] == 1000 * m.cfg.hardware.gpu.cache_probe_bytes


def test_a_gather_window_runs_at_the_hit_rate_only_when_all_its_rows_hit():
    cpu = dataclasses.replace(machine().cfg.hardware.cpu, core_window_rows=4,
                              core_llc_GBps=20.0, core_dram_GBps=5.0, embedding_op_GBps=100.0)
    rb, h = 128.0, 0.5
    t_hit = rb / min(rate_at(cpu.core_llc_GBps, rb), cpu.embedding_op_GBps)
    t_miss = rb / min(rate_at(cpu.core_dram_GBps, rb), cpu.embedding_op_GBps)
    assert (t_hit, t_miss) == (rb / 20.0, rb / 5.0)
    assert gather_core_ns(cpu, 100.0, rb, h) == pytest.approx(
        100 * (t_hit * h ** 4 + t_miss * (1 - h ** 4)))


def test_aggregation_prices_on_chip_lookups_at_their_own_cost():
    cpu = dataclasses.replace(machine().cfg.hardware.cpu, aggregate_ns_per_lookup=40.0,
                              aggregate_onchip_ns_per_lookup=10.0)
    got = aggregate_core_ns(cpu, 1000.0, 200.0, 64.0, onchip_fraction=0.25)
    per_lookup = 64.0 / cpu.embedding_op_GBps + 40.0 * 0.75 + 10.0 * 0.25
    assert got == pytest.approx(1000 * per_lookup + 200 * cpu.aggregate_ns_per_row)


def test_cpu_backward_aggregates_on_chip_lookups_only_with_an_llc():
    for llc in (60.0, 0.0):
        m = machine()
        cpu = dataclasses.replace(m.cfg.hardware.cpu, aggregate_ns_per_lookup=40.0,
                                  aggregate_onchip_ns_per_lookup=10.0, llc_MiB=llc)
        m.cfg = dataclasses.replace(m.cfg, hardware=dataclasses.replace(
            m.cfg.hardware, cpu=cpu))
        m.dram.onchip = m.dram.onchip if llc else None
        calls = record(m.cores)
        m.cpu_backward(0, 1000.0, 200.0, r=64.0, R=64.0, lookup_onchip=0.5)
        m.env.run()
        agg = next(n for label, n, _ in calls if label == "aggregate")
        assert agg == pytest.approx(aggregate_core_ns(cpu, 1000.0, 200.0, 64.0,
                                                      0.5 if llc else 0.0))


def test_stage_spans_are_kept_only_for_a_timeline():
    for keep in (True, False):
        cfg = machine().cfg
        m = Machine(simpy.Environment(), cfg, 4, keep_spans=keep)
        m.end_stage("collect", 0, 0.0)
        assert len(m.recorder.spans) == (1 if keep else 0)
        assert m.stage_order == ["collect"]


def test_gpu_backward_streams_each_lookups_gradient_and_two_ids_then_updates_rows():
    m = machine()
    calls = record(m.hbm.server)
    m.gpu_backward(0, 1000.0, 300.0, r=64.0, R=128.0)
    m.env.run()
    eff = m.cfg.hardware.gpu.aggregate_efficiency
    assert calls[0] == ("sort+reduce", 1000 * (64 + 2 * m.index_bytes), eff)
    assert [(label, n) for label, n, _ in calls[1:]] == [("update", 2 * 300 * 128.0)]


def test_cache_lookup_probes_every_lookup_unique_row_and_fill():
    m = machine()
    calls = record(m.hbm.server)
    m.cache_lookup(0, 1000.0, 300.0, 50.0)
    probe = m.cfg.hardware.gpu.cache_probe_bytes
    assert [(label, n) for label, n, _ in calls] == [("cache lookup", 1350 * probe)]


def test_a_slow_host_sets_the_dense_step_to_its_issue_time():
    """Eager issue of 10 ms an op: alone, the dense work (launched as issued) ends when the
    host has issued the whole iteration, max(dense, host issue); a fast host leaves the
    dense time."""
    from scratchpipe_sim.timing.dense_compute import dense_iteration
    from scratchpipe_sim.timing.machine import price_alone

    for op_ns in (1e7, 1.0):
        cfg = machine(framework="eager").cfg
        cfg = dataclasses.replace(cfg, hardware=dataclasses.replace(
            cfg.hardware, cpu=dataclasses.replace(cfg.hardware.cpu, host_op_ns=op_ns,
                                                  host_sync_ns=0.0)))
        dense = dense_iteration(cfg.model, cfg.hardware.gpu, 8.0).total_ns
        host = Machine(simpy.Environment(), cfg, 4)._host.total_ns
        got = price_alone(cfg, 4, lambda mm, b: mm.mlp(b, 8.0), [0])[0]
        assert got == pytest.approx(max(dense, host), rel=1e-9)
        assert (host > dense) == (op_ns > 1)
