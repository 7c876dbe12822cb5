"""The Python API's time ranges: `replay_time_ranges` (a trace file or a Trace, with the
full replay's check) and `simulate(ranges=K)`, the same rows as without."""

from __future__ import annotations

from small_configs import SMALL_A100

from scratchpipe_sim.api import replay_time_ranges, simulate
from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import write_trace


def test_replay_time_ranges_of_a_trace_file_with_check(tmp_path, zipf_ids):
    trace = Trace.single_table(zipf_ids(4000, 600, 1.1, 3), 600, 4)
    path = write_trace(trace, tmp_path / "t.sptrace")
    out = replay_time_ranges(path, "lru", 60, 3, check=True, executor="local")
    assert out.replay.proven and out.check.all_equal
    want = run_cache(trace, "lru", 60)
    assert int(out.replay.cols["hits"].sum()) == want.hits
    short = replay_time_ranges(trace, "lru", 60, 3, 0, check=True, executor="local")
    assert not short.replay.proven and not short.check.all_equal
    assert short.check.equal[0]  # the first range starts at batch 0: exact


def test_simulate_with_ranges_equals_without():
    wall = ("policy_wall_s", "simpy_wall_s")
    a = simulate(SMALL_A100, ["lru-cache"], replay_cache=False).drop(columns=list(wall))
    b = simulate(SMALL_A100, ["lru-cache"], replay_cache=False, ranges=3,
                 executor="local").drop(columns=list(wall))
    assert a.equals(b)
