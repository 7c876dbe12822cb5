"""Every command that takes a config resolves its designs and table sizes in one place: a
config without `designs:` (a valid config: the registry's default designs run) and one that
lists each table's rows (`tables: {rows: [...]}`, as the criteo-kaggle preset does) run
through each of them, never a traceback (issue 42, item 1)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from small_configs import TWO_SMALL_TABLES

from scratchpipe_sim.cli import main
from scratchpipe_sim.timing.designs import default_designs


def _config(tmp_path, per_table_rows: bool) -> str:
    d = copy.deepcopy(TWO_SMALL_TABLES)
    d["hardware"] = {"preset": "a100-gen4"}
    d.pop("designs", None)
    d["cache"] = {"load_factor": 0.3}
    if per_table_rows:
        d["model"]["tables"] = {"rows": [4000, 3000], "dim": 32}
    path = tmp_path / ("rows.yaml" if per_table_rows else "nodesigns.yaml")
    path.write_text(yaml.safe_dump(d))
    return str(path)


@pytest.fixture(params=[False, True], ids=["no-designs", "per-table-rows"])
def config(request, tmp_path) -> str:
    return _config(tmp_path, request.param)


def _ok(capsys, argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    assert code == 0, err
    return out


def test_config_show_fills_the_default_designs(capsys, config) -> None:
    out = _ok(capsys, ["config", "show", config])
    assert yaml.safe_load(out)["designs"] == list(default_designs())


def test_run_runs_the_default_designs(capsys, config, tmp_path) -> None:
    out = _ok(capsys, ["run", config, "--json", "--quiet", "--no-cache",
                       "--out", str(tmp_path / "res")])
    assert sorted(r["design"] for r in json.loads(out)) == sorted(default_designs())


def test_plan_plans_the_default_cache_designs(capsys, config) -> None:
    out = _ok(capsys, ["plan", config, "--json", "--axis", "capacity"])
    planned = {a["design"] for a in json.loads(out)["answers"]}
    assert planned and planned <= set(default_designs()) | {"bagpipe", "multi-gpu"}
    assert "lru-cache" in planned


def test_validate_cpu_measures_the_default_designs_cpu_stages(capsys, config) -> None:
    out = _ok(capsys, ["validate", "--cpu", config, "--json", "--set", "model.num_batches=6",
                       "--set", "model.warmup_batches=2"])
    designs = {r["stage"].split(".")[0] for r in json.loads(out)} - {"host"}
    assert designs == {"hybrid", "scratchpipe"} & set(default_designs())
