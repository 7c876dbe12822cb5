"""A policy's replay as K time ranges, each replayed on its own from a warm-up overlap.

Why: one replay is one core's work in stream order; a long trace split into K ranges of
batches is K independent tasks (forked processes here, a Dask cluster through
`experiments/range_tasks.py`). Range k counts batches lo..hi-1 and is replayed from batch
`start` = lo - overlap (the overlap warms its cache and counts nothing) to `stop` = hi plus
the batches past hi a lookahead policy looks at (`Policy.range_tail_batches`). The counted
columns are stitched into what `engine.replay_columns` returns for the whole trace.

When a range is exact (Heidelberger & Stone 1990: the re-simulation at a boundary scales
with the cache, not the trace): an LRU cache of C slots holds the C most recently used
distinct rows in recency order, whatever it held before, once C distinct rows have been
touched (the stack property, `Policy.stack_property`). So a range whose overlap touched at
least C = min(capacity, rows) distinct rows (or reaches back to batch 0) starts in the full
replay's state and makes its decisions: every per-batch column is the full replay's, bit for
bit. `overlap=None` grows each overlap backward batch by batch until that holds. Other
policies are never proven here (LFU, static: their counts start at 0 in a range; lookahead
and next-use policies: their decisions also depend on the state before the overlap):
`RangeReplay.proven` says which ranges are, and `compare_full` measures the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import POLICIES
from scratchpipe_sim.policies.engine import make_policy, replay_columns
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.csr_trace import Trace, chunk_size, slice_trace


@dataclass(frozen=True)
class TimeRange:
    """Range `index`: counts batches lo..hi-1, replayed over start..stop-1."""

    index: int
    lo: int
    hi: int
    start: int
    stop: int
    #: distinct rows the overlap (start..lo-1) touched, counted up to `target`
    overlap_rows: int
    #: distinct rows that prove it exact: min(capacity, rows) for a stack policy, else 0
    target: int

    @property
    def overlap_batches(self) -> int:
        return self.lo - self.start

    @property
    def proven(self) -> bool:
        """Exact by the stack property: the overlap reaches batch 0 or touched `target`
        distinct rows (never for a policy without the property: target 0)."""
        return self.target > 0 and (self.start == 0 or self.overlap_rows >= self.target)

    def describe(self) -> str:
        state = "exact" if self.proven else "not proven"
        why = ("from batch 0" if self.start == 0 else
               f"overlap {self.overlap_batches} batches touched {self.overlap_rows} distinct "
               f"rows" + (f" vs capacity {self.target}" if self.target else ""))
        return f"range {self.index}: batches {self.lo}..{self.hi - 1}, {why}: {state}"


@dataclass(frozen=True)
class RangeTask:
    """What one range's worker needs: the trace and its batches start..stop-1 to replay, the
    policy and which of them to keep. A worker slices the trace itself (forked workers
    share the parent's arrays); a task sent elsewhere is `sliced()` first, so it carries only
    those batches."""

    trace: Trace
    start: int
    stop: int
    policy: str
    capacity: int
    num_rows: int
    params: tuple[tuple[str, Any], ...]
    keep_lo: int  # first kept batch of the slice (lo - start)
    keep_hi: int  # one past the last (hi - start)

    def sliced(self) -> RangeTask:
        """The same task holding only its batches (what a pickled copy should carry)."""
        return dataclasses.replace(self, trace=self.trace.slice(self.start, self.stop),
                                   start=0, stop=self.stop - self.start)


@dataclass(frozen=True)
class RangePart:
    """One range's counted columns (its batches lo..hi-1) and its policy's totals."""

    cols: dict[str, np.ndarray]
    extra: dict[str, int]


@dataclass(frozen=True)
class RangeReplay:
    """The stitched columns (`engine.replay_columns`' for the whole trace when every range
    is exact) and the ranges they came from."""

    cols: dict[str, np.ndarray]
    extra: dict[str, int]
    ranges: tuple[TimeRange, ...]

    @property
    def proven(self) -> bool:
        return all(r.proven for r in self.ranges)


#: mapper(fn, tasks) -> [fn(task) for task in tasks], in order (sequential, forked, Dask)
Mapper = Callable[[Callable[[RangeTask], RangePart], Sequence[RangeTask]], list[RangePart]]


def serial_map(fn: Callable[[RangeTask], RangePart],
               tasks: Sequence[RangeTask]) -> list[RangePart]:
    """The tasks one after the other in this process."""
    return [fn(t) for t in tasks]


def forked_mapper(jobs: int) -> Mapper:
    """The tasks in `jobs` forked processes (`traces.forked.fork_map`; serial where the
    platform cannot fork or one job is asked)."""
    def run(fn: Callable[[RangeTask], RangePart], tasks: Sequence[RangeTask]
            ) -> list[RangePart]:
        from scratchpipe_sim.traces.forked import can_fork, fork_map  # noqa: PLC0415

        if jobs <= 1 or len(tasks) <= 1 or not can_fork():
            return serial_map(fn, tasks)
        # the workers inherit the tasks (their traces are views of the parent's arrays):
        # only an index goes down the pipe, never a slice's ids
        return fork_map(_apply_task, (fn, list(tasks)), list(range(len(tasks))),
                        min(jobs, len(tasks)))
    return run


def _apply_task(state: tuple[Callable[[RangeTask], RangePart], list[RangeTask]],
                i: int) -> RangePart:
    fn, tasks = state
    return fn(tasks[i])


def supports_proof(policy: str) -> bool:
    """Whether time ranges of `policy` can be proven exact (its `stack_property`)."""
    return bool(POLICIES.get(policy, field="policy").stack_property)


def split_batches(num_batches: int, ranges: int) -> list[tuple[int, int]]:
    """`ranges` consecutive (lo, hi) of near-equal batches covering 0..num_batches-1 (fewer
    when there are fewer batches)."""
    if isinstance(ranges, bool) or not isinstance(ranges, int) or ranges < 1:
        raise UserError(f"expected a whole number of time ranges >= 1, got {ranges!r}",
                        field="--ranges")
    k = max(1, min(ranges, num_batches))
    edges = [num_batches * i // k for i in range(k + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def plan_ranges(trace: Trace, policy: str, capacity: int, ranges: int,
                overlap: int | None = None, **params: Any) -> list[TimeRange]:
    """The ranges of a replay of `policy` over `trace`: `overlap` batches before each
    range's first (fewer at the trace's start), or (None) the fewest batches that touch
    min(capacity, rows) distinct rows, which proves an LRU range exact; each overlap's
    distinct rows are counted (up to that target) either way."""
    if overlap is not None and (isinstance(overlap, bool) or not isinstance(overlap, int)
                                or overlap < 0):
        raise UserError(f"expected an overlap of whole batches >= 0, got {overlap!r}",
                        field="--overlap")
    pol = make_policy(policy, capacity, trace.total_rows, **params)
    target = min(int(capacity), trace.total_rows) if pol.stack_property else 0
    count_to = target if target else min(int(capacity), trace.total_rows)
    tail = int(pol.range_tail_batches())
    n = trace.num_batches
    ptr = trace.batch_access_ptr()
    seen = np.zeros(trace.total_rows, np.uint8)
    out = []
    for i, (lo, hi) in enumerate(split_batches(n, ranges)):
        limit = lo if overlap is None else min(lo, overlap)
        if lo == 0:
            start, rows = 0, 0
        else:
            seen[:] = 0
            k, rows = _grow_back(trace, ptr, lo, limit, count_to, seen,
                                 stop_at_target=overlap is None)
            start = lo - k
        out.append(TimeRange(i, lo, hi, start, min(n, hi + tail), rows, target))
    return out


def _grow_back(trace: Trace, ptr: np.ndarray, lo: int, limit: int, target: int,
               seen: np.ndarray, stop_at_target: bool) -> tuple[int, int]:
    """(batches k <= limit before `lo`, distinct rows of batches lo-k..lo-1): the fewest k
    touching `target` rows when `stop_at_target` (else k = limit), the count capped at
    `target` (counting stops there)."""
    step = chunk_size()
    count = np.zeros(1, np.int64)
    end = lo
    while end > lo - limit:
        # a block of whole batches of about `step` accesses, ending at `end`
        first = int(np.searchsorted(ptr, ptr[end] - step, side="left"))
        first = max(lo - limit, min(first, end - 1))
        chunk = trace.chunk(first, end)
        b = _distinct_back(chunk.ids, chunk.batch_ptr, seen, count, target)
        if b >= 0:
            k = lo - (first + b)
            return (k if stop_at_target else limit), int(count[0])
        end = first
    return limit, int(count[0])


@njit(cache=True)
def _distinct_back(ids, batch_ptr, seen, count, target):
    """Batches of a chunk last to first, marking their rows in `seen` and counting new ones
    in count[0]: the batch (index in the chunk) after which count reached `target`, or -1."""
    for b in range(len(batch_ptr) - 2, -1, -1):
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            r = ids[j]
            if seen[r] == 0:
                seen[r] = 1
                count[0] += 1
        if count[0] >= target:
            return b
    return -1


def range_tasks(trace: Trace, policy: str, capacity: int, plan: Sequence[TimeRange],
                **params: Any) -> list[RangeTask]:
    """One task per range: its slice of the trace and the batches to keep of it."""
    items = tuple(sorted(params.items()))
    return [RangeTask(trace, r.start, r.stop, policy, int(capacity),
                      trace.total_rows, items, r.lo - r.start, r.hi - r.start)
            for r in plan]


def replay_range(task: RangeTask) -> RangePart:
    """One range's replay (what a worker runs): the kept batches' columns."""
    pol = make_policy(task.policy, task.capacity, task.num_rows, **dict(task.params))
    cols, extra = replay_columns(slice_trace(task.trace, task.start, task.stop), pol)
    return RangePart({k: np.ascontiguousarray(v[task.keep_lo:task.keep_hi])
                      for k, v in cols.items()}, extra)


def stitch(parts: Sequence[RangePart], num_batches: int) -> tuple[dict[str, np.ndarray],
                                                                  dict[str, int]]:
    """The ranges' columns end to end (each a whole trace's length when stitched); a policy
    total every range reports alike (a cache's ways) is kept, others are summed over the
    ranges' whole replays, overlaps included (`docs/performance.md`, "Time ranges")."""
    names = list(parts[0].cols)
    cols = {k: np.concatenate([p.cols[k] for p in parts]).astype(np.int64) for k in names}
    if any(len(v) != num_batches for v in cols.values()):
        raise ValueError("time ranges do not cover the trace's batches")
    extra: dict[str, int] = {}
    for key in parts[0].extra:
        values = [int(p.extra[key]) for p in parts]
        extra[key] = values[0] if len(set(values)) == 1 else sum(values)
    return cols, extra


def replay_ranges(trace: Trace, policy: str, capacity: int, ranges: int,
                  overlap: int | None = None, mapper: Mapper = serial_map,
                  **params: Any) -> RangeReplay:
    """`policy` over `trace` as `ranges` time ranges (see the module's docstring), each
    an independent task run by `mapper`; the stitched per-batch columns."""
    plan = plan_ranges(trace, policy, capacity, ranges, overlap, **params)
    parts = mapper(replay_range, range_tasks(trace, policy, capacity, plan, **params))
    cols, extra = stitch(parts, trace.num_batches)
    return RangeReplay(cols, extra, tuple(plan))


@dataclass(frozen=True)
class RangeCheck:
    """A ranged replay against the full one: per range, whether its columns are equal."""

    equal: tuple[bool, ...]
    #: per range, the largest |difference| of any column over its batches
    max_abs_diff: tuple[int, ...]
    hit_ratio_ranges: float
    hit_ratio_full: float

    @property
    def all_equal(self) -> bool:
        return all(self.equal)


def compare_full(result: RangeReplay, full: dict[str, np.ndarray]) -> RangeCheck:
    """Compare stitched columns with `engine.replay_columns`' over the whole trace."""
    equal, diff = [], []
    for r in result.ranges:
        d = max((int(np.max(np.abs(result.cols[k][r.lo:r.hi] - full[k][r.lo:r.hi]),
                            initial=0)) for k in full), default=0)
        diff.append(d)
        equal.append(d == 0)

    def ratio(cols: dict[str, np.ndarray]) -> float:
        acc = int(cols["accesses"].sum())
        return int(cols["hits"].sum()) / acc if acc else 0.0

    return RangeCheck(tuple(equal), tuple(diff), ratio(result.cols), ratio(full))


@dataclass(frozen=True)
class RangeSetting:
    """How a run replays its caches as time ranges (`run --ranges K`): `ranges` ranges,
    each overlap grown until it proves the range exact, the tasks run by `mapper`. Only
    policies with the stack property use it; the others are replayed whole."""

    ranges: int
    mapper: Mapper = serial_map

    def applies(self, policy: str | None) -> bool:
        return policy is not None and self.ranges > 1 and supports_proof(policy)

    def columns(self, trace: Trace, policy: str, capacity: int, **params: Any
                ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """`engine.replay_columns`' result for `policy` over `trace`, made by ranges."""
        result = replay_ranges(trace, policy, capacity, self.ranges, None, self.mapper,
                               **params)
        if not result.proven:  # the automatic overlap always proves a stack policy's
            raise AssertionError("an automatic overlap left a range unproven")
        return result.cols, result.extra
