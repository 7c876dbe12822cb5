"""Hybrid's update priced with FBGEMM's CPU backward structure (`hardware.cpu.update`).

Closed forms of timing/cpu_update_cost.py through the Machine: csr2csc's sort on every core,
the walk over unique rows on one core (SGD, Adagrad) or every core (rowwise Adagrad), the
socket's memory beside it; shapes differing only in unique rows move by exactly the per-row
terms; and the unique rows hybrid prices are the trace's exact distinct (table, row) pairs
per batch. Optimizers without terms (Adam: FBGEMM's CPU build has none) keep the
aggregation keys.
"""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.config import load_config
from scratchpipe_sim.timing.cpu_update_cost import (
    TABLE_BYTES_REF,
    TERM_NAMES,
    design_row,
    table_doublings,
    update_cost,
)
from scratchpipe_sim.timing.machine import aggregate_core_ns, price_alone

TERMS = {"ns_per_call": 5000.0, "ns_per_table": 700.0, "ns_per_lookup": 3.0,
         "ns_per_lookup_element": 0.25, "ns_per_row": 40.0, "ns_per_row_element": 2.0,
         "ns_per_bag_element": 0.5, "ns_per_row_doubling": 0.0}
BAGS = 800.0  # the bags every direct cpu_backward call below passes
#: memory far faster than the cores: the stage is the cores' time alone
FAST_MEMORY = {"dram_GBps": 1e9, "llc_GBps": 1e9, "dram_latency_ns": 0.0}


def _cfg(optimizer: str, cores: int = 1, parallel: bool = False, tables: int = 4,
         pe: float = 1.0, terms: dict | None = None, forward: dict | None = None):
    key = optimizer.replace("-", "_")
    update = {key: {**(terms or TERMS), "parallel": parallel}} if optimizer != "none" else {}
    return load_config({
        "hardware": {"preset": "a100-gen4",
                     "cpu": {**FAST_MEMORY, "cores": cores, "parallel_efficiency": pe,
                             "update": update, "forward": forward}},
        "model": {"tables": {"count": tables, "rows": 100000, "dim": 64},
                  "optimizer": "sgd" if optimizer == "none" else optimizer,
                  "pooling": 4, "batch_size": 64, "num_batches": 2, "warmup_batches": 0},
        "designs": ["hybrid"]})


def _backward(cfg, lookups: float, unique: float) -> float:
    r = cfg.model.row_bytes
    return float(price_alone(cfg, 1, lambda m, b: m.cpu_backward(b, lookups, unique, 0.0,
                                                                  r, r, bags=BAGS), [0])[0])


def _closed(lookups: float, unique: float, dim: float, tables: int) -> float:
    return float(np.dot(design_row(lookups, unique, dim, tables, BAGS),
                        [TERMS[n] for n in TERM_NAMES]))


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise-adagrad"])
def test_one_core_prices_the_closed_form_of_the_terms(optimizer):
    cfg = _cfg(optimizer)
    t = _backward(cfg, 10000, 3000)
    assert t == pytest.approx(_closed(10000, 3000, 64, 4), rel=1e-9)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise-adagrad"])
def test_shapes_differing_only_in_unique_rows_move_by_the_per_row_terms(optimizer):
    # the ratio of two shapes is the closed form's ratio; the difference is
    # dU x (ns_per_row + D x ns_per_row_element) alone
    cfg = _cfg(optimizer)
    n, u1, u2 = 20000, 2500, 20000
    t1, t2 = _backward(cfg, n, u1), _backward(cfg, n, u2)
    assert t2 / t1 == pytest.approx(_closed(n, u2, 64, 4) / _closed(n, u1, 64, 4), rel=1e-9)
    assert t2 - t1 == pytest.approx((u2 - u1) * (TERMS["ns_per_row"]
                                                  + 64 * TERMS["ns_per_row_element"]),
                                    rel=1e-9)


