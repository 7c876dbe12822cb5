"""Runs a policy over a trace, chunk by chunk, and counts what happened.

The engine is the only caller of `Policy.process`. It linearizes ids (via the trace), gives
future-aware policies their next-use positions, and turns per-access outcomes into per-batch
and per-table counters. Memory is bounded by the chunk size plus policy state, whatever the
trace's length: the next uses (one int32 per access below 2^31 - 1 accesses, else int64; for
`belady`, `scratchpipe` and `bagpipe`) of a trace held in memory are kept in memory only
while they take at most `NEXT_USE_MEMORY_BYTES`; beyond, and always for a trace
memory-mapped from a `.sptrace`, the backward pass writes them chunk by chunk to a
temporary file (`NextUses`) and the replay reads back each chunk's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies._hashmap import home
from scratchpipe_sim.policies.base import (
    EVICTIONS,
    FILLS,
    HIT,
    NO_NEXT_USE,
    NO_NEXT_USE_32,
    NUM_EVENTS,
    POLICIES,
    UNIQUE,
    UNIQUE_UNPLACED,
    UNPLACED,
    WRITEBACKS,
    Policy,
)
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.safety.limits import env_number
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._pages import read_at, read_only_mapping, spill_file, write_at
from scratchpipe_sim.traces._prefetch import prefetch
from scratchpipe_sim.traces.csr_trace import (
    ChunkBuffers,
    Trace,
    all_single,
    chunk_size,
)

#: Columns of `BatchCounts.counts`, in order.
#: `unique_unplaced`: unique rows of the batch whose first access in it was UNPLACED (the
#: rows a design updates in host memory once per batch). Appended last: indices never shift.
COUNTERS = ("accesses", "unique", "hits", "misses", "fills", "evictions", "writebacks",
            "unplaced", "unique_unplaced")
A_ACC, A_UNIQ, A_HIT, A_MISS, A_FILL, A_EVICT, A_WB, A_UNPL, A_UNIQ_UNPL = range(len(COUNTERS))
NUM_COUNTERS = len(COUNTERS)
#: most batches per engine chunk (bounds the per-batch buffers at small batch sizes)
MAX_CHUNK_BATCHES = 1 << 16
#: next uses kept in memory up to this many bytes (64 MiB: the quickstart's 15.7M int32);
#: more go to a temporary file, written by the backward pass and read back a chunk at a time
NEXT_USE_MEMORY_BYTES = memory_guard.NEXT_USE_MEMORY_BYTES
#: next uses of a trace memory-mapped from a `.sptrace` kept in memory at most: none. Why: its
#: run's memory must not grow with its length (issue 41), and with any bound above zero the
#: traces just below it peak higher than longer ones (62.5 MiB more at 16.4M accesses than at
#: 65.5M, `benchmarks/bench_trace_scale.py`); the spill costs one sequential write and read
MAPPED_NEXT_USE_MEMORY_BYTES = 0
#: environment variable overriding both bounds (0: always on disk, as tests force)
NEXT_USE_MEMORY_ENV = "SCRATCHPIPE_NEXT_USE_MEMORY_BYTES"
#: next uses are int32 below this many accesses (every position and `NO_NEXT_USE_32` fit)
_NARROW_NEXT_USE_ACCESSES = NO_NEXT_USE_32
_PF_NEXT_USE = 48  # prefetch distance of the next-use pass, in accesses
#: prefetch distance of the unique-row set's probes, in accesses (32 was the fastest of 8,
#: 16, 32, 64 for `access_unique` on the quickstart: a 32 MB set for its 327,680-access batches)
_PF_SEEN = 32
#: `_count_chunk`'s next uses when there are none: int32 like a trace's next uses (one
#: compiled specialization serves both)
_NO_NEXT_USE_ARG = np.zeros(0, np.int32)
#: the unique-row set's entries: (batch stamp << _SEEN_KEY_BITS) | row; -1 (sign bit set) is
#: never a valid entry
_SEEN_KEY_BITS = 48
_SEEN_STAMP_BITS = 15
_SEEN_KEY_MASK = (1 << _SEEN_KEY_BITS) - 1
_SEEN_STAMP_MASK = (1 << _SEEN_STAMP_BITS) - 1
#: entries of a unique-row set made at once even when lazy (512 KB: batches up to 8,192)
_SEEN_EAGER = 1 << 16


@dataclass(frozen=True)
class BatchCounts:
    """Counters of consecutive mini-batches: `counts[b, COUNTERS.index(name)]`."""

    first_batch: int
    counts: np.ndarray  # int64 (num_batches, len(COUNTERS))


@dataclass
class CacheResult:
    policy: str
    capacity: int
    num_rows: int
    accesses: int = 0
    unique: int = 0
    hits: int = 0
    misses: int = 0
    fills: int = 0
    evictions: int = 0
    writebacks: int = 0
    unplaced: int = 0
    unique_unplaced: int = 0
    wall_s: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)
    per_table: list[dict[str, int]] = field(default_factory=list)

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    @property
    def accesses_per_s(self) -> float:
        return self.accesses / self.wall_s if self.wall_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        d["hit_ratio"] = self.hit_ratio
        d["accesses_per_s"] = self.accesses_per_s
        return d


def make_policy(name: str, capacity: int, num_rows: int, **params: Any) -> Policy:
    return POLICIES.get(name, field="policy")(capacity, num_rows, **params)


def iter_cache(trace: Trace, policy: Policy, chunk_accesses: int | None = None,
               per_table: np.ndarray | None = None) -> Iterator[BatchCounts]:
    """Run `policy` over `trace`, yielding per-batch counters chunk by chunk.

    `per_table`, if given, is an int64 array (num_tables, 4) accumulated in place with
    accesses, hits, misses, unplaced per table.
    """
    for first, counts in _replay(trace, policy, chunk_accesses, per_table, per_batch=True):
        yield BatchCounts(first, counts)


def _replay(trace: Trace, policy: Policy, chunk_accesses: int, per_table: np.ndarray | None,
            per_batch: bool) -> Iterator[tuple[int, np.ndarray]]:
    """The engine loop: (first batch, counts) per chunk; `per_batch=False` yields instead one
    (1, NUM_COUNTERS) array of running totals (no per-batch counter arrays at all). Chunks
    start at `policy.first_replayed_batch()` (the batches before it count nothing).

    Why chunks are also capped in batches (`MAX_CHUNK_BATCHES`): the per-batch arrays (events
    and counters, 96 bytes a batch) would otherwise grow with the chunk's accesses, 100 MB per
    1M-access chunk at batch size 1. The outcome and events buffers are reused across chunks.
    """
    if policy.num_rows < trace.total_rows:
        raise UserError(f"policy built for {policy.num_rows} rows but the trace has "
                        f"{trace.total_rows}", source=trace.source)
    ptr = trace.batch_access_ptr()  # once: at batch size 1 it is one int64 per access
    # the next uses before `prepare`: their backward pass's per-row array is freed before a
    # policy makes its state there (scratchpipe's map: issue 41)
    next_use = (next_uses(trace, chunk_accesses, ptr) if policy.needs_next_use else None)
    try:
        policy.prepare(trace)
    except BaseException:
        if next_use is not None:
            next_use.close()
        raise
    seen = SeenSet(trace, ptr, lazy=True)
    tables = per_table if per_table is not None else np.zeros((1, 4), np.int64)
    chunk_accesses = chunk_size(chunk_accesses)
    max_batches = max(1, min(MAX_CHUNK_BATCHES, trace.num_batches))
    events_buf = np.zeros((max_batches, NUM_EVENTS), np.int64)
    totals = None if per_batch else np.zeros((1, NUM_COUNTERS), np.int64)
    # policies copy what they keep of a chunk (scratchpipe's window): one buffer serves
    start = min(policy.first_replayed_batch(), trace.num_batches)
    try:
        yield from _replay_chunks(trace, policy, chunk_accesses, per_table, start,
                                  max_batches, ptr, next_use, seen, tables, events_buf,
                                  totals)
    finally:
        if next_use is not None:
            next_use.close()  # a file's space goes back at once
    policy.finish()


def _replay_chunks(trace: Trace, policy: Policy, chunk_accesses: int,
                   per_table: np.ndarray | None, start: int, max_batches: int,
                   ptr: np.ndarray, next_use: NextUses | None, seen: SeenSet,
                   tables: np.ndarray, events_buf: np.ndarray,
                   totals: np.ndarray | None) -> Iterator[tuple[int, np.ndarray]]:
    """`_replay`'s loop over the chunks (see there)."""
    outcome_buf = np.empty(0, np.uint8)
    for chunk in trace.iter_chunks(chunk_accesses, start, max_batches=max_batches, ptr=ptr,
                                   reuse_buffers=True):
        n = len(chunk.ids)
        nbat = chunk.num_batches
        if len(outcome_buf) < n:
            outcome_buf = np.empty(max(n, chunk_accesses), np.uint8)
        outcome = outcome_buf[:n]
        events = events_buf[:nbat]  # zero: `_count_chunk` clears what it has read
        nu = None
        if next_use is not None:  # valid until the next chunk: policies copy what they keep
            nu = next_use.read(chunk.first_access, n)
        policy.process(chunk, nu, outcome, events)
        if not seen.ready and _count_may_walk_set(outcome, events, nu is not None,
                                                  policy.counts_unique):
            seen.ensure()
        nu_arg = _NO_NEXT_USE_ARG if nu is None else nu
        if totals is None:
            counts = np.zeros((nbat, NUM_COUNTERS), np.int64)
            _count_chunk(chunk.ids, chunk.tables, chunk.batch_ptr, chunk.first_batch,
                         outcome, events, seen.slots, seen.shift, seen.epoch, counts, 1, tables,
                         per_table is not None, nu_arg, chunk.first_access, nu is not None,
                         policy.counts_unique)
            yield chunk.first_batch, counts
        else:
            _count_chunk(chunk.ids, chunk.tables, chunk.batch_ptr, chunk.first_batch,
                         outcome, events, seen.slots, seen.shift, seen.epoch, totals, 0, tables,
                         per_table is not None, nu_arg, chunk.first_access, nu is not None,
                         policy.counts_unique)
            yield chunk.first_batch, totals


