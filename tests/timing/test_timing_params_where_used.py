"""Design and policy parameters live beside their code (issue 23): `design_params.NAME` and
`cache.params` are checked by each one's Params dataclass, the old flat `cache.*` keys are
refused naming the new key, and a new policy with a parameter is one file."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
import yaml

from scratchpipe_sim.api import simulate
from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import POLICIES
from scratchpipe_sim.policies.scratchpipe import ScratchPipe, ScratchpipeParams
from scratchpipe_sim.timing.designs import DESIGNS, check_params, design_params
from scratchpipe_sim.timing.designs.scratchpipe import ScratchpipeDesignParams
from scratchpipe_sim.timing.machine import PlannerParams

SMALL = {
    "hardware": {"preset": "a100-gen4"},
    "model": {"tables": {"count": 2, "rows": 400, "dim": 16}, "pooling": 3, "batch_size": 32,
              "num_batches": 8, "warmup_batches": 2, "bottom_mlp": [13, 16],
              "top_mlp": [19, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.1},
    "cache": {"capacity_rows": 300},
    "seed": 5,
}


def one_line_error(capsys, argv, *words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


def test_one_default_per_knob():
    # the design's params extend the policy's: the same field, the same default
    assert issubclass(ScratchpipeDesignParams, ScratchpipeParams)
    assert ScratchPipe.params["lookahead"] == ScratchpipeDesignParams().lookahead
    assert issubclass(DESIGNS.get("bagpipe").Params, POLICIES.get("bagpipe").Params)
    # the planner's cost knobs are declared once (PlannerParams) and inherited by each
    # design with a planner on the host cores
    for name in ("scratchpipe", "bagpipe"):
        assert issubclass(DESIGNS.get(name).Params, PlannerParams)


def test_each_design_prices_its_planner_with_its_own_knobs():
    """bagpipe's oracle follows design_params.bagpipe's planner knobs, never scratchpipe's."""
    both = {**SMALL, "designs": ["bagpipe", "scratchpipe"]}

    def oracle_and_plan(design_params):
        rows = simulate({**both, "design_params": design_params}, replay_cache=False)
        by = rows.set_index("design")
        return by.loc["bagpipe", "stage_oracle_ns"], by.loc["scratchpipe", "stage_plan_ns"]

    oracle, plan = oracle_and_plan({})
    sp_oracle, sp_plan = oracle_and_plan({"scratchpipe": {"plan_ns_per_id": 5000.0}})
    assert sp_oracle == oracle and sp_plan > 10 * plan
    bp_oracle, bp_plan = oracle_and_plan({"bagpipe": {"plan_ns_per_id": 5000.0}})
    assert bp_plan == plan and bp_oracle > 10 * oracle


@pytest.mark.parametrize("old, new", [
    ("lookahead", "design_params.scratchpipe.lookahead"),
    ("queue_depth", "design_params.scratchpipe.queue_depth"),
    ("pipeline", "design_params.scratchpipe.pipeline"),
    ("bagpipe_lookahead", "design_params.bagpipe.lookahead"),
    ("bagpipe_ttl_batches", "design_params.bagpipe.ttl_batches"),
    ("static_policy", "design_params.static-cache.policy"),
    ("static_profile", "design_params.static-cache.profile"),
    ("enforce_hbm", "design_params.lru-cache"),
    ("record_miss_counter", "design_params.lru-cache"),
    ("ways", "cache.params.ways"),
])
def test_old_cache_keys_name_the_new_one(old, new, tmp_path, capsys):
    with pytest.raises(UserError) as e:
        load_config({**SMALL, "cache": {old: 3}})
    assert e.value.field == f"cache.{old}" and new in e.value.message
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({**SMALL, "cache": {"capacity_rows": 300, old: 3}}))
    one_line_error(capsys, ["run", str(p), "--out", str(tmp_path / "r")], str(p), new)
    q = tmp_path / "ok.yaml"
    q.write_text(yaml.safe_dump(SMALL))
    one_line_error(capsys, ["run", str(q), "--out", str(tmp_path / "r"), "--set",
                            f"cache.{old}=3"], f"cache.{old}", new)


def test_old_key_as_a_sweep_axis_is_refused(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "base": SMALL, "designs": ["hybrid"],
                                 "sweep": {"grid": {"cache.lookahead": [3, 5]}}}))
    one_line_error(capsys, ["sweep", str(p), "--out", str(tmp_path / "r")],
                   "cache.lookahead", "design_params.scratchpipe.lookahead")


