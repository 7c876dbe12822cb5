"""Hybrid's forward priced with FBGEMM's CPU forward structure (`hardware.cpu.forward`):
the strided output of a multi-table call, and the freed memory `--against fbgemm` keeps.

Closed forms of timing/cpu_update_cost.py's forward terms (alone and through the Machine,
which passes the config's table count); on FBGEMM itself (skipped without the `peers`
extra), structure only, never time: a multi-table call's output is one [B, total_D] array
whose table t fills columns t D .. (t + 1) D of every bag's row (the stride the strided
term prices), and with glibc's freed memory kept a call's fresh output costs no page faults
after the first calls (counts from getrusage, not timings).
"""

from __future__ import annotations

import numpy as np
import pytest
from peer_packages import fbgemm_reason

from scratchpipe_sim.config import load_config
from scratchpipe_sim.config.hardware import ForwardTerms
from scratchpipe_sim.timing.cpu_update_cost import (
    FORWARD_TERM_NAMES,
    forward_overhead_ns,
    forward_row,
    strided_bags,
)
from scratchpipe_sim.timing.machine import price_alone

needs_fbgemm = pytest.mark.skipif(fbgemm_reason() is not None, reason=str(fbgemm_reason()))

FORWARD = {"ns_per_call": 9000.0, "ns_per_bag": 30.0, "ns_per_bag_element": 0.5,
           "ns_per_strided_bag": 7.0, "ns_per_strided_bag_element": 0.25,
           "rates_pooling": 20.0}
FAST_MEMORY = {"dram_GBps": 1e9, "llc_GBps": 1e9, "dram_latency_ns": 0.0}


def _cfg(tables: int, forward: dict | None, cores: int = 2):
    return load_config({
        "hardware": {"preset": "a100-gen4",
                     "cpu": {**FAST_MEMORY, "cores": cores, "parallel_efficiency": 1.0,
                             "forward": forward}},
        "model": {"tables": {"count": tables, "rows": 100000, "dim": 64},
                  "pooling": 4, "batch_size": 64, "num_batches": 2, "warmup_batches": 0},
        "designs": ["hybrid"]})


def test_strided_bags_are_every_bag_of_a_multi_table_call_and_none_of_one_table():
    assert strided_bags(4096, 1) == 0.0
    assert strided_bags(4096, 2) == 4096.0
    assert strided_bags(4096, 8) == 4096.0


def test_forward_row_lays_out_the_strided_columns_after_the_bag_ones():
    assert len(forward_row(100, 10, 64)) == len(FORWARD_TERM_NAMES)
    assert forward_row(100, 10, 64) == (1.0, 100, 6400, 10, 640, 0.0, 0.0)
    assert forward_row(100, 10, 64, 3) == (1.0, 100, 6400, 10, 640, 10.0, 640.0)


def test_one_table_forward_is_the_call_and_the_bags_beyond_the_rates_pooling():
    t = ForwardTerms(**FORWARD)
    # pooling 1: 5000 bags, 250 carried by the rates (one per 20 lookups)
    assert forward_overhead_ns(t, 5000, 5000, 64) == 9000 + 4750 * (30 + 64 * 0.5)
    assert forward_overhead_ns(t, 5000, 5000, 64, 1) == forward_overhead_ns(t, 5000, 5000, 64)


def test_a_multi_table_call_adds_every_bags_strided_run_at_any_pooling():
    t = ForwardTerms(**FORWARD)
    strided = 5000 * (7.0 + 128 * 0.25)
    one = forward_overhead_ns(t, 5000, 5000, 128, 1)
    assert forward_overhead_ns(t, 5000, 5000, 128, 8) == pytest.approx(one + strided)
    # pooling 20 (the rates' own): only the call, plus the strided runs of all 250 bags
    assert forward_overhead_ns(t, 5000, 250, 128, 1) == 9000
    assert forward_overhead_ns(t, 5000, 250, 128, 8) == pytest.approx(
        9000 + 250 * (7.0 + 128 * 0.25))


