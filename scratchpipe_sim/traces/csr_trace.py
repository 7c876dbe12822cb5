"""The in-memory trace: every mini-batch of every table as CSR `(indices, offsets)`.

Layout (the one DLRM and FBGEMM use, stacked over mini-batches):

* `indices` — row ids, each relative to its own table (0 <= id < table_rows[t]).
* `offsets` — int64 bag boundaries into `indices`, `num_bags + 1` entries (an ndarray, or
  for a compact `.sptrace` a `bag_offsets.BagOffsets` that indexes like one). Bags are ordered
  batch-major, then table-major, then sample: mini-batch k with B_k samples and T tables owns
  bags `batch_bounds[k] .. batch_bounds[k+1]` (= T*B_k bags), and table t of that batch is
  bags `batch_bounds[k] + t*B_k ... + (t+1)*B_k` — FBGEMM's `offsets[B*t : B*(t+1)+1]`.
* `batch_bounds` — int64, `num_batches + 1` entries, bag index where each batch starts.

Arrays may be `np.memmap`s (see `store.py`), so a trace larger than RAM is walked in chunks
by `iter_chunks`, which is what the cache engine and the timing model consume.

A cache serves all tables over *linearized* ids (table offset + row), as FBGEMM does;
`Chunk.ids` holds those.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety.limits import env_number
from scratchpipe_sim.safety.memory_guard import CHUNK_ACCESSES
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._pages import read_only_mapping, release, spilled_copy
from scratchpipe_sim.traces.bag_offsets import BagOffsets

#: accesses per chunk of a pass (the memory guard's working-set estimate is built on it)
DEFAULT_CHUNK_ACCESSES = CHUNK_ACCESSES
#: environment variable overriding DEFAULT_CHUNK_ACCESSES (tests replay at chunk sizes of
#: one batch, an odd size and more than the trace; results never depend on it)
CHUNK_ENV = "SCRATCHPIPE_CHUNK_ACCESSES"
#: the arrays a trace's content digest covers, in this order
CONTENT_ARRAYS = ("table_rows", "indices", "offsets", "batch_bounds")
_HASH_BLOCK = 1 << 24  # bytes hashed per step (bounded memory for memory-mapped traces)
#: bags whose rebased offsets a slice of a memory-mapped trace keeps in memory (512 KiB);
#: more are spilled to a temporary file (`_pages.spilled_copy`). Why this small: the copy is
#: one int64 a bag, so any larger bound makes a run's peak grow with the trace up to it
#: (at 2^21 bags, 12.5 MiB more at 1.6M timed bags than at 6.5M, issue 41)
_REBASE_IN_MEMORY = 1 << 16


@dataclass(frozen=True)
class Batch:
    """One mini-batch in FBGEMM layout: `offsets` has T*B+1 entries, rebased to 0."""

    indices: np.ndarray
    offsets: np.ndarray
    num_tables: int

    @property
    def batch_size(self) -> int:
        return (len(self.offsets) - 1) // self.num_tables

    def table(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, offsets) of table t, offsets rebased to 0 (B+1 entries)."""
        b = self.batch_size
        offs = self.offsets[b * t : b * (t + 1) + 1]
        return self.indices[offs[0] : offs[-1]], offs - offs[0]


@dataclass(frozen=True)
class Chunk:
    """Whole consecutive mini-batches, ids linearized over tables.

    `batch_ptr` (relative, n+1 entries) cuts `ids` into mini-batches; `first_batch` is the
    global index of the first one and `first_access` the global position of `ids[0]`.
    """

    first_batch: int
    first_access: int
    ids: np.ndarray  # int64 linearized ids
    tables: np.ndarray  # int32 table of each access
    batch_ptr: np.ndarray  # int64, relative

    @property
    def num_batches(self) -> int:
        return len(self.batch_ptr) - 1


