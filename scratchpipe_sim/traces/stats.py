"""Locality statistics of a trace, comparable with Meta's published dlrm_datasets numbers.

* `summarize(trace)`: accesses, unique rows (per table and total), mean unique rows per
  mini-batch, and `access_histogram` — per-row access counts in Meta's power-of-two buckets
  (0,1], (1,2], (2,4], ... (16384,32768], (32768+ with the share of unique rows and the share
  of accesses in each, exactly as in `locality_stats.txt`. The whole trace is one window
  (Meta's numbers are per trace file, each file one big batch), unique rows counted over
  linearized ids (a row is a (table, row) pair).
* `format_locality_stats` / `read_locality_stats`: that file format, written and parsed.
* `lru_miss_ratio_curve(trace)`: the exact LRU miss-ratio curve for a fully associative cache
  processed access by access, from stack distances in one pass (Mattson et al. 1970):
  a Fenwick tree over access times marks each id's latest access, so an access's stack
  distance is the number of marks after its id's previous access, O(log n) per access.
  `stack_distances(ids, num_ids)` gives each access's distance from the same kernel (the
  project's one stack-distance kernel: `traces/distribution_fit.py` and `reuse_distance.py` use it).

Memory: 8 bytes per row (count + batch stamp) for `summarize`; for the curve, 8 bytes per row
plus a tree of about 2 slots per row (int32) whose positions are renumbered when they run
out, so memory does not grow with the trace.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.csr_trace import DEFAULT_CHUNK_ACCESSES, Trace

#: Upper bucket edges of Meta's histogram: (0,1], (1,2], (2,4], ..., (16384,32768], (32768+.
BUCKET_EDGES = tuple([0] + [1 << i for i in range(16)])
NUM_BUCKETS = len(BUCKET_EDGES)  # 17, the last one open-ended
BUCKET_LABELS = tuple([f"({BUCKET_EDGES[i]}, {BUCKET_EDGES[i + 1]}]"
                       for i in range(NUM_BUCKETS - 1)] + [f"({BUCKET_EDGES[-1]}+"])
#: default miss-ratio-curve capacities, as fractions of the trace's rows.
DEFAULT_CAPACITY_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2)


def bucket_of(counts: np.ndarray) -> np.ndarray:
    """Meta's bucket index of each access count >= 1: 1 -> 0, 2 -> 1, 3..4 -> 2, ...,
    16385..32768 -> 15, above 32768 -> 16."""
    return np.searchsorted(np.asarray(BUCKET_EDGES[1:], np.int64), counts, side="left")


@dataclass(frozen=True)
class LocalityStats:
    """One block of Meta's `locality_stats.txt` (shares are fractions, 17 buckets)."""

    name: str
    num_batches: int
    batch_size: int
    num_indices: float
    num_unique: float
    avg_col_size: float
    row_share: tuple[float, ...]
    access_share: tuple[float, ...]
    #: exact per-bucket counts (ours only; None when parsed from a file)
    row_counts: tuple[int, ...] | None = None
    access_counts: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        d = {"name": self.name, "num_batches": self.num_batches,
             "batch_size": self.batch_size, "num_indices": self.num_indices,
             "num_unique": self.num_unique, "avg_col_size": self.avg_col_size,
             "buckets": list(BUCKET_LABELS), "row_share": list(self.row_share),
             "access_share": list(self.access_share)}
        if self.row_counts is not None:
            d["row_counts"] = list(self.row_counts)
            d["access_counts"] = list(self.access_counts or ())
        return d


@dataclass(frozen=True)
class TraceSummary:
    source: str
    table_rows: list[int]
    num_batches: int
    batch_size: int
    accesses: int
    #: distinct rows over the whole trace (not the per-batch sum `cache`/`run` call unique)
    distinct_rows: int
    accesses_per_table: list[int]
    distinct_rows_per_table: list[int]
    mean_unique_per_batch: float
    mean_pooling: float
    histogram: LocalityStats
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"source": self.source, "tables": len(self.table_rows),
                "table_rows": self.table_rows, "rows": int(sum(self.table_rows)),
                "batches": self.num_batches, "batch_size": self.batch_size,
                "accesses": self.accesses, "distinct_rows": self.distinct_rows,
                "accesses_per_table": self.accesses_per_table,
                "distinct_rows_per_table": self.distinct_rows_per_table,
                "mean_unique_per_batch": self.mean_unique_per_batch,
                "mean_pooling": self.mean_pooling, "histogram": self.histogram.to_dict()}


