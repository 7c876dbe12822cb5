"""`sensitivity` reuses a design's nominal pricing for a variant that changes only hardware
keys the design never read: the result equals pricing every variant with SimPy, each reused
float equals the SimPy run it replaces, and nothing is reused where the reads could not be
recorded."""

from __future__ import annotations

import copy

import pytest
from small_configs import SMALL_A100

import scratchpipe_sim.experiments.sensitivity_analysis as sens
from scratchpipe_sim.config import load_config
from scratchpipe_sim.config.read_tracking import HardwareReads, hardware_diff
from scratchpipe_sim.experiments.sensitivity_analysis import (
    Pricer,
    params_of,
    run_sensitivity,
    with_values,
)
from scratchpipe_sim.timing import build_trace
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.runner import check_designs
from scratchpipe_sim.timing.trace_setup import fit_trace, sized_config

DESIGN_NAMES = ["hybrid", "gpu-only", "static-cache", "lru-cache", "lru-prefetch",
                "scratchpipe", "bagpipe", "uvm"]


def _cfg():
    return load_config({**copy.deepcopy(SMALL_A100), "designs": DESIGN_NAMES})


@pytest.fixture(scope="module")
def priced():
    """A pricer of the a100-gen4 preset's 23 ranges at both ends, its nominal priced."""
    cfg = _cfg()
    trace = build_trace(cfg)
    cfg = sized_config(cfg, trace)
    pricer = Pricer(cfg, check_designs(cfg, None), fit_trace(trace, cfg))
    pricer.speedups(cfg)
    ends = [with_values(cfg, {p.key: v}) for p in params_of(cfg) for v in (p.low, p.high)]
    return pricer, ends


def test_a_reused_pricing_is_the_simpy_run_it_replaces(priced):
    pricer, ends = priced
    reused = 0
    for c in ends:
        for name in pricer.reused(c):
            assert pricer.iter_ns(c, name) == pricer.iter_ns(pricer.cfg, name), name
            reused += 1
    # most one-at-a-time ends touch a key some design never reads (the UVM page walks,
    # the planner's costs, the hash table's rates ...)
    assert reused >= len(ends)


def test_a_design_that_read_a_changed_key_is_priced_again(priced):
    pricer, ends = priced
    for c in ends:
        diff = hardware_diff(pricer.cfg, c)
        for name in pricer.names:
            if name not in pricer.reused(c):
                _value, reads = pricer._nominal[name]
                assert reads is None or any(k in reads for k in diff), (name, diff)
    # the baseline prices every GPU-side and link key it uses again
    assert "hybrid" not in pricer.reused(with_values(pricer.cfg, {"pcie.latency_ns": 9e3}))
    assert "uvm" not in pricer.reused(with_values(pricer.cfg,
                                                  {"gpu.uvm_translation_ns": 15.0}))
    assert "hybrid" in pricer.reused(with_values(pricer.cfg,
                                                 {"gpu.uvm_translation_ns": 15.0}))


def test_a_change_outside_hardware_reuses_nothing(priced):
    pricer, _ends = priced
    d = pricer.cfg.to_dict()
    d["seed"] += 1
    assert pricer.reused(type(pricer.cfg).from_dict(d)) == []


def test_the_result_equals_pricing_every_variant(monkeypatch):
    cfg = _cfg()
    trace = build_trace(cfg)
    calls = []
    real = Pricer.reused

    def counting(self, c):
        out = real(self, c)
        calls.append(len(out))
        return out

    monkeypatch.setattr(Pricer, "reused", counting)
    a = run_sensitivity(cfg, samples=3, seed=4, trace=trace).to_json()
    assert sum(calls) > 0
    monkeypatch.setattr(Pricer, "reused", lambda self, c: [])
    b = run_sensitivity(cfg, samples=3, seed=4, trace=trace).to_json()
    assert a == b


def test_reads_that_cannot_be_recorded_reuse_nothing(monkeypatch):
    """A pricing that walks the hardware in bulk (here: a deep copy inside the summary)
    cannot be tracked: it is priced without the view and no variant reuses it."""
    cfg = _cfg()
    trace = build_trace(cfg)
    reference = run_sensitivity(cfg, samples=2, seed=4, trace=trace).to_json()
    real = sens.summarize

    def bulk(c, name, run, w):
        copy.deepcopy(c.hardware)
        return real(c, name, run, w)

    monkeypatch.setattr(sens, "summarize", bulk)
    sized = sized_config(cfg, trace)
    pricer = Pricer(sized, check_designs(sized, None), fit_trace(trace, sized))
    pricer.speedups(sized)
    assert all(reads is None for _v, reads in pricer._nominal.values())
    assert pricer.reused(with_values(sized, {"gpu.uvm_translation_ns": 15.0})) == []
    assert run_sensitivity(cfg, samples=2, seed=4, trace=trace).to_json() == reference


def test_a_view_that_changes_the_price_reuses_nothing(monkeypatch):
    """Were the view to change a pricing's result instead of failing (a type check on a
    hardware section, say), its read set is dropped: the nominal is the plain pricing's."""
    cfg = _cfg()
    trace = build_trace(cfg)
    sized = sized_config(cfg, trace)
    plain = Pricer(sized, check_designs(sized, None), fit_trace(trace, sized))
    plain.speedups(sized)
    real = sens.summarize

    def perturbed(c, name, run, w):
        row = real(c, name, run, w)
        if isinstance(c.hardware, HardwareReads):
            row = {**row, "iter_ns_mean": row["iter_ns_mean"] * 2.0}
        return row

    monkeypatch.setattr(sens, "summarize", perturbed)
    pricer = Pricer(sized, check_designs(sized, None), fit_trace(trace, sized))
    assert pricer.speedups(sized) == plain.speedups(sized)
    assert all(reads is None for _v, reads in pricer._nominal.values())
    assert pricer.reused(with_values(sized, {"gpu.uvm_translation_ns": 15.0})) == []


def test_every_design_is_tracked_without_falling_back(priced):
    """Every design's pricing goes through the view (no bulk access in the timing layer):
    were one to fall back, its variants would silently lose the reuse."""
    pricer, _ends = priced
    assert set(pricer._nominal) == set(pricer.names)
    assert set(pricer.names) <= set(DESIGNS.names())
    assert all(reads for _v, reads in pricer._nominal.values())
