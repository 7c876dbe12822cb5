"""`calibrate --cpu --kernel fbgemm`: FBGEMM's CPU backward timed per optimizer, at shapes
that separate the terms of `timing/cpu_update_cost.py`.

Per optimizer (EXACT_SGD, EXACT_ADAGRAD, EXACT_ROWWISE_ADAGRAD: what FBGEMM 1.8's CPU build
runs; it refuses Adam) one CPU TBE per (tables, dim) of the shapes, float32 weights in huge
pages (THP_MEM_ALLOC_ENABLE, as validate --against fbgemm), one thread. A shape is (tables
T, batch B, pooling L, dim D, reuse k): every table gets B bags of L ids drawn over about
B x L / k distinct uniform random rows of its table (so U varies at fixed lookups), the
tables hold `update_table_rows` rows in all (> 100x this host's LLC at every dim: rows
miss, as a large table's do). Fit shapes vary D (32 / 64 / 128), the lookups through L
(2 / 8 / 32 at B, and pooling 1 at 8 B: one lookup a bag, as an unpooled feature),
the unique rows through k, and T (4 tables at pooling 2, and 8 tables x B at pooling 1
for each D: a multi-table call writes each bag's output at a stride; 8 is the shipped
configs' table count); check shapes (held out of the fit) are other combinations (D 48 /
96, T 2 / 8, pooling 1, and 4 tables x B at pooling 1, dim 128). Two more kinds of fit
shape identify the terms the configs need: rows used ~3 times (k = 3, at pooling 8 and 32:
a Zipf batch's lookups per unique row, 2.8 on the quickstart, between the other shapes' 1
and 8, so the per-lookup and per-row terms are not told apart only by extrapolation), and
a table's bytes (`rows_scale`: one table of dim 64 at 1/4 and 8x the rows, one of dim 128
at 2x, rows used once: 32 MiB to 1 GiB at full sizes; the configs' tables are 64-256 MiB
each, the other fit shapes' 16-256 MiB), which a unique row's cost grows with
(`table_doublings`). Each repetition runs
the forward, then the backward, each timed (the thread's CPU time: `cpu/measure.py`);
repetitions interleave every shape of the optimizer, so a slow moment of a shared host
lands on all of them (the forward is timed too: its per-call, per-table and per-bag
costs are fitted from it); a point's figure is the `statistic` (median by default) of
its repetitions. The unique rows are the exact count per table of the ids fed
(np.unique), summed over tables. With a `reference` (cpu/host_reference.py), its workload
is timed once at the start of every repetition round of every optimizer, so it sees the
moments the points see.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any, NamedTuple

import numba as nb
import numpy as np

from scratchpipe_sim.cpu.host_reference import HostReference
from scratchpipe_sim.cpu.measure import Timing, timed

#: the config's optimizer -> FBGEMM's EmbOptimType name, for the optimizers calibrated
OPTIMIZERS = {"sgd": "EXACT_SGD", "adagrad": "EXACT_ADAGRAD",
              "rowwise-adagrad": "EXACT_ROWWISE_ADAGRAD"}


class UpdateShape(NamedTuple):
    tables: int
    batch: int
    pooling: int
    dim: int
    reuse: int  # each distinct row used about this many times per table
    #: the shape's rows over all its tables, as a multiple of the bench's table rows
    rows_scale: float = 1.0


class UpdatePoint(NamedTuple):
    """FBGEMM's backward (fused optimizer) of one shape: counts and seconds."""

    optimizer: str
    role: str  # "fit" or "check"
    tables: float
    batch: float
    pooling: float
    dim: float
    lookups: float
    unique_rows: float
    seconds: float
    #: the forward before it (autograd on, as validate --against fbgemm times it)
    forward_seconds: float = 0.0
    #: one table's weight bytes (what a unique row's translation spans)
    table_bytes: float = 0.0
    #: the shape's rows as a multiple of the bench's (UpdateShape.rows_scale)
    rows_scale: float = 1.0


