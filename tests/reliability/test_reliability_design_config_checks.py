"""The checks every design other than the cluster makes from the config alone, at config
load (`Design.check_config`, through `design_parameters.check_inputs`): multi-gpu's GPUs and
the tables' placement on their HBM, and each cache design's policy (its name, its parameters
together, the warm-up prefix a profile needs). They were made when the design was built or
its counts replayed, after the trace was generated and, in a sweep, after other points
ran. Each is one line naming the file and the dotted key from `config show` (exit 2), from
`run` before the trace is built, and from a sweep whose every point it refuses before any
point is priced; a sweep that some points pass keeps the others as infeasible results. Every
shipped config and experiment passes them (no false refusal). test_reliability_cluster_
inputs.py holds the cluster's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_errors import one_line_error
from small_configs import SHORT_A100, nested

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import Config, deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments.spec import expand_points, load_experiment
from scratchpipe_sim.experiments.sweep_runner import refused_everywhere, sweep_designs
from scratchpipe_sim.timing.designs import with_default_designs
from scratchpipe_sim.timing.designs.design_parameters import check_inputs
from scratchpipe_sim.timing.runner import check_designs

ROOT = Path(__file__).resolve().parents[2]
MG = "design_params.multi-gpu"
#: a GPU whose HBM two 400-row tables of 64 B rows (25.6 KB each) do not fill, but one
#: table does: with the L2 off and a one-row cache, nothing else is refused first
ONE_TABLE_HBM = {"hardware.gpu.hbm_capacity_GiB": 0.00004, "hardware.gpu.l2_MiB": 0,
                 "cache.capacity_rows": 1}

#: (the design, settings, words of its line): each a check its construction or its replay
#: made that the config alone decides
CONFIG_LEVEL = [
    ("multi-gpu", {f"{MG}.gpus": 16},
     [f"{MG}.gpus", "16 GPUs but hardware.interconnect.gpus_per_node is 8",
      "expected at most one node's GPUs"]),
    ("multi-gpu", {**ONE_TABLE_HBM, f"{MG}.gpus": 1},
     [f"{MG}.gpus", "fits on none of 1 GPUs", "expected more GPUs"]),
    ("multi-gpu", {**ONE_TABLE_HBM, "hardware.gpu.hbm_capacity_GiB": 0.00002,
                   f"{MG}.sharding": "table-wise"},
     [f"{MG}.sharding", "table 0 needs", "expected design_params.multi-gpu.sharding "
      "row-wise or auto"]),
    ("multi-gpu", {**ONE_TABLE_HBM, "hardware.gpu.hbm_capacity_GiB": 0.000002},
     [f"{MG}.gpus", "gpus_per_node = 8 GPUs", "expected a node that holds them"]),
    ("static-cache", {"design_params.static-cache.policy": "lr"},
     ["design_params.static-cache.policy", "unknown policy 'lr'", "did you mean 'lru'"]),
    ("static-cache", {"cache.warmup_batches": 0},
     ["cache.warmup_batches", "static picks its rows from the warm-up prefix",
      "expected cache.warmup_batches >= 1"]),
    ("lru-cache", {"cache.policy": "static", "cache.params": {"skip_batches": 2}},
     ["cache.params.skip_batches", "skip_batches needs preload"]),
    ("lru-prefetch", {"cache.policy": "static", "cache.params": {"skip_batches": 2}},
     ["cache.params.skip_batches", "skip_batches needs preload"]),
]
IDS = [f"{d}-{'-'.join(k.rsplit('.', 1)[-1] for k in s)}" for d, s, _ in CONFIG_LEVEL]


def _config(design: str, settings: dict) -> dict:
    cfg = {**SHORT_A100, "designs": [design]}
    for k, v in settings.items():
        cfg = deep_merge(cfg, nested(k, v))
    return cfg


def _config_file(tmp_path: Path, design: str, settings: dict) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_config(design, settings)))
    return path


@pytest.mark.parametrize("design, settings, words", CONFIG_LEVEL, ids=IDS)
def test_config_show_reports_what_the_design_would_refuse_when_priced(tmp_path, capsys,
                                                                       design, settings,
                                                                       words):
    path = _config_file(tmp_path, design, settings)
    line = one_line_error(capsys, ["config", "show", str(path)], str(path), *words)
    assert line.startswith(f"scratchpipe-sim config: {path}: ")


@pytest.mark.parametrize("design, settings, words", CONFIG_LEVEL, ids=IDS)
def test_run_refuses_before_the_trace_is_generated(tmp_path, capsys, monkeypatch, design,
                                                   settings, words):
    import scratchpipe_sim.timing as timing

    def no_trace(*a, **k):
        raise AssertionError("the trace was built")

    monkeypatch.setattr(timing, "build_trace", no_trace)  # `api.run_trace`'s
    path = _config_file(tmp_path, design, settings)
    one_line_error(capsys, ["run", str(path), "--no-cache", "-q", "--no-timeline", "--out",
                            str(tmp_path / "out")], str(path), *words)
    assert not (tmp_path / "out").exists()


def _never(*a, **k):
    raise AssertionError("a point was priced")


@pytest.mark.parametrize("design, settings, words", CONFIG_LEVEL, ids=IDS)
def test_a_sweep_no_point_of_which_the_design_accepts_exits_2_before_any_point(
        tmp_path, capsys, monkeypatch, design, settings, words):
    import scratchpipe_sim.experiments.sweep_runner as sweep_runner

    monkeypatch.setattr(sweep_runner, "simulate_point", _never)
    monkeypatch.setattr(sweep_runner, "reported_metrics", _never)
    base = _config(design, settings)
    base.pop("designs")
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "refused", "base": base, "designs": [design],
                                   "sweep": {"grid": {"seed": [1, 2]}},
                                   "metrics": ["samples_per_s"]}))
    line = one_line_error(capsys, ["sweep", str(exp), "--out", str(tmp_path / "out"), "-q"],
                          str(exp), f"design {design} refuses every sweep point",
                          "{'seed': 1}", *words)
    assert line.count(str(exp)) == 2  # the experiment, and its base config (in it)
    assert not (tmp_path / "out").exists()


def _spec(tmp_path: Path, design: str, base: dict, grid: dict):
    base = {k: v for k, v in base.items() if k != "designs"}
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "some", "base": base, "designs": [design],
                                   "sweep": {"grid": grid}, "metrics": ["samples_per_s"]}))
    return load_experiment(exp)


@pytest.mark.parametrize("design, base, grid", [
    # the tables fit two GPUs' HBM of 0.00004 GiB, not one: the 1-GPU point is infeasible
    ("multi-gpu", _config("multi-gpu", ONE_TABLE_HBM), {f"{MG}.gpus": [1, 2]}),
    ("static-cache", _config("static-cache", {}), {"cache.warmup_batches": [0, 2]}),
    ("lru-cache", _config("lru-cache", {"cache.policy": "static"}),
     {"cache.params": [{"skip_batches": 2}, {"skip_batches": 2, "preload": True}]}),
])
def test_a_sweep_some_points_of_which_the_design_accepts_is_not_refused(tmp_path, design,
                                                                        base, grid):
    """A point refused alone is that point's infeasible result, as before."""
    spec = _spec(tmp_path, design, base, grid)
    points = expand_points(spec)
    refused = []
    for p in points:
        try:
            check_inputs(Config.from_dict(p.config, source=spec.source), [design])
        except UserError:
            refused.append(p.index)
    assert len(refused) == 1 and len(points) == 2
    refused_everywhere(points, sweep_designs(points, spec), spec)  # no error


