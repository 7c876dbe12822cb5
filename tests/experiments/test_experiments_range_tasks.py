"""Time ranges as tasks of an executor (`experiments/range_tasks.py`): on a Dask cluster the
stitched lru columns are the full replay's; an unknown executor is a named error."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments.range_tasks import range_mapper
from scratchpipe_sim.policies.engine import make_policy, replay_columns
from scratchpipe_sim.policies.time_ranges import replay_ranges
from scratchpipe_sim.traces.csr_trace import Trace


def _trace() -> Trace:
    rng = np.random.default_rng(11)
    ids = np.minimum(rng.zipf(1.2, 4000) - 1, 399).astype(np.int64)
    return Trace.single_table(ids, 400, 8)


def test_dask_local_cluster_ranges_equal_the_full_replay():
    distributed = pytest.importorskip("distributed", reason="dask.distributed ([dist] extra) "
                                      "is not installed")
    trace = _trace()
    want, _ = replay_columns(trace, make_policy("lru", 40, trace.total_rows))
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=2,
                                  dashboard_address=None) as cluster:
        mapper = range_mapper("dask", 1, cluster.scheduler_address)
        got = replay_ranges(trace, "lru", 40, 4, mapper=mapper)
    assert got.proven
    assert all(np.array_equal(got.cols[k], want[k]) for k in want)


def test_local_executor_and_unknown_executor():
    trace = _trace()
    want, _ = replay_columns(trace, make_policy("lru", 40, trace.total_rows))
    got = replay_ranges(trace, "lru", 40, 3, mapper=range_mapper("local"))
    assert all(np.array_equal(got.cols[k], want[k]) for k in want)
    with pytest.raises(UserError) as e:
        range_mapper("slurm")
    assert e.value.field == "--executor"
