"""Sampled runs (timing/sampled_run.py, docs/sampling.md): R = 1 is the exact run bit for
bit; at R = 20% on a small trace every design's hit ratio and PCIe bytes per sample are
within the bound docs/sampling.md states, for the worst of three salts; salts differ; the
counts are scaled by 1/R with SHARDS's adjustment; bad rates are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.config import load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.counts import Workload
from scratchpipe_sim.timing.sampled_run import SampleScale, combine

WALL = ("policy_wall_s", "simpy_wall_s")
#: docs/sampling.md's bound for this test's 98k-lookup trace (R = 20%, worst of 3 salts)
RATE, HIT_POINTS, PCIE_SHARE = 0.2, 0.015, 0.05

SMALL = {
    "hardware": {"preset": "a100-gen4"},
    "model": {"tables": {"count": 2, "rows": 60000, "dim": 32}, "pooling": 8,
              "batch_size": 256, "num_batches": 12, "warmup_batches": 3,
              "bottom_mlp": [13, 16], "interaction": "cat", "top_mlp": [80, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"load_factor": 0.05, "warmup_batches": 12},
    "design_params": {"scratchpipe": {
        "lookahead": 3, "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]]}},
    "seed": 5,
}


@pytest.fixture(scope="module")
def cfg():
    return load_config(SMALL)


@pytest.fixture(scope="module")
def exact(cfg):
    return simulate(cfg)


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in WALL} for r in rows]


def test_rate_one_is_the_exact_run_bit_for_bit(cfg, exact):
    assert _strip(simulate(cfg, sample=1.0)) == _strip(exact)
    one = load_config({**SMALL, "trace": {**SMALL["trace"], "sample_rate": 1}})
    assert _strip(simulate(one)) == _strip(exact)


def test_sampled_run_is_within_the_documented_bound(cfg, exact):
    rows = simulate(cfg, sample=RATE)
    assert [r["design"] for r in rows] == [r["design"] for r in exact]
    for e, s in zip(exact, rows, strict=True):
        # mean +- spread is [min, max] over the salts: the worst salt's error
        hit = abs(s["hit_ratio"] - e["hit_ratio"]) + s["hit_ratio_spread"]
        assert hit <= HIT_POINTS, (e["design"], hit)
        for col in ("pcie_h2d_bytes_per_sample", "pcie_d2h_bytes_per_sample"):
            err = abs(s[col] - e[col]) + s[f"{col}_spread"]
            assert err <= PCIE_SHARE * max(e[col], 1.0), (e["design"], col, err, e[col])
        assert s["sample_rate"] == RATE and s["sample_salts"] == 3
        assert s["capacity_rows"] == e["capacity_rows"]  # the full cache's rows
        assert s["accesses"] == e["accesses"]  # known exactly: SHARDS's adjustment


def test_salts_differ(cfg):
    rows = {r["design"]: r for r in simulate(cfg, sample=0.1, designs=["lru-cache"])}
    assert rows["lru-cache"]["hit_ratio_spread"] > 0
    assert rows["lru-cache"]["fills_spread"] > 0


def test_counts_scale_by_one_over_r_with_the_adjustment():
    w = Workload("lru", 10, {"accesses": np.array([10, 20]), "hits": np.array([6, 15]),
                             "misses": np.array([4, 5]), "fills": np.array([4, 5]),
                             "samples": np.array([8, 8])}, {"ways": 4, "stalls": 3})
    s = w.scaled(4.0)
    assert s.cols["fills"].tolist() == [16, 20] and s.cols["samples"].tolist() == [8, 8]
    assert s.extra == {"ways": 4, "stalls": 12}
    adj = SampleScale(0.25, np.array([99, 50, 70])).counts(w)  # the last 2 batches are w's
    assert adj.cols["accesses"].tolist() == [50, 70]
    # the surplus or deficit of accesses goes to the hits (the hottest rows)
    assert adj.cols["hits"].tolist() == [24 + 50 - 40, 60 + 70 - 80]
    assert adj.cols["misses"].tolist() == [16, 20]


def test_combine_means_and_half_ranges():
    a = [{"design": "x", "hit_ratio": 0.5, "fills": 10, "batches": 4, "steady_state": True,
          "policy_wall_s": 1.0}]
    b = [{"design": "x", "hit_ratio": 0.7, "fills": 14, "batches": 4, "steady_state": False,
          "policy_wall_s": 2.0}]
    (row,) = combine([a, b])
    assert row["hit_ratio"] == pytest.approx(0.6) and row["hit_ratio_spread"] == pytest.approx(0.1)
    assert row["fills"] == 12 and row["fills_spread"] == 2
    assert row["batches"] == 4 and "batches_spread" not in row
    assert row["steady_state"] is False and row["policy_wall_s"] == 3.0


@pytest.mark.parametrize("rate", [0, 1.5, -1])
def test_a_rate_outside_zero_one_is_refused(cfg, rate):
    with pytest.raises(UserError) as e:
        simulate(cfg, sample=rate)
    assert e.value.field == "--sample"


def _salt_rows(cfg, mapper):
    return simulate(cfg, ["lru-cache", "scratchpipe"], sample=RATE, salt_mapper=mapper)


def test_salts_as_independent_tasks_give_the_serial_rows(cfg):
    """Each salt one `SaltTask`: in forked processes, and shipped as a Dask task would be
    (`sliced()`, pickled: it carries its sample, not the trace), the rows of the serial
    run."""
    import pickle

    from scratchpipe_sim.policies.time_ranges import forked_mapper
    from scratchpipe_sim.timing.trace_setup import build_trace

    want = _strip(_salt_rows(cfg, None))
    assert _strip(_salt_rows(cfg, forked_mapper(2))) == want
    seen = []
    full = build_trace(cfg).num_accesses  # the tasks hold their samples, made in one read

    def shipped(fn, tasks):
        out = []
        for t in tasks:
            copy = pickle.loads(pickle.dumps(t.sliced()))
            assert copy.sampled and copy.jobs == 1
            assert copy.trace.num_accesses < 0.4 * full  # R = 20%
            seen.append(copy.salt)
            out.append(fn(copy))
        return out

    assert _strip(_salt_rows(cfg, shipped)) == want
    assert seen == [0, 1, 2]


def test_mean_window_rows_is_the_mean_union_of_w_batches():
    """Against an oracle: the distinct rows of every W consecutive batches, averaged."""
    from scratchpipe_sim.policies.scratchpipe import mean_window_rows, min_scratchpipe_capacity
    from scratchpipe_sim.traces.csr_trace import Trace

    rng = np.random.default_rng(4)
    trace = Trace.single_table(rng.zipf(1.3, 900) % 150, 150, 30)
    ids = trace.linear_ids()
    ptr = trace.batch_access_ptr()
    for w in (1, 3, 7):
        unions = [len(set(ids[ptr[j - w + 1]:ptr[j + 1]].tolist()))
                  for j in range(w - 1, trace.num_batches)]
        assert mean_window_rows(trace, w, chunk_accesses=37) == pytest.approx(np.mean(unions))
        assert min_scratchpipe_capacity(trace, w, chunk_accesses=37) == max(unions)


def test_a_scratchpad_keeps_r_times_its_slack():
    """`SampleScale.key`: R x the rows, plus the salt's window excess for a scratchpad only."""
    from scratchpipe_sim.timing.designs import WorkloadKey
    from scratchpipe_sim.timing.sampled_run import scratchpad_windows, window_excess
    from scratchpipe_sim.traces.csr_trace import Trace

    scale = SampleScale(0.01, window_excess=((3, 40), (5, -7)))
    pad = WorkloadKey("scratchpipe", 400_000, (("lookahead", 3), ("on_overflow", "stall")))
    assert scale.key(pad).capacity == 4000 + 40
    pad5 = WorkloadKey("scratchpipe", 400_000, (("lookahead", 5),))
    assert scale.key(pad5).capacity == 4000 - 7
    assert scale.key(WorkloadKey("lru", 400_000)).capacity == 4000
    assert scratchpad_windows([pad, pad5, WorkloadKey("lru", 9), pad]) == (3, 5)
    # a sample that pins exactly R x the full trace's rows has no excess
    trace = Trace.single_table(np.arange(600) % 200, 200, 20)
    assert window_excess([(3, 60.0 / 0.5)], trace, 0.5) == ((3, 0),)
