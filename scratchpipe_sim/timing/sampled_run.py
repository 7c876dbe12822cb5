"""Sampled runs (`trace.sample_rate` R < 1, `run --sample R`): each design on a spatial
sample of the trace, once per hash salt, each figure the mean over the salts with its
spread beside it (`X_spread`).

How one salt's run estimates the full run (SHARDS; miniature simulations for any policy):
the sample keeps every access to about R of the rows (`traces.spatial_sampling`), every
cache the policies replay holds R x its rows (`SampleScale.key`; the on-chip L2 / LLC too:
`SampleScale.replay_config`), and the per-batch counts the timing model prices (accesses,
unique rows, hits, misses, fills, evictions, write-backs, bytes) are scaled by 1/R before
pricing (`Workload.scaled`), so iteration time, PCIe bytes per sample and hit ratio are
estimates of the full run's. Designs are built and priced from the full config: only what
the policies replay is miniature. R = 1 is the exact run (`runner.simulate` never comes here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from scratchpipe_sim.config import Config
from scratchpipe_sim.policies.scratchpipe import ScratchpipeParams, mean_window_rows
from scratchpipe_sim.policies.time_ranges import Mapper
from scratchpipe_sim.timing.counts import Workload
from scratchpipe_sim.timing.designs import DESIGNS, WorkloadKey
from scratchpipe_sim.timing.trace_setup import build_trace, fit_trace, sized_config
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.spatial_sampling import (
    cached_sample,
    cached_samples,
    check_rate,
)

#: result keys that are not estimates of the full run: never averaged into a spread
#: (the wall times are summed over the salts: what the sampled run cost)
STRUCTURAL_KEYS = frozenset({"capacity_rows", "batches", "measured_batches"})
#: suffix of the column beside each sampled figure: half the range over the salts, so
#: mean +- spread covers every salt
SPREAD_SUFFIX = "_spread"


@dataclasses.dataclass(frozen=True)
class SampleScale:
    """How one salt's run on a sample of rate `rate` is sized (caches x R) and read
    (counts x 1/R): what `runner.simulate(..., sample=SampleScale(R))` applies."""

    rate: float
    #: the full trace's accesses of each batch (known exactly: its bags), for `counts`
    accesses: np.ndarray | None = dataclasses.field(default=None, compare=False)
    #: (W, rows): how many more rows this salt's sample pins in a scratchpad window of W
    #: batches, on average, than R x the full trace's (`window_excess`)
    window_excess: tuple[tuple[int, int], ...] = ()

    def rows(self, rows: int) -> int:
        """A cache of `rows` rows in the miniature: R x rows, at least 1."""
        return max(1, int(round(rows * self.rate)))

    def key(self, key: WorkloadKey) -> WorkloadKey:
        """A design's replay with its cache's rows scaled (no cache: unchanged); a
        scratchpad keeps R x its slack above the rows its window pins (`window_excess`)."""
        if key.policy is None:
            return key
        rows = self.rows(key.capacity)
        if key.policy == SCRATCHPAD_POLICY:
            w = dict(key.params).get("lookahead", ScratchpipeParams.lookahead)
            rows = max(1, rows + dict(self.window_excess).get(int(w), 0))
        return dataclasses.replace(key, capacity=rows)

    def replay_config(self, cfg: Config) -> Config:
        """The config the replays read (warm-up length, on-chip caches): cache rows and the
        LLC / L2 sizes scaled by R."""
        hw = cfg.hardware
        hw = dataclasses.replace(
            hw, cpu=dataclasses.replace(hw.cpu, llc_MiB=hw.cpu.llc_MiB * self.rate),
            gpu=dataclasses.replace(hw.gpu, l2_MiB=hw.gpu.l2_MiB * self.rate))
        cache = dataclasses.replace(cfg.cache, capacity_rows=self.rows(cfg.capacity_rows()))
        return dataclasses.replace(cfg, hardware=hw, cache=cache)

    def counts(self, w: Workload) -> Workload:
        """The sample's counts scaled to the full trace (x 1/R) before pricing, then
        SHARDS's adjustment (Waldspurger et al. 2015, "SHARDS_adj"): a batch's accesses are
        known exactly, and the sample's surplus or deficit of them is mostly its share of
        the hottest rows (a few rows, each kept or not), which hit: the difference goes to
        the hits (to the host lookups of a design without a cache) and to the on-chip hits,
        so the hottest rows' luck of the draw does not move every lookup count."""
        s = w.scaled(1.0 / self.rate)
        if self.accesses is None:
            return s
        cols = dict(s.cols)
        true = np.asarray(self.accesses[len(self.accesses) - w.num_batches:], np.int64)
        delta = true - cols["accesses"]
        cols["accesses"] = true.copy()
        to = ("misses", "unplaced") if w.policy == "none" else ("hits",)
        for name in (*to, "l2_hits", "llc_hits"):
            if name in cols:
                cols[name] = np.clip(cols[name] + delta, 0, true)
        return Workload(s.policy, s.capacity, cols, s.extra)