@dataclass(frozen=True)
class Trace:
    table_rows: np.ndarray
    indices: np.ndarray
    offsets: np.ndarray
    batch_bounds: np.ndarray
    batch_size: int
    meta: dict = field(default_factory=dict)
    source: str = "<memory>"
    #: arrays derived from the others, kept because rebuilding them per call or per chunk
    #: costs a pass over the trace: "ptr" (`batch_access_ptr`; `single_table` sets it to
    #: `batch_bounds` itself), "largest" (`largest_batch`), "zeros" (the table ids of a
    #: one-table chunk). Read only.
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict:
        """Pickled (a worker's copy) without `_memo`: derived arrays, rebuilt on demand."""
        return {**self.__dict__, "_memo": {}}

    # -- shape ---------------------------------------------------------------------------
    @property
    def num_tables(self) -> int:
        return len(self.table_rows)

    @property
    def num_batches(self) -> int:
        return len(self.batch_bounds) - 1

    @property
    def num_accesses(self) -> int:
        return int(self.offsets[-1]) if len(self.offsets) else 0

    @property
    def table_offsets(self) -> np.ndarray:
        """Exclusive prefix sum of table rows: linear id = table_offsets[t] + row."""
        return np.concatenate(([0], np.cumsum(self.table_rows, dtype=np.int64)[:-1])).astype(
            np.int64
        )

    @property
    def mapped(self) -> bool:
        """Whether the ids are memory-mapped read-only from a file (a `.sptrace`): passes
        then hold a chunk at a time, not the trace (`memory_guard.check_run(mapped=...)`)."""
        return read_only_mapping(self.indices)

    @property
    def total_rows(self) -> int:
        return int(np.sum(self.table_rows, dtype=np.int64))

    def samples_per_batch(self) -> np.ndarray:
        """Samples in each mini-batch (bags per batch / tables), int64, num_batches."""
        return (np.diff(np.asarray(self.batch_bounds, np.int64)) // self.num_tables).astype(
            np.int64)

    def batch_access_ptr(self) -> np.ndarray:
        """Global position in the access stream where each batch starts (num_batches+1).
        Read only: it may be an array the trace keeps (see `_memo`)."""
        ptr = self._memo.get("ptr")
        if ptr is not None:
            return ptr
        ptr = np.asarray(self.offsets[np.asarray(self.batch_bounds)], dtype=np.int64)
        release(self.offsets, 0, len(self.offsets))  # a page a batch of a mapped trace
        return ptr

    def largest_batch(self, ptr: np.ndarray | None = None) -> int:
        """Most accesses in one batch (at least 1); `ptr`: `batch_access_ptr()`, if at hand.
        Kept: the engine and a policy may both ask (a pass over one int64 a batch)."""
        m = self._memo.get("largest")
        if m is None:
            m = int(largest_batch(self.batch_access_ptr() if ptr is None else ptr))
            self._memo["largest"] = m
        return m

    # -- access ----------------------------------------------------------------------------
    def batch(self, k: int) -> Batch:
        lo, hi = int(self.batch_bounds[k]), int(self.batch_bounds[k + 1])
        offs = np.asarray(self.offsets[lo : hi + 1], dtype=np.int64)
        return Batch(np.asarray(self.indices[offs[0] : offs[-1]]), offs - offs[0], self.num_tables)

    def linear_batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Mini-batch k as (linearized int64 ids over all its bags, rebased int64 offsets)."""
        b = self.batch(k)
        B = b.batch_size
        toff = self.table_offsets
        ids = np.empty(len(b.indices), np.int64)
        for t in range(self.num_tables):
            lo, hi = b.offsets[B * t], b.offsets[B * (t + 1)]
            ids[lo:hi] = np.asarray(b.indices[lo:hi], np.int64) + toff[t]
        return ids, np.asarray(b.offsets, np.int64)

    def slice(self, start: int, stop: int) -> Trace:
        """Batches start..stop-1 as a trace of their own (views of the arrays, offsets
        rebased); the trace itself when that is every batch."""
        if start == 0 and stop == self.num_batches:
            return self
        bounds = np.asarray(self.batch_bounds[start : stop + 1], np.int64)
        view = self.offsets[int(bounds[0]) : int(bounds[-1]) + 1]
        lo, hi = int(view[0]), int(view[-1])
        indices = self.indices[lo:hi]
        part = dataclasses.replace(self, indices=indices, offsets=_rebased(view, lo),
                                   batch_bounds=bounds - bounds[0])
        part._memo["parent"] = (self, int(start), int(stop))
        return part

    # -- digests -------------------------------------------------------------------------------
    def content_sha256(self) -> str:
        """sha256 of the table rows, indices, offsets and batch bounds, each as little-endian
        int64, in that order (hashed in 16 MiB blocks; computed once per trace object): what
        `run` writes as trace.sha256 for a trace not read from a store."""
        digest = self._memo.get("content_sha256")
        if digest is None:
            h = hashlib.sha256()
            for name in CONTENT_ARRAYS:
                _hash_array(h, getattr(self, name))
            digest = self._memo["content_sha256"] = h.hexdigest()
        return digest

    def fingerprint(self) -> str:
        """What the trace's replays depend on: batch size, array dtypes and shapes and
        `content_sha256` (never a store's unverified manifest checksum). A slice made by
        `slice` derives its fingerprint from its parent's and its bounds (no hashing)."""
        digest = self._memo.get("fingerprint")
        if digest is not None:
            return digest
        h = hashlib.sha256()
        parent = self._memo.get("parent")
        if parent is not None:
            base, start, stop = parent
            h.update(f"slice:{base.fingerprint()}:{start}:{stop}".encode())
        else:
            h.update(f"batch_size={int(self.batch_size)};".encode())
            for name in CONTENT_ARRAYS:
                arr = getattr(self, name)
                h.update(f"{name}:{np.dtype(arr.dtype).str}:{tuple(arr.shape)};".encode())
            h.update(self.content_sha256().encode())
        digest = self._memo["fingerprint"] = h.hexdigest()
        return digest

    def checksum(self) -> str:
        """The checksum `run` writes as trace.sha256: the one a trace store recorded (sha256
        of its files) when the trace was read from one, else `content_sha256()`."""
        if "sha256" in self.meta:
            return str(self.meta["sha256"])
        return self.content_sha256()

    def checksum_pending(self) -> bool:
        """Whether `checksum()` would still hash the arrays (not read from a store, not
        hashed yet)."""
        return "sha256" not in self.meta and "content_sha256" not in self._memo

    def with_meta(self, meta: dict) -> Trace:
        """The trace with another meta dict (its arrays shared), keeping what was derived
        from the arrays (digests, slice parent, batch pointers): no digest reads meta, so the
        new object is never hashed again (a warm `run` hashed its 100 MB trace for nothing)."""
        new = dataclasses.replace(self, meta=meta)
        new._memo.update(self._memo)
        return new

    def with_digests(self, content_sha256: str, fingerprint: str | None = None) -> Trace:
        """The trace itself, its digests set to values computed earlier of the same arrays
        (a trace cache entry records both, so a trace read back is never hashed; a forked
        worker beside the replays gives the content digest alone:
        `timing.simulate(checksum=True)`)."""
        self._memo["content_sha256"] = str(content_sha256)
        if fingerprint is not None:
            self._memo["fingerprint"] = str(fingerprint)
        return self

    def iter_chunks(
        self, max_accesses: int | None = None, start_batch: int = 0,
        max_batches: int | None = None, ptr: np.ndarray | None = None,
        reuse_buffers: bool = False,
    ) -> Iterator[Chunk]:
        """Consecutive whole batches of about `max_accesses` linearized ids each (and at most
        `max_batches` batches, if given: per-batch buffers stay small at tiny batch sizes).

        A chunk always holds at least one batch, so one huge batch is one chunk. `ptr`:
        `batch_access_ptr()` if already at hand (it is one int64 per batch).
        `reuse_buffers=True`: every chunk's `ids` and `tables` are written into the same two
        arrays (`ChunkBuffers`), so a chunk is valid only until the next one is yielded: for
        passes that keep nothing of a chunk but copies.
        """
        ptr = self.batch_access_ptr() if ptr is None else ptr
        starts = self.chunk_starts(max_accesses, start_batch, ptr, max_batches)
        buffers = None
        if reuse_buffers:  # sized once, to the largest chunk
            first = np.asarray(starts, np.int64)
            buffers = ChunkBuffers(int(np.max(ptr[first[1:]] - ptr[first[:-1]], initial=0)))
        for k, end in zip(starts[:-1], starts[1:], strict=True):
            yield self.chunk(k, end, ptr, buffers)

    def chunk(self, k: int, end: int, ptr: np.ndarray | None = None,
              buffers: ChunkBuffers | None = None) -> Chunk:
        """Batches k..end-1 as one chunk (`ptr`: `batch_access_ptr()`, if already at hand;
        `buffers`: arrays to write the ids and tables into instead of new ones)."""
        ptr = self.batch_access_ptr() if ptr is None else ptr
        lo, hi = int(self.batch_bounds[k]), int(self.batch_bounds[end])
        base = int(ptr[k])
        bptr = ptr[k : end + 1] - base
        if self.num_tables == 1:
            ids = self._one_table_ids(base, base + int(bptr[-1]), buffers)
            return Chunk(k, base, ids, self._zero_tables(len(ids)), bptr)
        bounds = np.asarray(self.batch_bounds[k : end + 1], dtype=np.int64) - lo
        bag = constant_bag_length(self.offsets)
        if bag is not None:  # every bag holds `bag` ids: no offsets to read or build
            first, last = int(self.offsets[lo]), int(self.offsets[hi])
            raw = np.asarray(self.indices[first:last])
            ids, tables = (ChunkBuffers() if buffers is None else buffers).take(len(raw))
            _linearize_constant_into(raw, bag, bounds, self.table_offsets, self.num_tables,
                                     ids, tables)
            release(self.indices, first, last)
            return Chunk(k, first, ids, tables, bptr)
        offs = np.asarray(self.offsets[lo : hi + 1], dtype=np.int64)
        raw = np.asarray(self.indices[offs[0] : offs[-1]])
        ids, tables = _linearize(raw, offs - offs[0], bounds, self.table_offsets,
                                 self.num_tables, buffers)
        first, last = int(offs[0]), int(offs[-1])
        # the chunk holds copies: a mapped trace's pages go back (bounded resident set)
        release(self.indices, first, last)
        release(self.offsets, lo, hi + 1)
        return Chunk(k, first, ids, tables, bptr)

    def chunk_ids(self, k: int, end: int, ptr: np.ndarray | None = None,
                  buffers: ChunkBuffers | None = None) -> tuple[int, np.ndarray]:
        """(global position of the first access, linearized ids) of batches k..end-1: what
        `chunk` holds without its per-batch pointers (one int64 a batch to build: 8 MiB per
        1M-access chunk at batch size 1) when a pass needs only the ids."""
        if self.num_tables == 1:
            ptr = self.batch_access_ptr() if ptr is None else ptr
            base = int(ptr[k])
            return base, self._one_table_ids(base, int(ptr[end]), buffers)
        c = self.chunk(k, end, ptr, buffers)
        return c.first_access, c.ids

    def _one_table_ids(self, lo: int, hi: int, buffers: ChunkBuffers | None = None
                       ) -> np.ndarray:
        """Accesses lo..hi-1 of a one-table trace as int64 ids: its linear ids are the
        indices themselves, whatever the bags (a view when they are already int64: kernels
        only read chunk ids; else a copy, into `buffers` if given: one array type, one
        compiled kernel)."""
        raw = self.indices[lo:hi]
        ids = np.asarray(raw)
        if ids.dtype != np.int64 or not ids.flags.writeable or not ids.flags.c_contiguous:
            if buffers is None:
                out = np.array(raw, dtype=np.int64)
            else:
                out = buffers.take(len(ids))[0]
                np.copyto(out, ids, casting="unsafe")
            release(self.indices, lo, hi)  # copied: a mapped trace's pages go back
            return out
        return ids

    def _zero_tables(self, n: int) -> np.ndarray:
        """n int32 zeros, the table ids of a one-table chunk: a view of one array kept on the
        trace (a fresh one per chunk cost ~2.7 ns an access at batch size 1: allocation and
        page faults; untouched calloc pages of the kept array cost no memory)."""
        z = self._memo.get("zeros")
        if z is None or len(z) < n:
            z = np.zeros(n, np.int32)
            self._memo["zeros"] = z
        return z[:n]

    def chunk_starts(self, max_accesses: int | None = None, start_batch: int = 0,
                     ptr: np.ndarray | None = None,
                     max_batches: int | None = None) -> list[int]:
        """First batch of every chunk `iter_chunks` yields, then `num_batches` (no data read
        beyond the batch pointers), so a caller can walk the chunks in any order."""
        ptr = self.batch_access_ptr() if ptr is None else ptr
        max_accesses = chunk_size(max_accesses)
        starts, k, nb_ = [start_batch], start_batch, self.num_batches
        step = nb_ if max_batches is None else max(1, int(max_batches))
        while k < nb_:
            end = int(np.searchsorted(ptr, ptr[k] + max_accesses, side="right")) - 1
            k = min(max(end, k + 1), nb_, k + step)
            starts.append(k)
        return starts

    def linear_ids(self) -> np.ndarray:
        """The whole access stream as linearized ids (in memory: for small traces and tests)."""
        parts = [c.ids for c in self.iter_chunks(max_accesses=1 << 62)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    # -- checks ------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise UserError when the structure or an id is out of range (checked chunk-wise)."""
        src = self.source
        if self.num_tables < 1:
            raise UserError("a trace needs at least one table", source=src, field="table_rows")
        if np.any(np.asarray(self.table_rows) <= 0):
            raise UserError("every table needs a positive row count", source=src,
                            field="table_rows")
        if self.num_batches < 1 or self.num_accesses == 0:
            raise UserError("the trace is empty (no accesses)", source=src)
        if self.batch_bounds[0] != 0 or self.batch_bounds[-1] != len(self.offsets) - 1:
            raise UserError("batch_bounds do not cover the bags", source=src,
                            field="batch_bounds")
        bags = np.diff(np.asarray(self.batch_bounds))
        if np.any(bags <= 0) or np.any(bags % self.num_tables):
            raise UserError("every batch needs T*B bags (B >= 1)", source=src,
                            field="batch_bounds")
        if self.offsets[0] != 0 or _decreases(self.offsets):
            raise UserError("offsets must start at 0 and never decrease", source=src,
                            field="offsets")
        for chunk in self.iter_chunks(reuse_buffers=True):  # one chunk's memory
            if len(chunk.ids) == 0:
                continue
            bad = _first_out_of_range(chunk.ids, chunk.tables, self.table_offsets,
                                      np.asarray(self.table_rows, np.int64))
            if bad >= 0:
                t = int(chunk.tables[bad])
                row = int(chunk.ids[bad] - self.table_offsets[t])
                raise UserError(
                    f"id {row} at access {chunk.first_access + bad} is out of range for table "
                    f"{t}: expected 0 <= id < {int(self.table_rows[t])}",
                    source=src, field="indices")

    # -- construction --------------------------------------------------------------------------
    @staticmethod
    def single_table(ids: np.ndarray, num_rows: int | None, batch_size: int,
                     source: str = "<memory>", meta: dict | None = None) -> Trace:
        """One table, pooling 1: mini-batches of `batch_size` ids (the last may be shorter)."""
        ids = np.asarray(ids)
        if batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {batch_size}", source=source,
                            field="batch_size")
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise UserError(f"expected a 1-D integer array of row ids, got {ids.dtype} "
                            f"with shape {ids.shape}", source=source)
        if len(ids) == 0:
            raise UserError("the trace is empty (no accesses)", source=source)
        if ids.min() < 0:
            raise UserError(f"negative row id {int(ids.min())}: expected ids >= 0",
                            source=source, field="indices")
        rows = int(ids.max()) + 1 if num_rows is None else int(num_rows)
        n = len(ids)
        offsets = np.arange(n + 1, dtype=np.int64)
        # 0, B, 2B, ... and n: already sorted and distinct (np.unique here cost seconds)
        bounds = np.append(np.arange(0, n, batch_size, dtype=np.int64), n)
        trace = Trace(np.array([rows], np.int64), ids.astype(np.int64, copy=False), offsets,
                      bounds, batch_size, meta or {}, source)
        # pooling 1: offsets[i] = i, so the batch access pointers are the batch bounds (no
        # gather of one int64 per access at batch size 1: ~2-3 ns an access)
        trace._memo["ptr"] = bounds
        return trace

    @staticmethod
    def from_batches(batches: list[list[np.ndarray]], table_rows: list[int] | np.ndarray,
                     pooling_lengths: list[list[np.ndarray]] | None = None,
                     source: str = "<memory>", meta: dict | None = None) -> Trace:
        """Build from `batches[k][t]` = ids of table t in batch k.

        `pooling_lengths[k][t]` gives the bag lengths (B entries); without it every id is its
        own bag (pooling 1).
        """
        T = len(table_rows)
        idx_parts, len_parts, bounds = [], [], [0]
        batch_size = 0
        for k, per_table in enumerate(batches):
            if len(per_table) != T:
                raise UserError(f"batch {k} has {len(per_table)} tables, expected {T}",
                                source=source)
            lens_k = []
            for t, ids in enumerate(per_table):
                ids = np.asarray(ids, np.int64)
                lens = (np.ones(len(ids), np.int64) if pooling_lengths is None
                        else np.asarray(pooling_lengths[k][t], np.int64))
                lens_k.append(lens)
                idx_parts.append(ids)
            b = len(lens_k[0])
            if any(len(x) != b for x in lens_k):
                raise UserError(f"batch {k}: every table needs the same number of bags",
                                source=source)
            batch_size = max(batch_size, b)
            len_parts.extend(lens_k)
            bounds.append(bounds[-1] + T * b)
        indices = np.concatenate(idx_parts) if idx_parts else np.zeros(0, np.int64)
        lengths = np.concatenate(len_parts) if len_parts else np.zeros(0, np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        return Trace(np.asarray(table_rows, np.int64), indices, offsets,
                     np.asarray(bounds, np.int64), batch_size, meta or {}, source)


def chunk_size(max_accesses: int | None = None) -> int:
    """Accesses per chunk: `max_accesses` if given, else $SCRATCHPIPE_CHUNK_ACCESSES, else
    `DEFAULT_CHUNK_ACCESSES`."""
    if max_accesses is not None:
        return int(max_accesses)
    return int(env_number(CHUNK_ENV, DEFAULT_CHUNK_ACCESSES, minimum=1))


def _hash_array(h: hashlib._Hash, arr: np.ndarray) -> None:
    """Feed `arr` to `h` as little-endian int64, a block at a time (a memory-mapped array
    is never copied whole)."""
    flat = arr if isinstance(arr, BagOffsets) else np.asarray(arr).reshape(-1)
    step = max(1, _HASH_BLOCK // 8)
    for lo in range(0, len(flat), step):
        block = np.ascontiguousarray(flat[lo : lo + step], dtype="<i8")
        h.update(memoryview(block).cast("B"))
        release(flat, lo, lo + step)


def _decreases(arr: np.ndarray) -> bool:
    """Whether `arr` ever decreases, checked a block at a time (no copy of a mapped
    array; its pages go back)."""
    if isinstance(arr, BagOffsets) and arr.bag_length is not None:
        return False  # i * L
    step = max(1, _HASH_BLOCK // 8)
    for lo in range(0, max(len(arr) - 1, 0), step):
        d = np.diff(np.asarray(arr[lo : lo + step + 1]))
        release(arr, lo, lo + step + 1)
        if np.any(d < 0):
            return True
    return False


def _rebased(offsets: np.ndarray, base: int) -> np.ndarray:
    """A slice's offsets (`offsets - base`, int64) without a copy of one int64 a bag in
    memory: the view itself when nothing moves; a spilled, mapped copy when the view is
    mapped from a file and large (a production-scale trace's timed slice)."""
    if isinstance(offsets, BagOffsets):
        return offsets.shifted(base)  # lazy: nothing computed, nothing spilled
    if base == 0 and np.dtype(offsets.dtype) == np.int64:
        return offsets
    if len(offsets) > _REBASE_IN_MEMORY and read_only_mapping(offsets):
        return spilled_copy(offsets, base, f"the rebased offsets of {len(offsets) - 1} bags")
    return np.asarray(offsets, np.int64) - base


#: slices made by `slice_trace`, per parent trace object (the parent is kept in the entry, so
#: its id cannot be reused while the entry exists): every point of a sweep slices its shared
#: trace the same way, and a slice rebases its offsets (a pass over them). At most
#: _SLICE_MEMO_PARENTS parents are kept; `forget_slices()` drops them all.
_SLICE_MEMO: dict[int, tuple[Trace, dict[tuple[int, int], Trace]]] = {}
_SLICE_MEMO_PARENTS = 2


def slice_trace(trace: Trace, start: int, stop: int) -> Trace:
    """`trace.slice(start, stop)`, the same object for the same parent and bounds (traces
    are immutable), so the slices every design and sweep point replays are made once."""
    start, stop = int(start), int(stop)
    entry = _SLICE_MEMO.get(id(trace))
    if entry is None or entry[0] is not trace:
        if len(_SLICE_MEMO) >= _SLICE_MEMO_PARENTS:
            _SLICE_MEMO.clear()
        entry = _SLICE_MEMO[id(trace)] = (trace, {})
    part = entry[1].get((start, stop))
    if part is None:
        part = entry[1][start, stop] = trace.slice(start, stop)
    return part


def forget_slices() -> None:
    """Drop the remembered slices (and the parents they keep alive): a sweep worker calls it
    when it moves to another trace, so an old trace's memory is freed."""
    _SLICE_MEMO.clear()


class ChunkBuffers:
    """The ids and tables arrays `Trace.chunk` writes chunks into, reused chunk after chunk.

    Why: a pass that takes a fresh 12 B-an-access pair per chunk often gets pages the
    allocator has just handed back to the kernel, and faults its ~50 MB in again (the
    quickstart's scratchpipe replay: ~0.15 s of its ~1 s). Made for `accesses` ids, grown
    if a larger chunk is asked for, never shrunk."""

    def __init__(self, accesses: int = 0) -> None:
        self.ids = np.empty(accesses, np.int64)
        self.tables = np.empty(accesses, np.int32)

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The first n entries of each array (contents undefined)."""
        if len(self.ids) < n:
            self.ids = np.empty(n, np.int64)
            self.tables = np.empty(n, np.int32)
        return self.ids[:n], self.tables[:n]


def _linearize(raw: np.ndarray, offs: np.ndarray, bounds: np.ndarray,
               table_offsets: np.ndarray, num_tables: int,
               buffers: ChunkBuffers | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(global int64 ids, int32 table of each id) of a chunk's accesses; the outputs are
    allocated here (or taken from `buffers`), not in the kernel (an allocating kernel
    compiles np.empty's overload at the first run)."""
    n = len(raw)
    ids, tables = (ChunkBuffers() if buffers is None else buffers).take(n)
    _linearize_into(raw, offs, bounds, np.asarray(table_offsets, np.int64), num_tables,
                    ids, tables)
    return ids, tables


@njit(cache=True)
def _linearize_into(raw, offs, bounds, table_offsets, num_tables, ids, tables):
    """Each bag's ids plus its table's offset. Why the positions are unsigned: with a signed
    index Numba adds negative-index wrap-around, and LLVM vectorized the copy with AVX-512
    gathers and scatters instead of plain loads and stores (4x slower on the 2-core VM of
    docs/performance.md: 53 -> 14 ms for the quickstart's 26.2M ids)."""
    for k in range(len(bounds) - 1):
        b = (bounds[k + 1] - bounds[k]) // num_tables
        for t in range(num_tables):
            lo = np.uint64(offs[bounds[k] + t * b])
            hi = np.uint64(offs[bounds[k] + (t + 1) * b])
            base = table_offsets[t]
            for j in range(lo, hi):
                ids[j] = raw[j] + base
                tables[j] = t


def constant_bag_length(offsets: object) -> int | None:
    """The ids every bag holds when `offsets` says so without being read (a `.sptrace` of
    version 2 with fixed pooling: `BagOffsets`' constant encoding), else None. Why: such a
    trace's offsets are `i x L`, and building them (one int64 a bag: 8 bytes an id at
    pooling 1) cost more than the ids themselves in every pass over a Criteo day."""
    if isinstance(offsets, BagOffsets) and offsets.bag_length is not None:
        return offsets.bag_length
    return None


@njit(cache=True)
def _linearize_constant_into(raw, bag, bounds, table_offsets, num_tables, ids, tables):
    """`_linearize_into` for bags of `bag` ids each: bag i of the chunk starts at i x bag
    (the same ids and tables, no offsets array)."""
    for k in range(len(bounds) - 1):
        b = (bounds[k + 1] - bounds[k]) // num_tables
        for t in range(num_tables):
            lo = np.uint64((bounds[k] + t * b) * bag)
            hi = np.uint64((bounds[k] + (t + 1) * b) * bag)
            base = table_offsets[t]
            for j in range(lo, hi):
                ids[j] = raw[j] + base
                tables[j] = t


@njit(cache=True)
def all_single(batch_ptr):
    """True when every batch holds exactly one access (batch size 1, pooling 1): a chunk's
    `batch_ptr`, for the kernels' batch-size-1 paths."""
    ok = True
    for b in range(len(batch_ptr) - 1):  # no early exit: a branch-free, vectorized pass
        ok &= batch_ptr[b + 1] - batch_ptr[b] == 1
    return ok


@njit(cache=True)
def largest_batch(ptr):
    """Most accesses in one batch (at least 1), from `Trace.batch_access_ptr()`."""
    m = 1
    for b in range(len(ptr) - 1):
        m = max(m, ptr[b + 1] - ptr[b])
    return m


@njit(cache=True)
def _first_out_of_range(ids, tables, table_offsets, table_rows):
    for j in range(len(ids)):
        t = tables[j]
        r = ids[j] - table_offsets[t]
        if r < 0 or r >= table_rows[t]:
            return j
    return -1
