"""`Replays`: the per-batch counts every design of one run is priced from, each made once.

They are made by independent passes over the trace (a cache policy's replay, the on-chip
walks, first touches, ...). Each kind of pass is a frozen dataclass (`TracePass`) that says
how to make it (`run`), where its result goes (`keep`), how long it runs (`rank`) and whether
the on-disk cache may hold it (`cacheable`): `Replays.precompute` forks them, and a warm run
reads them from the cache, without knowing which kinds there are.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scratchpipe_sim.config import Config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies import POLICIES
from scratchpipe_sim.policies.replay_cache import NotCached, cached_columns, lookup_only
from scratchpipe_sim.policies.time_ranges import RangeSetting
from scratchpipe_sim.timing.counts import (
    Where,
    Workload,
    access_unique,
    cold_touches,
    first_touches,
    policy_counts,
    policy_mix,
    table_bytes,
    uncached_counts,
    warmup_length,
)
from scratchpipe_sim.timing.designs.design_inputs import (
    Warm,
    WorkloadKey,
    check_prefix,
    policy_error,
)
from scratchpipe_sim.traces._pages import trim_heap
from scratchpipe_sim.traces.csr_trace import Trace, slice_trace

#: code behind the trace passes `Replays` caches (see `traces.disk_cache.code_digest`):
#: the modules defining what they compute (`access_unique` is the policy engine's)
_COUNTS_SOURCES = ("policies/engine.py", "timing/counts.py", "traces/csr_trace.py")
_ONCHIP_SOURCES = ("timing/onchip.py", "traces/csr_trace.py")

#: `TracePass.rank`s, which passes to start first (lower: longer), by what a pass does per
#: access (the quickstart's passes, serial, on the 2-core VM of docs/performance.md,
#: session 7: scratchpipe 0.63 s, lru 0.36, static 0.16, the L2 and LLC walks 0.30 / 0.25,
#: unique rows 0.11, first touches 0.12, the trace's checksum ~0.1): a replay that also
#: needs each access's next use (scratchpipe, belady, bagpipe), then other replays, the
#: set-associative on-chip walks, the single passes: longest first, so the short ones fill
#: the end (with the walks before the other replays, lru started last and one worker idled
#: ~0.3 s at the end).
RANK_NEXT_USE_REPLAY, RANK_REPLAY, RANK_ONCHIP, RANK_SINGLE = 0, 1, 2, 3


def workload(trace: Trace, key: WorkloadKey, cfg: Config,
             replay_cache: bool = True, ranges: RangeSetting | None = None) -> Workload:
    """The per-batch counts `key` asks for over `trace` (policy errors named by config key).

    Tables of different dims need the policy's per-table totals (what it fills is priced at
    its tables' row bytes): that replay runs without the replay cache (and whole, never as
    `ranges`)."""
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
                             ranges=ranges,
                             **dict(key.params))
    except UserError as e:
        raise policy_error(e, key, cfg) from None


class TracePass(ABC):
    """One independent pass over the trace that `Replays` needs (every kind a frozen
    dataclass, so equal passes dedupe and a pass pickles to a forked worker)."""

    @abstractmethod
    def run(self, replays: Replays) -> Any:
        """Make the pass over `replays`' trace (what a forked worker runs): its result."""

    @abstractmethod
    def keep(self, replays: Replays, result: Any, seconds: float) -> None:
        """Store a result `run` made (here or in a worker) as if this process had made it."""

    @abstractmethod
    def rank(self) -> int:
        """When to start it among the others: a `RANK_*` (lower: longer, started first)."""

    @abstractmethod
    def cacheable(self, replays: Replays) -> bool:
        """Whether the on-disk cache may hold its result (else `run` computes it even under
        `lookup_only`: a warm run leaves it to the workers)."""


@dataclasses.dataclass(frozen=True)
class PolicyPart(TracePass):
    """The counts a key's cache policy makes over the timed batches (`Replays._policy_part`)."""

    key: WorkloadKey

    def run(self, replays: Replays) -> Workload:
        return replays._policy_part(self.key)

    def keep(self, replays: Replays, result: Workload, seconds: float) -> None:
        replays._parts[self.key] = result
        replays._part_s[self.key] = seconds

    def rank(self) -> int:
        if self.key.policy is None:
            return RANK_SINGLE
        needs_next_use = POLICIES.get(self.key.policy).needs_next_use
        return RANK_NEXT_USE_REPLAY if needs_next_use else RANK_REPLAY

    def cacheable(self, replays: Replays) -> bool:
        # tables of different dims: replayed without the cache (`workload`)
        return self.key.policy is None or not replays.cfg.model.heterogeneous