def test_unset_strided_terms_leave_the_forward_as_before():
    t = ForwardTerms(**{k: v for k, v in FORWARD.items() if "strided" not in k})
    for tables in (1, 2, 8):
        assert forward_overhead_ns(t, 5000, 5000, 64, tables) == 9000 + 4750 * 62.0


@pytest.mark.parametrize("tables", [1, 8])
def test_the_machine_prices_the_strided_runs_with_the_configs_tables(tables):
    # hybrid's cpu_gather = the rows' gather, then forward_overhead_ns on every core
    cfg = _cfg(tables, FORWARD)
    base = _cfg(tables, None)
    r = cfg.model.row_bytes

    def gather(c, bags):
        return float(price_alone(c, 1, lambda m, b: m.cpu_embedding_bag(5000, r, bags, b),
                                 [0])[0])

    extra = forward_overhead_ns(ForwardTerms(**FORWARD), 5000, 5000, 64, tables)
    assert gather(cfg, 5000) == pytest.approx(gather(base, 5000) + extra / 2, rel=1e-9)


@needs_fbgemm
def test_a_multi_table_forward_writes_each_tables_run_at_a_stride_of_total_d():
    """The structure strided_bags prices: FBGEMM's output for T tables at pooling 1 is one
    [B, T x D] array, row-major, table t's pooled row at columns t D .. (t + 1) D."""
    import torch

    from scratchpipe_sim.cpu.fbgemm_tbe import import_fbgemm

    fb = import_fbgemm()
    tables, rows, dim, batch = 3, 50, 8, 7
    tbe = fb["TBE"]([(rows, dim, fb["EmbeddingLocation"].HOST, fb["ComputeDevice"].CPU)]
                    * tables, optimizer=fb["EmbOptimType"].EXACT_SGD, learning_rate=0.01,
                    pooling_mode=fb["PoolingMode"].SUM,
                    weights_precision=fb["SparseType"].FP32)
    rng = np.random.default_rng(3)
    ids = [rng.integers(0, rows, batch) for _ in range(tables)]
    with torch.no_grad():
        out = tbe(torch.from_numpy(np.concatenate(ids).astype(np.int64)),
                  torch.arange(0, batch * tables + 1, dtype=torch.int64))
    assert tuple(out.shape) == (batch, tables * dim)
    assert out.stride() == (tables * dim, 1)
    weights = tbe.split_embedding_weights()
    for t in range(tables):
        np.testing.assert_array_equal(out[:, t * dim:(t + 1) * dim].numpy(),
                                      weights[t].detach().numpy()[ids[t]])


@needs_fbgemm
def test_kept_freed_memory_gives_a_large_output_no_page_faults_per_call():
    """With `keep_freed_memory` (set by import_fbgemm), a forward whose 16 MiB output and
    gradient are freed every step reuses the same pages: after two warm-up steps the
    steps fault (nearly) never; glibc's defaults faulted this shape 520 times a call."""
    import torch

    from scratchpipe_sim.cpu.fbgemm_tbe import import_fbgemm, keep_freed_memory, minor_faults

    fb = import_fbgemm()
    if not keep_freed_memory():
        pytest.skip("MALLOC_* set by the user, or not glibc: mallopt not applied")
    torch.set_num_threads(1)
    tables, rows, dim, batch = 8, 64, 128, 4096  # output 4096 x 1024 floats: 16 MiB
    tbe = fb["TBE"]([(rows, dim, fb["EmbeddingLocation"].HOST, fb["ComputeDevice"].CPU)]
                    * tables, optimizer=fb["EmbOptimType"].EXACT_SGD, learning_rate=0.01,
                    pooling_mode=fb["PoolingMode"].SUM,
                    weights_precision=fb["SparseType"].FP32)
    ids = torch.from_numpy(np.random.default_rng(5).integers(0, rows, batch * tables))
    offs = torch.arange(0, batch * tables + 1, dtype=torch.int64)
    faults = []
    for _ in range(5):
        f0 = minor_faults()
        out = tbe(ids, offs)
        faults.append(minor_faults() - f0)
        out.backward(torch.full_like(out, 1e-4))
        del out
    # a fresh 16 MiB output faults >= 8 times (2 MiB pages), 4096 on 4 KiB pages
    assert max(faults[2:]) < 8


