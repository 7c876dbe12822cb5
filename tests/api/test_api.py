"""The Python API (issue 27): `simulate`, `resolve` and `sweep` give what the CLI gives."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from small_configs import SMALL_A100

import scratchpipe_sim
from scratchpipe_sim.api import WALL_COLUMNS
from scratchpipe_sim.cli import main
from scratchpipe_sim.errors import UserError

SMALL = SMALL_A100


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(SMALL))
    return p


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def test_simulate_equals_run_json_on_every_numeric_column(cfg_file, tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["run", str(cfg_file), "--out", str(out), "--json", "--quiet",
                 "--no-timeline"]) == 0
    cli_rows = json.loads(capsys.readouterr().out)
    df = scratchpipe_sim.simulate(str(cfg_file))
    assert list(df["design"]) == [r["design"] for r in cli_rows]
    numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])
               and not c.startswith("cfg.") and c not in WALL_COLUMNS]
    assert "iter_ns_mean" in numeric and "hit_ratio" in numeric
    for row, cli in zip(df.to_dict(orient="records"), cli_rows, strict=True):
        for c in numeric:  # a design without a column (its stages) has NaN there
            want = cli.get(c, math.nan)
            want = math.nan if want is None else want
            assert _same(row[c], want), (row["design"], c, row[c], want)
    # the same columns as results.csv, in the same order
    with open(out / "results.csv", newline="") as f:
        assert list(df.columns) == next(csv.reader(f))
    assert df.attrs["config"] == yaml.safe_load((out / "resolved_config.yaml").read_text())
    assert df.attrs["trace_sha256"] == (out / "trace.sha256").read_text().strip()


def test_overrides_in_both_forms_and_designs_select(cfg_file):
    a = scratchpipe_sim.simulate(cfg_file, designs=["gpu-only", "hybrid"],
                                 overrides={"model.batch_size": 64})
    b = scratchpipe_sim.simulate(SMALL, ["gpu-only", "hybrid"],
                                 **{"model.batch_size": 64, "hardware.preset": "a100-gen4"})
    assert list(a["design"]) == ["gpu-only", "hybrid"]
    assert (a["cfg.model.batch_size"] == 64).all()
    assert a.attrs["config"]["model"]["batch_size"] == 64
    assert a["iter_ns_mean"].tolist() == b["iter_ns_mean"].tolist()
    base = scratchpipe_sim.simulate(cfg_file, designs=["gpu-only"])
    assert base["iter_ns_mean"].iloc[0] != a["iter_ns_mean"].iloc[0]


def test_resolve_matches_config_show_and_takes_python_values(cfg_file):
    from scratchpipe_sim.config import resolve as resolve_texts
    from scratchpipe_sim.timing.designs import with_default_designs

    got = scratchpipe_sim.resolve(cfg_file, {"design_params.scratchpipe.lookahead": 7}, seed=9)
    # config show's dict: the default designs filled in
    assert got == with_default_designs(
        resolve_texts(cfg_file, ["design_params.scratchpipe.lookahead=7", "seed=9"])
    )
    # a Python value is used as given: the text "7" is not parsed into a number
    with pytest.raises(UserError, match="design_params.scratchpipe.lookahead"):
        scratchpipe_sim.resolve(cfg_file, {"design_params.scratchpipe.lookahead": "seven"})


@pytest.mark.parametrize("kwargs, words", [
    ({"overrides": {"model.batch_sise": 64}}, ("model.batch_sise", "batch_size")),
    ({"designs": ["gpu-onyl"]}, ("gpu-onyl",)),
    ({"designs": ["hybrid", "hybrid"]}, ("hybrid", "twice")),
    ({"designs": "hybrid"}, ("list of design names",)),
    ({"overrides": {"seed": 1}, "seed": 2}, ("seed", "once")),
])
def test_bad_input_raises_user_error_naming_it(cfg_file, kwargs, words):
    with pytest.raises(UserError) as e:
        scratchpipe_sim.simulate(cfg_file, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    with pytest.raises(UserError, match="no.such.yaml"):
        scratchpipe_sim.simulate("no/such.yaml")


def test_sweep_returns_the_cli_table_and_resumes(tmp_path, capsys):
    exp = tmp_path / "tiny.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "tiny", "base": SMALL, "designs": ["hybrid", "gpu-only", "lru-cache"],
        "metrics": ["iter_ns_mean", "speedup_vs_hybrid", "hit_ratio"],
        "sweep": {"grid": {"trace.alpha": [0.9, 1.2]}}}))
    df = scratchpipe_sim.sweep(exp, out=tmp_path / "api", quiet=True)
    assert df.attrs["summary"]["ran"] == 2 and (df["status"] == "ok").all()
    assert len(df) == 6 and set(df["trace.alpha"]) == {0.9, 1.2}
    again = scratchpipe_sim.sweep(exp, out=tmp_path / "api", quiet=True)
    assert again.attrs["summary"]["skipped"] == 2 and again.attrs["summary"]["ran"] == 0
    pd.testing.assert_frame_equal(df, again)
    assert main(["sweep", str(exp), "--out", str(tmp_path / "cli"), "--quiet"]) == 0
    capsys.readouterr()
    cli = (tmp_path / "cli" / "results.csv").read_text()
    assert cli == (tmp_path / "api" / "results.csv").read_text()
    with pytest.raises(UserError, match="scheduler"):
        scratchpipe_sim.sweep(exp, out=tmp_path / "x", executor="local", scheduler="tcp://h:1")


def test_import_stays_cheap():
    probe = ("import sys, scratchpipe_sim; scratchpipe_sim.simulate; scratchpipe_sim.sweep; "
             "print(sorted(m for m in ('pandas', 'numba', 'simpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout
    assert out.strip() == "[]"


def test_simulate_sample_equals_the_config_keys(cfg_file):
    by_arg = scratchpipe_sim.simulate(str(cfg_file), ["lru-cache"], sample=0.5, salts=2)
    by_key = scratchpipe_sim.simulate(str(cfg_file), ["lru-cache"],
                                      **{"trace.sample_rate": 0.5, "trace.sample_salts": 2})
    cols = [c for c in by_arg.columns if c not in WALL_COLUMNS]
    assert by_arg[cols].equals(by_key[cols])
    assert {"hit_ratio_spread", "sample_rate"} <= set(by_arg.columns)
    with pytest.raises(UserError) as e:
        scratchpipe_sim.simulate(str(cfg_file), sample=0.5, **{"trace.sample_rate": 0.5})
    assert e.value.field == "trace.sample_rate"


def test_the_package_face_is_the_api() -> None:
    """dir() and __all__ list the API (not os, re, Path or the cache helpers); each name
    resolves (issue 42, item 5)."""
    import scratchpipe_sim as sp
    from scratchpipe_sim.errors import UserError

    assert dir(sp) == sorted(sp.__all__)
    assert {"simulate", "sweep", "resolve", "UserError", "__version__"} == set(sp.__all__)
    assert not {"os", "re", "shutil", "hashlib", "Path", "annotations"} & set(dir(sp))
    assert all(getattr(sp, n) is not None for n in sp.__all__)
    assert sp.UserError is UserError
