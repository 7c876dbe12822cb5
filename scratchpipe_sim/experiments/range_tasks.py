"""Where a replay's time ranges run: this process, forked processes, or a Dask cluster.

`range_mapper(executor, jobs, scheduler)` gives the `policies.time_ranges.Mapper` that runs
each range's task (`replay_range`): the executors and the Dask client of sweeps
(`executors.py`), for one replay's ranges instead of a sweep's points. A Dask task carries
its range's slice of the trace (batches start..stop-1, pickled): scattered to the workers
once, so the graph stays small; results come back in range order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments.executors import EXECUTORS
from scratchpipe_sim.policies.time_ranges import (
    Mapper,
    RangePart,
    RangeTask,
    forked_mapper,
    serial_map,
)


def range_mapper(executor: str = "process", jobs: int = 1,
                 scheduler: str | None = None) -> Mapper:
    """The mapper of `--executor` (local: serial; process: `jobs` forked processes; dask:
    the cluster at `scheduler`, or a LocalCluster of `jobs` workers without one)."""
    if executor == "local":
        return serial_map
    if executor == "process":
        return forked_mapper(jobs)
    if executor == "dask":
        return dask_mapper(jobs, scheduler)
    raise UserError(f"unknown executor '{executor}'; expected one of: {', '.join(EXECUTORS)}",
                    field="--executor")


def dask_mapper(jobs: int = 1, scheduler: str | None = None) -> Mapper:
    """Run the tasks on a dask.distributed cluster (checked importable now, connected when
    the tasks come)."""
    try:
        import distributed  # noqa: F401, PLC0415 - only this executor needs it
    except ImportError:
        raise UserError("the dask executor needs dask.distributed: pip install "
                        "'scratchpipe_sim[dist]'", field="--executor") from None

    def run(fn: Callable[[RangeTask], RangePart], tasks: Sequence[RangeTask]
            ) -> list[RangePart]:
        from distributed import Client, LocalCluster  # noqa: PLC0415

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
                                       dashboard_address=None, processes=True)
                client = Client(cluster)
            with client:
                data = client.scatter([t.sliced() for t in tasks])
                futures = [client.submit(fn, d, pure=False,
                                         key=f"scratchpipe-range-{i}-{d.key}")
                           for i, d in enumerate(data)]
                return client.gather(futures)
        finally:
            if cluster is not None:
                cluster.close()
    return run
