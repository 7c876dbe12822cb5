"""Designs' and policies' parameters: built from a config's raw mappings and checked.

A design's knobs are its class's `Params` (set as `design_params.NAME`), the cache policy's
its `Params` (set as `cache.params`); both are built with `config/schema.py`'s `build`
(one-line errors naming the file and the dotted key) when a run starts and when a config is
resolved, because config sits below the registries that know the Params classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from scratchpipe_sim.config import Config
from scratchpipe_sim.config.schema import build, to_plain
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.policies.base import POLICIES
from scratchpipe_sim.timing.designs.design_registry import (
    DESIGNS,
    config_designs,
    default_designs,
    design_order,
)


def _build_params(params_cls: type | None, raw: Any, source: str | None, where: str,
                  owner: str) -> Any:
    """`raw` checked against a Params dataclass (one-line errors naming `where`)."""
    if params_cls is None:
        if raw:
            raise UserError(f"{owner} takes no parameters, got {', '.join(map(str, raw))}",
                            source=source, field=where)
        return None
    return build(params_cls, raw if raw is not None else {}, source, where)


def _params_of(cfg: Config, kind: str, name: str) -> Any:
    """One build per config and name (a frozen config's params never change)."""
    memo = cfg.__dict__.setdefault("_params_memo", {})
    if (kind, name) not in memo:
        if kind == "design":
            memo[kind, name] = _build_params(
                DESIGNS.get(name).Params, cfg.design_params.get(name), cfg.source,
                f"design_params.{name}", f"design '{name}'")
        else:
            memo[kind, name] = _build_params(
                POLICIES.get(name, source=cfg.source, field="cache.policy").Params,
                cfg.cache.params, cfg.source, "cache.params", f"policy '{name}'")
    return memo[kind, name]


def design_params(cfg: Config, name: str, cross_check: bool = True) -> Any:
    """The typed parameters of design `name` (`design_params.NAME`, defaults filled in).

    `cross_check` also runs the Params' own `check(source, where)` (checks across fields,
    e.g. scratchpipe's window against its pipeline): wanted where the design runs, not for
    a design a config sets parameters of but does not run."""
    obj = _params_of(cfg, "design", name)
    if cross_check and hasattr(obj, "check"):
        obj.check(cfg.source, f"design_params.{name}")
    return obj


def policy_params(cfg: Config) -> Any:
    """The typed parameters of `cache.policy` (`cache.params`, defaults filled in)."""
    return _params_of(cfg, "policy", cfg.cache.policy)


def params_tuple(params: Any) -> tuple[tuple[str, Any], ...]:
    """A Params dataclass as the (name, value) pairs a WorkloadKey (and so the replay
    cache's key) holds."""
    if params is None:
        return ()
    return tuple((f.name, getattr(params, f.name)) for f in dataclasses.fields(params))


def param_sections() -> list[tuple[str, type]]:
    """(dotted prefix, Params dataclass) of every design and policy that takes parameters,
    for `config describe`: `design_params.NAME`, then `cache.params` of each policy (as
    `cache.params[NAME]`)."""
    out = [(f"design_params.{n}", DESIGNS.get(n).Params) for n in design_order()
           if DESIGNS.get(n).Params is not None]
    out += [(f"cache.params[{n}]", POLICIES.get(n).Params) for n in POLICIES.names()
            if dataclasses.fields(POLICIES.get(n).Params)]
    return out


def check_inputs(cfg: Config, names: Any) -> None:
    """Each of the designs `names` checks what cfg alone decides of its inputs
    (`Design.check_config`: the cluster's ranks, placement and HBM, say): one place for
    `config show`, `run` and the starts of a sweep and of `sensitivity`, so a mistake is
    one line before anything is priced."""
    for name in names:
        DESIGNS.get(name, source=cfg.source, field="designs").check_config(cfg)


def refusals(cfg: Config, names: Iterable[str], build: bool = False
             ) -> Iterator[tuple[str, UserError]]:
    """Each design of `names` that refuses cfg, in order, with its UserError: its config
    checks (`check_inputs`), or with `build` its construction (every check, for a config
    its trace sized). Lazy: `next(...)` stops at the first refusal."""
    for name in names:
        try:
            if build:
                DESIGNS.get(name, source=cfg.source, field="designs")(cfg)
            else:
                check_inputs(cfg, [name])
        except UserError as e:
            yield name, e


def check_params(cfg: Config, inputs: bool = True) -> None:
    """Every `design_params` entry names a design and holds its parameters, and
    `cache.params` the policy's: one-line errors naming the file and the dotted key.
    `inputs`: the designs the config runs also check their inputs (`check_inputs`); not
    for a sweep point's resolution, where a design that refuses a point is that point's
    infeasible result."""
    for name in config_designs(cfg):
        DESIGNS.get(name, source=cfg.source, field="designs")
    for name in cfg.design_params:
        if name not in DESIGNS:
            raise UserError(f"unknown design '{name}'{closest(name, DESIGNS.names())}; "
                            f"expected one of: {', '.join(DESIGNS.names())}",
                            source=cfg.source, field=f"design_params.{name}")
    runs = set(config_designs(cfg))
    for name in sorted(set(cfg.design_params) | runs):
        design_params(cfg, name, cross_check=name in runs)
    policy_params(cfg)
    if inputs:
        check_inputs(cfg, dict.fromkeys(config_designs(cfg)))


def with_default_designs(resolved: dict[str, Any], source: str | None = None,
                         inputs: bool = True) -> dict[str, Any]:
    """A resolved config dict with `designs: null` replaced by the default designs and every
    design's and the policy's parameters filled in with their defaults, as `config show`, a
    run's resolved_config.yaml and a sweep point's hash show them. `inputs`: as
    `check_params`'s."""
    if resolved.get("designs") is None:
        resolved["designs"] = list(default_designs())
    cfg = Config.from_dict(resolved, source=source)
    check_params(cfg, inputs)
    names = sorted(set(cfg.design_params) | set(cfg.designs or ()))
    resolved["design_params"] = {
        n: to_plain(design_params(cfg, n, cross_check=False)) for n in names
        if DESIGNS.get(n).Params}
    resolved.setdefault("cache", {})["params"] = to_plain(policy_params(cfg)) or {}
    return resolved