def sample_settings(cfg: Config, sample: float | None = None,
                    salts: int | None = None) -> tuple[float, int]:
    """(R, salts) of a run: `sample` / `salts` when given (checked, named as --sample /
    --salts), else the config's trace.sample_rate and trace.sample_salts."""
    from scratchpipe_sim.errors import UserError

    rate = (cfg.trace.sample_rate if sample is None
            else check_rate(sample, field="--sample", source=cfg.source))
    n = cfg.trace.sample_salts if salts is None else salts
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"expected a whole number of salts >= 1, got {n!r}",
                        source=cfg.source, field="--salts")
    return float(rate), int(n)


Progress = Callable[[str, str, int, int], None]


class ExactRun(Protocol):
    """`runner.simulate`, as a sampled run calls it on each sample (passed in by the runner,
    which imports this module: this one imports nothing above it)."""

    def __call__(self, cfg: Config, designs: Sequence[str] | None, *,
                 timeline_dir: Path | None, trace: Trace, progress: Progress,
                 replay_cache: bool, jobs: int, sample: SampleScale) -> list[dict]: ...


#: the policy whose miniature is sized by its window (`SampleScale.key`)
SCRATCHPAD_POLICY = "scratchpipe"


def scratchpad_windows(keys: Sequence[WorkloadKey]) -> tuple[int, ...]:
    """The lookahead windows W of the scratchpads among `keys` (sorted, distinct)."""
    return tuple(sorted({int(dict(k.params).get("lookahead", ScratchpipeParams.lookahead))
                         for k in keys if k.policy == SCRATCHPAD_POLICY}))


def window_excess(full: Sequence[tuple[int, float]], sample: Trace, rate: float
                  ) -> tuple[tuple[int, int], ...]:
    """(W, rows) for each (W, the full trace's mean window rows) of `full`: the sample's
    mean rows pinned by a window of W batches minus R x the full trace's, rounded.

    Why: a scratchpad sits near its floor, the rows its window pins (on Meta 2022's
    locality at 5% of the rows, the 3-batch window pins 91% of the capacity), and only the
    slack above it holds rows for later. A sample pins binomially many of the window's
    rows, so at R = 1% one salt pinned 5.7% more than R x the full trace's, which left its
    miniature 42% of R x the slack: 1.7 points of hit ratio and 9-11% of PCIe bytes off.
    Sized as R x capacity + this excess, the miniature keeps R x the slack (SHARDS's
    adjustment, for the window's distinct rows instead of the accesses)."""
    return tuple((int(w), int(round(mean_window_rows(sample, w) - rate * mean)))
                 for w, mean in full)