def test_grad_output_rows_miss_once_they_and_the_walks_rows_exceed_the_llc():
    from scratchpipe_sim.timing.cpu_update_cost import grad_output_offchip

    mib = 2.0**20
    # 4096 bags x dim 128 floats = 2 MiB of gradient + 4096 rows x 512 B = 2 MiB: fits 8 MiB
    assert grad_output_offchip(4096, 128, 4096, 512, 8 * mib) == 0.0
    # d128p1: 32,768 bags (16 MiB) + 16,384 rows (8 MiB) beside an 8 MiB LLC: 2/3 off chip
    assert grad_output_offchip(32768, 128, 16384, 512, 8 * mib) == pytest.approx(2 / 3)
    assert grad_output_offchip(0, 128, 16384, 512, 8 * mib) == 0.0
    assert grad_output_offchip(32768, 128, 16384, 512, 0.0) == 1.0


def test_the_machine_adds_the_grad_output_misses_to_fbgemms_walk():
    """cpu_backward with update terms: the walk + the off-chip share of the bags' rows at
    the miss rate beyond the hit rate; an LLC that holds them all adds nothing."""
    from scratchpipe_sim.timing.cpu_update_cost import grad_output_offchip
    from scratchpipe_sim.timing.machine import grad_output_miss_ns

    terms = {"ns_per_call": 0.0, "ns_per_table": 0.0, "ns_per_lookup": 0.0,
             "ns_per_lookup_element": 0.0, "ns_per_row": 10.0, "ns_per_row_element": 0.0,
             "ns_per_bag_element": 0.0}

    def cfg(llc_mib):
        return load_config({
            "hardware": {"preset": "a100-gen4",
                         "cpu": {**FAST_MEMORY, "cores": 1, "llc_MiB": llc_mib,
                                 "parallel_efficiency": 1.0,
                                 "core_dram_GBps": 8.0, "core_llc_GBps": 40.0,
                                 "embedding_op_GBps": 1000.0,
                                 "update": {"sgd": {**terms, "parallel": False}}}},
            "model": {"tables": {"count": 8, "rows": 100000, "dim": 64}, "pooling": 1,
                      "batch_size": 64, "num_batches": 2, "warmup_batches": 0},
            "designs": ["hybrid"]})

    small, roomy = cfg(1.0), cfg(64.0)
    r = small.model.row_bytes

    def backward(c, bags, unique):
        return float(price_alone(c, 1, lambda m, b: m.cpu_backward(
            b, bags, unique, 0.0, r, r, bags=bags), [0])[0])

    # 8192 bags x 256 B = 2 MiB of gradient + 4096 x 256 B rows beside a 1 MiB LLC
    miss = 8192 * grad_output_offchip(8192, 64, 4096, r, 2.0**20)
    assert miss == pytest.approx(8192 * (1 - 1 / 3))
    want = miss * (r / 8.0 - r / 40.0)  # ns: a row at 8 GB/s off chip, 40 on chip
    assert grad_output_miss_ns(small.hardware.cpu, 8192, r, 4096) == pytest.approx(want)
    assert grad_output_miss_ns(roomy.hardware.cpu, 8192, r, 4096) == 0.0
    assert backward(small, 8192, 4096) - backward(roomy, 8192, 4096) == pytest.approx(
        want, rel=1e-6)
    # 512 bags + 512 rows (256 KiB) fit either LLC: the same price
    assert backward(small, 512, 512) == backward(roomy, 512, 512)
