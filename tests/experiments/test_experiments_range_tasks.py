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


def test_a_sampled_runs_salts_on_a_dask_cluster_equal_the_serial_run():
    distributed = pytest.importorskip("distributed", reason="dask.distributed ([dist] extra) "
                                      "is not installed")
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.timing import simulate

    cfg = load_config({
        "hardware": {"preset": "a100-gen4"},
        "model": {"tables": {"count": 2, "rows": 20000, "dim": 32}, "pooling": 4,
                  "batch_size": 128, "num_batches": 6, "warmup_batches": 2},
        "trace": {"distribution": "zipf", "alpha": 1.05, "sample_rate": 0.25,
                  "sample_salts": 2},
        "cache": {"load_factor": 0.05, "warmup_batches": 6}, "seed": 3})
    wall = ("policy_wall_s", "simpy_wall_s")

    def strip(rows):
        return [{k: v for k, v in r.items() if k not in wall} for r in rows]

    want = strip(simulate(cfg, ["lru-cache"], replay_cache=False))
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        mapper = range_mapper("dask", 1, cluster.scheduler_address)
        got = strip(simulate(cfg, ["lru-cache"], replay_cache=False, salt_mapper=mapper))
    assert got == want and got[0]["sample_salts"] == 2
