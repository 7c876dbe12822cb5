"""`config describe` and docs/timing.md's constants table: both generated from the fields'
metadata (each constant's unit, range and source written once, beside its field)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.config.describe import BEGIN, END, describe, markdown_table
from scratchpipe_sim.config.hardware import HardwareConfig
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.designs import param_sections

ROOT = Path(__file__).resolve().parents[2]
#: hardware fields that are not constants (a name, the ranges table itself)
NOT_CONSTANTS = {"hardware.name", "hardware.ranges"}


def _leaves(cls: type, prefix: str) -> list[tuple[str, dataclasses.Field]]:
    out = []
    for f in dataclasses.fields(cls):
        default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                   else f.default)
        if dataclasses.is_dataclass(default):
            out += _leaves(type(default), f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", f))
    return out


def test_docs_table_is_the_generated_one() -> None:
    text = (ROOT / "docs" / "timing.md").read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    inside = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert inside == markdown_table(describe(extra=param_sections())), (
        "docs/timing.md's constants table is stale: regenerate it with "
        "`scratchpipe-sim config describe --markdown`")


def test_every_hardware_constant_has_its_unit_range_and_source() -> None:
    missing = [k for k, f in _leaves(HardwareConfig, "hardware.")
               if k not in NOT_CONSTANTS
               and not all(isinstance(f.metadata.get(m), str) and
                           (m == "range" or f.metadata[m]) for m in ("unit", "range", "source"))]
    assert missing == []
    documented = {c.key for c in describe("hardware")}
    assert documented == {k for k, _ in _leaves(HardwareConfig, "hardware.")} - NOT_CONSTANTS


def test_defaults_are_read_from_their_source_the_default_preset() -> None:
    preset = yaml.safe_load((ROOT / "configs/hardware/a100-gen4.yaml").read_text())
    rows = {c.key: c for c in describe("hardware")}
    for key, value in (("cpu.dram_GBps", preset["cpu"]["dram_GBps"]),
                       ("pcie.duplex_h2d_GBps", preset["pcie"]["duplex_h2d_GBps"]),
                       ("gpu.tflops", preset["gpu"]["tflops"])):
        assert rows[f"hardware.{key}"].default == value
    assert rows["hardware.cpu.dram_GBps"].default == HardwareConfig().cpu.dram_GBps
    assert rows["hardware.cxl.bandwidth_GBps"].default is None


def test_describe_selects_a_key_or_a_section() -> None:
    assert [c.key for c in describe("gpu.tflops")] == ["hardware.gpu.tflops"]
    assert [c.key for c in describe("hardware.gpu.tflops")] == ["hardware.gpu.tflops"]
    cxl = [c.key for c in describe("cxl")]
    assert cxl and all(k.startswith("hardware.cxl.") for k in cxl)
    assert [c.key for c in describe("model.cxl_share")] == ["model.cxl_share"]
    with pytest.raises(UserError, match="did you mean 'hardware.gpu.tflops'"):
        describe("gpu.tflop")


def test_cli_describe(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "describe", "cpu.plan_ns_per_id", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["key"] == "hardware.cpu.plan_ns_per_id" and row["unit"] == "core-ns per id"
    assert set(row) == {"key", "unit", "default", "range", "source", "help"}
    assert main(["config", "describe", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() == markdown_table(describe(extra=param_sections()))
    assert main(["config", "describe", "nonsense.key"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "KEY" in err[0] and "nonsense.key" in err[0]