def test_the_walk_runs_on_one_core_unless_fbgemm_parallelizes_it():
    # 4 cores at parallel efficiency 0.5: 2 core-ns per ns for the sort; the serial walk
    # runs at one core-ns per ns, a parallel one (rowwise Adagrad's JIT path) at 2
    n, u = 10000, 3000
    cost = update_cost(_terms(), n, u, 64, 4, BAGS)
    serial = _backward(_cfg("sgd", cores=4, pe=0.5), n, u)
    assert serial == pytest.approx(cost.sort_ns / 2 + cost.walk_ns, rel=1e-9)
    par = _backward(_cfg("rowwise-adagrad", cores=4, pe=0.5, parallel=True), n, u)
    assert par == pytest.approx((cost.sort_ns + cost.walk_ns) / 2, rel=1e-9)
    assert par < serial


def _terms():
    from scratchpipe_sim.config.hardware import UpdateTerms

    return UpdateTerms(**TERMS)


def test_without_terms_the_aggregation_keys_price_the_update():
    # Adam (no FBGEMM CPU kernel) and a preset without cpu.update: the aggregation model
    cfg = load_config({"hardware": {"preset": "a100-gen4", "cpu": FAST_MEMORY},
                       "model": {"optimizer": "adam"}, "designs": ["hybrid"]})
    assert cfg.hardware.cpu.update.of("adam") is None
    r, R = cfg.model.row_bytes, cfg.model.moved_row_bytes
    t = float(price_alone(cfg, 1, lambda m, b: m.cpu_backward(b, 1000, 300, 0.0, r, R),
                          [0])[0])
    cpu = cfg.hardware.cpu
    agg = aggregate_core_ns(cpu, 1000, 300, r) / (cpu.cores * cpu.parallel_efficiency)
    assert t > agg  # the aggregation, then the update's 2U row gathers
    with_terms = _backward(_cfg("sgd"), 1000, 300)
    assert with_terms == pytest.approx(_closed(1000, 300, 64, 4), rel=1e-9)


def test_hybrid_prices_the_traces_exact_unique_rows_per_batch():
    # only the per-row term set: cpu_update = ns_per_row x the batch's distinct
    # (table, row) pairs, counted here from the trace reader's ids
    from scratchpipe_sim.timing import build_trace
    from scratchpipe_sim.timing.designs import DESIGNS
    from scratchpipe_sim.timing.replay_passes import Replays
    from scratchpipe_sim.timing.runner import run_design

    only_rows = {n: 0.0 for n in TERM_NAMES} | {"ns_per_row": 100.0}
    cfg = _cfg("sgd", terms=only_rows)
    trace = build_trace(cfg, cache=False)
    design = DESIGNS.get("hybrid")(cfg)
    replays = Replays(cfg, trace, cached=False)
    m = run_design(cfg, design, replays.get(design.workload_key())[0])
    got = np.asarray(m.stage_ns["cpu_update"], float)
    for b in range(cfg.model.num_batches):
        batch = trace.batch(replays.prefix + b)
        exact = sum(len(np.unique(np.asarray(batch.table(t)[0])))
                    for t in range(trace.num_tables))
        assert got[b] == pytest.approx(100.0 * exact, rel=1e-9)


def test_bad_terms_are_one_line():
    from scratchpipe_sim.errors import UserError

    with pytest.raises(UserError, match="ns_per_row"):
        _cfg("sgd", terms={**TERMS, "ns_per_row": -1.0})
    with pytest.raises(UserError, match="nsper_row|did you mean"):
        _cfg("sgd", terms={**TERMS, "nsper_row": 1.0})


FORWARD = {"ns_per_call": 9000.0, "ns_per_bag": 30.0, "ns_per_bag_element": 0.5,
           "rates_pooling": 20.0}


