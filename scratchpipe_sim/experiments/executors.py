"""Where sweep points run: in this process, a spawn-safe process pool, or a Dask cluster.

Each executor takes tasks `(key, config, designs)` and yields `Outcome`s as points finish,
in completion order. The point function runs inside `call_point`, which turns any exception
into a recorded error, so one failing point never stops the others.

Pool workers die with the sweep: a SIGKILLed parent cannot shut its pool down, so each
worker asks Linux to kill it when its parent dies (prctl PR_SET_PDEATHSIG) and, as a
fallback elsewhere, watches its parent's pid from a daemon thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from scratchpipe_sim.errors import UserError

#: run_point(resolved config dict, designs) -> one metrics dict per design (key "design").
PointFn = Callable[[dict, tuple], list]
Task = tuple[str, dict, tuple]
EXECUTORS = ("local", "process", "dask")
MAX_ERROR_CHARS = 400


@dataclass
class Outcome:
    key: str
    rows: list[dict[str, Any]] | None
    error: str | None
    wall_s: float


def _one_line(e: BaseException) -> str:
    if isinstance(e, UserError):
        text = e.line()
    else:
        text = f"{type(e).__name__}: {e}"
        tb = traceback.extract_tb(e.__traceback__)
        if tb:
            text += f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})"
    text = " ".join(text.split())
    return text[:MAX_ERROR_CHARS]


def call_point(fn: PointFn, key: str, config: dict, designs: tuple) -> Outcome:
    """Run one point; never raises (the error becomes part of the outcome)."""
    t0 = time.perf_counter()
    try:
        rows = [dict(r) for r in fn(config, tuple(designs))]
        return Outcome(key, rows, None, time.perf_counter() - t0)
    except Exception as e:
        return Outcome(key, None, _one_line(e), time.perf_counter() - t0)


def run_local(fn: PointFn, tasks: Iterable[Task], jobs: int = 1) -> Iterator[Outcome]:
    for key, config, designs in tasks:
        yield call_point(fn, key, config, designs)


PR_SET_PDEATHSIG = 1
WATCHDOG_S = 1.0


def _parent_death_signal() -> bool:
    """Linux: SIGKILL this process when its parent dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(WATCHDOG_S)


def worker_init(parent: int) -> None:
    """Pool worker initializer: die with the parent (`parent`: its pid)."""
    _parent_death_signal()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                     name="parent-watchdog").start()


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the running workers, so leaving the pool's
    `with` does not wait for their points and their queues are closed by this process (a
    worker killed with its parent leaves semaphores for the resource tracker to report)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public handle
    pool.shutdown(wait=False, cancel_futures=True)  # (this forgets the processes)
    for p in workers:
        if p.is_alive():
            p.terminate()
    for p in workers:
        p.join(timeout=5)


def run_process(fn: PointFn, tasks: Iterable[Task], jobs: int) -> Iterator[Outcome]:
    """A ProcessPoolExecutor with the spawn start method (safe with Numba and threads);
    its workers die with this process (`worker_init`)."""
    tasks = list(tasks)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=worker_init,
                             initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(call_point, fn, k, c, d): k for k, c, d in tasks}
        try:
            for fut in as_completed(futures):
                try:
                    yield fut.result()
                except BrokenProcessPool as e:
                    yield Outcome(futures[fut], None,
                                  _one_line(RuntimeError(f"worker process died: {e}")), 0.0)
        except BaseException:  # Ctrl-C, SIGTERM, a failed write: stop the workers now
            stop_workers(pool)
            raise
        finally:
            for fut in futures:
                fut.cancel()


def require_dask() -> None:
    """A UserError naming the extra when dask.distributed is not importable."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise UserError("the dask executor needs dask.distributed: pip install "
                        "'scratchpipe_sim[dist]'", field="--executor") from None


@contextlib.contextmanager
def dask_client(jobs: int, scheduler: str | None = None) -> Iterator[Any]:
    """A dask.distributed client: of the cluster at `scheduler` (`--scheduler
    tcp://host:8786`), else of a LocalCluster of `jobs` worker processes on this machine,
    closed on the way out. Sweep points and a replay's time ranges both run on it."""
    require_dask()
    from distributed import Client, LocalCluster

    cluster = None
    try:
        if scheduler:
            try:
                client = Client(scheduler, timeout="10s")
            except OSError as e:
                raise UserError(f"cannot reach the Dask scheduler: {e}".splitlines()[0],
                                field="--scheduler") from None
        else:
            cluster = LocalCluster(n_workers=max(1, jobs), threads_per_worker=1,
                                   dashboard_address=None)
            client = Client(cluster)
        with client:
            yield client
    finally:
        if cluster is not None:
            cluster.close()


def run_dask(fn: PointFn, tasks: Iterable[Task], jobs: int,
             scheduler: str | None = None) -> Iterator[Outcome]:
    """The same points on a dask.distributed cluster (`dask_client`)."""
    with dask_client(jobs, scheduler) as client:
        from distributed import as_completed as dask_completed

        futures = [client.submit(call_point, fn, k, c, d, pure=False,
                                 key=f"scratchpipe-point-{k}") for k, c, d in tasks]
        for fut in dask_completed(futures):
            yield fut.result()


def execute(executor: str, fn: PointFn, tasks: Iterable[Task], jobs: int = 1,
            scheduler: str | None = None) -> Iterator[Outcome]:
    if executor == "local":
        return run_local(fn, tasks)
    if executor == "process":
        return run_process(fn, tasks, jobs)
    if executor == "dask":
        return run_dask(fn, tasks, jobs, scheduler)
    raise UserError(f"unknown executor '{executor}'; expected one of: {', '.join(EXECUTORS)}",
                    field="--executor")