@dataclasses.dataclass(frozen=True)
class SaltTask:
    """One salt of a sampled run, an independent task (`simulate_sampled(mapper=...)`): its
    sample of `trace` and every design on it. `simulate_sampled` makes every salt's sample
    in one read of the trace and gives each task its own (`sampled=True`): a forked worker
    inherits it (nothing pickled), a task sent elsewhere (Dask,
    `experiments/range_tasks.dask_mapper`) carries it (about R of the trace). A task of
    the parent trace (`sampled=False`) samples it itself (`sample`, `sliced`)."""

    salt: int
    trace: Trace
    sampled: bool
    cfg: Config
    names: tuple[str, ...]
    scale: SampleScale
    exact: ExactRun
    replay_cache: bool
    jobs: int
    timeline_dir: Path | None
    #: (W, the full trace's mean window rows) of each scratchpad window (`window_excess`)
    windows: tuple[tuple[int, float], ...] = ()

    @property
    def key(self) -> str:
        return f"salt{self.salt}"

    def sample(self) -> Trace:
        if self.sampled:
            return self.trace
        return cached_sample(self.trace, self.scale.rate, self.salt, cache=self.replay_cache,
                             source=self.cfg.source)

    def sliced(self) -> SaltTask:
        """The task holding its sample instead of the parent trace."""
        return dataclasses.replace(self, trace=self.sample(), sampled=True)


def run_salt(task: SaltTask, progress: Progress | None = None) -> list[dict[str, Any]]:
    """One salt's rows: `exact` on the salt's sample, caches x R (a scratchpad: plus its
    window's excess), counts x 1/R."""
    sample = task.sample()
    scale = task.scale
    if task.windows:
        scale = dataclasses.replace(
            scale, window_excess=window_excess(task.windows, sample, scale.rate))
    return task.exact(task.cfg, task.names, timeline_dir=task.timeline_dir,
                      trace=sample, progress=progress, replay_cache=task.replay_cache,
                      jobs=task.jobs, sample=scale)


#: (the trace, the windows W) the forked window pass reads (set only while it is forked)
_WINDOW_WORK: tuple[Trace, tuple[int, ...]] | None = None


def window_rows(trace: Trace, ws: tuple[int, ...]) -> tuple[tuple[int, float], ...]:
    """(W, the trace's mean window rows) for each scratchpad window W: the window pass."""
    return tuple((w, mean_window_rows(trace, w)) for w in ws)


def _forked_window_rows(send: Any) -> None:
    """The window pass of `windows_and_samples`, in the process it forked: its rows sent
    back, or the error's text. SIGTERM kills it (the default action), whatever handler the
    parent had: the parent ends it with its own `finally`."""
    import signal  # noqa: PLC0415 - only in the forked child

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    assert _WINDOW_WORK is not None, "runs only in the process windows_and_samples forks"
    trace, ws = _WINDOW_WORK
    try:
        send.send(("ok", window_rows(trace, ws)))
    except Exception as e:  # noqa: BLE001 - the parent makes the pass itself
        send.send(("error", repr(e)))
    finally:
        send.close()


def windows_and_samples(trace: Trace, rate: float, salts: int, ws: Sequence[int],
                        cache: bool, source: str | None, jobs: int = 1
                        ) -> tuple[tuple[tuple[int, float], ...], list[Trace]]:
    """((W, the full trace's mean window rows) for each scratchpad window W of `ws`, every
    salt's sample): the samples in one read of the trace (`cached_samples`: a forked salt
    task inherits its sample, a Dask task carries it), and with `jobs` > 1 the window pass
    (`mean_window_rows`, the other whole-trace pass a sampled run makes) in a forked
    process meanwhile, instead of before it. The same numbers either way."""
    global _WINDOW_WORK
    ws = tuple(int(w) for w in ws)
    from scratchpipe_sim.traces.forked import can_fork  # noqa: PLC0415 - forks only here

    if jobs <= 1 or not ws or not can_fork():
        windows = window_rows(trace, ws)
        return windows, cached_samples(trace, rate, range(salts), cache=cache, source=source)
    import multiprocessing  # noqa: PLC0415 - as traces/forked.py: only when forking

    from scratchpipe_sim.traces._jit import ready_target  # noqa: PLC0415

    ready_target()  # the child inherits Numba's target instead of setting it up
    _WINDOW_WORK = (trace, ws)
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    # one plain forked process, not a Pool: a Pool's worker inherits the CLI's SIGTERM
    # handler and its terminate() could wait on it forever (a sampling error in the parent)
    proc = ctx.Process(target=_forked_window_rows, args=(send,), daemon=True)
    try:
        proc.start()
    except BaseException:
        _WINDOW_WORK = None
        recv.close()
        send.close()
        raise
    send.close()
    try:
        samples = cached_samples(trace, rate, range(salts), cache=cache, source=source)
        try:
            status, got = recv.recv()
        except EOFError:  # the child died (killed, out of memory): the pass made here
            status, got = "error", None
        windows = got if status == "ok" else window_rows(trace, ws)
    finally:
        _WINDOW_WORK = None
        if proc.is_alive():
            proc.kill()
        proc.join()
        recv.close()
    return windows, samples