def test_the_forward_adds_fbgemms_call_and_bag_costs_after_the_rows_gathers():
    # hybrid's cpu_gather = the rows' gather (cpu_gather) then the call + the bags
    # beyond one per rates_pooling lookups x (bag + D x bag_element), on every core;
    # without cpu.forward, the rows alone
    from scratchpipe_sim.config.hardware import ForwardTerms
    from scratchpipe_sim.timing.cpu_update_cost import forward_overhead_ns

    base = _cfg("sgd", cores=2)
    with_fwd = _cfg("sgd", cores=2, forward=FORWARD)
    r = base.model.row_bytes

    def gather(cfg, bags):
        return float(price_alone(cfg, 1, lambda m, b: m.cpu_embedding_bag(5000, r, bags, b),
                                 [0])[0])

    rows_only = float(price_alone(base, 1, lambda m, b: m.cpu_gather(5000, r, b, "gather"),
                                  [0])[0])
    assert gather(base, 5000) == rows_only
    terms = ForwardTerms(**FORWARD)
    # pooling 1: 5000 bags, 4750 beyond the rates' 250
    extra = forward_overhead_ns(terms, 5000, 5000, 64)
    assert extra == 9000 + (5000 - 250) * (30 + 64 * 0.5)
    assert gather(with_fwd, 5000) == pytest.approx(rows_only + extra / 2, rel=1e-9)
    # at the rates' pooling (and above it) only the call is added
    fixed = 9000
    assert forward_overhead_ns(terms, 5000, 250, 64) == fixed
    assert forward_overhead_ns(terms, 5000, 100, 64) == fixed
    assert gather(with_fwd, 250) == pytest.approx(rows_only + fixed / 2, rel=1e-9)


def test_table_doublings_closed_form():
    ref = TABLE_BYTES_REF
    assert table_doublings(0.0) == 0.0  # not known: no doubling
    assert table_doublings(ref / 8) == 0.0 and table_doublings(ref) == 0.0
    assert table_doublings(2 * ref) == pytest.approx(1.0)
    assert table_doublings(64 * ref) == pytest.approx(6.0)
    assert table_doublings(3 * ref) == pytest.approx(np.log2(3.0))


def _sized(optimizer: str, rows: int, terms: dict):
    return load_config({
        "hardware": {"preset": "a100-gen4",
                     "cpu": {**FAST_MEMORY, "cores": 1, "parallel_efficiency": 1.0,
                             "update": {optimizer.replace("-", "_"): {**terms,
                                                                      "parallel": False}}}},
        "model": {"tables": {"count": 4, "rows": rows, "dim": 64}, "optimizer": optimizer,
                  "pooling": 4, "batch_size": 64, "num_batches": 2, "warmup_batches": 0},
        "designs": ["hybrid"]})


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise-adagrad"])
def test_a_unique_row_pays_the_doubling_of_the_tables_bytes_and_a_lookup_does_not(optimizer):
    # 4 tables of rows x 256 B: 2^17 rows = 32 MiB a table (no doubling), 2^20 rows = 256
    # MiB (3; the walk runs table by table: a table's bytes, not the 4 tables' 1 GiB): the
    # update moves by U x 3 x ns_per_row_doubling exactly, whatever the lookups; and with
    # the term 0 the tables' bytes change nothing
    terms = {**TERMS, "ns_per_row_doubling": 7.5}
    small, large = _sized(optimizer, 1 << 17, terms), _sized(optimizer, 1 << 20, terms)
    for n, u in ((20000, 2500), (40000, 2500), (20000, 20000)):
        dt = _backward(large, n, u) - _backward(small, n, u)
        assert dt == pytest.approx(u * 3 * 7.5, rel=1e-9)
    flat = {**TERMS, "ns_per_row_doubling": 0.0}
    assert _backward(_sized(optimizer, 1 << 20, flat), 20000, 2500) == pytest.approx(
        _backward(_sized(optimizer, 1 << 17, flat), 20000, 2500), rel=1e-12)
    # the closed form: design_row's last column is U x doublings
    row = design_row(20000, 2500, 64, 4, BAGS, (1 << 20) * 256)
    assert row[TERM_NAMES.index("ns_per_row_doubling")] == pytest.approx(2500 * 3.0)
