"""Which hardware keys a computation reads: a read-recording view of a config's hardware.

Why: `sensitivity` prices every design on ~75 hardware variants of one config, 46 of which
change a single key. Pricing is a deterministic function of the values it reads, so a design
that read none of the keys a variant changes prices that variant exactly as the nominal:
its SimPy run can be skipped and the nominal's float reused, bit for bit.

The view hands out the real leaf values and records each leaf's dotted key (relative to
`hardware`, as `hardware.ranges` names them). Sections are wrapped in turn; a property or
method of a section runs with the view as `self`, so the fields it reads are recorded too.
Anything the view cannot follow (iterating a section's fields, copying, comparing or hashing
it, a descriptor it does not know) raises `UntrackedAccess`: the caller then prices without
the view and reuses nothing, so a missed read can never turn into a reused result.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
from collections.abc import Iterable
from typing import Any

from scratchpipe_sim.config.model import Config
from scratchpipe_sim.config.schema import flatten


class UntrackedAccess(BaseException):
    """The tracked computation touched hardware in a way the view cannot record.

    A BaseException so that no `except Exception` (or `except TypeError`) in the code being
    observed can swallow it and go on with an incomplete record."""


class HardwareReads:
    """A read-recording view of one hardware section (`prefix`: its dotted path)."""

    __slots__ = ("_real", "_prefix", "_reads")

    def __init__(self, real: Any, prefix: str, reads: set[str]) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy/pickle/introspection protocols: not followable
            raise UntrackedAccess(f"{name} of hardware section {self._prefix!r}")
        real = self._real
        attr = inspect.getattr_static(type(real), name, None)
        if isinstance(attr, property) and attr.fget is not None:
            return attr.fget(self)
        if isinstance(attr, types.FunctionType):
            return types.MethodType(attr, self)
        if isinstance(attr, staticmethod):
            return attr.__func__
        if attr is not None and hasattr(type(attr), "__get__"):  # classmethod, cached_property
            raise UntrackedAccess(f"descriptor {self._prefix}{name}")
        value = getattr(real, name)
        key = self._prefix + name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return HardwareReads(value, key + ".", self._reads)
        self._reads.add(key)
        return value

    @property
    def __dataclass_fields__(self) -> Any:
        """Claims to be a dataclass, so that walking a config's fields (`to_plain`,
        `dataclasses.asdict`) reaches here and fails instead of passing the view on as an
        opaque value."""
        raise UntrackedAccess(f"the fields of hardware section {self._prefix!r}")

    def __repr__(self) -> str:
        raise UntrackedAccess(f"repr of hardware section {self._prefix!r}")

    __str__ = __repr__

    def __setattr__(self, name: str, value: Any) -> None:
        raise UntrackedAccess(f"setting {self._prefix}{name}")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise UntrackedAccess(f"copying hardware section {self._prefix!r}")

    def __eq__(self, other: object) -> bool:
        raise UntrackedAccess(f"comparing hardware section {self._prefix!r}")

    def __hash__(self) -> int:
        raise UntrackedAccess(f"hashing hardware section {self._prefix!r}")


def track_hardware_reads(cfg: Config, reads: set[str]) -> Config:
    """`cfg` whose hardware records into `reads` the dotted key of every leaf read."""
    out = copy.copy(cfg)
    object.__setattr__(out, "hardware", HardwareReads(cfg.hardware, "", reads))
    return out


def untracked(cfg: Config) -> Config:
    """The plain config behind a tracked one (for objects that outlive one tracking)."""
    hw = cfg.hardware
    if not isinstance(hw, HardwareReads):
        return cfg
    out = copy.copy(cfg)
    object.__setattr__(out, "hardware", object.__getattribute__(hw, "_real"))
    return out


def hardware_diff(base: Config, other: Config) -> frozenset[str] | None:
    """Dotted hardware keys whose values differ between two configs; None when anything
    outside `hardware` differs too (then no hardware read set can vouch for equality)."""
    if dataclasses.replace(other, hardware=base.hardware) != base:
        return None
    a = flatten(dataclasses.asdict(base.hardware))
    b = flatten(dataclasses.asdict(other.hardware))
    return frozenset(k for k in a.keys() | b.keys()
                     if k not in a or k not in b or not _same(a[k], b[k]))


def _same(x: Any, y: Any) -> bool:
    return type(x) is type(y) and x == y


def reads_any(reads: Iterable[str], keys: Iterable[str]) -> bool:
    """Whether a read set covers any of `keys`: the same key, or one inside the other (a
    whole curve or dict read covers its entries; a changed entry's section read covers
    it)."""
    reads = list(reads)
    for k in keys:
        for r in reads:
            if r == k or k.startswith(r + ".") or r.startswith(k + "."):
                return True
    return False
