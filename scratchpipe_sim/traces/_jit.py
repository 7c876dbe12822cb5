"""`njit`: Numba's `@njit`, imported and applied on a kernel's first call (issue 26).

Why: a fully cached `run` (trace and replay columns read from the cache) calls no kernel,
yet importing the modules that define them imported Numba (~0.1 s of a ~0.45 s run). Here
`@njit(cache=True)` returns a `LazyKernel`; the first call of any of them (or Numba typing
one: `_numba_type_`) imports Numba, runs the extension hooks (`on_numba`: the `@overload`s
and `@intrinsic`s of traces/_prefetch.py and policies/fbgemm.py, registered before any
kernel compiles), builds the real dispatcher of every kernel defined so far with the same
options, and puts it in place of the `LazyKernel` in every module of the package, so a
kernel compiling later sees real dispatchers as its globals. Kernels defined after that get
their dispatcher at once. The dispatchers are Numba's own, on the same Python functions:
`cache=True` files (named by the function's file, name and line) are the same ones.

Where `cache=True` files go: before building any kernel, `materialize` puts a cache locator
at the head of Numba's list (`_add_cache_locator`) that answers only for this package's
source files, sending their cache to `scratchpipe_sim.numba_cache_folder()` (laid out as
Numba's own `NUMBA_CACHE_DIR` locator would); every other library's kernels find Numba's
locators as before, and nothing of Numba's configuration or the environment changes.

A `LazyKernel` held elsewhere (a test's `from ... import kernel`) forwards calls and
attributes to its dispatcher. With `NUMBA_DISABLE_JIT=1` the "dispatcher" is the Python
function itself, as with Numba's `njit`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

_LOCK = threading.RLock()
_PENDING: list[LazyKernel] = []
_HOOKS: list[Callable[[], None]] = []
_NUMBA: Any = None  # the numba module once the kernels are built
PACKAGE = "scratchpipe_sim"


class LazyKernel:
    """A kernel whose Numba dispatcher is built on first use (see the module doc)."""

    def __init__(self, py_func: Callable[..., Any], options: dict[str, Any]):
        self.py_func = py_func
        self.options = options
        self._dispatcher: Any = None
        self.__name__ = py_func.__name__
        self.__qualname__ = py_func.__qualname__
        self.__module__ = py_func.__module__
        self.__doc__ = py_func.__doc__

    @property
    def dispatcher(self) -> Any:
        if self._dispatcher is None:
            materialize()
        return self._dispatcher

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.dispatcher(*args, **kwargs)

    @property
    def _numba_type_(self) -> Any:
        # Numba's typeof reads this: a LazyKernel passed to or seen by a compiling kernel
        # types as its dispatcher
        return self.dispatcher._numba_type_

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __repr__(self) -> str:
        state = "built" if self._dispatcher is not None else "not built yet"
        return f"<LazyKernel {self.__module__}.{self.__qualname__} ({state})>"


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`@njit(cache=True, ...)`: Numba's njit with these options, applied on first use."""

    def decorate(fn: Callable[..., Any]) -> Any:
        with _LOCK:
            if _NUMBA is not None:
                return _NUMBA.njit(**options)(fn)
            kernel = LazyKernel(fn, options)
            _PENDING.append(kernel)
            return kernel

    return decorate


def on_numba(hook: Callable[[], None]) -> Callable[[], None]:
    """Run `hook` (it registers Numba extensions) once Numba is imported, before any kernel
    of the package is built; at once when that has happened already."""
    with _LOCK:
        if _NUMBA is not None:
            hook()
        else:
            _HOOKS.append(hook)
    return hook


def materialize() -> None:
    """Import Numba, register the extensions and build every pending kernel's dispatcher,
    putting it in place of its `LazyKernel` in the package's modules (once)."""
    global _NUMBA
    with _LOCK:
        if _NUMBA is not None:
            return
        import numba

        _add_cache_locator()
        while _HOOKS:
            _HOOKS.pop(0)()
        while _PENDING:
            kernel = _PENDING.pop(0)
            kernel._dispatcher = numba.njit(**kernel.options)(kernel.py_func)
        _NUMBA = numba
        for name, module in list(sys.modules.items()):
            if module is None or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
                continue
            space = vars(module)
            for key, value in list(space.items()):
                if isinstance(value, LazyKernel) and value._dispatcher is not None:
                    space[key] = value._dispatcher


def _add_cache_locator() -> None:
    """Send the cache of this package's kernels to our folder (see the module doc)."""
    from numba.core import caching, config

    from scratchpipe_sim import numba_cache_folder

    folder = numba_cache_folder()
    if folder is None:  # the user's NUMBA_CACHE_DIR: Numba's own locator uses it
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

    class PackageCacheLocator(caching.UserProvidedCacheLocator):
        """Numba's NUMBA_CACHE_DIR locator with our folder, for our files only."""

        def __init__(self, py_func: Any, py_file: str):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(folder, self.get_suitable_cache_subpath(py_file))

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if config.CACHE_DIR or not os.path.abspath(py_file).startswith(root):
                return None  # a folder the user set since, or another library's function
            return super(caching.UserProvidedCacheLocator, cls).from_function(py_func, py_file)

    caching.CacheImpl._locator_classes.insert(0, PackageCacheLocator)


def ready_target() -> None:
    """Set Numba's CPU target up in this process. A process pays ~0.1 s for it on its first
    kernel call, even one loaded from Numba's cache (0.13-0.15 s for the first call of a warm
    quickstart run, 3 ms for the next kernel's): `fork_map` calls this before forking, so
    the workers inherit the target instead of each setting it up."""
    materialize()
    _first_kernel(0)


@njit(cache=True)
def _first_kernel(x):
    """The kernel `ready_target` calls: the smallest there is."""
    return x + 1


def built() -> bool:
    """Whether Numba has been imported and the kernels built (tests)."""
    return _NUMBA is not None
