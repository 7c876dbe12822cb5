"""`simulate(cfg, designs)`: one trace, every design, one flat metrics dict per design.

Steps: build (or take) the trace and check it against the model's tables; run each distinct
cache policy once over it (designs sharing a policy share its counts); run each design as a
SimPy process on a fresh `Machine`; summarise batches `warmup_batches..` into metrics.
Deterministic: the trace comes from the config's seed; SimPy and the policies are
deterministic; nothing depends on wall time except the `wall_s` fields.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.config.model import DEFAULT_ROWS, per_table
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies import POLICIES
from scratchpipe_sim.policies.replay_cache import NotCached, cached_columns, lookup_only
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.timing.counts import (
    Workload,
    access_unique,
    first_touches,
    policy_counts,
    policy_mix,
    table_bytes,
    uncached_counts,
    warmup_length,
)
from scratchpipe_sim.timing.designs import DESIGNS, WorkloadKey
from scratchpipe_sim.timing.designs.base import (
    Design,
    baseline_design,
    check_params,
    config_designs,
    design_params,
)
from scratchpipe_sim.timing.machine import Machine
from scratchpipe_sim.timing.resources import run_to_end
from scratchpipe_sim.timing.timeline import write_timeline
from scratchpipe_sim.traces import generators
from scratchpipe_sim.traces.csr_trace import Trace, slice_trace
from scratchpipe_sim.traces.trace_cache import cached_trace

#: `cache.warmup_batches: auto` on a generated trace lengthens its warm-up prefix (doubling
#: it from model.num_batches) until the cache would be full or the timed batches' rate of
#: never-seen rows is steady, but never past this many accesses in the whole trace (about
#: 8 bytes each in memory, 0.8 GB at the cap): the documented bound on auto's time and memory.
AUTO_WARMUP_MAX_ACCESSES = 100_000_000
#: `steady`'s tolerance: the second half's rate within this share of the first half's
STEADY_TOL = 0.1



def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one): the
    default `--jobs` of `run`."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def check_jobs(jobs: int) -> int:
    """`jobs`, refused unless a whole number >= 1 (named as `--jobs`)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UserError(f"expected --jobs >= 1 (a whole number), got {jobs!r}",
                        field="--jobs")
    return jobs


def prefix_cap(cfg: Config, prefix_batches: int | None = None) -> int:
    """Most warm-up batches a trace is built with (auto: `prefix_batches` when `simulate`
    lengthened it, else model.num_batches)."""
    wb = cfg.cache.warmup_batches
    if wb != "auto":
        return int(wb)
    return cfg.model.num_batches if prefix_batches is None else prefix_batches


def config_accesses(cfg: Config) -> int:
    """Lookups of the trace a config generates: the cache warm-up prefix (at most
    `prefix_cap` batches) and the timed batches, each batch_size x the tables' poolings."""
    m = cfg.model
    return (prefix_cap(cfg) + m.num_batches) * m.batch_size * sum(m.poolings)


def memory_field(cfg: Config, rows: int, accesses: int) -> str:
    """The key the memory check blames: a trace file's path; for a generated trace the
    larger term of the estimate (per-row state or per-lookup arrays) and, for lookups,
    their largest factor -- the same key before and after the trace is built."""
    if cfg.trace.path is not None:
        return "trace.path"
    if accesses * memory_guard.BYTES_PER_ACCESS <= rows * memory_guard.RUN_BYTES_PER_ROW:
        return "model.tables.rows"
    m = cfg.model
    factors = {"model.num_batches": m.num_batches, "model.batch_size": m.batch_size,
               "model.pooling": max(m.poolings)}
    return max(factors, key=lambda k: factors[k])


def check_config_memory(cfg: Config, source: str | None = None) -> None:
    """`memory_guard.check_run` for a config whose trace is generated (a trace file's sizes
    are known only once it is read: `check_trace_memory` then)."""
    if cfg.trace.path is None:
        rows, accesses = cfg.total_rows, config_accesses(cfg)
        memory_guard.check_run(rows, accesses, source=source,
                               field=memory_field(cfg, rows, accesses))


def check_trace_memory(cfg: Config, trace: Trace, source: str | None = None) -> None:
    """`memory_guard.check_run` for a built trace (a file's, or a generated one whose
    auto warm-up prefix grew), blaming the key `memory_field` names."""
    rows, accesses = trace.total_rows, trace.num_accesses
    memory_guard.check_run(rows, accesses, source=source,
                           field=memory_field(cfg, rows, accesses), mapped=trace.mapped)


def build_trace(cfg: Config, cache: bool = True, prefix_batches: int | None = None,
                jobs: int = 1) -> Trace:
    """The config's trace (`config_trace`); with `cache.warmup_batches: auto`, a generated
    trace and a cache design among the config's designs, its warm-up prefix lengthened until
    the cache warms (`auto_warmup_trace`)."""
    if (prefix_batches is None and cfg.cache.warmup_batches == "auto"
            and cfg.trace.path is None and _has_cache(cfg)):
        return auto_warmup_trace(cfg, cache, jobs)
    return config_trace(cfg, cache, prefix_batches, jobs)