def simulate_sampled(cfg: Config, names: Sequence[str], rate: float, salts: int,
                     exact: ExactRun, *, trace: Trace | None = None,
                     timeline_dir: Path | None = None, progress: Progress | None = None,
                     replay_cache: bool = True, jobs: int = 1,
                     mapper: Mapper | None = None) -> list[dict[str, Any]]:
    """`runner.simulate` at sampling rate `rate` < 1 for the (checked) designs `names`: the
    trace (built or given) sampled once per salt 0..salts-1 (from the trace cache when made
    before), `exact` run on each sample, one row per design: each figure the mean over the
    salts, with `X_spread`; timelines of salt 0's run. `mapper`: run the salts as
    independent `SaltTask`s on it (forked processes, a Dask cluster: the `--executor`s of
    `experiments/range_tasks.range_mapper`), each salt's replays serial inside its task;
    None: one salt after the other here, each with `jobs` forked replays. With `jobs` > 1
    the full trace's window pass runs in a forked process beside the sampling pass
    (`windows_and_samples`). The same rows either way."""
    trace = build_trace(cfg, cache=replay_cache) if trace is None else trace
    cfg = sized_config(cfg, trace)
    trace = fit_trace(trace, cfg)
    ptr = trace.batch_access_ptr()
    scale = SampleScale(rate, np.diff(np.asarray(ptr, np.int64)))
    capacity = {n: DESIGNS.get(n)(cfg).workload_key() for n in names}
    windows, samples = windows_and_samples(
        trace, rate, salts, scratchpad_windows(list(capacity.values())), replay_cache,
        cfg.source, jobs)
    tasks = [SaltTask(salt, sample, True, cfg, tuple(names), scale, exact, replay_cache,
                      jobs if mapper is None else 1,
                      timeline_dir if salt == 0 else None, windows)
             for salt, sample in enumerate(samples)]
    if mapper is not None:
        per_salt = mapper(run_salt, tasks)
        if progress is not None:
            for i, name in enumerate(names):
                progress("design", name, i + 1, len(names))
    else:
        per_salt = []
        for task in tasks:
            last = task.salt == salts - 1

            def relay(event: str, design: str, done: int, total: int,
                      last: bool = last) -> None:
                if progress is not None and (event == "policy" or last):
                    progress(event, design, done, total)

            per_salt.append(run_salt(task, relay))
    rows = combine(per_salt)
    for row in rows:
        key = capacity[row["design"]]
        if key.policy is not None:
            row["capacity_rows"] = key.capacity
        row["sample_rate"] = rate
        row["sample_salts"] = salts
    return rows


def combine(per_salt: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per design from each salt's rows (same designs, same order): a number the
    mean over the salts with `X_spread` = (max - min) / 2 after it; a `*_wall_s` the sum;
    a flag true only when true for every salt; anything else the first salt's."""
    out = []
    for group in zip(*per_salt, strict=True):
        row: dict[str, Any] = {}
        for key, first in group[0].items():
            values = [r.get(key) for r in group]
            if isinstance(first, bool):
                row[key] = all(bool(v) for v in values)
            elif isinstance(first, (int, float)) and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                arr = np.asarray(values, np.float64)
                if key.endswith("_wall_s"):
                    row[key] = float(arr.sum())
                    continue
                mean = float(arr.mean())
                row[key] = (int(round(mean)) if isinstance(first, int)
                            and key in STRUCTURAL_KEYS else mean)
                if key not in STRUCTURAL_KEYS:
                    row[key + SPREAD_SUFFIX] = float((arr.max() - arr.min()) / 2)
            else:
                row[key] = first
        out.append(row)
    return out
