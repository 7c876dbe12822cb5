"""Generic validation of nested frozen dataclasses from plain dicts (YAML).

Every config dataclass declares its fields with type hints and optional `metadata`
(`help`, `min`, `gt`, `max`, `choices`). `build(cls, data, source, prefix)` walks the
hints, rejects unknown keys with a "did you mean", checks types strictly (an int where a
float is expected is fine; a str where a number is expected is not; bool is never a number;
.inf and .nan are never a number: no size, rate or count is infinite)
and the metadata bounds, and names the dotted key and the file in every error.

Beyond a field's own bounds, every field is checked against `NAME_BOUNDS`, a physical range
chosen by its name's unit (`*_GBps`, `*_ns`, `tflops`, ...) or meaning (`lookahead`,
`ways`): a bandwidth of 1e-300 GB/s or a window of 10**11 batches is a typo, and would
otherwise reach the timing model as an infinite time or numpy as a terabyte array. The
same table bounds policy parameters (`cache --param`, `--lookahead`, `--ways`) and the
keys of `hardware.ranges`; docs/architecture.md lists it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import math
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin, get_type_hints

from scratchpipe_sim.errors import UserError, closest


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return " or ".join(_describe(a) for a in args) + " or null"
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_describe(args[0])}"
        return f"a list [{', '.join(_describe(a) for a in args)}]"
    if origin in (dict, Mapping):
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, str(tp))


def coerce(tp: Any, value: Any, field: str, source: str | None) -> Any:
    """`value` checked against type `tp` (lists become tuples so configs stay hashable)."""

    def bad() -> UserError:
        return UserError(f"expected {_describe(tp)}, got {value!r} ({type(value).__name__})",
                         source=source, field=field)

    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        # the one alternative's own error, where it says more than a wrong type (an
        # element's, `columns.0: expected an integer`; a NaN's `expected a finite number`)
        deeper = None
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(a, value, field, source)
            except UserError as e:
                generic = e.field == field and e.message.startswith(f"expected {_describe(a)}, ")
                if not generic and deeper is None:
                    deeper = e
                continue
        if deeper is not None and sum(a is not type(None) for a in args) == 1:
            raise deeper
        raise bad()
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise bad()
        return build(tp, value, source, field)
    if tp is bool:
        if not isinstance(value, bool):
            raise bad()
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad()
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"expected a finite number, got {value!r} (.inf and .nan are not "
                            "sizes or rates)", source=source, field=field)
        try:
            return float(value)
        except OverflowError:  # an int beyond float range (10**400)
            raise UserError(f"expected a finite number, got an integer of "
                            f"{len(str(abs(value)))} digits", source=source,
                            field=field) from None
    if tp is str:
        if not isinstance(value, str):
            raise bad()
        if "\0" in value:  # names become paths (results/<name>), and no path holds NUL
            raise UserError(f"expected text without NUL bytes, got {value!r}", source=source,
                            field=field)
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise bad()
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(args[0], v, f"{field}[{i}]", source) for i, v in enumerate(value))
        if len(value) != len(args):
            raise bad()
        return tuple(coerce(a, v, f"{field}[{i}]", source)
                     for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise bad()
        vt = get_args(tp)[1] if get_args(tp) else Any
        seen: dict[str, Any] = {}
        for k in value:  # YAML keeps 0 and "0" apart; as text they are one key
            if str(k) in seen:
                raise UserError(f"keys {seen[str(k)]!r} and {k!r} are both '{k}': expected "
                                "each key once", source=source, field=f"{field}.{k}")
            seen[str(k)] = k
        return {str(k): coerce(vt, v, f"{field}.{k}", source) for k, v in value.items()}
    raise TypeError(f"unsupported config type {tp!r}")


#: (name pattern, lowest, highest, unit and why): the physical range of every field whose
#: last dotted part matches (first match wins). Rates are >= 1 MB/s (an idealized link may
#: be 1e15 GB/s), times <= 1000 s, windows (batches) and associativity <= 4096: far beyond
#: any machine or config, far below what would overflow a time or an allocation.
NAME_BOUNDS: tuple[tuple[str, float, float, str], ...] = (
    ("*_GBps", 1e-3, 1e18, "GB/s (at least 1 MB/s; idealized links may be 1e15)"),
    ("*_GHz", 1e-3, 1e3, "GHz"),
    ("tflops", 1e-6, 1e18, "TFLOP/s"),
    ("peak_tflops_*", 1e-6, 1e18, "TFLOP/s"),
    ("*_Gps", 1e-6, 1e9, "billion operations per second"),
    ("*_ns", 0.0, 1e12, "ns (at most 1000 s)"),
    ("*_ns_per_*", 0.0, 1e12, "ns (at most 1000 s)"),
    ("*_GiB", 0.0, 1e6, "GiB (at most 1 EiB)"),
    ("*_MiB", 0.0, 1e9, "MiB (at most 1 EiB)"),
    ("*_usd_per_hour", 0.0, 1e9, "USD per hour"),
    ("*_bytes", 0.0, 2.0**40, "bytes"),
    ("*lookahead", 1, 4096, "batches of lookahead"),
    ("queue_depth", 1, 4096, "batches in a queue"),
    ("*_ttl_batches", 0, 2**40, "batches"),
    ("*ways", 1, 4096, "ways of associativity"),
    ("*_window_rows", 1, 2.0**50, "rows"),
    ("count", 1, 2**20, "tables"),
    ("tables", 1, 2**20, "tables"),
    ("cores", 1, 2**20, "cores"),
    ("gpus*", 1, 2**20, "GPUs"),
    ("plan_threads", 1, 2**20, "threads"),
)


def named_bound(name: str) -> tuple[float, float, str] | None:
    """The (lowest, highest, unit) NAME_BOUNDS gives a field or parameter name, or None."""
    leaf = str(name).rsplit(".", 1)[-1]
    for pattern, lo, hi, unit in NAME_BOUNDS:
        if fnmatch.fnmatchcase(leaf, pattern):
            return lo, hi, unit
    return None


def check_named(name: str, value: Any, field: str, source: str | None) -> None:
    """Refuse a number outside the physical range NAME_BOUNDS gives `name` (numbers inside
    lists and mappings too; a mapping's keys name their values, as in hardware.ranges; in a
    curve of [x, value] points only the values are the named quantity)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_named(str(k), v, f"{field}.{k}", source)
        return
    if isinstance(value, (tuple, list)):
        curve = bool(value) and all(isinstance(v, (tuple, list)) and len(v) == 2
                                    for v in value)
        for i, v in enumerate(value):
            if curve:
                check_named(name, v[1], f"{field}[{i}][1]", source)
            else:
                check_named(name, v, f"{field}[{i}]", source)
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return  # zero and below: every such field's own bound (min, gt, a curve check) says
    bound = named_bound(name)
    if bound is not None and isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"expected a finite number, got {value!r} (.inf and .nan are not "
                        "sizes or rates)", source=source, field=field)
    if bound is not None and not bound[0] <= value <= bound[1]:
        lo, hi, unit = bound
        raise UserError(f"expected {_num(lo)} to {_num(hi)} {unit}, got {_num(value)} (a "
                        "typo?)", source=source, field=field)