def test_design_params_are_checked_with_the_file_and_key(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({**SMALL, "design_params": {"scratchpipe": {"lookahead": 0}}}))
    one_line_error(capsys, ["run", str(p), "--out", str(tmp_path / "r")], str(p),
                   "design_params.scratchpipe.lookahead", ">= 1, got 0")
    p.write_text(yaml.safe_dump({**SMALL, "design_params": {"scratchpip": {}}}))
    one_line_error(capsys, ["config", "show", str(p)], "design_params.scratchpip",
                   "did you mean 'scratchpipe'")
    p.write_text(yaml.safe_dump({**SMALL, "design_params": {"hybrid": {"x": 1}}}))
    one_line_error(capsys, ["config", "show", str(p)], "design_params.hybrid",
                   "takes no parameters")


def test_config_show_fills_every_default(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({**SMALL, "cache": {"capacity_rows": 300,
                                                    "policy": "fbgemm-lru"}}))
    assert main(["config", "show", str(p)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["cache"]["params"] == {"ways": 32}
    assert shown["design_params"]["scratchpipe"]["lookahead"] == 5
    # the designs that run (the defaults here), each with its params; bagpipe does not run
    assert "bagpipe" not in shown["designs"] and "bagpipe" not in shown["design_params"]
    assert shown["design_params"]["lru-cache"] == {"enforce_hbm": False,
                                                   "record_miss_counter": False}


def test_a_window_below_the_depth_only_matters_where_scratchpipe_runs():
    over = ["design_params.scratchpipe.lookahead=2"]
    check_params(load_config({**SMALL, "designs": ["hybrid"]}, over))
    with pytest.raises(UserError, match="design_params.scratchpipe.lookahead >= 5"):
        check_params(load_config({**SMALL, "designs": ["scratchpipe"]}, over))
    cfg = load_config({**SMALL, "designs": ["hybrid"]}, over)
    assert design_params(cfg, "scratchpipe", cross_check=False).lookahead == 2


POLICY_FILE = '''
from dataclasses import dataclass, field

import numpy as np

from scratchpipe_sim.policies.base import POLICIES, UNPLACED, Policy

SEEN = []


@dataclass(frozen=True)
class TmpParams:
    factor: int = field(default=1, metadata={"help": "a knob of the test", "min": 1})


@POLICIES.register("tmp-policy")
class TmpPolicy(Policy):
    """Caches nothing: every access is served from host memory."""

    Params = TmpParams

    def process(self, chunk, next_use, outcome, events):
        SEEN.append(self.p["factor"])
        outcome[:] = UNPLACED

    def resident(self):
        return np.zeros(0, np.int64)
'''


@pytest.fixture
def tmp_policy(tmp_path):
    path = tmp_path / "tmp_policy_plugin.py"
    path.write_text(textwrap.dedent(POLICY_FILE))
    spec = importlib.util.spec_from_file_location("tmp_policy_plugin", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tmp_policy_plugin"] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        POLICIES.unregister("tmp-policy")
        del sys.modules["tmp_policy_plugin"]


def test_a_new_policy_with_a_parameter_is_one_file(tmp_policy, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))  # no stored replay
    base = {**SMALL, "cache": {"capacity_rows": 300, "policy": "tmp-policy",
                               "params": {"factor": 7}}, "designs": ["lru-cache"]}
    row = simulate(base, replay_cache=False).iloc[0]
    assert row["policy"] == "tmp-policy" and row["hit_ratio"] == 0
    assert set(tmp_policy.SEEN) == {7}  # the param reached the kernel
    # from run, as a --set override, the resolved config showing it
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(base))
    tmp_policy.SEEN.clear()
    out = tmp_path / "r"
    assert main(["run", str(p), "--out", str(out), "--set", "cache.params.factor=16"]) == 0
    capsys.readouterr()
    assert set(tmp_policy.SEEN) == {16}
    resolved = yaml.safe_load((out / "resolved_config.yaml").read_text())
    assert resolved["cache"]["params"] == {"factor": 16}
    # a wrong value: one line, naming the file and the dotted key, exit 2
    one_line_error(capsys, ["run", str(p), "--out", str(out), "--set",
                            "cache.params.factor=0"],
                   str(p), "cache.params.factor", ">= 1, got 0")
    one_line_error(capsys, ["run", str(p), "--out", str(out), "--set",
                            "cache.params.facter=2"],
                   "cache.params.facter", "did you mean 'factor'")
