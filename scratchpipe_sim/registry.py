"""A tiny name -> implementation registry, one per pluggable interface, and the single
source of truth for what is plugged in.

A registry made with `package=` discovers its plug-ins: on first use (`get`, `names`, `in`,
iteration) it imports every module of that package whose name does not start with "_"
(`pkgutil`, sorted by name), and each module registers what it defines. So adding a policy,
a design, a trace reader or a distribution is one new file in the right package.

The name is written once: `@REGISTRY.register("name")` on a class also sets the class's
`name` attribute (a class that already sets `name` may use bare `@REGISTRY.register`).
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

from scratchpipe_sim.errors import UserError, closest

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, package: str | None = None):
        self.kind = kind
        self.package = package
        self._items: dict[str, T] = {}
        self._loaded = package is None
        self._loading = False

    # -- discovery -----------------------------------------------------------------------
    def load(self) -> None:
        """Import every non-underscore module of `package` (once; re-entrant safe)."""
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            pkg = importlib.import_module(self.package)  # type: ignore[arg-type]
            for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
                if not info.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{info.name}")
            self._loaded = True
        finally:
            self._loading = False

    # -- registration --------------------------------------------------------------------
    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: T) -> T: ...

    def register(self, name: Any) -> Any:
        """Decorator: `@register("name")`, or bare `@register` on a class with `name`."""
        if not isinstance(name, str):  # bare decorator: the class names itself
            item = name
            return self._add(getattr(item, "name", ""), item)

        def decorate(item: T) -> T:
            if isinstance(item, type):
                item.name = name  # type: ignore[attr-defined]  # the one place it is written
            return self._add(name, item)

        return decorate

    def _add(self, name: str, item: T) -> T:
        if not name:
            raise ValueError(f"{self.kind} {item!r} has no name")
        if name in self._items:
            raise ValueError(f"{self.kind} '{name}' registered twice")
        self._items[name] = item
        return item

    def unregister(self, name: str) -> T:
        """Remove `name` (tests that register a plug-in at run time clean up with this)."""
        return self._items.pop(name)

    @contextlib.contextmanager
    def temporary(self, name: str) -> Iterator[Callable[[T], T]]:
        """`with REG.temporary("x") as reg: reg(Cls)` registers for the block only."""
        self.load()
        try:
            yield self.register(name)
        finally:
            self._items.pop(name, None)

    # -- lookup --------------------------------------------------------------------------
    def get(self, name: str, *, source: str | None = None, field: str | None = None) -> T:
        self.load()
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
        self.load()
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, item) in registration order."""
        self.load()
        return list(self._items.items())

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
