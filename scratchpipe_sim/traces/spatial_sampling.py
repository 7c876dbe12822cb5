"""Spatial sampling of a trace (SHARDS, Waldspurger et al., FAST 2015): keep every access of
row k of table t iff hash(salt, t, k) mod P < T, rate R = T / P.

Why: a cache of R x capacity replayed on the sampled stream sees about R of every count
(accesses, unique rows, hits, fills, ...) of the full cache on the full stream, so a run of
about R of the work estimates the full run's figures (miniature simulations, ATC 2017, for
any policy). A row is kept or dropped in every batch alike, so reuse survives sampling.

The sampled trace has the parent's batches, bags (so its samples per batch) and table row
counts; each bag keeps its sampled ids. Deterministic: the hash is splitmix64's finalizer
of (a per-table key made from the salt and the table) xor the row (`keep_row` is its
pure-Python statement). R = 1 returns the parent itself. Sample once, replay many:
`cached_sample` keeps the sampled trace in the trace cache, keyed by the parent's
fingerprint, R and the salt, so every point of a sweep reads it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._pages import release
from scratchpipe_sim.traces.csr_trace import (
    DEFAULT_CHUNK_ACCESSES,
    Trace,
    constant_bag_length,
)

#: the hash's modulus P: a row is kept iff (hash >> 32) < T = round(R x P)
MODULUS = 1 << 32
_MASK64 = (1 << 64) - 1
#: splitmix64's constants (Steele, Lea, Flood 2014; Vigna's reference code)
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_U_GAMMA = np.uint64(_GAMMA)
_U_MIX1 = np.uint64(_MIX1)
_U_MIX2 = np.uint64(_MIX2)
_U30, _U27, _U31, _U32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
#: the trace.meta keys a sampled trace records (its rate and salt)
META_RATE, META_SALT = "sample_rate", "sample_salt"
#: sampled ids kept in memory up to this many bytes; beyond, written to a `.sptrace`
IN_MEMORY_MAX_BYTES = 1 << 30


def splitmix64(x: int) -> int:
    """splitmix64's step on a Python int (the pure-Python statement of the hash)."""
    z = (x + _GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def table_keys(salt: int, num_tables: int) -> np.ndarray:
    """Each table's hash key: splitmix64(salt x 2^20 + table) (tables <= 2^20)."""
    return np.array([splitmix64(((int(salt) << 20) + t) & _MASK64)
                     for t in range(num_tables)], np.uint64)


def threshold(rate: float) -> int:
    """T of the rule hash mod P < T for a rate R in (0, 1]."""
    return min(MODULUS, int(round(float(rate) * MODULUS)))


def keep_row(salt: int, table: int, row: int, rate: float) -> bool:
    """Whether row `row` of `table` is in the sample (the rule, in plain Python)."""
    key = splitmix64(((int(salt) << 20) + table) & _MASK64)
    return (splitmix64(key ^ int(row)) >> 32) < threshold(rate)


def check_rate(rate: object, field: str = "trace.sample_rate",
               source: str | None = None) -> float:
    """`rate` as a float in (0, 1], else a UserError naming `field`."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (
            0 < float(rate) <= 1):
        raise UserError(f"expected a sampling rate in (0, 1], got {rate!r}", source=source,
                        field=field)
    if threshold(float(rate)) < 1:
        raise UserError(f"a sampling rate of {rate!r} keeps no row (below 1/{MODULUS}): "
                        "expected a larger rate", source=source, field=field)
    return float(rate)


@njit(cache=True)
def _sample_chunk(raw, offs, bag, bounds, num_tables, keys, limit, out, lengths, ns, seen,
                  kept):
    """Keep the ids of whole batches whose hash is below `limit`, for every salt s at once
    (one read of the chunk): `out[s]` gets salt s's kept ids in order (`ns[s]` of them),
    `lengths[s, i]` its kept ids of bag i, `seen` each table's accesses, `kept[s]` each
    table's kept ones. `bag` >= 0: every bag holds `bag` ids (`offs` unread), else bag i is
    `offs[i]..offs[i+1]`."""
    num_salts = keys.shape[0]
    for s in range(num_salts):
        ns[s] = 0
    for k in range(len(bounds) - 1):
        b = (bounds[k + 1] - bounds[k]) // num_tables
        for t in range(num_tables):
            for i in range(bounds[k] + t * b, bounds[k] + (t + 1) * b):
                lo = i * bag if bag >= 0 else offs[i]
                hi = lo + bag if bag >= 0 else offs[i + 1]
                seen[t] += hi - lo
                for s in range(num_salts):
                    key = keys[s, t]
                    start = ns[s]
                    n = start
                    for j in range(lo, hi):
                        z = (key ^ np.uint64(raw[j])) + _U_GAMMA
                        z = (z ^ (z >> _U30)) * _U_MIX1
                        z = (z ^ (z >> _U27)) * _U_MIX2
                        z = z ^ (z >> _U31)
                        if (z >> _U32) < limit:
                            out[s, n] = raw[j]
                            n += 1
                    ns[s] = n
                    kept[s, t] += n - start
                    lengths[s, i] = n - start


def _chunks(trace: Trace, max_accesses: int):
    """(first batch, end batch) of consecutive whole batches of about `max_accesses` ids."""
    starts = trace.chunk_starts(max_accesses)
    return list(zip(starts[:-1], starts[1:], strict=True))


def _sampled_parts(trace: Trace, rate: float, salts: Sequence[int], max_accesses: int):
    """Each chunk's (per salt: kept ids, bag lengths; batch bounds relative to the chunk),
    in order, with each table's accesses seen and each salt's kept (filled in as the
    chunks are made). One read of the trace for every salt."""
    keys = np.stack([table_keys(salt, trace.num_tables) for salt in salts]) if salts else (
        np.zeros((0, trace.num_tables), np.uint64))
    limit = np.uint64(threshold(rate))
    T, S = trace.num_tables, len(salts)
    seen, kept = np.zeros(T, np.int64), np.zeros((S, T), np.int64)
    ns = np.zeros(S, np.int64)
    bag = constant_bag_length(trace.offsets)
    buffer = np.empty((S, 0), trace.indices.dtype)

    def parts():
        nonlocal buffer
        for k, end in _chunks(trace, max_accesses):
            lo, hi = int(trace.batch_bounds[k]), int(trace.batch_bounds[end])
            bounds = np.asarray(trace.batch_bounds[k : end + 1], np.int64) - lo
            if bag is not None:
                first, last = int(trace.offsets[lo]), int(trace.offsets[hi])
                offs = _NO_OFFSETS
            else:
                offs = np.asarray(trace.offsets[lo : hi + 1], np.int64)
                first, last = int(offs[0]), int(offs[-1])
                offs = offs - first
            raw = np.asarray(trace.indices[first:last])
            if buffer.shape[1] < len(raw):
                buffer = np.empty((S, len(raw)), trace.indices.dtype)
            lengths = np.empty((S, hi - lo), np.int64)
            _sample_chunk(raw, offs, -1 if bag is None else bag, bounds, T, keys, limit,
                          buffer, lengths, ns, seen, kept)
            release(trace.indices, first, last)
            yield [buffer[s, : ns[s]].copy() for s in range(S)], lengths, bounds

    return parts(), seen, kept


#: `_sample_chunk`'s offsets when every bag has the same length (unread)
_NO_OFFSETS = np.zeros(1, np.int64)


def _check_tables(trace: Trace, rate: float, salt: int, seen: np.ndarray,
                  kept: np.ndarray, source: str | None) -> None:
    """Refuse a sample in which a table the trace reads keeps no access (nothing left to
    estimate it from), naming trace.sample_rate."""
    empty = np.flatnonzero((seen > 0) & (kept == 0))
    if len(empty):
        t = int(empty[0])
        raise UserError(
            f"a sampling rate of {rate:g} (salt {salt}) keeps no row of table {t} (its "
            f"{int(seen[t]):,} accesses over {int(trace.table_rows[t]):,} rows): expected a "
            "rate at which every table keeps some of its rows", source=source,
            field="trace.sample_rate")


def _meta(trace: Trace, rate: float, salt: int) -> dict:
    return {**trace.meta, META_RATE: float(rate), META_SALT: int(salt)}


def sample_trace(trace: Trace, rate: float, salt: int = 0, out: str | Path | None = None,
                 max_accesses: int = DEFAULT_CHUNK_ACCESSES,
                 source: str | None = None) -> Trace:
    """The accesses of `trace` to the rows `keep_row(salt, t, row, rate)` keeps, in the same
    batches and bags (R = 1: `trace` itself). In memory, or, given `out`, streamed chunk by
    chunk into a new `.sptrace` folder there (`TraceWriter`) and read back memory-mapped.
    A table the trace reads that keeps no access is a UserError naming trace.sample_rate
    (and `source`, the config's file)."""
    return sample_traces(trace, rate, [salt], None if out is None else [out], max_accesses,
                         source)[0]


def sample_traces(trace: Trace, rate: float, salts: Sequence[int],
                  outs: Sequence[str | Path] | None = None,
                  max_accesses: int = DEFAULT_CHUNK_ACCESSES,
                  source: str | None = None) -> list[Trace]:
    """`sample_trace(trace, rate, salt)` for every salt of `salts`, made in one read of the
    trace (the salts' samples are the same, id for id, as one at a time). Why: a sampled
    run of S salts read a 500M-lookup trace S times, and its chunks' offsets were built S
    times. `outs`: one `.sptrace` folder a salt, each sample streamed there."""
    rate = check_rate(rate)
    salts = [int(x) for x in salts]
    if threshold(rate) >= MODULUS:
        return [trace for _ in salts]
    parts, seen, kept = _sampled_parts(trace, rate, salts, max_accesses)
    srcs = [f"{trace.source} (sampled at {rate:g}, salt {salt})" for salt in salts]
    if outs is not None:
        from contextlib import ExitStack

        from scratchpipe_sim.traces.store import INDEX_DTYPES, TraceWriter, read_trace

        dtype = np.dtype(trace.indices.dtype).str
        with ExitStack() as stack:
            writers = [stack.enter_context(TraceWriter(
                out, trace.table_rows, trace.batch_size, _meta(trace, rate, salt),
                index_dtype=dtype if dtype in INDEX_DTYPES else None))
                for out, salt in zip(outs, salts, strict=True)]
            for ids, lengths, bounds in parts:
                for w, kept_ids, lens in zip(writers, ids, lengths, strict=True):
                    w.append_batches(kept_ids, np.concatenate(([0], np.cumsum(lens))),
                                     bounds)
            for s, salt in enumerate(salts):
                _check_tables(trace, rate, salt, seen, kept[s], source)
        out_traces = []
        for out, salt, src in zip(outs, salts, srcs, strict=True):
            stored = read_trace(out)
            out_traces.append(Trace(np.asarray(trace.table_rows, np.int64), stored.indices,
                                    stored.offsets, stored.batch_bounds, trace.batch_size,
                                    _meta(trace, rate, salt), src))
        return out_traces
    ids_parts: list[list[np.ndarray]] = [[] for _ in salts]
    len_parts: list[list[np.ndarray]] = [[] for _ in salts]
    for ids, lengths, _ in parts:
        for s in range(len(salts)):
            ids_parts[s].append(ids[s])
            len_parts[s].append(lengths[s])
    out_traces = []
    for s, salt in enumerate(salts):
        _check_tables(trace, rate, salt, seen, kept[s], source)
        lengths = (np.concatenate(len_parts[s]) if len_parts[s]
                   else np.zeros(0, np.int64))
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        indices = (np.concatenate(ids_parts[s]) if ids_parts[s]
                   else np.zeros(0, trace.indices.dtype))
        out_traces.append(Trace(np.asarray(trace.table_rows, np.int64), indices, offsets,
                                np.asarray(trace.batch_bounds, np.int64).copy(),
                                trace.batch_size, _meta(trace, rate, salt), srcs[s]))
    return out_traces


def cached_sample(trace: Trace, rate: float, salt: int = 0, cache: bool = True,
                  source: str | None = None) -> Trace:
    """`sample_trace(trace, rate, salt)`, read back from the trace cache when a run made it
    before (key: the parent's fingerprint, R, the salt). A sample larger than
    IN_MEMORY_MAX_BYTES is streamed to a temporary `.sptrace` instead (mapped, not cached)."""
    rate = check_rate(rate)
    if threshold(rate) >= MODULUS:
        return trace
    expect = rate * trace.num_accesses * np.dtype(trace.indices.dtype).itemsize
    if expect > IN_MEMORY_MAX_BYTES:
        folder = Path(tempfile.mkdtemp(prefix="spsample."))
        try:  # mapped files outlive their names (POSIX): nothing is left on disk
            return sample_trace(trace, rate, salt, out=folder / "sample.sptrace",
                                source=source)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if not cache:  # no key to make: the parent's fingerprint is a hash of all of it
        return sample_trace(trace, rate, salt, source=source)
    from scratchpipe_sim.traces.trace_cache import cached_trace

    key = {"kind": "spatial-sample", "parent": trace.fingerprint(), "rate": float(rate),
           "salt": int(salt)}
    return cached_trace(key, lambda: sample_trace(trace, rate, salt, source=source),
                        enabled=cache)


def cached_samples(trace: Trace, rate: float, salts: Sequence[int], cache: bool = True,
                   source: str | None = None) -> list[Trace]:
    """`cached_sample(trace, rate, salt, cache)` for every salt of `salts`, the ones the
    trace cache does not hold made in one read of the trace (`sample_traces`); the parent's
    fingerprint (a hash of the whole trace) only asked for when the cache is on."""
    rate = check_rate(rate)
    salts = [int(x) for x in salts]
    if threshold(rate) >= MODULUS:
        return [trace for _ in salts]
    expect = rate * trace.num_accesses * np.dtype(trace.indices.dtype).itemsize
    if expect > IN_MEMORY_MAX_BYTES:
        folder = Path(tempfile.mkdtemp(prefix="spsample."))
        try:  # mapped files outlive their names (POSIX): nothing is left on disk
            return sample_traces(trace, rate, salts,
                                 outs=[folder / f"sample{i}.sptrace"
                                       for i in range(len(salts))], source=source)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if not cache:
        return sample_traces(trace, rate, salts, source=source)
    from scratchpipe_sim.traces.trace_cache import cached_trace

    made: dict[int, Trace] = {}
    parent = trace.fingerprint()

    def make(salt: int) -> Trace:
        if salt not in made:  # the first salt not in the cache: every one left, one read
            todo = [s for s in salts[salts.index(salt):] if s not in made]
            made.update(zip(todo, sample_traces(trace, rate, todo, source=source),
                            strict=True))
        return made.pop(salt)

    out = [cached_trace({"kind": "spatial-sample", "parent": parent, "rate": float(rate),
                         "salt": salt}, lambda salt=salt: make(salt), enabled=True)
           for salt in salts]
    made.clear()
    return out