def run_cache(trace: Trace, policy: str | Policy, capacity: int | None = None,
              chunk_accesses: int | None = None, **params: Any) -> CacheResult:
    """Totals (and per-table counts) of one policy over one trace."""
    if isinstance(policy, str):
        if capacity is None:
            raise UserError("a capacity is needed", field="capacity")
        policy = make_policy(policy, capacity, trace.total_rows, **params)
    start = time.perf_counter()
    tables = np.zeros((trace.num_tables, 4), np.int64)
    totals = np.zeros(NUM_COUNTERS, np.int64)
    one = trace.num_tables == 1  # per-table counts are the totals: skip that pass
    for _, running in _replay(trace, policy, chunk_accesses, None if one else tables,
                              per_batch=False):
        totals = running[0]
    if one:
        tables[0] = totals[[A_ACC, A_HIT, A_MISS, A_UNPL]]
    wall = time.perf_counter() - start
    res = CacheResult(policy.name, policy.capacity, policy.num_rows,
                      **{name: int(totals[i]) for i, name in enumerate(COUNTERS)},
                      wall_s=wall, extra=policy.extra_totals())
    res.per_table = [
        {"table": t, "accesses": int(a), "hits": int(h), "misses": int(m), "unplaced": int(u)}
        for t, (a, h, m, u) in enumerate(tables)
    ]
    return res


