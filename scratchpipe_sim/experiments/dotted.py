"""Dotted-key access to plain nested dicts (`cache.capacity_rows`), for sweep axes."""

from __future__ import annotations

from typing import Any

_MISSING = object()


def get_dotted(tree: dict, key: str, default: Any = _MISSING) -> Any:
    """The value at `key` in `tree`; `default` (or KeyError) when any part is absent."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is _MISSING:
                raise KeyError(key)
            return default
        node = node[part]
    return node


def has_dotted(tree: dict, key: str) -> bool:
    sentinel = object()
    return get_dotted(tree, key, sentinel) is not sentinel


def put_dotted(tree: dict, key: str, value: Any) -> None:
    """Set `key` in `tree` in place, creating intermediate mappings (Ramulator-style overrides
    of a preset: `hardware: {preset: a100-gen4}` + `hardware.pcie.h2d_GBps` -> nested)."""
    parts = key.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise TypeError(".".join(parts[: i + 1]))
        node = child
    node[parts[-1]] = value


def leaf_keys(tree: dict, prefix: str = "") -> list[str]:
    """Every dotted key of `tree` (leaves and the mappings above them)."""
    keys: list[str] = []
    for k, v in tree.items():
        full = f"{prefix}{k}"
        keys.append(full)
        if isinstance(v, dict):
            keys.extend(leaf_keys(v, full + "."))
    return keys


def deep_merge(base: dict, top: dict) -> dict:
    """A new dict: `top` merged into `base`, mappings recursively, everything else replaced."""
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out
