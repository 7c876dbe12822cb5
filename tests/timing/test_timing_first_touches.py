"""Compulsory misses: `cold_touches` against a per-access oracle, `auto` warming a generated
trace until the first-touch share of the measured lookups is below FIRST_TOUCH_TARGET (the
issue's small config: a cache of every row), its cap and memory bound, and a recorded
trace's report / warn rule."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import build_trace, run_metrics, simulate, trace_setup
from scratchpipe_sim.timing.counts import cold_touches, first_touches
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.replay_passes import Replays
from scratchpipe_sim.timing.runner import run_design
from scratchpipe_sim.timing.trace_setup import FIRST_TOUCH_TARGET, fit_trace, sized_config
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import write_trace

#: the issue's small config: 8 x 250k rows, dim 64, batch 1024, pooling 10, 60 batches, a
#: cache of every row, `cache.warmup_batches: auto` (the default)
SMALL = {"hardware": {"preset": "a100-gen4"},
         "model": {"tables": {"count": 8, "rows": 250_000, "dim": 64}, "pooling": 10,
                   "batch_size": 1024, "num_batches": 60, "warmup_batches": 8,
                   "bottom_mlp": [13, 512, 256, 64], "top_mlp": [100, 512, 256, 1]},
         "trace": {"distribution": "zipf", "alpha": 1.05},
         "cache": {"policy": "lru", "load_factor": 1.0}, "seed": 1}
#: two 2,000-row tables, a cache of every row: a cold start in well under a second
TINY = {"hardware": {"preset": "a100-gen4"},
        "model": {"tables": {"count": 2, "rows": 2000, "dim": 16}, "pooling": 4,
                  "batch_size": 64, "num_batches": 12, "warmup_batches": 2,
                  "bottom_mlp": [13, 16], "top_mlp": [19, 1]},
        "trace": {"distribution": "zipf", "alpha": 1.05},
        "cache": {"policy": "lru", "load_factor": 1.0},
        "design_params": {"scratchpipe": {
            "lookahead": 3, "pipeline": [["plan"], ["collect", "exchange", "insert"],
                                         ["train"]]}},
        "seed": 2}


def _oracle_cold(trace: Trace, capacity: int) -> list[int]:
    """Per batch, accesses to a row never seen before while fewer than `capacity`
    distinct rows had been seen (a Python set, one access at a time)."""
    ids, ptr = trace.linear_ids(), trace.batch_access_ptr()
    seen: set[int] = set()
    out = []
    for a, b in zip(ptr[:-1], ptr[1:], strict=True):
        n = 0
        for r in ids[a:b].tolist():
            if r not in seen:
                n += len(seen) < capacity
                seen.add(r)
        out.append(n)
    return out


@pytest.mark.parametrize("capacity", [1, 37, 150, 400, 10**6])
def test_cold_touches_are_first_touches_while_the_cache_has_room(capacity):
    rng = np.random.default_rng(7)
    batches = [[np.minimum(rng.zipf(1.2, 48) - 1, 299).astype(np.int64) for _ in range(2)]
               for _ in range(9)]
    trace = Trace.from_batches(batches, [300, 300])
    got = cold_touches(first_touches(trace), capacity)
    assert got.tolist() == _oracle_cold(trace, capacity)


def test_an_all_rows_cache_warms_below_the_target_on_the_small_config():
    """The issue's case: lru-cache ran 1.81x gpu-only at hit ratio 0.935 with 6.5% of the
    measured lookups first touches. `auto` now doubles the prefix (60, 120, 240, 480) until
    they are below 1%. lru-cache stays 1.52x gpu-only: most of the gap is its lookup
    kernels (FBGEMM's probes and sorts, 73 us a batch), which the same run with no miss
    at all pays too (1.41x) and lru-prefetch hides under the MLP (within 5% of gpu-only)."""
    cfg = load_config(SMALL)
    trace = build_trace(cfg)
    assert trace.meta[trace_setup.AUTO_PREFIX] == 480
    assert trace.meta[trace_setup.AUTO_SHARE] < FIRST_TOUCH_TARGET
    names = ["gpu-only", "lru-cache", "lru-prefetch"]
    rows = {r["design"]: r for r in simulate(cfg, names, trace=trace)}
    for name in names[1:]:
        assert rows[name]["first_touch_share"] < FIRST_TOUCH_TARGET
        assert rows[name]["cache_warmup_batches"] == 480
    assert rows["lru-cache"]["hit_ratio"] > 1 - FIRST_TOUCH_TARGET
    assert rows["lru-prefetch"]["iter_ns_mean"] == pytest.approx(
        rows["gpu-only"]["iter_ns_mean"], rel=0.05)
    # the oracle: the same lru-cache run with every cold miss a hit (a cache of every row
    # in a long run never misses)
    sized = sized_config(cfg, trace)
    fitted = fit_trace(trace, sized)
    design = DESIGNS.get("lru-cache")(sized)
    w, _ = Replays(sized, fitted, True).get(design.workload_key())
    zero = np.zeros(w.num_batches, np.int64)
    warm = w.with_columns({"fills": zero, "misses": zero, "hits": w.cols["accesses"]})
    m = run_design(sized, design, warm)
    # 250.5 us against 232.5: the 0.9% left (748 fills a batch over UVM) cost 7.7%; the
    # 6.5% of the 60-batch prefix cost 29% (299.6 us)
    oracle = run_metrics.summarize(sized, "lru-cache", m, warm)["iter_ns_mean"]
    assert oracle < rows["lru-cache"]["iter_ns_mean"] < 1.1 * oracle


def test_every_cache_design_reports_its_first_touch_share():
    cfg = load_config(deep_merge(TINY, {"cache": {"warmup_batches": 1}}))
    caching = [n for n in DESIGNS.names() if DESIGNS.get(n)(cfg).workload_key().policy]
    rows = {r["design"]: r for r in simulate(cfg, caching + ["gpu-only"])}
    assert "first_touch_share" not in rows["gpu-only"]
    trace = fit_trace(build_trace(cfg), cfg)
    acc = np.diff(trace.batch_access_ptr())
    wu = 1 + cfg.model.warmup_batches  # the prefix, then the pipeline's fill
    expect = (cold_touches(first_touches(trace), cfg.capacity_rows())[wu:].sum()
              / acc[wu:].sum())
    for name in caching:
        oracle = DESIGNS.get(name)(cfg).workload_key().warm == "profile-all"
        assert rows[name]["first_touch_share"] == pytest.approx(0.0 if oracle else expect)
    assert expect > FIRST_TOUCH_TARGET


def test_a_fixed_short_warm_up_warns_with_the_share(capsys):
    cfg = load_config(deep_merge(TINY, {"cache": {"warmup_batches": 1}}))
    row = simulate(cfg, ["lru-cache"])[0]
    err = capsys.readouterr().err
    assert f"{row['first_touch_share']:.1%} of the measured lookups are first touches" in err
    assert "cache.warmup_batches: auto warms until it is below" in err


def test_auto_at_its_cap_says_so_with_the_share_left(monkeypatch, capsys):
    """A cap that allows no doubling (about two traces' worth of lookups): auto keeps the
    first prefix and `run` names the cap and the share left."""
    cfg = load_config(TINY)
    per_batch = 64 * 8
    monkeypatch.setattr(trace_setup, "AUTO_WARMUP_MAX_ACCESSES", 30 * per_batch)
    monkeypatch.setattr(run_metrics, "AUTO_WARMUP_MAX_ACCESSES", 30 * per_batch)
    trace = build_trace(cfg, cache=False)
    assert trace.meta[trace_setup.AUTO_PREFIX] == cfg.model.num_batches
    share = trace.meta[trace_setup.AUTO_SHARE]
    assert share >= FIRST_TOUCH_TARGET
    row = simulate(cfg, ["lru-cache"], trace=trace, replay_cache=False)[0]
    assert row["first_touch_share"] == pytest.approx(share)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{share:.1%} of the measured lookups" in err[0]
    assert f"auto stopped at its cap of {30 * per_batch:,} accesses" in err[0]
    # uncapped, auto reaches the target: the same config, a longer prefix
    monkeypatch.undo()
    longer = build_trace(cfg, cache=False)
    assert longer.meta[trace_setup.AUTO_SHARE] < FIRST_TOUCH_TARGET
    assert longer.meta[trace_setup.AUTO_PREFIX] > cfg.model.num_batches


def test_the_memory_guard_bounds_each_longer_warm_up(monkeypatch):
    """Each doubled trace is checked before it is drawn: memory for the first trace only
    is one line naming cache.warmup_batches, not an allocation failure (tables of 200k
    rows: their per-row state, not the generator's block, decides the first check)."""
    cfg = load_config(deep_merge(TINY, {"model": {"tables": {"rows": 200_000}}}))
    rows, per_batch = cfg.total_rows, 64 * 8
    from scratchpipe_sim.safety import memory_guard

    first = memory_guard.estimate(rows, 2 * cfg.model.num_batches * per_batch,
                                  memory_guard.RUN_BYTES_PER_ROW)
    monkeypatch.setenv(memory_guard.ENV, str(first))
    with pytest.raises(UserError) as e:
        build_trace(cfg, cache=False)
    assert e.value.field == "cache.warmup_batches" and "auto warm-up" in e.value.message


def _recorded(tmp_path, name: str, fresh: bool) -> str:
    """A one-table trace file of 40 batches of 200 ids. `fresh`: each batch brings 10 ids
    never seen before (as production brings new users), the rest from a 50-row hot set;
    else every id from 1,500 rows at random, so first touches die out (a cold start)."""
    rng = np.random.default_rng(3)
    rows = 2000
    batches = []
    for k in range(40):
        if fresh:
            ids = np.concatenate([50 + k * 10 + np.arange(10), rng.integers(0, 50, 190)])
        else:
            ids = rng.integers(0, 1500, 200)
        batches.append([ids.astype(np.int64)])
    path = tmp_path / f"{name}.sptrace"
    write_trace(Trace.from_batches(batches, [rows]), path)
    return str(path)


@pytest.mark.parametrize("fresh", [True, False])
def test_a_recorded_trace_reports_its_share_and_warns_only_while_it_falls(
        tmp_path, capsys, fresh):
    cfg = load_config({"hardware": {"preset": "a100-gen4"},
                       "model": {"tables": {"count": 1, "dim": 16}, "pooling": 1,
                                 "batch_size": 200,
                                 "num_batches": 16, "warmup_batches": 2,
                                 "bottom_mlp": [13, 16], "top_mlp": [17, 1]},
                       "trace": {"path": _recorded(tmp_path, "t", fresh)},
                       "cache": {"policy": "lru", "load_factor": 1.0}, "seed": 1})
    row = simulate(cfg, ["lru-cache"])[0]
    err = capsys.readouterr().err
    assert row["first_touch_share"] > FIRST_TOUCH_TARGET  # reported either way
    if fresh:  # new ids at a steady rate: the trace's own share, no warning
        assert row["first_touch_share"] == pytest.approx(10 / 200)
        assert abs(row["first_touch_drift"]) < trace_setup.STEADY_TOL and err == ""
    else:
        assert row["first_touch_drift"] > trace_setup.STEADY_TOL
        assert "still falling" in err and "lru-cache" in err


def test_auto_decides_from_the_config_and_seed_alone(tmp_path, monkeypatch):
    """The same config and seed give the same prefix and the same rows, made afresh or read
    back from the on-disk caches (the decision never depends on the machine)."""
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))
    cfg = load_config(TINY)
    wall = ("policy_wall_s", "simpy_wall_s")
    runs = []
    for cache in (False, True, True):  # afresh, then filling the caches, then from them
        trace = build_trace(cfg, cache=cache)
        rows = simulate(cfg, ["lru-cache", "scratchpipe"], trace=trace, replay_cache=cache)
        runs.append((trace.meta[trace_setup.AUTO_PREFIX],
                     [{k: v for k, v in r.items() if k not in wall} for r in rows]))
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][0] > cfg.model.num_batches
