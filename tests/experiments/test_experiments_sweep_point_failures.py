"""`sweep_runner.simulate_point` when designs fail: the others keep their numbers (each
design rerun alone after a joint failure), a lone failing design is not run twice, and a
point run without a replay-jobs count replays in this process (one job)."""

from __future__ import annotations

import copy

from small_configs import SHORT_A100

import scratchpipe_sim.api as api
import scratchpipe_sim.timing as timing
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments import sweep_runner as sr


def fake_simulate(calls):
    def simulate(cfg, designs, trace=None, replay_cache=True, jobs=1):
        calls.append((tuple(designs), jobs))
        if "lru-cache" in designs:
            raise UserError("too large")
        return [{"design": d, "iter_ns_mean": 10.0 * (i + 1)} for i, d in enumerate(designs)]
    return simulate


def point(monkeypatch, designs, **kw):
    calls = []
    monkeypatch.setattr(timing, "simulate", fake_simulate(calls))
    monkeypatch.setattr(sr, "point_trace", lambda *a, **k: None)
    rows = sr.simulate_point(api.resolve(copy.deepcopy(SHORT_A100)), designs, **kw)
    return rows, calls


def test_a_failing_design_leaves_the_others_their_numbers(monkeypatch):
    rows, calls = point(monkeypatch, ("gpu-only", "lru-cache", "hybrid"))
    assert [(r["design"], r.get("iter_ns_mean"), sr._failed(r)) for r in rows] == [
        ("gpu-only", 10.0, False), ("lru-cache", None, True), ("hybrid", 10.0, False)]
    assert rows[1] == {"design": "lru-cache", sr.DESIGN_INFEASIBLE: "too large"}
    assert [c[0] for c in calls] == [("gpu-only", "lru-cache", "hybrid"), ("gpu-only",),
                                     ("lru-cache",), ("hybrid",)]


def test_a_lone_failing_design_runs_once(monkeypatch):
    rows, calls = point(monkeypatch, ("lru-cache",))
    assert rows == [{"design": "lru-cache", sr.DESIGN_INFEASIBLE: "too large"}]
    assert calls == [(("lru-cache",), 1)]


def test_a_point_replays_in_this_process_unless_told(monkeypatch):
    _, calls = point(monkeypatch, ("gpu-only",))
    assert calls == [(("gpu-only",), 1)]
    _, calls = point(monkeypatch, ("gpu-only",), replay_jobs=3)
    assert calls == [(("gpu-only",), 3)]
