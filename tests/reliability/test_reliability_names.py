"""A name is not a path: an experiment's or a config's `name:` and calibrate's `--name` name a
folder or file under a results folder, so one holding a path separator, `..`, a control
character or a leading '-' is refused with one line, and nothing is written outside
`results/` (issue 42, item 2)."""

from __future__ import annotations

import copy

import pytest
import yaml
from cli_errors import one_line_error
from small_configs import TWO_SMALL_TABLES
from sweep_fakes import BASE, DESIGNS, METRICS

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety.paths import plain_name

BAD_NAMES = ["../../x", "/tmp/abs", "a/b", "a\\b", "..", ".", "-rf", "tab\there", "nul\0",
             "x" * 256]
GOOD_NAMES = ["fig1_cache-size", "quickstart.v2", "résumé", "a b", "x" * 255]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_plain_name_refuses_what_would_leave_the_folder(name: str) -> None:
    with pytest.raises(UserError) as e:
        plain_name(name, "exp.yaml", "name")
    assert e.value.field == "name"


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_plain_name_keeps_a_plain_component(name: str) -> None:
    assert plain_name(name, "exp.yaml", "name") == name


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/escaped-abs"])
def test_sweep_refuses_a_name_that_is_a_path(capsys, tmp_path, monkeypatch, name) -> None:
    monkeypatch.chdir(tmp_path)
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": name, "base": BASE,
                                   "sweep": {"grid": {"cache.load_factor": [0.1, 0.2]}},
                                   "designs": DESIGNS, "metrics": METRICS}))
    one_line_error(capsys, ["sweep", str(exp)], "name", "plain experiment name")
    assert not (tmp_path / "results").exists()
    assert not (tmp_path.parent / "escaped").exists()


@pytest.mark.parametrize("command", [["config", "show"], ["run", "--quiet"]])
def test_a_config_name_that_is_a_path_is_refused(capsys, tmp_path, monkeypatch,
                                                 command) -> None:
    monkeypatch.chdir(tmp_path)
    d = copy.deepcopy(TWO_SMALL_TABLES) | {"name": "../up", "hardware": {"preset": "a100-gen4"}}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(d))
    one_line_error(capsys, [*command, str(cfg)], "name", "plain config name")


def test_calibrate_refuses_a_preset_name_that_is_a_path(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    one_line_error(capsys, ["calibrate", "--cpu", "--tiny", "--name", "../../evil"], "--name",
                   "plain preset name")