def _has_cache(cfg: Config) -> bool:
    """Whether any of the config's designs replays a cache policy (needs a warm-up)."""
    return any(DESIGNS.get(n)(cfg).workload_key().policy is not None
               for n in config_designs(cfg) if n in DESIGNS)


def generator_fields(cfg: Config) -> dict[str, str]:
    """The config key the user wrote for each generator argument (its messages name
    these, not the generator's own names): one key, one name."""
    t = cfg.trace
    return {"": "trace.params.", "table_rows": "model.tables.rows",
            "batch_size": "model.batch_size", "num_batches": "model.num_batches",
            "pooling": "model.pooling", "seed": "seed" if t.seed is None else "trace.seed",
            "reuse": "trace.reuse", "distribution": "trace.distribution",
            **({} if "alpha" in t.params else {"alpha": "trace.alpha"})}


def config_trace(cfg: Config, cache: bool = True, prefix_batches: int | None = None,
                 jobs: int = 1) -> Trace:
    """The config's trace: read `trace.path` or generate it, checked against model.tables.

    It holds the cache warm-up prefix (at most `prefix_cap` batches) followed by the
    model.num_batches timed batches; `simulate` replays the prefix through the policies only.
    A generated trace is read back from the on-disk trace cache when an earlier run made
    the same one (`traces.trace_cache.cached_trace`; `cache=False` generates it afresh).
    """
    t, m = cfg.trace, cfg.model
    if t.path is not None:
        from scratchpipe_sim.traces.io import open_trace

        path = Path(t.path)
        if not path.is_absolute() and cfg.source and Path(cfg.source).exists():
            cand = Path(cfg.source).resolve().parent / path
            path = cand if cand.exists() else path
        from scratchpipe_sim.traces.store import is_store

        if is_store(path):  # a store keeps its own mini-batches: they must be the model's
            trace = open_trace(path, fmt=t.format)
            if trace.batch_size != m.batch_size:
                raise UserError(
                    f"the trace {path} has batch size {trace.batch_size}; expected "
                    f"model.batch_size to match (e.g. --set model.batch_size="
                    f"{trace.batch_size})", source=cfg.source, field="model.batch_size")
        else:  # flat id streams are cut into the model's mini-batches; rows = max id + 1
            trace = open_trace(path, batch_size=m.batch_size, fmt=t.format)
            trace = trace.with_meta({**trace.meta, ROWS_INFERRED: True})
        return fit_trace(trace, sized_config(cfg, trace))
    seed = cfg.seed if t.seed is None else t.seed

    def generate() -> Trace:
        from scratchpipe_sim.traces.generators import DISTRIBUTIONS, generate_trace

        factory = DISTRIBUTIONS.get(t.distribution, source=cfg.source,
                                    field="trace.distribution")
        params = dict(t.params)
        if t.alpha is not None and "alpha" in getattr(factory, "PARAMS", {}):
            params.setdefault("alpha", t.alpha)
        return generate_trace(t.distribution, list(m.rows_per_table), m.batch_size,
                              prefix_cap(cfg, prefix_batches) + m.num_batches,
                              list(m.poolings), seed,
                              reuse=t.reuse, source=cfg.source,
                              field_prefix=generator_fields(cfg), jobs=jobs, **params)

    # everything generate() reads from the config (a bad name or parameter never has an
    # entry: it fails in generate() with its usual message)
    key = {"kind": "generated-trace", "distribution": t.distribution, "alpha": t.alpha,
           "params": dict(t.params), "rows": list(m.rows_per_table),
           "batch_size": m.batch_size,
           "num_batches": prefix_cap(cfg, prefix_batches) + m.num_batches,
           "pooling": list(m.poolings), "seed": seed, "reuse": t.reuse}
    return cached_trace(key, generate, enabled=cache)


#: trace.meta key: the trace's row counts were inferred from its ids (a flat id stream)
ROWS_INFERRED = "rows_inferred"


