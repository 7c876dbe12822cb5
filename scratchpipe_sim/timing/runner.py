"""`simulate(cfg, designs)`: one trace, every design, one flat metrics dict per design.

Steps: build (or take) the trace and check it against the model's tables
(`trace_setup`); run each distinct cache policy once over it, designs sharing a policy
sharing its counts (`replay_passes.Replays`); run each design as a SimPy process on a fresh
`Machine`; summarise batches `warmup_batches..` into metrics (`run_metrics`).
Deterministic: the trace comes from the config's seed; SimPy and the policies are
deterministic; nothing depends on wall time except the `wall_s` fields.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.time_ranges import Mapper, RangeSetting
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.timing.counts import Workload
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_parameters import (
    check_inputs,
    check_params,
    design_params,
)
from scratchpipe_sim.timing.designs.design_registry import config_designs
from scratchpipe_sim.timing.machine import Machine
from scratchpipe_sim.timing.replay_passes import Replays
from scratchpipe_sim.timing.resources import run_to_end
from scratchpipe_sim.timing.run_metrics import (
    input_bound_warnings,
    speedups_vs_baseline,
    steady_state_warnings,
    summarize,
)
from scratchpipe_sim.timing.sampled_run import SampleScale, sample_settings, simulate_sampled
from scratchpipe_sim.timing.timeline import write_timeline
from scratchpipe_sim.timing.trace_setup import build_trace, fit_trace, sized_config
from scratchpipe_sim.traces import generators
from scratchpipe_sim.traces.csr_trace import Trace, slice_trace
from scratchpipe_sim.traces.forked import check_jobs


def check_designs(cfg: Config, designs: Sequence[str] | None, inputs: bool = True
                  ) -> list[str]:
    """The designs to run (default: the config's), each name and its `design_params`
    checked before anything is built, and with `inputs` what the config alone decides of
    each one's inputs (`check_inputs`: one line before the trace is built; False where a
    design that refuses the config is an infeasible result, not an error)."""
    names = list(config_designs(cfg) if designs is None else designs)
    for n in names:
        DESIGNS.get(n, source=cfg.source, field="designs")
    check_params(cfg, inputs=False)
    for n in names:  # a design asked for by name, outside cfg.designs
        design_params(cfg, n)
    if inputs:
        check_inputs(cfg, names)
    return names


#: progress(event, design, done, total): event is "policy" (a design's counts are about to be
#: computed or reused), "design" (a design's SimPy run ended: done of total designs).
Progress = Callable[[str, str, int, int], None]


def simulate(cfg: Config, designs: Sequence[str] | None = None,
             timeline_dir: Path | None = None, trace: Trace | None = None,
             progress: Progress | None = None, replay_cache: bool = True,
             jobs: int = 1, checksum: bool = False,
             sample: float | SampleScale | None = None,
             ranges: RangeSetting | None = None,
             salt_mapper: Mapper | None = None) -> list[dict]:
    """Run `designs` (default: cfg.designs) on one trace; one flat metrics dict per design.

    `replay_cache=False` recomputes every policy replay (and generates the trace) instead
    of reading the on-disk caches (`scratchpipe_sim.policies.replay_cache`). `jobs > 1`
    makes the independent replays in that many forked processes (`Replays.precompute`:
    identical results). `checksum=True`: the caller will ask `trace.checksum()` (`run`
    records it); with the replays forked, a worker hashes the trace beside them (0.1 s of
    a ~2.6 s cold quickstart run on 2 cores, otherwise spent after them in this process).
    `sample`: a spatial sampling rate R (None: trace.sample_rate); R < 1 is a sampled run
    (`timing.sampled_run`: caches x R, counts x 1/R, mean and spread over the salts).
    `ranges`: replay each cache whose policy has the stack property (lru) as time ranges,
    each range its own task (`policies/time_ranges.py`: the same counts); the others are
    replayed whole, with a warning naming them. `salt_mapper`: a sampled run's salts as
    independent tasks on it (`sampled_run.SaltTask`; None: one after the other)."""
    scale = sample if isinstance(sample, SampleScale) else None
    names = check_designs(cfg, designs)
    if scale is None and (rate_salts := sample_settings(cfg, sample))[0] < 1:
        if ranges is not None:
            raise UserError("time ranges replay the whole trace: not with a sampled run",
                            source=cfg.source, field="--ranges")
        return simulate_sampled(cfg, names, *rate_salts, simulate, trace=trace,
                                progress=progress, timeline_dir=timeline_dir,
                                replay_cache=replay_cache, jobs=jobs, mapper=salt_mapper)
    check_jobs(jobs)
    trace = build_trace(cfg, cache=replay_cache) if trace is None else trace
    given = trace
    cfg = sized_config(cfg, trace)
    trace = fit_trace(trace, cfg)
    built = {name: DESIGNS.get(name)(cfg) for name in names}
    keys = {name: d.workload_key() if scale is None else scale.key(d.workload_key())
            for name, d in built.items()}
    replays = Replays(cfg if scale is None else scale.replay_config(cfg), trace,
                      any(k.policy is not None for k in keys.values()), replay_cache,
                      checksum_of=given if checksum else None, ranges=ranges)
    if ranges is not None:
        for name in names:
            if keys[name].policy is not None and not replays.ranged(keys[name]):
                print(f"scratchpipe-sim: warning: --ranges: design {name}'s policy "
                      f"{keys[name].policy} is not proven exact by time ranges (only lru "
                      "is, by its stack property): replayed whole", file=sys.stderr)
    jobs = memory_guard.jobs_within_memory(trace.total_rows, trace.num_accesses, jobs,
                                           mapped=trace.mapped)
    if jobs > 1 and trace.num_accesses >= generators.PARALLEL_MIN_ACCESSES:
        # a ranged replay runs its ranges as tasks of its own (after these passes)
        replays.precompute([keys[n] for n in names if not replays.ranged(keys[n])], jobs)
    timed = timed_batches(cfg, trace)
    rows = []
    for name in names:
        design, key = built[name], keys[name]
        if progress is not None:
            progress("policy", name, len(rows), len(names))
        w, policy_s = replays.get(key)
        w = with_own_columns(design, timed, w, replay_cache)
        w = w if scale is None else scale.counts(w)
        t0 = time.perf_counter()
        m = run_design(cfg, design, w, keep_spans=timeline_dir is not None)
        done = m.done
        sim_s = time.perf_counter() - t0
        if np.isnan(done).any():
            raise RuntimeError(f"design {name} did not finish every batch")
        row = summarize(cfg, name, m, w)
        row["cache_warmup_batches"] = replays.warm if key.policy is not None else 0
        row.update(policy_wall_s=policy_s, simpy_wall_s=sim_s)
        rows.append(row)
        if progress is not None:
            progress("design", name, len(rows), len(names))
        if timeline_dir is not None:
            write_timeline(Path(timeline_dir) / f"timeline_{name}.json", name, m)
    for warning in [*steady_state_warnings(cfg, rows), *input_bound_warnings(rows)]:
        print(f"scratchpipe-sim: {warning}", file=sys.stderr)
    for r, speedup in zip(rows, speedups_vs_baseline(rows), strict=True):
        r["speedup_vs_hybrid"] = speedup
    return rows


def timed_batches(cfg: Config, trace: Trace) -> Trace:
    """The batches a run prices: the trace's last model.num_batches (the rest warm up)."""
    return slice_trace(trace, trace.num_batches - cfg.model.num_batches, trace.num_batches)


def with_own_columns(design: Design, timed: Trace, w: Workload,
                     replay_cache: bool = True) -> Workload:
    """`w` with the design's own per-batch columns of the timed batches (the cluster's
    per-rank counts; none for the others): every path that prices a design adds them."""
    own = design.trace_columns(timed, replay_cache)
    return w.with_columns(own) if own else w


def run_design(cfg: Config, design: Design, w: Workload, keep_spans: bool = False
               ) -> Machine:
    """Price one design's run of workload `w`: its SimPy process on a fresh environment and
    Machine, to the last event (`run_to_end`); the machine holds what it measured."""
    env = simpy.Environment()
    m = Machine(env, cfg, w.num_batches, keep_spans=keep_spans, design=design.name)
    env.process(design.run(m, w))
    run_to_end(env)
    return m
