"""`fork_map`: one function over many items in forked worker processes, results in item order.

Why fork: the work shares hundreds of MB of arrays (a trace, the replays of a run, a
sensitivity pricer); a forked worker inherits them copy-on-write and reads them in place,
so only the items and the results are pickled. Numba is imported, every kernel's
dispatcher built and Numba's CPU target set up once in the parent first
(`traces/_jit.ready_target`), so the workers inherit them instead of each making them.
The one home of the pattern: `run --jobs`'s passes (timing/replay_passes.py), the
table-parallel trace draw (traces/generators.py) and `sensitivity --jobs`
(experiments/sensitivity_analysis.py); and of what every `--jobs` is checked with
(`check_jobs`, `usable_cores`). multiprocessing and concurrent.futures (~7 ms) are imported
only when a process forks, so a command that checks `--jobs` and forks nothing never pays.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces._jit import ready_target

#: what `fork_map(skip_failures=True)` gives for an item whose call raised (the caller
#: makes it again serially, where its error is raised as it would be without workers)
FAILED = object()

#: (fn, state) the forked workers apply (set only while `fork_map` runs)
_WORK: tuple[Callable[[Any, Any], Any], Any] | None = None


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one): the
    default `--jobs` of `run`."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def check_jobs(jobs: int) -> int:
    """`jobs`, refused unless a whole number >= 1 (named as `--jobs`)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UserError(f"expected --jobs >= 1 (a whole number), got {jobs!r}",
                        field="--jobs")
    return jobs


def can_fork() -> bool:
    """Whether this platform has the fork start method (Linux; not Windows)."""
    import multiprocessing  # noqa: PLC0415 - see the module's docstring

    return "fork" in multiprocessing.get_all_start_methods()


def _apply(item: Any) -> Any:
    assert _WORK is not None, "runs only in a worker that fork_map forked"
    fn, state = _WORK
    return fn(state, item)


def fork_map(fn: Callable[[Any, Any], Any], state: Any, items: Sequence[Any], jobs: int, *,
             chunksize: int = 1, skip_failures: bool = False) -> list[Any]:
    """`[fn(state, item) for item in items]` in `jobs` forked processes (`fn` a module-level
    function; `state` inherited, never pickled). `skip_failures`: an item whose call raised
    gives `FAILED` instead of raising. Callers check `can_fork()` first."""
    global _WORK
    import multiprocessing  # noqa: PLC0415 - see the module's docstring
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

    ready_target()
    _WORK = (fn, state)
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            if not skip_failures:
                return list(pool.map(_apply, items, chunksize=chunksize))
            out: list[Any] = []
            for f in [pool.submit(_apply, item) for item in items]:
                try:
                    out.append(f.result())
                except Exception:  # noqa: BLE001 - the caller makes it again serially
                    out.append(FAILED)
            return out
    finally:
        _WORK = None
