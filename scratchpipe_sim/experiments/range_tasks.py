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
from scratchpipe_sim.experiments.executors import EXECUTORS, dask_client, require_dask
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
    the tasks come: `executors.dask_client`, the sweep's own)."""
    require_dask()

    def run(fn: Callable[[RangeTask], RangePart], tasks: Sequence[RangeTask]
            ) -> list[RangePart]:
        with dask_client(jobs, scheduler) as client:
            data = client.scatter([t.sliced() for t in tasks])
            futures = [client.submit(fn, d, pure=False,
                                     key=f"scratchpipe-range-{i}-{d.key}")
                       for i, d in enumerate(data)]
            return client.gather(futures)
    return run