def sized_config(cfg: Config, trace: Trace) -> Config:
    """The config with the sizes the trace determines: table count and rows when the config
    leaves them out, `num_batches: all`. Where both give them and disagree: exit 2 naming
    both numbers (a flat id stream's rows are only a lower bound: max id + 1)."""
    m, src = cfg.model, cfg.source
    t = trace.num_tables
    given_count = m.tables.count is not None or any(
        isinstance(v, tuple) for v in (m.tables.rows, m.tables.dim, m.pooling))
    if given_count and m.table_count != t:
        field = ("model.tables.count" if m.tables.count is not None
                 else "model.tables.rows" if isinstance(m.tables.rows, tuple)
                 else "model.tables.dim" if isinstance(m.tables.dim, tuple) else "model.pooling")
        raise UserError(f"the trace {trace.source} has {t} tables but the config gives "
                        f"{m.table_count}: expected equal (or leave model.tables.count out)",
                        source=src, field=field)
    trace_rows = tuple(int(x) for x in trace.table_rows)
    changes: dict[str, Any] = {}
    if m.tables.rows is None:
        changes["tables"] = dataclasses.replace(m.tables, rows=trace_rows, count=None)
    elif not given_count:
        changes["tables"] = dataclasses.replace(m.tables, count=t)
    if m.tables.rows is not None:
        rows = per_table(m.tables.rows, t, DEFAULT_ROWS)
        inferred = bool(trace.meta.get(ROWS_INFERRED))
        for k, (mine, theirs) in enumerate(zip(rows, trace_rows, strict=True)):
            if inferred and mine < theirs:
                raise UserError(f"table {k} of the trace {trace.source} has ids up to "
                                f"{theirs - 1} but model.tables.rows gives {mine}: expected "
                                f"0 <= id < {mine} (raise model.tables.rows, or leave it out "
                                "to take the trace's)", source=src, field="model.tables.rows")
            if not inferred and mine != theirs:
                raise UserError(f"table {k} has {theirs} rows in the trace {trace.source} but "
                                f"{mine} in the config: expected equal (or leave "
                                "model.tables.rows out to take the trace's)", source=src,
                                field="model.tables.rows")
    if m.num_batches == "all":
        wb = cfg.cache.warmup_batches
        warm = 0 if wb == "auto" else int(wb)
        if trace.num_batches - warm < 1:
            raise UserError(f"the trace has {trace.num_batches} batches, all taken by "
                            f"cache.warmup_batches = {warm}", source=src,
                            field="model.num_batches")
        changes["num_batches"] = trace.num_batches - warm
    return cfg.with_model(**changes) if changes else cfg



def fit_trace(trace: Trace, cfg: Config) -> Trace:
    """Check a trace against the model (tables, rows); keep at most `prefix_cap` warm-up
    batches before the model.num_batches timed ones (from the start of the trace)."""
    m = cfg.model
    src = trace.source
    rows = np.asarray(m.rows_per_table, np.int64)
    if np.any(np.asarray(trace.table_rows) != rows):
        trace = dataclasses.replace(trace, table_rows=rows)
        try:
            trace.validate()
        except UserError as e:
            raise UserError(f"{e.message} (model.tables.rows)", source=src,
                            field="model.tables.rows") from None
    if trace.num_batches < m.num_batches:
        raise UserError(f"the trace has {trace.num_batches} batches but model.num_batches is "
                        f"{m.num_batches}: expected at most {trace.num_batches}", source=src,
                        field="model.num_batches")
    prefix = min(trace.num_batches - m.num_batches,
                 prefix_cap(cfg, trace.meta.get(AUTO_PREFIX)))
    wb = cfg.cache.warmup_batches
    if wb != "auto" and prefix < int(wb):
        raise UserError(f"cache.warmup_batches = {wb} needs {int(wb) + m.num_batches} batches "
                        f"with model.num_batches = {m.num_batches}, but the trace has "
                        f"{trace.num_batches}", source=src, field="cache.warmup_batches")
    trace = slice_trace(trace, 0, prefix + m.num_batches)
    if m.num_batches <= m.warmup_batches:
        raise UserError(f"model.num_batches = {m.num_batches}, expected more than "
                        f"model.warmup_batches = {m.warmup_batches}", source=src,
                        field="model.warmup_batches")
    return trace


def check_designs(cfg: Config, designs: Sequence[str] | None) -> list[str]:
    names = list(config_designs(cfg) if designs is None else designs)
    for n in names:
        DESIGNS.get(n, source=cfg.source, field="designs")
    check_params(cfg)
    for n in names:  # a design asked for by name, outside cfg.designs
        design_params(cfg, n)
    return names


def workload(trace: Trace, key: WorkloadKey, cfg: Config,
             replay_cache: bool = True) -> Workload:
    """The per-batch counts `key` asks for over `trace` (policy errors named by config key).

    Tables of different dims need the policy's per-table totals (what it fills is priced at
    its tables' row bytes): that replay runs without the replay cache."""
    m = cfg.model
    if key.policy is None:
        return uncached_counts(trace, key.where)
    try:
        if m.heterogeneous:
            w, mix = policy_mix(trace, key.policy, key.capacity, m.row_bytes_per_table,
                                m.moved_row_bytes_per_table, **dict(key.params))
            n = w.num_batches
            return w.with_columns({k: np.full(n, v) for k, v in mix.items()})
        return policy_counts(trace, key.policy, key.capacity, replay_cache=replay_cache,
                             **dict(key.params))
    except UserError as e:
        field = e.field
        if field in (None, "capacity"):
            field = "cache.capacity_rows"
        elif field == "policy":
            field = key.policy_field
        elif not field.startswith(("cache.", "design_params.")):
            field = f"{key.params_field}.{field}"
        raise UserError(e.message, source=cfg.source, field=field) from None


