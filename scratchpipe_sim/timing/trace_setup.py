"""The trace a run is priced on: its memory checks, building it (read or generated, then
checked against the model and cut to the warm-up prefix + timed batches), and the auto
warm-up prefix (`cache.warmup_batches: auto`).

Why apart from the runner: the api, sweeps and benchmarks need the trace and its checks
without the designs, and the on-disk cache of auto warm-up decisions is keyed by this
module's code (`_AUTO_SOURCES`), not by the metrics' or the runner's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.config import Config
from scratchpipe_sim.config.model import DEFAULT_ROWS, per_table
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.replay_cache import cached_columns
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.timing.counts import cold_touches, first_touches, warmup_length
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.designs.design_registry import config_designs
from scratchpipe_sim.traces.csr_trace import Trace, slice_trace
from scratchpipe_sim.traces.trace_cache import cached_trace

#: `cache.warmup_batches: auto` on a generated (stationary) trace lengthens its warm-up
#: prefix (doubling it from model.num_batches) until the first-touch share of the measured
#: lookups (`counts.cold_touches`: misses only a cold cache makes) is below
#: FIRST_TOUCH_TARGET, but never past this many accesses in the whole trace (about 20 bytes
#: each at a run's peak, `memory_guard.BYTES_PER_ACCESS`: 2 GB at the cap; each doubling is
#: checked against the memory available before it is drawn): the documented bound on
#: auto's time and memory. At the cap `run` warns with the share left.
AUTO_WARMUP_MAX_ACCESSES = 100_000_000
#: the first-touch share of the measured lookups a warm-up must reach: a generated trace's
#: `auto` warms until it is below; a result at or above it is warned about (a recorded
#: trace's only while its share still falls, `first_touch_falling`)
FIRST_TOUCH_TARGET = 0.01
#: `steady`'s tolerance: the second half's rate within this share of the first half's
STEADY_TOL = 0.1


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


def _read_trace_file(open_trace: Callable[..., Trace], path: Path, **kw: Any) -> Trace:
    """`open_trace(path, **kw)`, its input errors naming the key that gave the file
    (`trace.path`) beside the file and line the reader names."""
    try:
        return open_trace(path, **kw)
    except UserError as e:
        if e.field is None:
            raise UserError(e.message, source=e.source or str(path),
                            field="trace.path") from None
        raise


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
            trace = _read_trace_file(open_trace, path, fmt=t.format)
            if trace.batch_size != m.batch_size:
                raise UserError(
                    f"the trace {path} has batch size {trace.batch_size}; expected "
                    f"model.batch_size to match (e.g. --set model.batch_size="
                    f"{trace.batch_size})", source=cfg.source, field="model.batch_size")
        else:  # flat id streams are cut into the model's mini-batches; rows = max id + 1
            trace = _read_trace_file(open_trace, path, batch_size=m.batch_size, fmt=t.format)
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


#: Trace.meta key: the warm-up prefix `auto_warmup_trace` built the trace with
AUTO_PREFIX = "auto_warmup_prefix"
#: Trace.meta key: the first-touch share of the measured lookups that prefix reached
AUTO_SHARE = "auto_warmup_first_touch_share"
#: code behind the auto warm-up decisions `auto_warmup_trace` caches on disk (see
#: `traces.disk_cache.code_digest`): the passes it makes (`warmup_length`, `first_touches`,
#: `cold_touches`), the trace's chunks and this module; not the metrics or the runner
_AUTO_SOURCES = ("policies/engine.py", "timing/counts.py", "timing/trace_setup.py",
                 "traces/csr_trace.py")


def auto_warmup_trace(cfg: Config, replay_cache: bool, jobs: int = 1) -> Trace:
    """The config's trace; with `cache.warmup_batches: auto`, a generated trace and a cache
    design, its warm-up prefix doubled from model.num_batches until the first-touch share of
    the measured lookups (`counts.cold_touches`: first touches while the cache still
    has room, the misses no long run would see) is below FIRST_TOUCH_TARGET -- at once when
    the prefix touches as many distinct rows as the cache holds -- within
    AUTO_WARMUP_MAX_ACCESSES. The trace's meta records the prefix (AUTO_PREFIX) for
    `fit_trace` and the share reached (AUTO_SHARE)."""
    m = cfg.model
    per_batch = m.batch_size * sum(m.poolings)
    capacity = cfg.capacity_rows()
    prefix = m.num_batches
    while True:
        check_warmup_memory(cfg, (prefix + m.num_batches) * per_batch)
        trace = config_trace(cfg, cache=replay_cache, prefix_batches=prefix, jobs=jobs)

        def compute(trace=trace, prefix=prefix):
            # a prefix that fills the cache decides alone (it stops as soon as it has
            # `capacity` rows): the whole-trace pass only when it does not
            # (an int count and its total: the cache keeps int extras)
            start = prefix + m.warmup_batches
            measured = int(trace.batch_access_ptr()[-1] - trace.batch_access_ptr()[start])
            if warmup_length(trace, prefix, capacity) < prefix:
                return {}, {"cold": 0, "measured": measured}
            cold = cold_touches(first_touches(trace), capacity)[start:].sum()
            return {}, {"cold": int(cold), "measured": measured}

        if replay_cache:  # a warm run decides from the on-disk cache, as for replays
            _, extra = cached_columns(
                {"kind": "auto-warmup-share", "trace": trace.fingerprint(), "prefix": prefix,
                 "capacity": int(capacity), "warmup_batches": m.warmup_batches},
                compute, True, sources=_AUTO_SOURCES)
        else:
            _, extra = compute()
        share = int(extra["cold"]) / max(int(extra["measured"]), 1)
        if (share < FIRST_TOUCH_TARGET
                or (2 * prefix + m.num_batches) * per_batch > AUTO_WARMUP_MAX_ACCESSES):
            return trace.with_meta({**trace.meta, AUTO_PREFIX: prefix, AUTO_SHARE: share})
        del trace, compute  # the next, longer trace is drawn without this one in memory
        prefix *= 2


def check_warmup_memory(cfg: Config, accesses: int) -> None:
    """`memory_guard.check_run` for the trace an auto warm-up is about to draw (held in
    memory: the bound on auto's longer prefixes), blaming cache.warmup_batches."""
    rows = cfg.total_rows
    need = memory_guard.estimate(rows, accesses, memory_guard.RUN_BYTES_PER_ROW)
    memory_guard.check(need, f"the auto warm-up's trace ({accesses} lookups over {rows} rows)",
                       "expected a fixed cache.warmup_batches (a shorter warm-up: its "
                       "first-touch share is reported) or more memory",
                       source=cfg.source, field="cache.warmup_batches")


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