def shapes(max_lookups: int) -> tuple[list[UpdateShape], list[UpdateShape]]:
    """(fit shapes, check shapes) with at most `max_lookups` lookups per table."""
    b = max(16, max_lookups // 32)
    fit = [UpdateShape(1, bb, p, d, k) for d in (32, 64, 128)
           for bb, p in ((b, 2), (b, 8), (b, 32), (8 * b, 1)) for k in (1, 8)]
    fit += [UpdateShape(4, b, 2, 64, k) for k in (1, 8)]
    # pooling 1 on 8 tables: each bag's output run written at a stride (strided_bags)
    fit += [UpdateShape(8, b, 1, d, 1) for d in (32, 64, 128)]
    # rows used ~3 times: a Zipf batch's duplicates (module docstring)
    fit += [UpdateShape(1, b, p, 64, 3) for p in (8, 32)]
    # the tables' bytes: 1/4 and 8x the rows at dim 64, 2x at dim 128 (table_doublings)
    fit += [UpdateShape(1, b, 8, 64, 1, 0.25), UpdateShape(1, b, 8, 64, 1, 8.0),
            UpdateShape(1, b, 2, 128, 1, 2.0)]
    check = [UpdateShape(2, max(8, b // 2), 10, 96, 3),
             UpdateShape(1, b * 2, 1, 48, 1),
             UpdateShape(4, max(8, b // 4), 20, 128, 2),
             UpdateShape(8, max(8, b // 2), 4, 64, 1),
             UpdateShape(4, b, 1, 128, 1)]
    return fit, check


def shape_rows(s: UpdateShape, table_rows: int) -> int:
    """Rows of each of the shape's tables: its share of `table_rows` x rows_scale."""
    return max(1, int(table_rows * s.rows_scale) // s.tables)


def shape_table_bytes(s: UpdateShape, table_rows: int) -> float:
    """One of the shape's tables' weight bytes (float32)."""
    return float(shape_rows(s, table_rows) * s.dim * 4)


def _ids(rng: np.random.Generator, rows: int, n: int, k: int) -> np.ndarray:
    """n ids in random order over about n / k distinct random rows, each used ~k times."""
    pool = np.unique(rng.integers(0, rows, max(1, n // k)))
    return rng.permutation(np.resize(pool, n)).astype(np.int64)


def measure_update(fb: dict[str, Any], table_rows: int, max_lookups: int, reps: int,
                   statistic: str, note: Callable[[Timing], float],
                   optimizers: tuple[str, ...] = tuple(OPTIMIZERS),
                   shape_set: tuple[list[UpdateShape], list[UpdateShape]] | None = None,
                   reference: HostReference | None = None) -> list[UpdatePoint]:
    """Every fit and check shape (`shapes(max_lookups)` unless `shape_set` gives them) of
    every optimizer (module docstring); `note` turns a point's repetitions into its figure
    (and records its spread); `reference` is sampled at the start of every timed round."""
    torch = fb["torch"]
    torch.set_num_threads(1)
    threads = nb.get_num_threads()
    nb.set_num_threads(1)  # the clock: this thread's CPU time (cpu/measure.py)
    fit, check = shape_set or shapes(max_lookups)
    rng = np.random.default_rng(43)
    out: list[UpdatePoint] = []
    for opt in optimizers:
        tbes: dict[tuple[int, int], Any] = {}
        runs = []
        for role, group in (("fit", fit), ("check", check)):
            for s in group:
                key = (s.tables, s.dim, s.rows_scale)
                rows = shape_rows(s, table_rows)
                if key not in tbes:
                    specs = [(rows, s.dim, fb["EmbeddingLocation"].HOST,
                              fb["ComputeDevice"].CPU)] * s.tables
                    tbes[key] = fb["TBE"](
                        specs, optimizer=getattr(fb["EmbOptimType"], OPTIMIZERS[opt]),
                        learning_rate=0.01, pooling_mode=fb["PoolingMode"].SUM,
                        weights_precision=fb["SparseType"].FP32)
                n = s.batch * s.pooling
                per = [_ids(rng, rows, n, s.reuse) for _ in range(s.tables)]
                uniq = sum(len(np.unique(x)) for x in per)
                idx = torch.from_numpy(np.concatenate(per))
                offs = torch.from_numpy(np.arange(0, n * s.tables + 1, s.pooling,
                                                  dtype=np.int64))
                runs.append((role, s, tbes[key], idx, offs, uniq, [], [],
                             shape_table_bytes(s, table_rows)))
        for r in range(max(1, reps) + 1):  # round 0: warm-up (allocations, first touch)
            if r and reference is not None:
                reference.sample(opt)
            for _role, _s, tbe, idx, offs, _u, times, fwd, _b in runs:
                outs = []
                tf = timed(lambda t=tbe, i=idx, o=offs, k=outs: k.append(t(i, o)))
                grad = torch.full_like(outs[0], 1e-4)
                t = timed(lambda o=outs[0], g=grad: o.backward(g))
                if r:
                    times.append(t)
                    fwd.append(tf)
        for role, s, _tbe, _i, _o, uniq, times, fwd, nbytes in runs:
            out.append(UpdatePoint(opt, role, float(s.tables), float(s.batch),
                                   float(s.pooling), float(s.dim),
                                   float(s.batch * s.pooling * s.tables), float(uniq),
                                   note(Timing.of(times)), note(Timing.of(fwd)), nbytes,
                                   float(s.rows_scale)))
        del tbes, runs
        gc.collect()
    nb.set_num_threads(threads)
    return out
