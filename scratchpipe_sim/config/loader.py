"""Read YAML configs: presets expanded in place, `--set key=value` overrides, validation.

Order (Ramulator style): read the file; apply each `--set a.b.c=value` to the raw mapping
(values parsed as YAML scalars, so `22` is an int and `true` a bool); expand every
`preset:` key — `hardware: {preset: a100-gen4, pcie: {h2d_GBps: 22}}` loads
`configs/hardware/a100-gen4.yaml` and deep-merges the user's keys over it; validate with
`Config.from_dict`. A preset is a name (looked up in the config file's folder, its
`hardware/` subfolder, then the project's `configs/hardware/`) or a path to a YAML file.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from scratchpipe_sim.config.model import Config
from scratchpipe_sim.errors import UserError, closest


def _configs_dir() -> Path:
    """The preset folder: $SCRATCHPIPE_CONFIGS, else the checkout's configs/ (editable
    installs, tests), else the copy a regular install puts in <prefix>/share/scratchpipe_sim."""
    if "SCRATCHPIPE_CONFIGS" in os.environ:
        return Path(os.environ["SCRATCHPIPE_CONFIGS"])
    checkout = Path(__file__).resolve().parents[2] / "configs"
    if (checkout / "hardware").is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "scratchpipe_sim" / "configs"


#: the project's preset folder (hardware/ and traces/ presets).
CONFIGS_DIR = _configs_dir()
_PRESET_DIRS = {"hardware": "hardware", "trace": "traces"}


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UserError("no such config file", source=str(p))
    try:
        with open(p, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"not valid YAML{where}: {getattr(e, 'problem', e)}",
                        source=str(p)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"expected a mapping at the top level, got {type(data).__name__}",
                        source=str(p))
    return data


def parse_override(text: str, source: str = "--set") -> tuple[str, Any]:
    """'a.b.c=value' -> ('a.b.c', YAML-parsed value)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"expected key=value, got {text!r}", source=source)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key, value


def set_dotted(d: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Set `d["a"]["b"]["c"] = value` for key "a.b.c", creating mappings on the way.

    A string `value` is parsed as a YAML scalar ("22" -> 22, "true" -> True). Unknown keys are
    caught later by validation, which names the dotted key and the closest valid one.
    """
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            pass
    parts = key.split(".")
    if any(not p for p in parts):
        raise UserError(f"bad dotted key {key!r}", source="--set", field=key)
    node = d
    for i, p in enumerate(parts[:-1]):
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        elif not isinstance(nxt, dict):
            raise UserError(f"'{'.'.join(parts[:i + 1])}' is {nxt!r}, not a mapping",
                            source="--set", field=key)
        node = nxt
    node[parts[-1]] = value
    return d


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, recursively for mappings (lists are replaced whole)."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _find_preset(section: str, name: str, base_dir: Path | None, source: str | None,
                 field: str) -> Path:
    if not isinstance(name, str) or not name:
        raise UserError(f"expected a preset name or a path, got {name!r}", source=source,
                        field=field)
    cand: list[Path] = []
    looks_like_path = looks_like_file(name)
    sub = _PRESET_DIRS.get(section, section)
    if looks_like_path:
        p = Path(name)
        cand += [p] if p.is_absolute() else ([base_dir / p] if base_dir else []) + [p]
    else:
        for d in ([base_dir, base_dir / sub] if base_dir else []) + [CONFIGS_DIR / sub]:
            cand.append(d / f"{name}.yaml")
    for c in cand:
        if c.is_file():
            return c
    known = sorted(p.stem for p in (CONFIGS_DIR / sub).glob("*.yaml"))
    raise UserError(f"no preset '{name}'{closest(name, known)}; expected one of: "
                    f"{', '.join(known) or '(none)'} or a path to a YAML file", source=source,
                    field=field)


def expand_presets(d: dict[str, Any], base_dir: Path | None, source: str | None,
                   prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Replace every `{preset: X, ...}` mapping by preset X with the other keys over it."""
    if depth > 8:
        raise UserError("presets nest too deeply (a cycle?)", source=source, field=prefix)
    out: dict[str, Any] = {}
    for k, v in d.items():
        where = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            v = dict(v)
            if "preset" in v:
                name = v.pop("preset")
                path = _find_preset(k, name, base_dir, source, f"{where}.preset")
                preset = read_yaml(path)
                preset = expand_presets({k: preset}, path.parent, str(path), prefix,
                                        depth + 1)[k]
                v = deep_merge(preset, v)
                if k == "hardware" and not v.get("name"):
                    v["name"] = Path(name).stem if looks_like_file(name) else name
            out[k] = expand_presets(v, base_dir, source, where, depth)
        else:
            out[k] = v
    return out


def looks_like_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or "/" in name or os.sep in name


def _raw(path_or_dict: str | os.PathLike | Mapping[str, Any]
         ) -> tuple[dict[str, Any], str | None, Path | None]:
    if isinstance(path_or_dict, Mapping):
        return copy.deepcopy(dict(path_or_dict)), "<dict>", None
    p = Path(path_or_dict)
    return read_yaml(p), str(p), p.resolve().parent


def load_config(path: str | os.PathLike | Mapping[str, Any],
                overrides: Sequence[str] = ()) -> Config:
    """A validated `Config` from a YAML file (or a dict), with `--set` overrides applied."""
    raw, source, base_dir = _raw(path)
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(raw, key, value)
    expanded = expand_presets(raw, base_dir, source)
    return Config.from_dict(expanded, source=source)


def resolve(path_or_dict: str | os.PathLike | Mapping[str, Any],
            overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The fully resolved plain dict: presets expanded, overrides applied, defaults filled."""
    return load_config(path_or_dict, overrides).to_dict()


class _Dumper(yaml.SafeDumper):
    """Block-style mappings, flow-style lists: `bottom_mlp: [13, 512, 256, 64]`."""


def _list_flow(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(list, _list_flow)
_Dumper.add_representer(tuple, _list_flow)


def dump_yaml(d: Mapping[str, Any]) -> str:
    return yaml.dump(dict(d), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=100)