#: code behind the trace passes `Replays` caches (see `traces.disk_cache.code_digest`)
_COUNTS_SOURCES = ("timing/counts.py", "traces/csr_trace.py")
_ONCHIP_SOURCES = ("timing/onchip.py", "traces/csr_trace.py")
_AUTO_SOURCES = ("timing/counts.py", "timing/runner.py", "traces/csr_trace.py")


def _pass_rank(task: tuple) -> int:
    """Which passes to start first (lower: longer), by what a pass does per access (the
    quickstart's passes, serial, on the 2-core VM of docs/performance.md, session 7:
    scratchpipe 0.63 s, lru 0.36, static 0.16, the L2 and LLC walks 0.30 / 0.25, unique rows
    0.11, first touches 0.12, the trace's checksum ~0.1): a replay that also needs each
    access's next use (scratchpipe, belady, bagpipe), then other replays, the set-associative
    on-chip walks, the single passes: longest first, so the short ones fill the end (with the
    walks before the other replays, lru started last and one worker idled ~0.3 s at the
    end)."""
    if task[0] == "part" and task[1].policy is not None:
        return 0 if POLICIES.get(task[1].policy).needs_next_use else 1
    return 2 if task[0] == "onchip" else 3  # the single passes, the checksum among them


class Replays:
    """The counts every design of one `simulate` call is priced from, each computed once.

    The trace is `prefix` warm-up batches then the timed ones. Dynamic caches replay the last
    `warm` prefix batches before the timed ones (policy only, no SimPy); `static` profiles the
    whole prefix (or, as an oracle, the timed batches too) and preloads its rows.
    """

    def __init__(self, cfg: Config, trace: Trace, cached: bool, replay_cache: bool = True,
                 checksum_of: Trace | None = None):
        self.cfg, self.trace = cfg, trace
        self.replay_cache = replay_cache
        #: the trace whose `checksum()` the caller will ask for (the one it passed, before
        #: `fit_trace`): hashed among the passes when pending, not after them
        self.checksum_of = checksum_of
        self.timed = cfg.model.num_batches
        self.prefix = trace.num_batches - self.timed
        wb = cfg.cache.warmup_batches
        if not cached or self.prefix == 0:
            self.warm = 0
        elif wb == "auto":
            self.warm = self._warmup_length(cfg.capacity_rows())
        else:
            self.warm = int(wb)
        self._run = slice_trace(trace, self.prefix - self.warm, trace.num_batches)
        self._timed_trace = slice_trace(trace, self.prefix, trace.num_batches)
        self._memo: dict = {}
        self._cache: dict[WorkloadKey, tuple[Workload, float]] = {}
        #: policy parts computed ahead by `precompute` (taken by `_compute`)
        self._parts: dict[WorkloadKey, Workload] = {}
        self._part_s: dict[WorkloadKey, float] = {}

    def _cached(self, kind: str, trace: Trace, compute, sources: tuple[str, ...], **key):
        """`compute()`'s (columns, extras) of a pass over `trace` that no policy makes,
        through the on-disk cache like the policy replays (unless `--no-cache`)."""
        if not self.replay_cache:
            return compute()
        return cached_columns({"kind": kind, "trace": trace.fingerprint(), **key},
                              compute, True, sources=sources)

    def _warmup_length(self, capacity: int) -> int:
        def compute():
            return {}, {"warm": warmup_length(self.trace, self.prefix, capacity)}

        _, extra = self._cached("warmup-length", self.trace, compute, _COUNTS_SOURCES,
                                prefix=self.prefix, capacity=int(capacity))
        return int(extra["warm"])

    def get(self, key: WorkloadKey) -> tuple[Workload, float]:
        if key not in self._cache:
            t0 = time.perf_counter()
            w = self._compute(key)
            self._cache[key] = (w, time.perf_counter() - t0 + self._part_s.pop(key, 0.0))
        return self._cache[key]

    def passes(self, keys: Sequence[WorkloadKey]) -> list[tuple]:
        """The independent passes over the trace that `get(key)` for every key needs and
        has not made yet: ("part", key) per distinct key with a cache policy,
        ("onchip", name, rows, ways) per on-chip cache, ("first",), ("access_unique",) (the
        one pass the keys without a policy share: their parts are made from it in a moment),
        ("bytes",) when a key needs them and ("checksum",) when `checksum_of` still needs
        hashing. Longest first (`_pass_rank`), so that workers taking them in order finish
        together."""
        todo = [k for k in dict.fromkeys(keys) if k not in self._cache and k not in self._parts]
        shared: list[tuple] = []
        if self.checksum_of is not None and self.checksum_of.checksum_pending():
            shared.append(("checksum",))
        if any(k.policy is None for k in todo) and "access_unique" not in self._memo:
            shared.append(("access_unique",))
        for k in todo:
            name, rows, ways = self._onchip_cache(k)
            task = ("onchip", name, rows, ways)
            if rows > 0 and name not in self._memo and task not in shared:
                shared.append(task)
        if any(k.policy is not None and k.warm == "replay" for k in todo):
            if "first" not in self._memo:
                shared.append(("first",))
        if todo and self.cfg.model.heterogeneous and "bytes" not in self._memo:
            shared.append(("bytes",))
        parts = [("part", k) for k in todo if k.policy is not None]
        return sorted(shared + parts, key=_pass_rank)

    def run_pass(self, task: tuple) -> Any:
        """One pass of `passes` (what a forked worker runs): its result."""
        if task[0] == "part":
            return self._policy_part(task[1])
        if task[0] == "onchip":
            return self._onchip_columns(*task[1:])
        if task[0] == "first":
            return self._first_touches()
        if task[0] == "access_unique":
            return self._access_unique()
        if task[0] == "checksum":
            assert self.checksum_of is not None
            return self.checksum_of.content_sha256()
        return self._table_bytes()

    def keep_pass(self, task: tuple, result: Any, seconds: float) -> None:
        """Store a pass a worker made, as if this process had made it."""
        if task[0] == "part":
            self._parts[task[1]] = result
            self._part_s[task[1]] = seconds
        elif task[0] == "onchip":
            self._memo[task[1]] = result
        elif task[0] == "checksum":
            assert self.checksum_of is not None
            self.checksum_of.with_digests(result)
        else:
            self._memo[task[0]] = result

    def _read_cached(self, tasks: list[tuple]) -> list[tuple]:
        """Keep every pass the on-disk cache holds (read here: forking to read a file costs
        more than reading it); the passes left to make."""
        if not self.replay_cache:
            return tasks
        rest = []
        with lookup_only():
            for t in tasks:
                uncacheable = t[0] in ("bytes", "checksum") or (
                    t[0] == "part" and t[1].policy is not None
                    and self.cfg.model.heterogeneous)  # replayed without the cache
                if uncacheable:
                    rest.append(t)
                    continue
                t0 = time.perf_counter()
                try:
                    result = self.run_pass(t)
                except NotCached:
                    rest.append(t)
                else:
                    self.keep_pass(t, result, time.perf_counter() - t0)
        return rest

    def precompute(self, keys: Sequence[WorkloadKey], jobs: int) -> int:
        """Make the passes `keys` need in up to `jobs` forked processes (each inherits the
        trace copy-on-write; results come back pickled and are kept as if made here, so
        every count is bit for bit the serial one). Returns the processes used (1: serial,
        also where `fork` is unavailable)."""
        tasks = self._read_cached(self.passes(keys))
        jobs = min(int(jobs), len(tasks))
        if jobs <= 1:
            return 1
        # imported here: a fully cached run forks nothing (multiprocessing costs ~7 ms)
        from scratchpipe_sim.traces.forked import FAILED, can_fork, fork_map  # noqa: PLC0415

        if not can_fork():
            return 1
        made = fork_map(_timed_pass, self, tasks, jobs, skip_failures=True)
        for t, got in zip(tasks, made, strict=True):
            if got is not FAILED:  # a failed pass is made again serially, raising its error
                self.keep_pass(t, *got)
        return jobs

    def _compute(self, key: WorkloadKey) -> Workload:
        part = self._parts.pop(key, None)
        w = self._policy_part(key) if part is None else part
        cols = self._onchip(key)
        if self.cfg.model.heterogeneous:
            cols.update(self._table_bytes())
        if key.policy is not None and key.warm == "replay":
            cols["first_touches"] = self._first_touches()
        return w.with_columns(cols)

    def _policy_part(self, key: WorkloadKey) -> Workload:
        """The counts `key`'s policy (or none) makes over the timed batches, before the
        columns every design shares (on-chip hits, first touches, per-table bytes)."""
        cfg = self.cfg
        if key.policy is not None and key.warm != "replay":  # profile, preload
            if key.warm == "profile-prefix" and self.prefix == 0:
                raise UserError(f"{key.policy} picks its rows from the warm-up prefix: "
                                "expected cache.warmup_batches >= 1 (or profile every batch, "
                                f"as an oracle: see {key.params_field})",
                                source=cfg.source, field="cache.warmup_batches")
            n = self.trace.num_batches
            # ceil(fraction x n) = prefix batches exactly (the 0.5 keeps float error away)
            frac = 1.0 if key.warm == "profile-all" else (self.prefix - 0.5) / n
            # preloaded: the prefix changes nothing the timed batches see, so only they
            # are replayed (the prefix is profiled all the same)
            params = {**dict(key.params), "profile_fraction": frac, "preload": True,
                      "skip_batches": self.prefix}
            k = dataclasses.replace(key, params=tuple(sorted(params.items())))
            w = workload(self.trace, k, cfg, self.replay_cache).tail(self.prefix)
        elif key.policy is None:  # no cache, nothing to warm: the timed batches alone
            w = uncached_counts(self._timed_trace, key.where, self._access_unique())
        else:
            w = workload(self._run, key, cfg, self.replay_cache).tail(self.warm)
        return w

    def _access_unique(self) -> tuple[np.ndarray, np.ndarray]:
        """Accesses and unique rows of each timed batch: what every design without a cache
        (hybrid, gpu-only) is priced from, one pass shared by all of them."""
        if "access_unique" not in self._memo:
            def compute():
                acc, uniq = access_unique(self._timed_trace)
                return {"accesses": acc, "unique": uniq}, {}

            cols, _ = self._cached("access-unique", self._timed_trace, compute,
                                   _COUNTS_SOURCES)
            self._memo["access_unique"] = (cols["accesses"], cols["unique"])
        return self._memo["access_unique"]

    def _table_bytes(self) -> dict[str, np.ndarray]:
        if "bytes" not in self._memo:
            m = self.cfg.model
            self._memo["bytes"] = table_bytes(self._timed_trace, m.row_bytes_per_table,
                                              m.moved_row_bytes_per_table)
        return dict(self._memo["bytes"])

    def _first_touches(self) -> np.ndarray:
        """Rows of each timed batch never seen earlier in the whole trace (prefix included):
        the closest estimate of compulsory misses the trace allows."""
        if "first" not in self._memo:
            cols, _ = self._cached("first-touches", self.trace,
                                   lambda: ({"first": first_touches(self.trace)}, {}),
                                   _COUNTS_SOURCES)
            self._memo["first"] = cols["first"][self.prefix:]
        return self._memo["first"]

    def _onchip_cache(self, key: WorkloadKey) -> tuple[str, int, int]:
        """Which on-chip cache `key`'s lookups meet: its memo name, rows and ways."""
        hw, r = self.cfg.hardware, self.cfg.model.row_bytes
        host = key.policy is None and key.where == "host"
        mib, ways, name = ((hw.cpu.llc_MiB, hw.cpu.llc_ways, "llc") if host
                           else (hw.gpu.l2_MiB, hw.gpu.l2_ways, "l2"))
        return name, int(mib * (1 << 20) // r), int(ways)

    def _onchip(self, key: WorkloadKey) -> dict[str, np.ndarray]:
        """On-chip hits of the lookup stream: GPU L2 for GPU-side designs, CPU LLC for the
        host-side one (computed over the timed batches plus one batch to warm them)."""
        name, rows, ways = self._onchip_cache(key)
        return {} if rows <= 0 else self._onchip_columns(name, rows, ways)

    def _onchip_columns(self, name: str, rows: int, ways: int) -> dict[str, np.ndarray]:
        if name not in self._memo:
            from scratchpipe_sim.timing.onchip import onchip_hits

            lead = 1 if self.prefix > 0 else 0
            sub = slice_trace(self.trace, self.prefix - lead, self.trace.num_batches)

            def compute():
                oc = onchip_hits(sub, rows, ways)
                return {"lookup": oc.lookup_hits, "update": oc.update_hits}, {}

            cols, _ = self._cached("onchip-hits", sub, compute, _ONCHIP_SOURCES,
                                   rows=rows, ways=int(ways))
            self._memo[name] = {f"{name}_hits": np.asarray(cols["lookup"])[lead:],
                                f"{name}_update_hits": np.asarray(cols["update"])[lead:]}
        return dict(self._memo[name])


def _timed_pass(replays: Replays, task: tuple) -> tuple[Any, float]:
    """A forked worker's pass (`fork_map`): its result and seconds."""
    t0 = time.perf_counter()
    result = replays.run_pass(task)
    return result, time.perf_counter() - t0


#: progress(event, design, done, total): event is "policy" (a design's counts are about to be
#: computed or reused), "design" (a design's SimPy run ended: done of total designs).
Progress = Callable[[str, str, int, int], None]


def simulate(cfg: Config, designs: Sequence[str] | None = None,
             timeline_dir: Path | None = None, trace: Trace | None = None,
             progress: Progress | None = None, replay_cache: bool = True,
             jobs: int = 1, checksum: bool = False) -> list[dict]:
    """Run `designs` (default: cfg.designs) on one trace; one flat metrics dict per design.

    `replay_cache=False` recomputes every policy replay (and generates the trace) instead
    of reading the on-disk caches (`scratchpipe_sim.policies.replay_cache`). `jobs > 1`
    makes the independent replays in that many forked processes (`Replays.precompute`:
    identical results). `checksum=True`: the caller will ask `trace.checksum()` (`run`
    records it); with the replays forked, a worker hashes the trace beside them (0.1 s of
    a ~2.6 s cold quickstart run on 2 cores, otherwise spent after them in this process)."""
    names = check_designs(cfg, designs)
    check_jobs(jobs)
    trace = build_trace(cfg, cache=replay_cache) if trace is None else trace
    given = trace
    cfg = sized_config(cfg, trace)
    trace = fit_trace(trace, cfg)
    built = {name: DESIGNS.get(name)(cfg) for name in names}
    keys = {name: d.workload_key() for name, d in built.items()}
    replays = Replays(cfg, trace, any(k.policy is not None for k in keys.values()),
                      replay_cache, checksum_of=given if checksum else None)
    jobs = memory_guard.jobs_within_memory(trace.total_rows, trace.num_accesses, jobs)
    if jobs > 1 and trace.num_accesses >= generators.PARALLEL_MIN_ACCESSES:
        replays.precompute([keys[n] for n in names], jobs)
    rows = []
    for name in names:
        design, key = built[name], keys[name]
        if progress is not None:
            progress("policy", name, len(rows), len(names))
        w, policy_s = replays.get(key)
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
    for r in rows:  # never silently: a cache still filling prices its cold start
        if r.get("steady_state") is False:
            print(f"scratchpipe-sim: {steady_state_warning(cfg, r)}", file=sys.stderr)
    base_name = baseline_design()  # the column keeps its stable name speedup_vs_hybrid
    base = next((r for r in rows if r["design"] == base_name), None)
    for r in rows:
        r["speedup_vs_hybrid"] = (base["iter_ns_mean"] / r["iter_ns_mean"]
                                  if base is not None else None)
    return rows


#: Trace.meta key: the warm-up prefix `auto_warmup_trace` built the trace with
AUTO_PREFIX = "auto_warmup_prefix"


def auto_warmup_trace(cfg: Config, replay_cache: bool, jobs: int = 1) -> Trace:
    """The config's trace; with `cache.warmup_batches: auto`, a generated trace and a cache
    design, its warm-up prefix doubled from model.num_batches until the prefix touches as
    many distinct rows as the cache holds, or the timed batches' never-seen rows (a cache's
    compulsory misses) arrive at a steady rate (`steady`), within AUTO_WARMUP_MAX_ACCESSES.
    The trace's meta records the prefix (AUTO_PREFIX) for `fit_trace`."""
    m = cfg.model
    per_batch = m.batch_size * sum(m.poolings)
    capacity = cfg.capacity_rows()
    prefix = m.num_batches
    while True:
        trace = config_trace(cfg, cache=replay_cache, prefix_batches=prefix, jobs=jobs)

        def compute(trace=trace, prefix=prefix):
            # a prefix that fills the cache decides alone (it stops as soon as it has
            # `capacity` rows): the two whole-trace passes only when it does not
            if warmup_length(trace, prefix, capacity) < prefix:
                return {}, {"warm": 1}
            new = first_touches(trace)[prefix + m.warmup_batches:]
            _, unique = access_unique(slice_trace(trace, prefix + m.warmup_batches,
                                                  trace.num_batches))
            return {}, {"warm": int(steady(new, unique)[0])}

        if replay_cache:  # a warm run decides from the on-disk cache, as for replays
            _, extra = cached_columns(
                {"kind": "auto-warmup", "trace": trace.fingerprint(), "prefix": prefix,
                 "capacity": int(capacity), "warmup_batches": m.warmup_batches,
                 "tol": STEADY_TOL}, compute, True, sources=_AUTO_SOURCES)
        else:
            _, extra = compute()
        if (extra["warm"]
                or (2 * prefix + m.num_batches) * per_batch > AUTO_WARMUP_MAX_ACCESSES):
            return trace.with_meta({**trace.meta, AUTO_PREFIX: prefix})
        prefix *= 2


def steady_state_warning(cfg: Config, row: dict[str, Any]) -> str:
    """One line: a design whose fill rate still drifts over the measured batches."""
    wb = cfg.cache.warmup_batches
    need = ("cache.warmup_batches: auto lengthens the warm-up up to "
            f"{AUTO_WARMUP_MAX_ACCESSES:,} accesses" if wb != "auto" else
            f"auto stopped at its cap of {AUTO_WARMUP_MAX_ACCESSES:,} accesses")
    return (f"{row['design']} did not reach steady state: its fill rate drifts "
            f"{row['fill_rate_drift']:+.0%} over the measured batches, cold-miss share "
            f"{row['cold_miss_share']:.2f} after a warm-up of {row['cache_warmup_batches']} "
            f"batches; a longer warm-up is needed (more batches than the "
            f"{row['cache_warmup_batches']} replayed: {need}; or more model.num_batches)")


def steady(fills: np.ndarray, unique: np.ndarray | None = None, tol: float = STEADY_TOL
           ) -> tuple[bool, float]:
    """Whether the fill rate converged over the measured batches: the mean of the second
    half within `tol` of the first half's, or (given the batches' unique rows) the change
    at most `tol` x the mean unique rows of a batch — a cache holding every row it has
    seen fills only never-seen rows, whose rate decays without end, but once the decay is a
    small share of each batch's rows it no longer moves the time (relative drift
    returned)."""
    n = len(fills)
    if n < 4:
        return True, 0.0
    a, b = float(fills[: n // 2].mean()), float(fills[n // 2 :].mean())
    drift = (a - b) / max(a, b) if max(a, b) > 0 else 0.0
    small = unique is not None and abs(a - b) <= tol * float(np.mean(unique))
    return abs(drift) <= tol or small, drift


def run_design(cfg: Config, design: Design, w: Workload, keep_spans: bool = False
               ) -> Machine:
    """Price one design's run of workload `w`: its SimPy process on a fresh environment and
    Machine, to the last event (`run_to_end`); the machine holds what it measured."""
    env = simpy.Environment()
    m = Machine(env, cfg, w.num_batches, keep_spans=keep_spans)
    env.process(design.run(m, w))
    run_to_end(env)
    return m


def percentile(values: np.ndarray, q: float) -> float:
    """`np.percentile(values, q)` (method "linear") bit for bit, for a 1-d array without
    NaNs: numpy's first `percentile` call imports `numpy.ma` (~7 ms of a fully cached run).
    numpy's steps: index (n - 1) x q / 100, its floor and the next, `_lerp`'s two forms."""
    s = np.sort(values)
    n = len(s)
    virtual = (n - 1) * (q / 100)
    below = float(np.floor(virtual))
    lo = min(int(below), n - 1)
    hi = min(lo + 1, n - 1)
    gamma = virtual - below
    a, b = s[lo], s[hi]
    diff = b - a
    return float(b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma)


def summarize(cfg: Config, name: str, m: Machine, w: Workload) -> dict[str, Any]:
    """Metrics over the measured batches (warmup_batches onward)."""
    done = m.done
    wu = cfg.model.warmup_batches
    prev = np.concatenate(([0.0], done[:-1]))
    it = (done - prev)[wu:]
    samples = int(w.cols["samples"][wu:].sum())
    span_ns = float(done[-1] - (done[wu - 1] if wu > 0 else 0.0))
    hw = cfg.hardware
    row: dict[str, Any] = {
        "design": name,
        "policy": w.policy,
        "capacity_rows": w.capacity,
        "batches": int(w.num_batches),
        "measured_batches": int(len(it)),
        "iter_ns_mean": float(it.mean()),
        "iter_ns_p50": percentile(it, 50),
        "iter_ns_p99": percentile(it, 99),
        "iter_cycles_mean": float(it.mean() * hw.clock_GHz),
        "samples_per_s": samples / span_ns * 1e9 if span_ns > 0 else float("inf"),
        "hit_ratio": w.total("hits", wu) / max(w.total("accesses", wu), 1),
        "pcie_h2d_bytes_per_sample": float(m.pcie.h2d_bytes[wu:].sum()) / samples,
        "pcie_d2h_bytes_per_sample": float(m.pcie.d2h_bytes[wu:].sum()) / samples,
        "pcie_h2d_bytes": float(m.pcie.h2d_bytes[wu:].sum()),
        "pcie_d2h_bytes": float(m.pcie.d2h_bytes[wu:].sum()),
        "dram_bytes": float(m.dram.server.bytes_by_batch[wu:].sum()),
        "hbm_bytes": float(m.hbm.server.bytes_by_batch[wu:].sum()),
    }
    if m.cxl is not None:  # only with a CXL tier: runs without one keep their columns
        row["cxl_bytes"] = float(m.cxl.server.bytes_by_batch[wu:].sum())
    for col in ("accesses", "unique", "hits", "fills", "evictions", "writebacks", "unplaced",
                "unique_unplaced"):
        row[col] = w.total(col, wu)
    end = float(done[-1])
    window = end - m.window_start_ns
    for s in m.servers:
        busy = s.busy_now() - m.busy_at_window_start[s.name]
        row[f"busy_{s.name}"] = busy / window if window > 0 else 0.0
    for st in m.stage_order:
        row[f"stage_{st}_ns"] = float(m.stage_ns[st][wu:].mean())
    for k, v in w.extra.items():
        row[f"policy_{k}"] = v
    for k, v in m.counters.items():
        row[k] = v
    if "usd_per_million_samples" not in row:  # what a million samples cost on this hardware
        from scratchpipe_sim.config.cost import usd_per_million

        row["usd_per_million_samples"] = usd_per_million(cfg, row["samples_per_s"],
                                                         int(m.counters.get("gpus", 1)))
    for chip in ("l2", "llc"):  # lookups that hit on chip (only where the design has one)
        if f"{chip}_hits" in w.cols:
            row[f"{chip}_hit_ratio"] = (w.total(f"{chip}_hits", wu)
                                        / max(w.total("accesses", wu), 1))
    if "first_touches" in w.cols:  # a cache design: how much of the result is cold start
        misses = w.total("misses", wu)
        row["cold_miss_share"] = w.total("first_touches", wu) / misses if misses else 0.0
        ok, drift = steady(w.cols["fills"][wu:], w.cols["unique"][wu:])
        row["steady_state"] = ok
        row["fill_rate_drift"] = drift
    return row