def replay_columns(trace: Trace, policy: Policy,
                   chunk_accesses: int | None = None,
                   per_table: np.ndarray | None = None
                   ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Every per-batch column of one replay: `COUNTERS` plus the policy's `batch_columns()`
    (int64, one entry per batch of the trace) and its `extra_totals()`; `per_table`, if
    given, accumulates accesses, hits, misses, unplaced per table as in `iter_cache`.

    This is what the replay cache stores (`scratchpipe_sim.policies.replay_cache`).
    """
    out = np.zeros((NUM_COUNTERS, trace.num_batches), np.int64)
    for first, counts in _replay(trace, policy, chunk_accesses, per_table, per_batch=True):
        out[:, first : first + len(counts)] = counts.T
    cols = {name: out[i] for i, name in enumerate(COUNTERS)}
    for name, col in policy.batch_columns().items():
        if name in cols:
            raise ValueError(f"policy column {name!r} shadows an engine counter")
        cols[name] = np.asarray(col, np.int64)
    extra = {k: int(v) for k, v in policy.extra_totals().items()}
    return cols, extra


def next_use_dtype(accesses: int) -> type:
    """int32 while every position of a trace of `accesses` and `NO_NEXT_USE_32` fit."""
    return np.int32 if accesses < _NARROW_NEXT_USE_ACCESSES else np.int64


def next_use_memory_bytes(mapped: bool = False) -> int:
    """Largest next-use array kept in memory: $SCRATCHPIPE_NEXT_USE_MEMORY_BYTES, else
    `MAPPED_NEXT_USE_MEMORY_BYTES` for a memory-mapped trace (`mapped`), else
    `NEXT_USE_MEMORY_BYTES`."""
    default = MAPPED_NEXT_USE_MEMORY_BYTES if mapped else NEXT_USE_MEMORY_BYTES
    return int(env_number(NEXT_USE_MEMORY_ENV, default, minimum=0))


class NextUses:
    """A trace's next uses (`compute_next_use`'s values), in memory or in a temporary file.

    Why a file: one entry per access is the only replay state that grows with the trace
    (4 B an access: 20 GB for a day of Criteo 1TB). The backward pass that computes them
    writes each chunk's at its place in an unnamed temporary file (`_pages.spill_file`,
    in the user cache folder, its size checked against the free disk first; the OS deletes
    it when it is closed or the process ends), and `read` fills one reused buffer with a
    chunk's: the memory is one chunk's, and nothing is mapped, so the pages read stay out of
    the resident set. Values and type are those of the in-memory array, so a replay is the
    same bit for bit either way. Never clamped (scratchpipe's FIFO compares next uses past
    its window)."""

    def __init__(self, values: np.ndarray | None = None, file=None, dtype: type = np.int32,
                 accesses: int = 0):
        self.values = values
        self.file = file
        self.dtype = np.dtype(values.dtype if values is not None else dtype)
        self.accesses = len(values) if values is not None else int(accesses)
        self._buf = np.empty(0, self.dtype)

    @property
    def on_disk(self) -> bool:
        return self.file is not None

    def read(self, first: int, n: int) -> np.ndarray:
        """Next uses of accesses first..first+n-1: a view of the array, or (on disk) of a
        buffer the next call overwrites."""
        if self.values is not None:
            return np.asarray(self.values[first : first + n])
        if len(self._buf) < n:
            self._buf = np.empty(n, self.dtype)
        return read_at(self.file, self._buf[:n], first)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def next_uses(trace: Trace, chunk_accesses: int | None = None,
              ptr: np.ndarray | None = None, on_disk: bool | None = None) -> NextUses:
    """The trace's next uses (see `compute_next_use`): in memory when they take at most
    `next_use_memory_bytes(mapped)` (`mapped`: the trace's ids are a read-only mapping of
    its file), else in a temporary file (`on_disk` forces either)."""
    n = trace.num_accesses
    dtype = next_use_dtype(n)
    nbytes = n * np.dtype(dtype).itemsize
    if on_disk is None:
        on_disk = nbytes > next_use_memory_bytes(read_only_mapping(trace.indices))
    if not on_disk:
        return NextUses(compute_next_use(trace, chunk_accesses, ptr))
    f = spill_file(nbytes, f"the next uses of {n} accesses")
    try:
        buf = np.empty(0, dtype)

        def sink(first: int, ids: np.ndarray) -> np.ndarray:
            nonlocal buf
            if len(buf) < len(ids):
                buf = np.empty(len(ids), dtype)
            return buf[: len(ids)]

        def done(first: int, out: np.ndarray) -> None:
            write_at(f, out, first)

        _backward(trace, chunk_accesses, ptr, dtype, sink, done)
    except BaseException:
        f.close()
        raise
    return NextUses(None, f, dtype, n)


def compute_next_use(trace: Trace, chunk_accesses: int | None = None,
                     ptr: np.ndarray | None = None) -> np.ndarray:
    """For every access, the global position of the next access to the same linearized id.

    One backward pass over the chunks; where the id is never seen again, the largest value of
    the array's type (`next_use_sentinel`). int32 while the trace has fewer than 2^31 - 1
    accesses (every position and the sentinel fit), else int64. Why narrow: the array is
    one entry per access, the largest a replay allocates (118 MB as int64 for the
    quickstart's scratchpipe replay, 14.7M accesses), and fresh pages cost the forked worker
    that replays scratchpipe up to 0.4 s of page clearing on the 2-core VM of
    docs/performance.md. A comparison with a position decides the same with either type,
    since every position is below both sentinels: policies only compare next uses with
    positions and with each other.
    The whole array in memory: the engine's replays take `next_uses`, which keeps a large
    trace's on disk.
    """
    out = np.empty(trace.num_accesses, next_use_dtype(trace.num_accesses))
    _backward(trace, chunk_accesses, ptr, out.dtype.type,
              lambda first, ids: out[first : first + len(ids)], lambda first, part: None)
    return out


def _backward(trace: Trace, chunk_accesses: int, ptr: np.ndarray | None, dtype: type,
              sink, done) -> None:
    """The backward pass: chunks last to first, each chunk's next uses written into
    `sink(first, ids)` (an array of len(ids)), then handed to `done(first, that array)`."""
    narrow = np.dtype(dtype) == np.int32
    low_bits = _SPLIT_LOW_BITS
    split = _SPLIT_NEXT_USE and not narrow and trace.num_accesses < (2 << low_bits) - 1
    if split:  # row -> next position in 4 B + 1 bit (see `_next_use_backward_split`)
        low = np.full(trace.total_rows, (1 << low_bits) - 1, np.uint32)
        high = np.full((trace.total_rows + 63) >> 6, -1, np.int64)
    else:
        last = np.full(trace.total_rows, NO_NEXT_USE_32 if narrow else NO_NEXT_USE, dtype)
    ptr = trace.batch_access_ptr() if ptr is None else ptr
    starts = trace.chunk_starts(chunk_accesses, ptr=ptr)
    buffers = ChunkBuffers()
    for k, end in reversed(list(zip(starts[:-1], starts[1:], strict=True))):
        first, ids = trace.chunk_ids(k, end, ptr, buffers)
        out = sink(first, ids)
        if split:
            _next_use_backward_split(ids, first, low, high, low_bits, out)
        else:
            _next_use_backward(ids, first, last, out)
        done(first, out)


#: low bits of a next position the backward pass keeps per row in a uint32 where next uses
#: are int64 (2^31 - 1 accesses or more); one more bit a row lives in a bitmap (tests lower
#: it to reach the path with a small trace)
_SPLIT_LOW_BITS = 32
#: False: an int64 a row instead (the tests compare the two)
_SPLIT_NEXT_USE = True


def next_use_sentinel(next_use: np.ndarray) -> int:
    """What `compute_next_use` writes for an access whose id is never seen again: the largest
    value of the array's type (`NO_NEXT_USE_32` or `NO_NEXT_USE`)."""
    return NO_NEXT_USE_32 if next_use.dtype == np.int32 else NO_NEXT_USE


@njit(cache=True)
def _next_use_backward(ids, base, last, out):
    """`last[row]`: the row's next position (the sentinel until seen), of `out`'s type."""
    for j in range(len(ids) - 1, -1, -1):
        if j >= _PF_NEXT_USE:  # a hint (see _prefetch.py): `last` is one entry per row
            prefetch(last, ids[j - _PF_NEXT_USE])
        r = ids[j]
        out[j] = last[r]
        last[r] = base + j


@njit(cache=True)
def _next_use_backward_split(ids, base, low, high, low_bits, out):
    """`_next_use_backward` into int64 `out` with the row's next position held in
    `low_bits` + 1 bits: the low bits in `low[row]` (uint32), the top bit at bit row & 63
    of `high[row >> 6]` (int64 words). All ones (every bit set, as both arrays start) is
    "not seen": the caller passes a trace with fewer than 2^(low_bits + 1) - 1 accesses, so
    every position is below it and each stores and reads back exactly. Why: a day of Criteo
    Terabyte (4.74 B accesses) needs int64 next uses, and an int64 a row is 8 B x 204M rows
    = 1.6 GB in the worker that makes them; this is 4.125 B a row (0.84 GB)."""
    mask = (np.int64(1) << low_bits) - 1
    unseen = (np.int64(2) << low_bits) - 1
    for j in range(len(ids) - 1, -1, -1):
        if j >= _PF_NEXT_USE:  # a hint (see _prefetch.py): `low` is one entry per row
            prefetch(low, ids[j - _PF_NEXT_USE])
            prefetch(high, ids[j - _PF_NEXT_USE] >> 6)
        r = np.int64(ids[j])
        w = r >> 6
        s = r & 63
        word = high[w]
        code = (((word >> s) & 1) << low_bits) | np.int64(low[r])
        out[j] = NO_NEXT_USE if code == unseen else code
        p = np.int64(base) + j
        low[r] = np.uint32(p & mask)
        high[w] = (word & ~(np.int64(1) << s)) | ((p >> low_bits) << s)


def row_bits(rows: int) -> np.ndarray:
    """A zeroed bit per row: uint64 words, row r at bit r & 63 of word r >> 6. The per-row
    "seen" sets of whole passes use it (a byte a row is 204 MB for a Criteo day's 204M
    rows, a bit 25.5 MB): unique rows here, first touches (`timing/counts.py`), the
    per-rank counts (`timing/rank_streams.py`)."""
    return np.zeros((int(rows) + 63) >> 6, np.uint64)


class SeenSet:
    """Which rows a batch has already touched, for the unique-row counters.

    Why a per-batch hash set: a stamp per row (`seen[row] = batch`) costs one random DRAM
    access per access once the rows outgrow the last-level cache (as much as the LRU kernel
    itself); a set sized to the largest batch (>= 8x its accesses, a power of two: probes
    past the home position are rare) stays in L2 and needs no clearing per batch. One int64
    an entry, the batch's stamp and the row packed (`_SEEN_STAMP_BITS` bits of the global
    batch index above `_SEEN_KEY_BITS` bits of row), so a test is one load and a new row one
    store: with key and stamp in two words the set's pass took 8-9 ns an access at batch
    size 4096 (alone over 10M accesses), packed 3.7. Stamps repeat every 2^15 batches, so
    the set is cleared when a batch is 2^15 or more after the last clear (`epoch`).
    Batches comparable to the table size use a stamp per row (`shift` < 0: entry = row).

    `lazy=True` (the engine's replays): the entries of a set larger than `_SEEN_EAGER`
    entries are made by `ensure()`, before the first chunk whose count may walk them. Most
    replays never do (a policy that counts its unique rows itself, or one with next uses and
    no UNPLACED outcome), and the quickstart's set is 32 MB of fresh pages written with -1 in
    each forked worker's replay. A smaller set is made at once: the test per chunk would cost
    more (~3% of an lru replay at batch size 1, 153 chunks of 65,536 batches).
    """

    def __init__(self, trace: Trace, ptr: np.ndarray, lazy: bool = False):
        if trace.total_rows > _SEEN_KEY_MASK:
            raise ValueError(f"{trace.total_rows} rows: the unique-row set packs row ids "
                             f"in {_SEEN_KEY_BITS} bits")
        biggest = trace.largest_batch(ptr)
        bits = max(3, (8 * max(biggest, 1) - 1).bit_length())
        if (1 << bits) >= trace.total_rows:
            self._entries = trace.total_rows
            self.shift = -1
        else:
            self._entries = 1 << bits
            self.shift = 64 - bits
        #: until `ensure()`: one empty entry, which a count that walks no set never reads
        self.slots = np.full(1, -1, np.int64)
        self.ready = False
        self.epoch = np.zeros(1, np.int64)  # batch of the last clear
        if not lazy or self._entries <= _SEEN_EAGER:
            self.ensure()

    def ensure(self) -> None:
        """Make the set's entries (all empty), once."""
        if not self.ready:
            self.slots = np.full(self._entries, -1, np.int64)
            self.ready = True


def _count_may_walk_set(outcome: np.ndarray, events: np.ndarray, has_nu: bool,
                        has_uniq: bool) -> bool:
    """Whether `_count_chunk` may walk the unique-row set for a chunk with these outcomes and
    events: a superset of its own test (a batch not counted by the policy, and, with next
    uses, holding an UNPLACED outcome), so a set made only when this holds is never missed."""
    if has_nu:
        return bool(np.any(outcome == UNPLACED))
    return not has_uniq or bool(np.any(events[:, UNIQUE] < 0))


@njit(cache=True)
def seen_batch(slots, epoch, stamp):
    """The set's tag of global batch `stamp` (its stamp bits above the row bits), clearing
    the set first when stamps would repeat (see `SeenSet`)."""
    if stamp - epoch[0] > _SEEN_STAMP_MASK:
        slots[:] = -1
        epoch[0] = stamp
    return (stamp & _SEEN_STAMP_MASK) << _SEEN_KEY_BITS


@njit(cache=True)
def seen_home(shift, r):
    """Row r's home entry in the unique-row set (`seen_first` probes from there)."""
    if shift < 0:
        return r
    return home(r, np.uint64(shift))  # the maps' Fibonacci hash


@njit(cache=True)
def seen_first(slots, shift, mask, tag, r):
    """Is row `r` new in the batch of `tag` (`seen_batch`)? Records it. Branch free: a
    duplicate is as unpredictable as a cache outcome; with the set 8x the batch, a probe
    past the home position is rare. A stamp per row (shift < 0): slots[r]."""
    want = tag | r
    i = seen_home(shift, r)
    if shift >= 0:
        # past entries of this batch holding other rows
        while (slots[i] != want) & ((slots[i] & ~_SEEN_KEY_MASK) == tag):
            i = (i + 1) & mask
    first = slots[i] != want
    slots[i] = want
    return first


@njit(cache=True)
def _unique_chunk(ids, batch_ptr, first_batch, slots, shift, epoch, acc, uniq):
    """Accesses and unique rows of each batch of a chunk into acc/uniq[first_batch + b]."""
    mask = len(slots) - 1
    for b in range(len(batch_ptr) - 1):
        lo = batch_ptr[b]
        hi = batch_ptr[b + 1]
        stamp = first_batch + b
        acc[stamp] = hi - lo
        if hi - lo <= 1:  # batch size 1 (or empty): no set needed
            uniq[stamp] = hi - lo
            continue
        tag = seen_batch(slots, epoch, stamp)
        n = 0
        for j in range(lo, hi):
            if j + _PF_SEEN < hi:  # a hint: a large batch's set outgrows the core's caches
                prefetch(slots, seen_home(shift, ids[j + _PF_SEEN]))
            n += seen_first(slots, shift, mask, tag, ids[j])
        uniq[stamp] = n


def access_unique(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Accesses and unique rows per batch, with the engine's unique-row set (`SeenSet`):
    the one unique-rows-per-batch implementation (the timing layer's counts use it).

    Where the set would be a stamp per row (batches comparable to the rows: 8 B a row, 1.6
    GB of fresh pages for MLPerf DLRM's 2 x 10^8 rows, ~8 s to fault in on the 2-core VM)
    it is a bit per row instead (`_unique_chunk_bits`: 25 MB, cleared by walking the batch
    again), the same counts."""
    ptr = trace.batch_access_ptr()
    acc = np.zeros(trace.num_batches, np.int64)
    uniq = np.zeros(trace.num_batches, np.int64)
    seen = SeenSet(trace, ptr, lazy=True)
    if seen.shift < 0 and _SEEN_PER_ROW_BITS:
        bits = row_bits(trace.total_rows)
        for chunk in trace.iter_chunks(ptr=ptr, reuse_buffers=True):
            _unique_chunk_bits(chunk.ids, chunk.batch_ptr, chunk.first_batch, bits, acc, uniq)
        return acc, uniq
    seen.ensure()
    for chunk in trace.iter_chunks(ptr=ptr, reuse_buffers=True):
        _unique_chunk(chunk.ids, chunk.batch_ptr, chunk.first_batch, seen.slots, seen.shift,
                      seen.epoch, acc, uniq)
    return acc, uniq


#: `access_unique` counts with a bit per row where the set would be a stamp per row (False:
#: the stamps, as before; the tests compare the two)
_SEEN_PER_ROW_BITS = True


@njit(cache=True)
def _unique_chunk_bits(ids, batch_ptr, first_batch, bits, acc, uniq):
    """`_unique_chunk` with a bit per row (clear on entry and on return): a batch's rows set
    their bits as it is walked, and a second walk clears their words."""
    for b in range(len(batch_ptr) - 1):
        lo = batch_ptr[b]
        hi = batch_ptr[b + 1]
        n = 0
        for j in range(lo, hi):
            if j + _PF_SEEN < hi:  # a hint: 25 MB of bits outgrow the core's own caches
                prefetch(bits, ids[j + _PF_SEEN] >> 6)
            r = ids[j]
            w = r >> 6
            m = np.uint64(1) << np.uint64(r & 63)
            old = bits[w]
            bits[w] = old | m
            n += (old & m) == 0
        for j in range(lo, hi):
            bits[ids[j] >> 6] = 0
        acc[first_batch + b] = hi - lo
        uniq[first_batch + b] = n


@njit(cache=True)
def _count_singles(outcome, events, counts):
    """Totals of a chunk of single-access batches (`_count_chunk`'s fast path): every access
    is its batch's only row, so unique = accesses and unique_unplaced = unplaced; the
    counters are plain sums that the compiler vectorizes (no per-batch bookkeeping: ~4 ns an
    access at batch size 1 before)."""
    n = len(outcome)
    hits = 0
    unpl = 0
    for j in range(n):
        o = outcome[j]
        hits += o == 0
        unpl += o == 2
    fill = evict = wb = 0
    for b in range(len(events)):
        fill += events[b, 0]
        evict += events[b, 1]
        wb += events[b, 2]
    events[:] = 0
    _add_totals(counts, n, n, hits, fill, evict, wb, unpl, unpl)


@njit(cache=True)
def _add_totals(counts, acc, uniq, hits, fill, evict, wb, unpl, uniq_unpl):
    """A chunk's totals into counts[0] (once per chunk, in COUNTERS order)."""
    counts[0, 0] += acc
    counts[0, 1] += uniq
    counts[0, 2] += hits
    counts[0, 3] += acc - hits
    counts[0, 4] += fill
    counts[0, 5] += evict
    counts[0, 6] += wb
    counts[0, 7] += unpl
    counts[0, 8] += uniq_unpl


@njit(cache=True)
def _count_chunk(ids, tables, batch_ptr, first_batch, outcome, events, slots, shift, epoch,
                 counts, stride, per_table, do_tables, next_use, base, has_nu, has_uniq):
    """One pass over a chunk's outcomes adding every counter of batch b to `counts[b * stride]`
    (stride 1: per batch; stride 0: totals only, summed in locals and added once: the
    compiler cannot keep `counts` in registers across the loop, and at batch size 1 nine
    read-modify-writes per access were half this pass), and per-table counts if
    `do_tables`. Clears the events it has read: the engine reuses the buffer.

    With next uses (`has_nu`: belady, scratchpipe, bagpipe), a batch's unique rows are its
    accesses whose next use lies past the batch (each row's last access), which needs no
    per-access set (~10 ns an access at batch size 4096: the set's store-to-load chains);
    the set is walked only for a batch with an UNPLACED outcome (unique_unplaced needs each
    row's first access) and without next uses. A policy that counts unique rows itself
    (`has_uniq`: `Policy.counts_unique`) spares the set's pass wherever its count is known."""
    if stride == 0 and not do_tables and all_single(batch_ptr):
        _count_singles(outcome, events, counts)
        return
    t_acc = t_uniq = t_hits = t_fill = t_evict = t_wb = t_unpl = t_uu = 0
    mask = len(slots) - 1
    for b in range(len(batch_ptr) - 1):
        lo = batch_ptr[b]
        hi = batch_ptr[b + 1]
        uniq = 0
        hits = 0
        unpl = 0
        uniq_unpl = 0
        if hi - lo == 1:  # batch size 1: the row is unique, no stamp needed
            o = outcome[lo]
            uniq = 1
            hits = o == 0
            unpl = o == 2
            uniq_unpl = unpl
        else:
            known = has_uniq and events[b, UNIQUE] >= 0
            # unsigned positions: no negative-index wrap-around, so these loops vectorize
            # with plain loads (signed, LLVM used AVX-512 gathers: see _linearize_into)
            ulo, uhi = np.uint64(lo), np.uint64(hi)
            if has_nu:  # a row's last access in the batch is the one whose next use lies
                end = base + hi  # past it: unique rows = those accesses (no set needed)
                for j in range(ulo, uhi):
                    o = outcome[j]
                    uniq += next_use[j] >= end
                    hits += o == 0
                    unpl += o == 2
            elif known:
                uniq = events[b, UNIQUE]
                uniq_unpl = events[b, UNIQUE_UNPLACED]
                for j in range(ulo, uhi):
                    o = outcome[j]
                    hits += o == 0
                    unpl += o == 2
            if not known and (not has_nu or unpl > 0):  # unique_unplaced: first accesses
                uniq = hits = unpl = 0
                tag = seen_batch(slots, epoch, first_batch + b)
                for j in range(lo, hi):  # branch-free counting: outcomes are unpredictable
                    if j + _PF_SEEN < hi:
                        prefetch(slots, seen_home(shift, ids[j + _PF_SEEN]))
                    o = outcome[j]
                    first = seen_first(slots, shift, mask, tag, ids[j])
                    uniq += first
                    hits += o == 0
                    unpl += o == 2
                    uniq_unpl += first & (o == 2)
        if do_tables:
            for j in range(lo, hi):
                t = tables[j]
                o = outcome[j]
                per_table[t, 0] += 1
                per_table[t, 1] += o == 0
                per_table[t, 2] += o != 0
                per_table[t, 3] += o == 2
        if stride == 0:
            t_acc += hi - lo
            t_uniq += uniq
            t_hits += hits
            t_fill += events[b, 0]
            t_evict += events[b, 1]
            t_wb += events[b, 2]
            t_unpl += unpl
            t_uu += uniq_unpl
        else:
            counts[b, 0] += hi - lo
            counts[b, 1] += uniq
            counts[b, 2] += hits
            counts[b, 3] += hi - lo - hits
            counts[b, 4] += events[b, 0]
            counts[b, 5] += events[b, 1]
            counts[b, 6] += events[b, 2]
            counts[b, 7] += unpl
            counts[b, 8] += uniq_unpl
        events[b, 0] = 0  # ready for the next chunk (no separate pass clearing them)
        events[b, 1] = 0
        events[b, 2] = 0
        events[b, UNIQUE] = 0
        events[b, UNIQUE_UNPLACED] = 0
    if stride == 0:
        _add_totals(counts, t_acc, t_uniq, t_hits, t_fill, t_evict, t_wb, t_unpl, t_uu)


assert (A_HIT, A_MISS, A_FILL, A_UNPL, A_UNIQ_UNPL) == (2, 3, 4, 7, 8)
assert HIT == 0 and UNPLACED == 2
assert (FILLS, EVICTIONS, WRITEBACKS, UNIQUE, UNIQUE_UNPLACED) == (0, 1, 2, 3, 4)