def test_with_a_trace_file_the_placement_waits_for_the_trace(tmp_path, capsys):
    """A trace file may size the tables: multi-gpu's GPU count is checked at load, the
    placement when the trace is read (a config whose placeholder sizes do not fit is
    shown)."""
    sized_by_trace = {"trace.path": str(tmp_path / "t.sptrace"),
                      "model.tables": {"count": None, "rows": None}, "model.top_mlp": None}
    path = _config_file(tmp_path, "multi-gpu", {**sized_by_trace, f"{MG}.gpus": 16})
    one_line_error(capsys, ["config", "show", str(path)], str(path), f"{MG}.gpus",
                   "expected at most one node's GPUs")
    path = _config_file(tmp_path, "multi-gpu", {**sized_by_trace, **ONE_TABLE_HBM,
                                                f"{MG}.gpus": 1})
    assert main(["config", "show", str(path)]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("design, settings", [
    ("static-cache", {"cache.warmup_batches": 0,
                      "design_params.static-cache.profile": "oracle"}),
    ("static-cache", {"design_params.static-cache.policy": "fbgemm-lru"}),
    ("lru-cache", {"cache.policy": "static",
                   "cache.params": {"skip_batches": 2, "preload": True}}),
    ("lru-cache", {"cache.policy": "static", "cache.warmup_batches": 0}),
    ("lru-prefetch", {"cache.policy": "fbgemm-lru", "cache.params": {"ways": 64}}),
    ("multi-gpu", {**ONE_TABLE_HBM, f"{MG}.gpus": 2}),
    ("multi-gpu", ONE_TABLE_HBM),  # the fewest GPUs that hold them
    ("scratchpipe", {"cache.capacity_rows": 2}),  # the window's rows: the trace decides
    ("bagpipe", {"cache.capacity_rows": 1}),
    ("uvm", {}), ("gpu-only", {}), ("hybrid", {}),
])
def test_configs_each_design_accepts_are_shown(tmp_path, capsys, design, settings):
    path = _config_file(tmp_path, design, settings)
    assert main(["config", "show", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()


# -- no false refusal: what ships passes every check ----------------------------------------------
@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_passes_its_designs_checks(path):
    cfg = load_config(path)
    with_default_designs(cfg.to_dict(), str(path))  # `config show`'s, check_inputs included
    check_designs(cfg, None)  # `run`'s


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_experiment_passes_its_designs_checks(path):
    """Every design of every point of every study sweep: none refused (a sweep's start and
    `bands`' first point check them)."""
    spec = load_experiment(path)
    points = expand_points(spec)
    designs = sweep_designs(points, spec)
    refused_everywhere(points, designs, spec)
    for p in points:
        check_inputs(Config.from_dict(p.config, source=spec.source), designs)


def test_a_range_end_multi_gpu_cannot_place_the_tables_on_is_refused_before_pricing(
        tmp_path, capsys, monkeypatch):
    """`sensitivity` checks both ends of every range through the designs' config checks:
    an HBM too small for multi-gpu's tables at the low end is one line naming the preset's
    range (it failed when that end was priced, after the nominal)."""
    import scratchpipe_sim.experiments.sensitivity_analysis as sa
    from scratchpipe_sim.config.loader import CONFIGS_DIR

    monkeypatch.setattr(sa, "build_trace", _never)
    preset = yaml.safe_load((CONFIGS_DIR / "hardware" / "a100-gen4.yaml").read_text())
    preset["ranges"] = {"gpu.hbm_capacity_GiB": [0.000002, 80.0]}
    pfile = tmp_path / "mygpu.yaml"
    pfile.write_text(yaml.safe_dump(preset))
    cfg = _config("multi-gpu", {"cache.capacity_rows": 1})
    cfg["hardware"] = {"preset": str(pfile), "gpu": {"l2_MiB": 0}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    line = one_line_error(capsys, ["sensitivity", str(path), "--samples", "0", "--out",
                                   str(tmp_path / "s")],
                          f"{pfile}: ranges.gpu.hbm_capacity_GiB: the range's low end",
                          "refused by design multi-gpu", f"{MG}.gpus")
    assert str(path) in line
    assert not (tmp_path / "s").exists()