@dataclasses.dataclass(frozen=True)
class AccessUnique(TracePass):
    """Accesses and unique rows of each timed batch, shared by every design without a cache."""

    def run(self, replays: Replays) -> tuple[np.ndarray, np.ndarray]:
        return replays._access_unique()

    def keep(self, replays: Replays, result: tuple[np.ndarray, np.ndarray],
             seconds: float) -> None:
        replays._access_unique_counts = result

    def rank(self) -> int:
        return RANK_SINGLE

    def cacheable(self, replays: Replays) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class TableBytes(TracePass):
    """Per-table bytes of each timed batch (tables of different dims); never on disk."""

    def run(self, replays: Replays) -> dict[str, np.ndarray]:
        return replays._table_bytes()

    def keep(self, replays: Replays, result: dict[str, np.ndarray], seconds: float) -> None:
        replays._bytes = result

    def rank(self) -> int:
        return RANK_SINGLE

    def cacheable(self, replays: Replays) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class FirstTouches(TracePass):
    """Rows of each batch of the trace never seen in an earlier one (a cache's cold
    misses)."""

    def run(self, replays: Replays) -> np.ndarray:
        return replays._trace_first_touches()

    def keep(self, replays: Replays, result: np.ndarray, seconds: float) -> None:
        replays._first = result

    def rank(self) -> int:
        return RANK_SINGLE

    def cacheable(self, replays: Replays) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class OnChip(TracePass):
    """On-chip hits of the lookup stream in one cache (`name` "l2" or "llc", its rows and
    ways); also the key its columns are kept under."""

    name: str
    rows: int
    ways: int

    def run(self, replays: Replays) -> dict[str, np.ndarray]:
        return replays._onchip_columns(self)

    def keep(self, replays: Replays, result: dict[str, np.ndarray], seconds: float) -> None:
        replays._onchip_hits[self] = result

    def rank(self) -> int:
        return RANK_ONCHIP

    def cacheable(self, replays: Replays) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class Checksum(TracePass):
    """The sha256 of the trace the caller passed (`Replays.checksum_of`); never on disk."""

    def run(self, replays: Replays) -> str:
        assert replays.checksum_of is not None
        return replays.checksum_of.content_sha256()

    def keep(self, replays: Replays, result: str, seconds: float) -> None:
        assert replays.checksum_of is not None
        replays.checksum_of.with_digests(result)

    def rank(self) -> int:
        return RANK_SINGLE

    def cacheable(self, replays: Replays) -> bool:
        return False


