"""sweep_runner's small pieces against hand-made oracles (mutation survivors of issue 42):
the speedup's baseline row, the designs a sweep runs, the metric probe over failing designs."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from small_configs import SHORT_A100

import scratchpipe_sim.api as api
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments import sweep_runner as sr


def test_speedups_are_against_the_baseline_row_wherever_it_is():
    rows = [{"design": "gpu-only", "iter_ns_mean": 50.0},
            {"design": "lru-cache", sr.DESIGN_ERROR: "boom"},
            {"design": "hybrid", "iter_ns_mean": 100.0},
            {"design": "scratchpipe", "iter_ns_mean": 25.0}]
    sr._fix_speedups(rows)
    assert [r.get("speedup_vs_hybrid") for r in rows] == [2.0, None, 1.0, 4.0]


def test_no_speedup_when_the_baseline_failed():
    rows = [{"design": "gpu-only", "iter_ns_mean": 50.0},
            {"design": "hybrid", sr.DESIGN_INFEASIBLE: "too large"}]
    sr._fix_speedups(rows)
    assert rows[0]["speedup_vs_hybrid"] is None


def _spec(designs=None):
    return SimpleNamespace(designs=designs, source="exp.yaml", base_source="base.yaml")


def _points(*design_lists):
    return [SimpleNamespace(config={"designs": d}) for d in design_lists]


def test_sweep_designs_from_the_experiment_then_the_base_config():
    assert sr.sweep_designs(_points(["hybrid"]), _spec(("gpu-only",))) == ("gpu-only",)
    assert sr.sweep_designs(_points(["hybrid", "gpu-only"]), _spec()) == ("hybrid", "gpu-only")
    with pytest.raises(UserError, match="design 'hybrid' listed twice") as e:
        sr.sweep_designs(_points(["hybrid", "gpu-only", "hybrid"]), _spec())
    assert e.value.field == "designs"
    with pytest.raises(UserError, match="expected a 'designs:' list"):
        sr.sweep_designs(_points(None), _spec())


def _resolved(**model):
    """A sweep point's config: resolved (presets expanded), as `expand_points` makes it."""
    cfg = copy.deepcopy(SHORT_A100)
    cfg["model"].update(model)
    return api.resolve(cfg)


def test_the_metric_probe_keeps_going_past_a_design_that_cannot_run():
    cfg = _resolved()
    names = sr.reported_metrics(cfg, ("no-such-design", "gpu-only"), replay_cache=False)
    assert names is not None and "iter_ns_mean" in names


def test_the_metric_probe_runs_a_few_batches_with_a_valid_warm_up():
    cfg = _resolved(num_batches=8, warmup_batches=7)  # probed with 4 batches, warm-up 3
    assert "iter_ns_mean" in sr.reported_metrics(cfg, ("gpu-only",), replay_cache=False)


def test_an_error_row_keeps_the_designs_after_it():
    from scratchpipe_sim.experiments.executors import Outcome

    point = SimpleNamespace(key="k", index=0, values={"cache.load_factor": 0.1})
    rows = [{"design": "hybrid", sr.DESIGN_ERROR: "boom"},
            {"design": "lru-cache", sr.DESIGN_INFEASIBLE: "too large"},
            {"design": "gpu-only", "iter_ns_mean": 5.0}]
    out = sr.point_rows(point, Outcome("k", rows, None, 0.0),
                        ("hybrid", "lru-cache", "gpu-only"), ("iter_ns_mean",), _spec())
    assert [(r["design"], r["status"]) for r in out] == [
        ("hybrid", sr.ERROR), ("lru-cache", sr.INFEASIBLE), ("gpu-only", sr.OK)]


def test_a_metric_typo_is_refused_before_the_results_folder_is_made(tmp_path):
    from sweep_fakes import write_exp

    from scratchpipe_sim.experiments.spec import load_experiment

    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2]}, metrics=["hit_ratoi"],
                    designs=["gpu-only"])
    with pytest.raises(UserError, match="no metric 'hit_ratoi'"):
        sr.run_sweep(load_experiment(exp), tmp_path / "o", quiet=True, replay_cache=False)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("n, shown", [(20, 20), (21, 20), (25, 20)])
def test_error_lines_show_twenty_then_count_the_rest(tmp_path, n, shown):
    s = sr.SweepSummary("e", tmp_path, 30, 1, 0, 30, n, None,
                        errors=[(i, {"a": i}, "hybrid", "boom") for i in range(n)])
    lines = s.error_lines()
    assert lines[:shown] == [f"error: point {i} (a={i}) hybrid: boom" for i in range(shown)]
    assert lines[shown:] == ([] if n == shown else
                             [f"... and {n - shown} more error rows (see the 'error' column "
                              "of results.csv)"])


@pytest.mark.parametrize("sel, ok", [("0", [0]), ("1-3", [1, 2, 3]), ("0,4", [0, 4]),
                                     ("5", None), ("3-5", None), ("-1", None)])
def test_band_point_indices_in_and_out_of_range(sel, ok):
    from scratchpipe_sim.experiments.bands import select_points

    points = [SimpleNamespace(index=i, values={}) for i in range(5)]
    if ok is not None:
        assert [p.index for p in select_points(points, [], [sel], "exp.yaml")] == ok
        return
    with pytest.raises(UserError) as e:
        select_points(points, [], [sel], "exp.yaml")
    assert e.value.field == "--points"
    assert "the sweep has points 0-4" in str(e.value) or "bad point index" in str(e.value)