def _num(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _check_bounds(meta: Mapping[str, Any], value: Any, field: str, source: str | None) -> None:
    if value is None:
        return
    items = value if isinstance(value, tuple) else (value,)
    for v in items:
        if isinstance(v, tuple):
            continue
        if "choices" in meta and v not in meta["choices"]:
            raise UserError(f"unknown value {v!r}{closest(str(v), meta['choices'])}; expected "
                            f"one of: {', '.join(meta['choices'])}", source=source, field=field)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if "gt" in meta and not v > meta["gt"]:
                raise UserError(f"expected a value > {meta['gt']}, got {v}", source=source,
                                field=field)
            if "min" in meta and v < meta["min"]:
                raise UserError(f"expected a value >= {meta['min']}, got {v}", source=source,
                                field=field)
            if "max" in meta and v > meta["max"]:
                raise UserError(f"expected a value <= {meta['max']}, got {v}", source=source,
                                field=field)


@functools.cache
def _shape(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """(type hints, public init fields) of a config dataclass, once per class: evaluating the
    string annotations costs ~0.4 ms a class, paid at every config a sweep resolves."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}
    return get_type_hints(cls), fields


def build(cls: type, data: Mapping[str, Any], source: str | None, prefix: str = "") -> Any:
    """Instantiate dataclass `cls` from `data`; unknown keys and bad types are UserErrors."""
    if not isinstance(data, Mapping):
        raise UserError(f"expected a mapping, got {type(data).__name__}", source=source,
                        field=prefix or None)
    hints, fields = _shape(cls)
    for key in data:
        if key not in fields:
            where = f"{prefix}.{key}" if prefix else str(key)
            renamed = getattr(cls, "RENAMED_KEYS", {})
            if key in renamed:  # a key a model change replaced: say by what, never alias it
                raise UserError(f"'{key}' was removed: {renamed[key]}", source=source,
                                field=where)
            raise UserError(f"unknown key '{key}'{closest(str(key), fields)}; expected one of: "
                            f"{', '.join(fields)}", source=source, field=where)
    kwargs = {}
    for name, f in fields.items():
        where = f"{prefix}.{name}" if prefix else name
        if name in data:
            value = coerce(hints[name], data[name], where, source)
            _check_bounds(f.metadata, value, where, source)
            kwargs[name] = value
        elif dataclasses.is_dataclass(hints[name]) and f.default is dataclasses.MISSING \
                and f.default_factory is dataclasses.MISSING:
            kwargs[name] = build(hints[name], {}, source, where)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            help_ = f.metadata.get("help", "")
            raise UserError(f"required key missing ({help_})" if help_ else
                            "required key missing", source=source, field=where)
    obj = cls(**kwargs)
    for name, value in kwargs.items():  # after the class's own checks, which say more
        check_named(name, value, f"{prefix}.{name}" if prefix else name, source)
    return obj


def to_plain(obj: Any) -> Any:
    """Dataclass tree -> plain dicts/lists/scalars (YAML/JSON ready), public fields only."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.init and not f.name.startswith("_")}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {"a.b.c": value}; lists are kept as one value."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out