class Replays:
    """The counts every design of one `simulate` call is priced from, each computed once.

    The trace is `prefix` warm-up batches then the timed ones. Dynamic caches replay the last
    `warm` prefix batches before the timed ones (policy only, no SimPy); `static` profiles the
    whole prefix (or, as an oracle, the timed batches too) and preloads its rows.
    """

    def __init__(self, cfg: Config, trace: Trace, cached: bool, replay_cache: bool = True,
                 checksum_of: Trace | None = None, ranges: RangeSetting | None = None):
        self.cfg, self.trace = cfg, trace
        self.replay_cache = replay_cache
        #: the replays a run makes as time ranges (`run --ranges`), where proven exact
        self.ranges = ranges
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
        # the shared passes' results, each made once (or kept from a worker)
        self._access_unique_counts: tuple[np.ndarray, np.ndarray] | None = None
        self._bytes: dict[str, np.ndarray] | None = None
        self._first: np.ndarray | None = None
        self._onchip_hits: dict[OnChip, dict[str, np.ndarray]] = {}
        self._cache: dict[WorkloadKey, tuple[Workload, float]] = {}
        #: policy parts computed ahead by `precompute` (taken by `_compute`)
        self._parts: dict[WorkloadKey, Workload] = {}
        self._part_s: dict[WorkloadKey, float] = {}

    def _cached(self, kind: str, trace: Trace,
                compute: Callable[[], tuple[dict[str, Any], dict[str, Any]]],
                sources: tuple[str, ...], **key: Any
                ) -> tuple[dict[str, Any], dict[str, Any]]:
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

    def ranged(self, key: WorkloadKey) -> bool:
        """Whether `key`'s replay is made as time ranges (`run --ranges`): a policy with the
        stack property, replayed (not profiled), tables of one dim."""
        return (self.ranges is not None and key.warm == "replay"
                and not self.cfg.model.heterogeneous and self.ranges.applies(key.policy))

    def get(self, key: WorkloadKey) -> tuple[Workload, float]:
        if key not in self._cache:
            t0 = time.perf_counter()
            w = self._compute(key)
            trim_heap()  # as a worker does after each pass (`_timed_pass`)
            self._cache[key] = (w, time.perf_counter() - t0 + self._part_s.pop(key, 0.0))
        return self._cache[key]

    def passes(self, keys: Sequence[WorkloadKey]) -> list[TracePass]:
        """The independent passes over the trace that `get(key)` for every key needs and
        has not made yet: a `PolicyPart` per distinct key with a cache policy, an `OnChip`
        per on-chip cache, `FirstTouches`, `AccessUnique` (the one pass the keys without a
        policy share: their parts are made from it in a moment), `TableBytes` when a key
        needs them and `Checksum` when `checksum_of` still needs hashing. Longest first
        (`TracePass.rank`), so that workers taking them in order finish together."""
        todo = [k for k in dict.fromkeys(keys) if k not in self._cache and k not in self._parts]
        shared: list[TracePass] = []
        if self.checksum_of is not None and self.checksum_of.checksum_pending():
            shared.append(Checksum())
        if any(k.policy is None for k in todo) and self._access_unique_counts is None:
            shared.append(AccessUnique())
        for k in todo:
            onchip = self._onchip_pass(k)
            if onchip.rows > 0 and onchip not in self._onchip_hits and onchip not in shared:
                shared.append(onchip)
        if any(k.policy is not None and k.warm is not Warm.PROFILE_ALL for k in todo):
            if self._first is None:
                shared.append(FirstTouches())
        if todo and self.cfg.model.heterogeneous and self._bytes is None:
            shared.append(TableBytes())
        parts: list[TracePass] = [PolicyPart(k) for k in todo if k.policy is not None]
        return sorted(shared + parts, key=lambda p: p.rank())

    def _read_cached(self, passes: list[TracePass]) -> list[TracePass]:
        """Keep every pass the on-disk cache holds (read here: forking to read a file costs
        more than reading it); the passes left to make."""
        if not self.replay_cache:
            return passes
        rest = []
        with lookup_only():
            for p in passes:
                if not p.cacheable(self):
                    rest.append(p)
                    continue
                t0 = time.perf_counter()
                try:
                    result = p.run(self)
                except NotCached:
                    rest.append(p)
                else:
                    p.keep(self, result, time.perf_counter() - t0)
        return rest

    def precompute(self, keys: Sequence[WorkloadKey], jobs: int) -> int:
        """Make the passes `keys` need in up to `jobs` forked processes (each inherits the
        trace copy-on-write; results come back pickled and are kept as if made here, so
        every count is bit for bit the serial one). Returns the processes used (1: serial,
        also where `fork` is unavailable)."""
        passes = self._read_cached(self.passes(keys))
        jobs = min(int(jobs), len(passes))
        if jobs <= 1:
            return 1
        # imported here: a fully cached run forks nothing (multiprocessing costs ~7 ms)
        from scratchpipe_sim.traces.forked import FAILED, can_fork, fork_map  # noqa: PLC0415

        if not can_fork():
            return 1
        trim_heap()  # what opening the trace freed is not inherited by every worker
        made = fork_map(_timed_pass, self, passes, jobs, skip_failures=True)
        for p, got in zip(passes, made, strict=True):
            if got is not FAILED:  # a failed pass is made again serially, raising its error
                p.keep(self, *got)
        return jobs

    def _compute(self, key: WorkloadKey) -> Workload:
        part = self._parts.pop(key, None)
        w = self._policy_part(key) if part is None else part
        cols = self._onchip(key)
        if self.cfg.model.heterogeneous:
            cols.update(self._table_bytes())
        if key.policy is not None and key.warm is not Warm.PROFILE_ALL:
            first = self._trace_first_touches()
            cols["first_touches"] = first[self.prefix:]
            cols["cold_touches"] = cold_touches(first, key.capacity)[self.prefix:]
        elif key.policy is not None:  # an oracle profiles every batch: no cold start
            cols["cold_touches"] = np.zeros(w.num_batches, np.int64)
        return w.with_columns(cols)

    def _policy_part(self, key: WorkloadKey) -> Workload:
        """The counts `key`'s policy (or none) makes over the timed batches, before the
        columns every design shares (on-chip hits, first touches, per-table bytes)."""
        cfg = self.cfg
        if key.policy is not None and key.warm is not Warm.REPLAY:  # profile, preload
            check_prefix(key, self.prefix, cfg)
            n = self.trace.num_batches
            # ceil(fraction x n) = prefix batches exactly (the 0.5 keeps float error away)
            frac = 1.0 if key.warm is Warm.PROFILE_ALL else (self.prefix - 0.5) / n
            # preloaded: the prefix changes nothing the timed batches see, so only they
            # are replayed (the prefix is profiled all the same)
            params = {**dict(key.params), "profile_fraction": frac, "preload": True,
                      "skip_batches": self.prefix}
            k = dataclasses.replace(key, params=tuple(sorted(params.items())))
            w = workload(self.trace, k, cfg, self.replay_cache).tail(self.prefix)
        elif key.policy is None:  # no cache, nothing to warm: the timed batches alone
            w = uncached_counts(self._timed_trace, key.where, self._access_unique())
        else:
            w = workload(self._run, key, cfg, self.replay_cache, self.ranges).tail(self.warm)
        return w

    def _access_unique(self) -> tuple[np.ndarray, np.ndarray]:
        """Accesses and unique rows of each timed batch: what every design without a cache
        (hybrid, gpu-only) is priced from, one pass shared by all of them."""
        if self._access_unique_counts is None:
            def compute():
                acc, uniq = access_unique(self._timed_trace)
                return {"accesses": acc, "unique": uniq}, {}

            cols, _ = self._cached("access-unique", self._timed_trace, compute,
                                   _COUNTS_SOURCES)
            self._access_unique_counts = (cols["accesses"], cols["unique"])
        return self._access_unique_counts

    def _table_bytes(self) -> dict[str, np.ndarray]:
        if self._bytes is None:
            m = self.cfg.model
            self._bytes = table_bytes(self._timed_trace, m.row_bytes_per_table,
                                      m.moved_row_bytes_per_table)
        return dict(self._bytes)

    def _trace_first_touches(self) -> np.ndarray:
        """Rows of each batch never seen earlier in the whole trace (prefix included): the
        closest estimate of compulsory misses the trace allows (`cold_touches` keeps those
        a cache has room for)."""
        if self._first is None:
            cols, _ = self._cached("first-touches", self.trace,
                                   lambda: ({"first": first_touches(self.trace)}, {}),
                                   _COUNTS_SOURCES)
            self._first = cols["first"]
        return self._first

    def _onchip_pass(self, key: WorkloadKey) -> OnChip:
        """Which on-chip cache `key`'s lookups meet: its name, rows and ways."""
        hw, r = self.cfg.hardware, self.cfg.model.row_bytes
        host = key.policy is None and key.where is Where.HOST
        mib, ways, name = ((hw.cpu.llc_MiB, hw.cpu.llc_ways, "llc") if host
                           else (hw.gpu.l2_MiB, hw.gpu.l2_ways, "l2"))
        rows = int(mib * (1 << 20) // r) if key.onchip else 0  # 0: no walk (`WorkloadKey`)
        return OnChip(name, rows, int(ways))

    def _onchip(self, key: WorkloadKey) -> dict[str, np.ndarray]:
        """On-chip hits of the lookup stream: GPU L2 for GPU-side designs, CPU LLC for the
        host-side one (computed over the timed batches plus one batch to warm them)."""
        onchip = self._onchip_pass(key)
        return {} if onchip.rows <= 0 else self._onchip_columns(onchip)

    def _onchip_columns(self, onchip: OnChip) -> dict[str, np.ndarray]:
        if onchip not in self._onchip_hits:
            from scratchpipe_sim.timing.onchip import onchip_hits

            name, rows, ways = onchip.name, onchip.rows, onchip.ways
            lead = 1 if self.prefix > 0 else 0
            sub = slice_trace(self.trace, self.prefix - lead, self.trace.num_batches)

            def compute():
                oc = onchip_hits(sub, rows, ways)
                return {"lookup": oc.lookup_hits, "update": oc.update_hits}, {}

            cols, _ = self._cached("onchip-hits", sub, compute, _ONCHIP_SOURCES,
                                   rows=rows, ways=int(ways))
            self._onchip_hits[onchip] = {
                f"{name}_hits": np.asarray(cols["lookup"])[lead:],
                f"{name}_update_hits": np.asarray(cols["update"])[lead:]}
        return dict(self._onchip_hits[onchip])


def _timed_pass(replays: Replays, trace_pass: TracePass) -> tuple[Any, float]:
    """A forked worker's pass (`fork_map`): its result and seconds."""
    t0 = time.perf_counter()
    result = trace_pass.run(replays)
    trim_heap()  # the pass's freed buffers back to the OS before the worker's next pass
    return result, time.perf_counter() - t0
