"""Experiment YAML: a base config plus sweep axes, the designs and the metrics to keep.

    name: fig1-cache-size            # optional; default: the file's stem
    include: configs/quickstart.yaml # a config file (relative to this file, then the cwd)
    base: {model: {num_batches: 40}} # inline mapping, deep-merged over `include`
    sweep:
      grid: {cache.load_factor: [0.01, 0.05, 0.1]}          # cartesian product
      zip:  {trace.distribution: [zipf, uniform], trace.alpha: [1.05, 1.05]}  # in lock step
    designs: [hybrid, lru-cache, scratchpipe]
    metrics: [iter_ns_mean, speedup_vs_hybrid]
    figures: {speedup-vs-cache-size: {x: cache.load_factor}}

`zip` may also be a list of such mappings (several lock-step groups). Points are the
cartesian product of the grid axes and the zip groups, in the order written. Empty parts are
refused alike (an empty `grid`, `zip`, zip list or axis): a sweep names what it varies. The
number of points is counted from the axis lengths before anything is expanded and refused
above limits.SWEEP_POINTS; points are then expanded one at a time (`iter_points`). Each point's
fully resolved config (presets expanded, defaults filled) is hashed: that hash is its
identity in the results table.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scratchpipe_sim.config.loader import (
    deep_merge,
    get_dotted,
    has_dotted,
    leaf_keys,
    set_dotted,
)
from scratchpipe_sim.config.model import MOVED_CACHE_KEYS, Config
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.experiments.figures import check_figures
from scratchpipe_sim.experiments.hashing import config_hash
from scratchpipe_sim.safety import limits
from scratchpipe_sim.safety.paths import plain_name, present

TOP_KEYS = ("name", "description", "include", "base", "sweep", "designs", "metrics",
            "figures")
SWEEP_KEYS = ("grid", "zip")

#: Resolver(raw config dict, base_dir, source) -> fully resolved plain dict.
Resolver = Callable[[dict, "Path | None", str], dict]


@dataclass(frozen=True)
class Axis:
    key: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Point:
    """One configuration of the sweep: its position, axis values, resolved config, hash."""

    index: int
    values: dict[str, Any]
    config: dict[str, Any]
    key: str


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    source: str
    base: dict[str, Any]
    base_dir: Path | None
    base_source: str
    grid: tuple[Axis, ...] = ()
    zips: tuple[tuple[Axis, ...], ...] = ()
    designs: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    description: str = ""

    @property
    def num_points(self) -> int:
        """Points of the sweep: the product of the grid axes' and zip groups' lengths."""
        return math.prod([len(a.values) for a in self.grid]
                         + [len(g[0].values) for g in self.zips])

    @property
    def axes(self) -> list[str]:
        """Swept dotted keys, in the order their columns appear."""
        return [a.key for a in self.grid] + [a.key for g in self.zips for a in g]


def default_resolver(raw: dict, base_dir: Path | None, source: str) -> dict:
    """Presets expanded and every default filled, validated as the simulator will see it."""
    from scratchpipe_sim.config import Config, expand_presets
    from scratchpipe_sim.timing.designs import with_default_designs

    expanded = expand_presets(raw, base_dir, source)
    # a design refusing one point is its infeasible result there (`refused_everywhere`)
    resolved = with_default_designs(Config.from_dict(expanded, source=source).to_dict(),
                                    inputs=False)
    # a relative trace file is relative to the config that names it; points run elsewhere
    # (another process, a Dask worker), so make it absolute here
    path = (resolved.get("trace") or {}).get("path")
    if path and base_dir is not None and not Path(path).is_absolute():
        cand = base_dir / path
        if cand.exists():
            resolved["trace"]["path"] = str(cand.resolve())
    return resolved


def _read_yaml(path: Path) -> dict[str, Any]:
    """The experiment file (UTF-8, strict YAML: duplicate keys and an empty file are
    errors)."""
    from scratchpipe_sim.config.loader import read_yaml

    return read_yaml(path, "experiment file")


def _find_include(name: Any, exp_dir: Path, source: str) -> Path:
    if not isinstance(name, str) or not name:
        raise UserError(f"expected a config file path, got {name!r}", source=source,
                        field="include")
    p = Path(name)
    for cand in ([p] if p.is_absolute() else [exp_dir / p, Path.cwd() / p]):
        if present(cand, "config file", "include") and cand.is_file():
            return cand
    raise UserError(f"no such config file '{name}' (looked beside the experiment and in the "
                    "current directory)", source=source, field="include")


def _axes(mapping: Any, source: str, field_name: str) -> tuple[Axis, ...]:
    if not isinstance(mapping, dict) or not mapping:
        raise UserError("expected a non-empty mapping of dotted key -> list of values",
                        source=source, field=field_name)
    axes = []
    for key, values in mapping.items():
        where = f"{field_name}.{key}"
        if not isinstance(key, str) or not key or any(not p for p in key.split(".")):
            raise UserError(f"bad dotted key {key!r}", source=source, field=where)
        if not isinstance(values, list):
            raise UserError(f"expected a list of values, got {values!r}", source=source,
                            field=where)
        if not values:
            raise UserError("empty axis: expected at least one value", source=source,
                            field=where)
        axes.append(Axis(key, tuple(values)))
    return tuple(axes)


def _str_list(value: Any, source: str, field_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UserError("expected a list of names", source=source, field=field_name)
    if len(set(value)) != len(value):
        raise UserError("expected each name once", source=source, field=field_name)
    return tuple(value)


def load_experiment(path: str | os.PathLike) -> ExperimentSpec:
    """Parse and check an experiment YAML (axes, designs, metrics, figures); no resolving."""
    p = Path(path)
    source = str(p)
    data = _read_yaml(p)
    for k in data:
        if k not in TOP_KEYS:
            raise UserError(f"unknown key{closest(str(k), TOP_KEYS)}; expected one of: "
                            f"{', '.join(TOP_KEYS)}", source=source, field=str(k))
    base: dict[str, Any] = {}
    base_dir: Path | None = None
    base_source = source
    if "include" in data:
        inc = _find_include(data["include"], p.resolve().parent, source)
        from scratchpipe_sim.config import read_yaml

        base = read_yaml(inc)
        base_dir, base_source = inc.resolve().parent, str(inc)
    if "base" in data:
        if not isinstance(data["base"], dict):
            raise UserError("expected a mapping (a config)", source=source, field="base")
        base = deep_merge(base, data["base"])
        if "include" not in data:
            base_dir = p.resolve().parent
    if "include" not in data and "base" not in data:
        raise UserError("expected 'include: CONFIG.yaml' or an inline 'base:' config",
                        source=source, field="include")
    sweep = data.get("sweep")
    if not isinstance(sweep, dict) or not sweep:
        raise UserError("expected a mapping with 'grid' and/or 'zip' axes", source=source,
                        field="sweep")
    for k in sweep:
        if k not in SWEEP_KEYS:
            raise UserError(f"unknown key{closest(str(k), SWEEP_KEYS)}; expected grid or zip",
                            source=source, field=f"sweep.{k}")
    grid = _axes(sweep["grid"], source, "sweep.grid") if "grid" in sweep else ()
    zips: list[tuple[Axis, ...]] = []
    if "zip" in sweep:
        groups = sweep["zip"] if isinstance(sweep["zip"], list) else [sweep["zip"]]
        if not groups:
            raise UserError("expected a non-empty mapping of dotted key -> list of values "
                            "(or a non-empty list of them)", source=source, field="sweep.zip")
        for i, g in enumerate(groups):
            where = "sweep.zip" if not isinstance(sweep["zip"], list) else f"sweep.zip[{i}]"
            axes = _axes(g, source, where)
            lengths = {a.key: len(a.values) for a in axes}
            if len(set(lengths.values())) > 1:
                desc = ", ".join(f"{k} has {n}" for k, n in lengths.items())
                raise UserError(f"zipped axes must have equal lengths: {desc}",
                                source=source, field=where)
            zips.append(axes)
    keys = [a.key for a in grid] + [a.key for g in zips for a in g]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise UserError("axis swept twice", source=source, field=f"sweep.{dup[0]}")
    designs = _str_list(data.get("designs"), source, "designs")
    metrics = _str_list(data.get("metrics"), source, "metrics")
    clash = sorted(set(metrics) & set(keys))
    if clash:
        raise UserError("a metric has the name of a swept key", source=source,
                        field=f"metrics.{clash[0]}")
    figures = check_figures(data.get("figures"), source)
    name = plain_name(data.get("name", p.stem), source, "name", "experiment name")
    spec = ExperimentSpec(name=name, source=source, base=base, base_dir=base_dir,
                          base_source=base_source, grid=grid, zips=tuple(zips),
                          designs=designs, metrics=metrics, figures=figures,
                          description=str(data.get("description", "")))
    check_point_count(spec)
    return spec


def check_point_count(spec: ExperimentSpec) -> None:
    """Refuse a sweep with more points than limits.SWEEP_POINTS, counted from the axis
    lengths (nothing expanded): a mistyped grid must not resolve for minutes first."""
    n, limit = spec.num_points, limits.SWEEP_POINTS.value()
    if n > limit:
        sizes = " x ".join(str(len(a.values)) for a in spec.grid) or "1"
        zipped = "".join(f" x {len(g[0].values)}" for g in spec.zips)
        raise UserError(f"the sweep has {n:,} points ({sizes}{zipped}): expected fewer axis "
                        f"values ({limits.SWEEP_POINTS.advice()})", source=spec.source,
                        field="sweep")


def _check_axis_key(key: str, resolved: dict, spec: ExperimentSpec) -> None:
    parts = key.split(".")
    ok = has_dotted(resolved, key)
    if not ok and parts[-1] == "preset":  # a preset is consumed by expansion
        parent = ".".join(parts[:-1])
        ok = isinstance(get_dotted(resolved, parent, None), dict)
    if not ok and len(parts) == 2 and parts[0] == "cache" and parts[1] in MOVED_CACHE_KEYS:
        raise UserError(f"'{parts[1]}' was removed: {MOVED_CACHE_KEYS[parts[1]]}",
                        source=spec.source, field=f"sweep.{key}")
    if not ok and parts[0] in Config.RENAMED_KEYS:
        raise UserError(f"'{parts[0]}' was removed: {Config.RENAMED_KEYS[parts[0]]}",
                        source=spec.source, field=f"sweep.{key}")
    if not ok:
        known = leaf_keys(resolved)
        raise UserError(f"sweep axis names no config key '{key}'{closest(key, known)}",
                        source=spec.source, field=f"sweep.{key}")


def expand_points(spec: ExperimentSpec, resolver: Resolver | None = None) -> list[Point]:
    """Every point of the sweep, resolved and hashed; bad keys or values fail here, before
    anything runs."""
    return list(iter_points(spec, resolver))


def iter_points(spec: ExperimentSpec, resolver: Resolver | None = None) -> Iterator[Point]:
    """The sweep's points one at a time (`--dry-run` prints each as it is resolved)."""
    check_point_count(spec)
    resolver = resolver or default_resolver
    base = copy.deepcopy(spec.base)
    if spec.designs:
        base["designs"] = list(spec.designs)
    try:
        resolved_base = resolver(copy.deepcopy(base), spec.base_dir, spec.base_source)
    except UserError as e:
        raise UserError(f"base config: {e.line()}", source=spec.source) from None
    for key in spec.axes:
        _check_axis_key(key, resolved_base, spec)
    dims: list[list[dict[str, Any]]] = [[{a.key: v} for v in a.values] for a in spec.grid]
    for group in spec.zips:
        n = len(group[0].values)
        dims.append([{a.key: a.values[i] for a in group} for i in range(n)])
    seen: dict[str, dict[str, Any]] = {}
    for i, combo in enumerate(itertools.product(*dims)):
        values: dict[str, Any] = {}
        for part in combo:
            values.update(part)
        raw = copy.deepcopy(base)
        for key, v in values.items():
            set_dotted(raw, key, v, source=spec.source, field=f"sweep.{key}")
        try:
            cfg = resolver(raw, spec.base_dir, spec.base_source)
        except UserError as e:
            raise UserError(f"sweep point {values}: {e.line()}", source=spec.source) from None
        key = config_hash(cfg)
        if key in seen:
            raise UserError(f"points {seen[key]} and {values} resolve to the same config "
                            "(a repeated value?)", source=spec.source, field="sweep")
        seen[key] = values
        yield Point(index=i, values=values, config=cfg, key=key)
