"""Config layer: presets, dotted overrides, validation errors, `config show` end to end."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import (
    CONFIGS_DIR,
    Config,
    config_to_dict,
    interpolate,
    load_config,
    parse_override,
    read_yaml,
    resolve,
    set_dotted,
)
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.designs import with_default_designs

PRESETS = ("v100-gen3", "a100-gen4", "h100-gen5", "h200-gen5")


def write(tmp_path, data, name="c.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return p


@pytest.mark.parametrize("name", PRESETS)
def test_presets_load_and_match_their_file(name):
    raw = read_yaml(CONFIGS_DIR / "hardware" / f"{name}.yaml")
    cfg = load_config({"hardware": {"preset": name}})
    hw = cfg.hardware
    assert hw.name == name
    assert hw.pcie.h2d_GBps == raw["pcie"]["h2d_GBps"]
    assert hw.gpu.hbm_GBps == raw["gpu"]["hbm_GBps"]
    assert hw.cpu.dram_GBps == raw["cpu"]["dram_GBps"]


def test_datasheet_numbers_in_presets():
    hbm = {n: load_config({"hardware": {"preset": n}}).hardware.gpu.hbm_GBps for n in PRESETS}
    assert hbm == {"v100-gen3": 900.0, "a100-gen4": 2039.0, "h100-gen5": 3350.0,
                   "h200-gen5": 4800.0}


def test_preset_then_overrides_in_place(tmp_path):
    p = write(tmp_path, {"hardware": {"preset": "a100-gen4", "pcie": {"h2d_GBps": 22}}})
    cfg = load_config(p, ["hardware.gpu.tflops=30", "model.optimizer=adagrad"])
    assert cfg.hardware.pcie.h2d_GBps == 22.0
    assert cfg.hardware.pcie.d2h_GBps == 25.0  # from the preset
    assert cfg.hardware.pcie.duplex_h2d_GBps == 11.0  # from the preset
    assert cfg.hardware.gpu.tflops == 30.0
    assert cfg.model.state_bytes == 4 * cfg.model.tables.dim
    # --set may also pick the preset, and beats the file's keys
    cfg2 = load_config(p, ["hardware.preset=v100-gen3", "hardware.pcie.h2d_GBps=9.5"])
    assert cfg2.hardware.name == "v100-gen3" and cfg2.hardware.gpu.hbm_GBps == 900.0
    assert cfg2.hardware.pcie.h2d_GBps == 9.5


def test_preset_as_path(tmp_path):
    hw = read_yaml(CONFIGS_DIR / "hardware" / "h200-gen5.yaml")
    hw["name"] = "measured-h200"
    hw["pcie"]["h2d_GBps"] = 41.5
    (tmp_path / "measured.yaml").write_text(yaml.safe_dump(hw))
    p = write(tmp_path, {"hardware": {"preset": "measured.yaml"}})
    cfg = load_config(p)
    assert cfg.hardware.pcie.h2d_GBps == 41.5 and cfg.hardware.name == "measured-h200"


def test_resolve_is_a_fixed_point_and_round_trips():
    d = resolve({"hardware": {"preset": "h100-gen5"}, "model": {"pooling": 7}})
    assert resolve(d) == d
    assert config_to_dict(Config.from_dict(d)) == d
    assert d["hardware"]["gpu"]["hbm_GBps"] == 3350.0 and d["model"]["pooling"] == 7
    assert isinstance(d["hardware"]["gpu"]["gather_efficiency"], list)
    assert d["model"]["top_mlp"] is None  # null: derived from the interaction (top_layers)


def test_overrides_parse_yaml_scalars_once():
    d: dict = {}
    for text in ("a.b.c=22", "a.b.f=2.5", "a.t=true", "a.s=lru", "a.l=[1, 2]", 'a.q="22"'):
        set_dotted(d, *parse_override(text))
    assert d == {"a": {"b": {"c": 22, "f": 2.5}, "t": True, "s": "lru", "l": [1, 2],
                       "q": "22"}}
    # set_dotted stores what it is given (a string stays a string) and copies it
    value = ["x"]
    set_dotted(d, "a.v", value)
    set_dotted(d, "a.w", "22")
    value.append("y")
    assert d["a"]["v"] == ["x"] and d["a"]["w"] == "22"


def test_derived_quantities():
    cfg = load_config({"model": {"tables": {"count": 2, "rows": 1000, "dim": 16},
                                 "batch_size": 10, "bottom_mlp": [4, 16],
                                 "top_mlp": [19, 2], "optimizer": "rowwise-adagrad"},
                       "cache": {"load_factor": 0.15}})
    assert cfg.model.row_bytes == 64 and cfg.model.moved_row_bytes == 68
    assert cfg.model.interaction_width == 16 + 2 * 3 // 2  # dot: D + F(F+1)/2
    assert cfg.capacity_rows() == math.ceil(0.15 * 2000)
    assert interpolate(((64, 0.2), (128, 0.4)), 96) == pytest.approx(0.3)
    assert interpolate(((64, 0.2), (128, 0.4)), 1024) == 0.4


@pytest.mark.parametrize("data, field, words", [
    ({"hardwre": {}}, "hardwre", "did you mean 'hardware'"),
    ({"hardware": {"pcie": {"h2d_gbps": 3}}}, "hardware.pcie.h2d_gbps", "did you mean 'h2d_GBps'"),
    ({"hardware": {"pcie": {"h2d_GBps": "fast"}}}, "hardware.pcie.h2d_GBps", "expected a number"),
    ({"hardware": {"pcie": {"h2d_GBps": -3}}}, "hardware.pcie.h2d_GBps", "expected a value > 0"),
    ({"hardware": {"cpu": {"dram_GBps": 0}}}, "hardware.cpu.dram_GBps", "> 0"),
    ({"model": {"batch_size": 2.5}}, "model.batch_size", "expected an integer"),
    ({"model": {"batch_size": True}}, "model.batch_size", "expected an integer"),
    ({"hardware": {"pcie": {"full_duplex": 1}}}, "hardware.pcie.full_duplex", "true or false"),
    ({"model": {"optimizer": "adamw"}}, "model.optimizer", "did you mean 'adam'"),
    ({"cache": {"capacity_rows": 400_000_000}}, "cache.capacity_rows", "fits in HBM"),
    ({"cache": {"load_factor": 1.0}, "hardware": {"gpu": {"hbm_capacity_GiB": 1}}},
     "cache.load_factor", "fits in HBM"),
    ({"hardware": {"preset": "a100-gen"}}, "hardware.preset", "did you mean 'a100-gen4'"),
    ({"model": {"warmup_batches": 100, "num_batches": 100}}, "model.warmup_batches", "<"),
    ({"hardware": {"cpu": {"gather_efficiency": [[128, 0.5], [64, 0.4]]}}},
     "hardware.cpu.gather_efficiency", "increase"),
    ({"hardware": {"gpu": {"gather_efficiency": [[64, 1.5]]}}},
     "hardware.gpu.gather_efficiency[0]", "efficiency <= 1"),
])
def test_bad_input_names_file_key_and_expectation(tmp_path, data, field, words):
    p = write(tmp_path, data)
    with pytest.raises(UserError) as e:
        load_config(p)
    assert e.value.source == str(p)
    assert e.value.field == field
    assert words in e.value.message


def test_bad_files(tmp_path):
    with pytest.raises(UserError, match="no such config file"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match="not valid YAML at line"):
        load_config(write(tmp_path, "a: [1,\n b: 2\n"))
    with pytest.raises(UserError, match="expected a mapping at the top level"):
        load_config(write(tmp_path, "- 1\n- 2\n"))
    with pytest.raises(UserError, match="expected key=value"):
        load_config(write(tmp_path, {}), ["model.pooling"])


def test_config_show_cli(tmp_path, capsys):
    p = write(tmp_path, {"hardware": {"preset": "v100-gen3"}})
    assert main(["config", "show", str(p), "--set", "hardware.pcie.h2d_GBps=7"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    # config (below timing) leaves unset designs null; `config show` lists the defaults
    assert shown == with_default_designs(resolve(p, ["hardware.pcie.h2d_GBps=7"]))
    assert shown["hardware"]["pcie"]["h2d_GBps"] == 7.0
    assert main(["config", "show", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"]["gpu"]["hbm_GBps"] == 900.0
    assert main(["config", "show", str(p), "--flat"]) == 0
    assert "hardware.gpu.hbm_GBps=900.0" in capsys.readouterr().out.splitlines()


def test_config_show_bad_key_is_one_line_exit_2(tmp_path, capsys):
    p = write(tmp_path, {"hardware": {"preset": "v100-gen3"}})
    assert main(["config", "show", str(p), "--set", "hardware.gpu.hbm_gbps=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{p}: hardware.gpu.hbm_gbps: unknown key" in err
    assert "did you mean 'hbm_GBps'" in err


def test_quickstart_config_is_valid():
    cfg = load_config(CONFIGS_DIR / "quickstart.yaml")
    assert set(cfg.designs) == {"hybrid", "gpu-only", "static-cache", "lru-cache",
                                "lru-prefetch", "scratchpipe"}
    assert cfg.trace.distribution == "zipf"
