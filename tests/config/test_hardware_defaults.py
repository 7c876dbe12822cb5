"""The built-in hardware defaults are one named preset's values (`DEFAULT_PRESET`), so a
config without `preset:` runs on hardware whose sources are written down (before, the
defaults matched no preset: 110 GB/s DRAM, 16 cores, 150 TFLOP/s)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from scratchpipe_sim.config.hardware import DEFAULT_PRESET, HardwareConfig
from scratchpipe_sim.config.loader import resolve
from scratchpipe_sim.config.model import Config

ROOT = Path(__file__).resolve().parents[2]
#: what only a named preset carries: its name and its `sensitivity` ranges
PRESET_ONLY = ("name", "ranges")


def _differences(default: Any, preset: Any, prefix: str = "") -> list[str]:
    """Every leaf field whose default differs from the preset's, as 'key: default != preset'."""
    out = []
    for f in dataclasses.fields(default):
        if not prefix and f.name in PRESET_ONLY:
            continue
        d, p = getattr(default, f.name), getattr(preset, f.name)
        if dataclasses.is_dataclass(d):
            out += _differences(d, p, f"{prefix}{f.name}.")
        elif d != p or type(d) is not type(p) and not {type(d), type(p)} <= {int, float}:
            out.append(f"{prefix}{f.name}: {d!r} != {p!r}")
    return out


def test_defaults_equal_the_default_preset_field_by_field() -> None:
    preset = Config.from_dict(resolve({"hardware": {"preset": DEFAULT_PRESET}})).hardware
    assert preset.name == DEFAULT_PRESET and preset.ranges
    assert _differences(HardwareConfig(), preset) == []
    assert dataclasses.replace(preset, name="", ranges={}) == HardwareConfig()


def test_every_key_the_preset_file_writes_is_a_default() -> None:
    """The file itself, not through the loader (which fills unwritten keys with defaults)."""
    raw = yaml.safe_load((ROOT / "configs" / "hardware" / f"{DEFAULT_PRESET}.yaml").read_text())
    hw = HardwareConfig()
    written = 0
    for section, values in raw.items():
        if section in PRESET_ONLY:
            continue
        if not isinstance(values, dict):
            assert getattr(hw, section) == values, section
            written += 1
            continue
        for key, value in values.items():
            default = getattr(getattr(hw, section), key)
            if isinstance(value, list):
                value = tuple(tuple(point) for point in value)
            assert default == value, f"{section}.{key}: default {default!r}, preset {value!r}"
            written += 1
    assert written > 40   # the preset writes nearly every cpu, pcie and gpu key