# -- counting pass --------------------------------------------------------------------------
@njit(cache=True)
def _count_pass(ids, batch_ptr, first_batch, counts, stamp, uniq):
    for b in range(len(batch_ptr) - 1):
        s = first_batch + b
        u = 0
        for j in range(batch_ptr[b], batch_ptr[b + 1]):
            r = ids[j]
            counts[r] += 1
            if stamp[r] != s:
                stamp[r] = s
                u += 1
        uniq[s] = u


def row_access_counts(trace: Trace, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(accesses of every linearized row [uint32], unique rows of every batch [int64])."""
    counts = np.zeros(trace.total_rows, np.uint32)
    stamp = np.full(trace.total_rows, -1, np.int32 if trace.num_batches < 2**31 else np.int64)
    uniq = np.zeros(trace.num_batches, np.int64)
    for c in trace.iter_chunks(chunk_accesses):
        _count_pass(c.ids, c.batch_ptr, c.first_batch, counts, stamp, uniq)
    return counts, uniq


def histogram_from_counts(counts: np.ndarray, name: str, num_batches: int = 1,
                          batch_size: int = 0) -> LocalityStats:
    """Meta's histogram of a per-row access-count array (zeros are untouched rows)."""
    c = np.asarray(counts)
    c = c[c > 0].astype(np.int64)
    b = bucket_of(c)
    rows = np.bincount(b, minlength=NUM_BUCKETS).astype(np.int64)
    acc = np.zeros(NUM_BUCKETS, np.int64)
    np.add.at(acc, b, c)
    n_uniq, n_acc = int(rows.sum()), int(acc.sum())
    rs = tuple(float(x) / n_uniq if n_uniq else 0.0 for x in rows)
    as_ = tuple(float(x) / n_acc if n_acc else 0.0 for x in acc)
    return LocalityStats(name, num_batches, batch_size, float(n_acc), float(n_uniq),
                         n_acc / n_uniq if n_uniq else 0.0, rs, as_,
                         tuple(int(x) for x in rows), tuple(int(x) for x in acc))


def summarize(trace: Trace, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> TraceSummary:
    """Accesses, distinct rows, mean distinct rows per batch and the access histogram, one
    pass."""
    counts, uniq = row_access_counts(trace, chunk_accesses)
    toff = np.concatenate((trace.table_offsets, [trace.total_rows]))
    acc_t = [int(counts[toff[t]:toff[t + 1]].sum(dtype=np.int64))
             for t in range(trace.num_tables)]
    uniq_t = [int(np.count_nonzero(counts[toff[t]:toff[t + 1]]))
              for t in range(trace.num_tables)]
    bags = len(trace.offsets) - 1
    # the whole trace is one window: Meta's "1 batches of size <samples>"
    samples = bags // trace.num_tables
    hist = histogram_from_counts(counts, Path(trace.source).name, 1, samples)
    return TraceSummary(trace.source, [int(x) for x in trace.table_rows], trace.num_batches,
                        trace.batch_size, trace.num_accesses, int(sum(uniq_t)), acc_t, uniq_t,
                        float(uniq.mean()) if len(uniq) else 0.0,
                        trace.num_accesses / bags if bags else 0.0, hist, dict(trace.meta))


def access_histogram(trace: Trace) -> LocalityStats:
    """Per-row access-count histogram in Meta's power-of-two buckets (see module doc)."""
    return summarize(trace).histogram


# -- Meta's text format ----------------------------------------------------------------------
def format_locality_stats(s: LocalityStats) -> str:
    """One block in Meta's `locality_stats.txt` layout (3 decimals, cumulative lists)."""
    def section(title: str, shares: tuple[float, ...]) -> list[str]:
        cum = np.concatenate(([0.0], np.cumsum(shares)))
        return ([title] + [f"{lab}: {v:.3f}" for lab, v in zip(BUCKET_LABELS, shares,
                                                               strict=True)]
                + [str(list(BUCKET_EDGES)), str([f"{min(v, 1.0):.3f}" for v in cum])])

    lines = [s.name,
             f"Locality stats after processing {s.num_batches} batches of size {s.batch_size}",
             f"Avg # of indices: {_num(s.num_indices)}",
             f"Avg # of unique cols: {_num(s.num_unique)}",
             f"Avg col size: {s.avg_col_size:.1f}"]
    lines += section("Histogram of col sizes:", s.row_share)
    lines += section("Ratio of index distribution at different column sizes:", s.access_share)
    return "\n".join(lines) + "\n"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


_HEADER = re.compile(r"Locality stats after processing (\d+) batches of size (\d+)\s*$")
_VALUE = re.compile(r"(Avg # of indices|Avg # of unique cols|Avg col size):\s*([0-9.eE+-]+)\s*$")
_BUCKET = re.compile(r"\((\d+)(?:, (\d+)\]|\+):\s*([0-9.]+)\s*$")


def read_locality_stats(path: str | os.PathLike) -> list[LocalityStats]:
    """Every block of a Meta `locality_stats.txt` file (UserError naming the line)."""
    p = Path(path)
    src = str(p)
    try:
        lines = p.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read ({e})", source=src) from None
    out: list[LocalityStats] = []
    i = 0
    n = len(lines)

    def fail(msg: str, at: int) -> UserError:
        return UserError(f"line {at + 1}: {msg}", source=src)

    while i < n:
        if not lines[i].strip():
            i += 1
            continue
        name = lines[i].strip()
        i += 1
        if i >= n or not (m := _HEADER.match(lines[i].strip())):
            raise fail("expected 'Locality stats after processing N batches of size B'", i)
        num_batches, batch_size = int(m.group(1)), int(m.group(2))
        i += 1
        vals: dict[str, float] = {}
        for _ in range(3):
            if i >= n or not (m := _VALUE.match(lines[i].strip())):
                raise fail("expected 'Avg # of indices', 'Avg # of unique cols' or "
                           "'Avg col size: X'", i)
            vals[m.group(1)] = float(m.group(2))
            i += 1
        shares = []
        for title in ("Histogram of col sizes:",
                      "Ratio of index distribution at different column sizes:"):
            if i >= n or lines[i].strip() != title:
                raise fail(f"expected '{title}'", i)
            i += 1
            sec = []
            for k in range(NUM_BUCKETS):
                if i >= n or not (m := _BUCKET.match(lines[i].strip())) \
                        or int(m.group(1)) != BUCKET_EDGES[k]:
                    raise fail(f"expected bucket '{BUCKET_LABELS[k]}: share'", i)
                sec.append(float(m.group(3)))
                i += 1
            i += 2  # the edges list and the cumulative list
            if i > n:
                raise fail("expected the bucket edge and cumulative lists", n - 1)
            shares.append(tuple(sec))
        missing = {"Avg # of indices", "Avg # of unique cols", "Avg col size"} - vals.keys()
        if missing:
            raise fail(f"block '{name}' lacks {sorted(missing)}", i)
        out.append(LocalityStats(name, num_batches, batch_size, vals["Avg # of indices"],
                                 vals["Avg # of unique cols"], vals["Avg col size"],
                                 shares[0], shares[1]))
    if not out:
        raise UserError("no locality-stats block found", source=src)
    return out


# -- LRU miss-ratio curve --------------------------------------------------------------------
@dataclass(frozen=True)
class MissRatioCurve:
    """Exact LRU misses at any capacity: `distance_counts[d]` accesses had stack distance d
    (d >= 1; an access hits in an LRU cache of C rows iff d <= C), plus cold misses."""

    accesses: int
    cold_misses: int
    distance_counts: np.ndarray  # int64, index = stack distance (index 0 unused)
    capacities: tuple[int, ...]

    def misses_at(self, capacity: int) -> int:
        c = min(int(capacity), len(self.distance_counts) - 1)
        hits = int(self.distance_counts[1 : c + 1].sum()) if c >= 1 else 0
        return self.accesses - hits

    def miss_ratio(self, capacity: int) -> float:
        return self.misses_at(capacity) / self.accesses if self.accesses else 0.0

    def points(self) -> list[dict]:
        return [{"capacity": c, "misses": self.misses_at(c), "miss_ratio": self.miss_ratio(c),
                 "hit_ratio": 1.0 - self.miss_ratio(c)} for c in self.capacities]


@njit(cache=True)
def _compact(last, tree, size):
    """Renumber the live marks 1..k in time order and rebuild the tree; returns k.

    Why: the tree is indexed by access time, so without this it would need one slot per
    access; renumbering keeps it at a fixed size (about 2x the rows) for any trace length.
    """
    owner = np.full(size + 1, -1, np.int64)
    for x in range(len(last)):
        if last[x] > 0:
            owner[last[x]] = x
    k = 0
    for pos in range(1, size + 1):
        if owner[pos] >= 0:
            k += 1
            last[owner[pos]] = k
    for i in range(1, size + 1):  # linear-time Fenwick build of marks at 1..k
        lo = i - (i & (-i))
        tree[i] = max(0, min(i, k) - lo)
    return k


@njit(cache=True)
def _stack_distances(ids, last, tree, state, hist, out):
    """The one LRU stack-distance kernel (Mattson et al. 1970), resumable chunk by chunk.

    Each access's distance d (1 = the same id as the previous distinct one, 0 = first use)
    is counted in `hist[d]` (d >= 1 only) when `hist` is not empty and written to `out[j]`
    when `out` is not empty. `last[x]` (0 = unseen) is id x's latest position in `tree`,
    a Fenwick tree over access times, renumbered (`_compact`) when its slots run out.
    """
    # state[0] = distinct ids seen so far (= marks in the tree), state[1] = cold misses,
    # state[2] = current position in the tree (1-based), state[3] = compactions
    size = len(tree) - 1
    count = len(hist) > 0
    write = len(out) > 0
    for j in range(len(ids)):
        x = ids[j]
        p = last[x]
        if p > 0:
            # marks at positions <= p
            s = 0
            i = p
            while i > 0:
                s += tree[i]
                i -= i & (-i)
            d = state[0] - s + 1
            if count:
                hist[d] += 1
            if write:
                out[j] = d
            i = p
            while i <= size:
                tree[i] -= 1
                i += i & (-i)
        else:
            state[0] += 1
            state[1] += 1
            if write:
                out[j] = 0
        if state[2] == size:
            if p > 0:
                last[x] = 0  # unmarked above; not live during the renumbering
            state[2] = _compact(last, tree, size)
            state[3] += 1
        state[2] += 1
        t = state[2]
        i = t
        while i <= size:
            tree[i] += 1
            i += i & (-i)
        last[x] = t


def _stack_state(num_ids: int, accesses: int, tree_size: int | None):
    """(last, tree, state) for `_stack_distances` over `accesses` accesses of `num_ids` ids;
    `tree_size` (default 2x the ids) bounds the tree whatever the stream's length."""
    last = np.zeros(num_ids, np.int64)
    if tree_size is None:
        tree_size = max(2 * num_ids, 1 << 16)
    # marks never exceed the distinct ids, so a tree larger than that always has room
    size = max(min(accesses, int(tree_size)), min(num_ids, accesses) + 1)
    return last, np.zeros(size + 1, np.int32), np.zeros(4, np.int64)


_NONE = np.zeros(0, np.int64)


def stack_distances(ids: np.ndarray, num_ids: int, tree_size: int | None = None) -> np.ndarray:
    """LRU stack distance of every access of `ids` (ids in [0, num_ids)): 1 = the same id
    as the previous distinct one, 0 = first use (the kernel of `lru_miss_ratio_curve`)."""
    ids = np.asarray(ids)
    last, tree, state = _stack_state(int(num_ids), len(ids), tree_size)
    out = np.zeros(len(ids), np.int64)
    _stack_distances(ids, last, tree, state, _NONE, out)
    return out


def default_capacities(total_rows: int) -> tuple[int, ...]:
    return tuple(sorted({max(1, int(round(f * total_rows)))
                         for f in DEFAULT_CAPACITY_FRACTIONS}))


def lru_miss_ratio_curve(trace: Trace, capacities: list[int] | None = None,
                         chunk_accesses: int = DEFAULT_CHUNK_ACCESSES,
                         tree_size: int | None = None) -> MissRatioCurve:
    """Exact LRU miss counts at every capacity, one pass (see the module doc).

    `tree_size` (default 2x the rows): slots of the Fenwick tree; when the access clock
    reaches it, live marks are renumbered (amortized O(1) per access), so memory stays
    bounded by the rows, not the trace length.
    """
    caps = tuple(int(c) for c in capacities) if capacities else \
        default_capacities(trace.total_rows)
    for c in caps:
        if c < 1:
            raise UserError(f"capacity must be >= 1 row, got {c}", source=trace.source,
                            field="capacities")
    n = trace.num_accesses
    last, tree, state = _stack_state(trace.total_rows, n, tree_size)
    hist = np.zeros(min(trace.total_rows, n) + 2, np.int64)
    for c in trace.iter_chunks(chunk_accesses):
        _stack_distances(c.ids, last, tree, state, hist, _NONE)
    return MissRatioCurve(n, int(state[1]), hist, caps)
