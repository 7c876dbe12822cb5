"""A tiny name -> implementation registry, one per pluggable interface.

Adding a policy or a system design is one new module that decorates its class with
`@REGISTRY.register("name")`, plus one import line in the package's `__init__`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from scratchpipe_sim.errors import UserError, closest

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            self._items[name] = item
            return item

        return decorate

    def get(self, name: str, *, source: str | None = None, field: str | None = None) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items))
            raise UserError(
                f"unknown {self.kind} '{name}'{closest(name, self._items)}; "
                f"expected one of: {known}",
                source=source,
                field=field,
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
