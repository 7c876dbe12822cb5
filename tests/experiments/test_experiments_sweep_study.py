"""The study's experiment files stay valid: they parse, expand, and their figures name
columns that the results will have."""

from __future__ import annotations

from pathlib import Path

import pytest

from scratchpipe_sim.experiments.figures import figure_options
from scratchpipe_sim.experiments.spec import expand_points, load_experiment

EXPERIMENTS = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("fig*.yaml"))


def test_ten_study_figures():
    assert len(EXPERIMENTS) == 10  # fig10_scale_out: 8 to 1,024 GPUs (issue 44)


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_expands_and_its_figures_name_real_columns(path):
    spec = load_experiment(path)
    points = expand_points(spec)
    assert spec.name == path.stem and len(points) >= 1
    assert len({p.key for p in points}) == len(points)
    assert spec.designs and spec.metrics and spec.figures
    columns = set(spec.axes) | set(spec.metrics) | {"design", "miss_ratio"}
    for name in spec.figures:
        opts = figure_options(name, spec.figures)
        for key in ("x", "facet"):
            vals = opts.get(key)
            for v in ([vals] if isinstance(vals, str) else vals or []):
                assert v in columns, (name, key, v)
        ys = opts.get("y")
        for y in ([ys] if isinstance(ys, str) else ys or []):
            assert y in columns, (name, y)
        if opts.get("x") is None and opts.get("x_candidates"):
            assert set(opts["x_candidates"]) & set(spec.axes), name
