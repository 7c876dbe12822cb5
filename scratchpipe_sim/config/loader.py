"""Read YAML configs: presets expanded in place, `--set key=value` overrides, validation.

Order (Ramulator style): read the file (UTF-8, strict YAML: a key written twice is an
error, an empty file too); apply each `--set a.b.c=value` to the raw mapping (each value
parsed once as YAML, so `22` is an int, `'"22"'` the string 22 and `true` a bool); expand every
`preset:` key — `hardware: {preset: a100-gen4, pcie: {h2d_GBps: 22}}` loads
`configs/hardware/a100-gen4.yaml` and deep-merges the user's keys over it; validate with
`Config.from_dict`. A preset is a name (looked up in the config file's folder, its
`hardware/` subfolder, then the project's `configs/hardware/`) or a path to a YAML file.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from scratchpipe_sim.config.model import Config
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.safety import limits
from scratchpipe_sim.safety.paths import input_file, present


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
_PRESET_DIRS = {"hardware": "hardware", "trace": "traces", "model": "models"}


class YamlLimitError(yaml.YAMLError):
    """A document beyond a limit (nesting, alias expansion): refused, never read as text."""

    def __init__(self, message: str, mark: yaml.Mark | None):
        self.message = message
        self.mark = mark
        super().__init__(message)


#: YAML 1.2 floats: `1e-3` and `1e300` are numbers (YAML 1.1 wants `1.0e-3`), as people
#: write them; the 1.1 forms (`.5`, `1_000.0`, `.inf`) stay numbers too.
_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key written twice in one mapping (PyYAML keeps the last
    silently, so a typo-level duplicate would change a config without a word), nesting
    deeper than limits.YAML_DEPTH (checked while composing, before any recursion runs deep)
    and documents whose aliases expand beyond limits.YAML_NODES nodes ("billion laughs":
    PyYAML shares aliased objects, but printing or copying one expands it)."""

    _depth = 0
    #: nodes composed so far, and their limit (read once a document)
    _nodes = 0
    _max_nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > limits.YAML_DEPTH.value():
                raise YamlLimitError(f"nested too deeply; {limits.YAML_DEPTH.advice()}",
                                     self.peek_event().start_mark)
            if not self._max_nodes:
                self._max_nodes = limits.YAML_NODES.value()
            if self._nodes > self._max_nodes:  # a list of 200,000 ranks: refused at the
                # limit, not after composing all of it (17 s) and then named an alias
                raise YamlLimitError(f"more than {self._max_nodes:,} nodes written; "
                                     f"{limits.YAML_NODES.advice()}",
                                     self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor` merges are overridden on purpose
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: the base constructor reports it
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first}); "
                        "expected each key once", key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE,
                                      list("-+0123456789."))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a composed document whose aliases expand beyond the node or depth limit, or
    refer to themselves; iterative and memoized per node, so a bomb costs what it is
    written with, not what it expands to."""
    max_nodes, max_depth = limits.YAML_NODES.value(), limits.YAML_DEPTH.value()
    size: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth)
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = [size[id(c)] for c in _children(node)]
            nodes = 1 + sum(k[0] for k in kids)
            depth = 1 + max((k[1] for k in kids), default=0)
            if nodes > max_nodes:
                raise YamlLimitError(f"aliases expand to more than {max_nodes:,} nodes; "
                                     f"{limits.YAML_NODES.advice()}", node.start_mark)
            if depth > max_depth:
                raise YamlLimitError(f"aliases nest too deeply; {limits.YAML_DEPTH.advice()}",
                                     node.start_mark)
            size[key] = (nodes, depth)
        elif key not in size:
            if key in on_path:
                raise YamlLimitError("an alias refers to the node that contains it; expected "
                                     "a tree", node.start_mark)
            on_path.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node) if id(c) not in size)


def load_yaml_text(text: str, source: str | None, field: str | None = None) -> Any:
    """YAML text -> data with the strict loader; a syntax error, duplicate key or a
    document beyond a limit is a one-line UserError naming the line."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        raise _yaml_error(e, source, field) from None


class YamlRefused(UserError):
    """A YAML document or value beyond a limit (a UserError a caller must not read as
    text)."""


def _yaml_error(e: yaml.YAMLError, source: str | None, field: str | None) -> UserError:
    mark = getattr(e, "problem_mark", None) or getattr(e, "mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    if isinstance(e, YamlLimitError):
        return YamlRefused(f"YAML refused{where}: {e.message}", source=source, field=field)
    problem = getattr(e, "problem", None) or str(e)
    return UserError(f"not valid YAML{where}: {' '.join(str(problem).split())}",
                     source=source, field=field)


def parse_yaml_value(text: str, source: str | None = None, field: str | None = None) -> Any:
    """A command-line value read as YAML (`22` an int, `"22"` the string 22, `1e-3` a
    float); text that is not valid YAML stays text, but a value beyond a limit (nesting,
    aliases), a flow mapping or list (`{...}`, `[...]`: meant as one) or a duplicate key
    is a UserError naming the YAML's problem, never kept as text."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except YamlLimitError as e:
        raise _yaml_error(e, source, field) from None
    except yaml.YAMLError as e:
        if text.lstrip().startswith(("{", "[")) or "duplicate key" in str(e):
            raise _yaml_error(e, source, field) from None
        return text


def read_text(path: Path, what: str = "config file") -> str:
    """A file's UTF-8 text; a missing, unreadable or non-UTF-8 file is a UserError."""
    input_file(path, what)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                        f"{e.start}); expected a UTF-8 YAML file", source=str(path)) from None
    except OSError as e:
        raise UserError(f"cannot read: {e.strerror or e}", source=str(path)) from None


#: parsed YAML by file text (read_yaml): a sweep resolves every point from the same preset
#: files, and pure-Python YAML parsing costs tens of ms a file. Keyed by the text itself, not
#: by mtime/size, so an edited file is re-parsed even within one mtime tick; callers get deep
#: copies, so no caller can change what the next one reads. Bounded: cleared when full.
_YAML_MEMO: dict[str, dict[str, Any]] = {}
_YAML_MEMO_MAX = 128
_YAML_MEMO_MAX_CHARS = 1 << 20  # larger files are parsed every time (not kept in memory)


def read_yaml(path: str | os.PathLike, what: str = "config file") -> dict[str, Any]:
    """A YAML file whose top level is a non-empty mapping (a fresh deep copy each call)."""
    p = Path(path)
    text = read_text(p, what)
    hit = _YAML_MEMO.get(text)
    if hit is not None:
        return copy.deepcopy(hit)
    data = _parse_mapping(text, p, what)
    if len(text) <= _YAML_MEMO_MAX_CHARS:
        if len(_YAML_MEMO) >= _YAML_MEMO_MAX:
            _YAML_MEMO.clear()
        _YAML_MEMO[text] = copy.deepcopy(data)
    return data


def _parse_mapping(text: str, p: Path, what: str) -> dict[str, Any]:
    data = load_yaml_text(text, str(p))
    if data is None:
        raise UserError(f"empty {what}: expected a YAML mapping (e.g. the sections model, "
                        "trace, cache, hardware, designs as in configs/quickstart.yaml)",
                        source=str(p))
    if not isinstance(data, dict):
        raise UserError(f"expected a mapping at the top level, got {type(data).__name__}",
                        source=str(p))
    return data


def parse_override(text: str, source: str = "--set") -> tuple[str, Any]:
    """'a.b.c=value' -> ('a.b.c', value parsed once as YAML: `22` is an int, `"22"` the
    string 22, `true` a bool; text that is not YAML stays text)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"expected key=value, got {text!r}", source=source)
    if not raw.strip():
        return key, None
    return key, parse_yaml_value(raw, source, key)


# -- dotted-key access to plain nested dicts (`cache.capacity_rows`) -----------------------
# The one implementation: --set overrides here and sweep axes (experiments/spec.py) use it.

_MISSING = object()


def _parts(key: str, source: str | None, field: str | None) -> list[str]:
    parts = key.split(".") if isinstance(key, str) else [""]
    if any(not p for p in parts):
        raise UserError(f"bad dotted key {key!r}: expected names joined by '.'",
                        source=source, field=field or str(key))
    return parts


def get_dotted(tree: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    """The value at `key` in `tree`; `default` (or KeyError) when any part is absent."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            if default is _MISSING:
                raise KeyError(key)
            return default
        node = node[part]
    return node


def has_dotted(tree: Mapping[str, Any], key: str) -> bool:
    return get_dotted(tree, key, _MISSING_HAS) is not _MISSING_HAS


_MISSING_HAS = object()


def set_dotted(d: dict[str, Any], key: str, value: Any, *, source: str | None = "--set",
               field: str | None = None) -> dict[str, Any]:
    """Set `d["a"]["b"]["c"]` to a deep copy of `value` for key "a.b.c", creating mappings
    on the way; returns `d`. The value is stored as given (parse text with
    `parse_override` first). A part that is not a mapping is a UserError at `field`
    (default: the key). Unknown keys are caught later by validation."""
    parts = _parts(key, source, field)
    node = d
    for i, p in enumerate(parts[:-1]):
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        elif not isinstance(nxt, dict):
            raise UserError(f"'{'.'.join(parts[:i + 1])}' is {nxt!r}, not a mapping: cannot "
                            f"set '{key}'", source=source, field=field or key)
        node = nxt
    node[parts[-1]] = copy.deepcopy(value)
    return d


def leaf_keys(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every dotted key of `tree` (leaves and the mappings above them)."""
    keys: list[str] = []
    for k, v in tree.items():
        full = f"{prefix}{k}"
        keys.append(full)
        if isinstance(v, Mapping):
            keys.extend(leaf_keys(v, full + "."))
    return keys


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: `over` on top of `base`, recursively for mappings (lists and scalars are
    replaced whole); deep copies, so neither input is shared with or changed by the
    result."""
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
        if present(c, "preset file", field) and c.is_file():
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
                preset = read_yaml(path, "preset file")
                preset = expand_presets({k: preset}, path.parent, str(path), prefix,
                                        depth + 1)[k]
                v = deep_merge(preset, v)
                if k == "hardware" and not v.get("name"):
                    v["name"] = Path(name).stem if looks_like_file(name) else name
            out[k] = expand_presets(v, base_dir, source, where, depth)
        else:
            out[k] = v
    return out


def key_origin(path: str | os.PathLike, parts: Sequence[str]
               ) -> tuple[str, str, Any] | None:
    """(the file that writes the key `parts` of the config file at `path`, the dotted key
    there, the value written): the config itself, else the preset (or the preset's preset)
    that supplies it, where the key is relative to the preset's section (`hardware.ranges.X`
    of a config is `ranges.X` of its hardware preset); None when neither writes it or a file
    cannot be read. Errors name where a value was written, not only the config that pulled
    it in (a caller compares the value: a `--set` may have replaced it)."""
    try:
        raw, source, base_dir = _raw(path)
        return _origin(raw, list(parts), [], source, base_dir, "", 0)
    except UserError:
        return None


def _origin(node: Any, parts: list[str], done: list[str], source: str | None,
            base_dir: Path | None, section: str, depth: int) -> tuple[str, str, Any] | None:
    if not parts:
        return (source or "", ".".join(done), node)
    if not isinstance(node, dict):
        return None
    if parts[0] in node:
        found = _origin(node[parts[0]], parts[1:], [*done, parts[0]], source, base_dir,
                        parts[0], depth)
        if found is not None:
            return found
    if "preset" in node and depth < 8:  # what the preset's keys under this one supply
        path = _find_preset(section, node["preset"], base_dir, source, "preset")
        return _origin(read_yaml(path, "preset file"), parts, [], str(path), path.parent,
                       section, depth + 1)
    return None


def looks_like_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or "/" in name or os.sep in name


def _raw(path_or_dict: str | os.PathLike | Mapping[str, Any]
         ) -> tuple[dict[str, Any], str | None, Path | None]:
    if isinstance(path_or_dict, Mapping):
        return copy.deepcopy(dict(path_or_dict)), "<dict>", None
    p = Path(path_or_dict)
    return read_yaml(p), str(p), p.resolve().parent


def _overridden(path: str | os.PathLike | Mapping[str, Any], overrides: Sequence[str],
                values: Mapping[str, Any] | None
                ) -> tuple[dict[str, Any], str | None, Path | None]:
    """`_raw`'s (config as written, source, folder) with the `--set` overrides applied,
    then `values`; presets not yet expanded."""
    raw, source, base_dir = _raw(path)
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(raw, key, value)
    for key, value in (values or {}).items():
        set_dotted(raw, key, value, source="overrides")
    return raw, source, base_dir


def load_config(path: str | os.PathLike | Mapping[str, Any],
                overrides: Sequence[str] = (),
                values: Mapping[str, Any] | None = None) -> Config:
    """A validated `Config` from a YAML file (or a dict), with `--set` overrides applied,
    then `values` (dotted key -> a Python value, used as given: the Python API's form)."""
    raw, source, base_dir = _overridden(path, overrides, values)
    expanded = expand_presets(raw, base_dir, source)
    return Config.from_dict(expanded, source=source)


def preset_file(path: str | os.PathLike, overrides: Sequence[str] = (),
                section: str = "hardware") -> Path | None:
    """The file of the config's `section` preset after the `--set` overrides (what a tool
    that keeps files beside a preset reads: calibrate's raw samples beside the hardware
    preset), None when the section names no preset (inline values). Call it after the
    config loaded, so the name is known to resolve."""
    raw, source, base_dir = _overridden(path, overrides, None)
    node = raw.get(section)
    if not isinstance(node, dict) or not isinstance(node.get("preset"), str):
        return None
    return _find_preset(section, node["preset"], base_dir, source, f"{section}.preset")


def resolve(path_or_dict: str | os.PathLike | Mapping[str, Any],
            overrides: Sequence[str] = (),
            values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fully resolved plain dict: presets expanded, overrides applied, defaults filled."""
    return load_config(path_or_dict, overrides, values).to_dict()


class _Dumper(yaml.SafeDumper):
    """Block-style mappings, flow-style lists: `bottom_mlp: [13, 512, 256, 64]`."""


def _list_flow(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(list, _list_flow)
_Dumper.add_representer(tuple, _list_flow)


def dump_yaml(d: Mapping[str, Any]) -> str:
    return yaml.dump(dict(d), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=100)
