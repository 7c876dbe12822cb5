"""The published FBGEMM TBE shapes measured with this project's own numba-cuda kernels.

Why: the GPU timing model is checked against NVIDIA's recsys-examples runs of FBGEMM TBE on
H100 (issue 24; T1.2 = `DEVICE`, T1.10 = `MANAGED`). When a GPU is lent, this module measures
the same shapes on it (10 tables, D 128 fp32, one id per sample, 104,857 samples per table,
Zipf 1.05 ids; forward and fused EXACT_SGD backward timed apart with CUDA events, mean of
`iters` iterations after warm-up), so the published table gains a row measured here, next
to the model's prediction for the very same ids (the ids come from the model's own trace).

Kernels (FBGEMM's split for the backward, written plainly; no warp shuffles, which the CUDA
simulator lacks):
- forward, unpooled: one warp per lookup (grid-stride), each lane loads 4 columns before it
  stores them, so a warp has one 512 B row in flight per step;
- backward, EXACT_SGD: ids sorted on the host (numba-cuda has no device sort; the sort's
  host cost is reported apart), then per unique row: a segment of at most `chunk_rows`
  gradient rows is summed and applied by one warp (`w -= lr * sum g`); a longer segment
  (a hot id) is summed in chunks into a partial buffer by one warp per chunk, and a second
  kernel adds its partials and applies the update. No atomics.

`MANAGED` is FBGEMM's `new_managed_tensor`: cudaMallocManaged, then cudaMemAdvise
PreferredLocation = CPU and AccessedBy = this GPU, so the table stays in host memory and the
GPU reads it in place over PCIe. numba-cuda allocates managed memory but exposes no advise,
so the advice goes to libcuda through ctypes; where that fails the table is mapped pinned
host memory (`cuda.mapped_array`), the same mechanism (the GPU reads host memory in place,
no migration). The JSON says which one ran.

Importing this module does not import numba.cuda (the CLI must answer "no GPU" first, and a
test must be able to switch to the simulator); the kernels are built on first use.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from scratchpipe_sim.config import published_points
from scratchpipe_sim.config.published_points import PublishedPoint
from scratchpipe_sim.cuda.runtime import EventTimer, cuda, gpu_status, is_simulator
from scratchpipe_sim.safety import memory_guard

WARP = 32
#: threads per block of every kernel here (8 warps)
THREADS = 256
#: a unique id with more gradient rows than this is summed in chunks (FBGEMM: long segments)
CHUNK_ROWS = 32
#: the recsys-examples harness seeds its pow-law generator with 42
SEED = 42
#: the share of available host memory a MANAGED table may take
HOST_SHARE = 0.8
#: numba.cuda once `kernels()` ran (see there)
_cuda: Any = None
_F32 = np.float32


#: the published point each placement measures (`scratchpipe_sim/data/published_points.yaml`)
PLACEMENT_POINTS = {"DEVICE": "T1.2", "MANAGED": "T1.10"}


@dataclass(frozen=True)
class PublishedShape:
    """One published point's shape and figures, as the data file gives them."""

    point: str
    placement: str  # DEVICE | MANAGED
    tables: int
    rows_per_table: int
    samples_per_table: int
    dim: int
    alpha: float
    forward_ms: float
    backward_ms: float
    distinct_ids_per_iter: float  # as published: tells whether our Zipf ids match theirs
    design: str  # the model's design for this placement
    stages: tuple[str, str]  # the model's (forward, backward) stages

    @classmethod
    def of(cls, p: PublishedPoint) -> PublishedShape:
        """A loaded point's shape; the stages are its design's one stage per phase."""
        from scratchpipe_sim.timing.stage_columns import phase_stages  # noqa: PLC0415

        stages = phase_stages(p.design)
        one = tuple(s for ph in ("forward", "backward") for s in stages[ph])
        if len(one) != 2:
            raise ValueError(f"design '{p.design}' sums {dict(stages)} into its phases; the "
                             "published shapes compare one stage per phase")
        m, fwd, bwd = p.model, p.measured_ms.forward, p.measured_ms.backward
        if fwd is None or bwd is None or p.trace.distinct_ids_per_iter is None:
            raise ValueError(f"point {p.id} lacks a measured phase or its distinct ids")
        return cls(p.id, p.placement, m.tables, m.rows_per_table, m.batch_size, m.dim,
                   p.trace.alpha, fwd, bwd, p.trace.distinct_ids_per_iter, p.design,
                   (one[0], one[1]))


@cache
def published() -> dict[str, PublishedShape]:
    """Placement -> the shape of its published point, read from the shipped data file."""
    return {placement: PublishedShape.of(published_points.point(pid))
            for placement, pid in PLACEMENT_POINTS.items()}


@dataclass(frozen=True)
class RunShape:
    """The shape actually run: a published shape with fewer tables and/or scaled sizes."""

    base: PublishedShape
    tables: int
    scale: float

    @property
    def rows_per_table(self) -> int:
        return max(1, round(self.base.rows_per_table * self.scale))

    @property
    def samples_per_table(self) -> int:
        return max(1, round(self.base.samples_per_table * self.scale))

    @property
    def lookups(self) -> int:
        return self.tables * self.samples_per_table

    @property
    def table_bytes(self) -> int:
        return self.tables * self.rows_per_table * self.base.dim * 4

    @property
    def is_published(self) -> bool:
        return self.tables == self.base.tables and self.scale == 1.0


# -- kernels ---------------------------------------------------------------------------------
@cache
def kernels() -> SimpleNamespace:
    """The numba-cuda kernels, compiled lazily (importing numba.cuda happens here).

    The kernels name numba.cuda through the module global `_cuda`: the CUDA simulator swaps
    a function's globals that are the cuda module, not its closure variables.
    """
    global _cuda
    _cuda = c = cuda()

    @c.jit
    def gather_unpooled(table, ids, out):
        """out[i, :] = table[ids[i], :]; one warp per lookup, 4 loads in flight per lane."""
        t = _cuda.blockIdx.x * _cuda.blockDim.x + _cuda.threadIdx.x
        lane = t % WARP
        nwarps = _cuda.gridDim.x * _cuda.blockDim.x // WARP
        dim = table.shape[1]
        for i in range(t // WARP, ids.shape[0], nwarps):
            r = ids[i]
            for c0 in range(lane, dim, 4 * WARP):
                c1, c2, c3 = c0 + WARP, c0 + 2 * WARP, c0 + 3 * WARP
                v0 = table[r, c0]
                v1 = table[r, c1] if c1 < dim else _F32(0.0)
                v2 = table[r, c2] if c2 < dim else _F32(0.0)
                v3 = table[r, c3] if c3 < dim else _F32(0.0)
                out[i, c0] = v0
                if c1 < dim:
                    out[i, c1] = v1
                if c2 < dim:
                    out[i, c2] = v2
                if c3 < dim:
                    out[i, c3] = v3

    @c.jit
    def sgd_short(table, grad, order, rows, lo, hi, lr):
        """table[rows[u]] -= lr * sum(grad[order[lo[u]:hi[u]]]); one warp per unique row."""
        t = _cuda.blockIdx.x * _cuda.blockDim.x + _cuda.threadIdx.x
        lane = t % WARP
        nwarps = _cuda.gridDim.x * _cuda.blockDim.x // WARP
        dim = table.shape[1]
        for u in range(t // WARP, rows.shape[0], nwarps):
            r = rows[u]
            for c0 in range(lane, dim, 4 * WARP):
                c1, c2, c3 = c0 + WARP, c0 + 2 * WARP, c0 + 3 * WARP
                a0 = _F32(0.0)
                a1 = _F32(0.0)
                a2 = _F32(0.0)
                a3 = _F32(0.0)
                for j in range(lo[u], hi[u]):
                    g = order[j]
                    a0 += grad[g, c0]
                    if c1 < dim:
                        a1 += grad[g, c1]
                    if c2 < dim:
                        a2 += grad[g, c2]
                    if c3 < dim:
                        a3 += grad[g, c3]
                table[r, c0] -= lr * a0
                if c1 < dim:
                    table[r, c1] -= lr * a1
                if c2 < dim:
                    table[r, c2] -= lr * a2
                if c3 < dim:
                    table[r, c3] -= lr * a3

    @c.jit
    def chunk_sums(grad, order, lo, hi, partial):
        """partial[k] = sum(grad[order[lo[k]:hi[k]]]); one warp per chunk of a long segment."""
        t = _cuda.blockIdx.x * _cuda.blockDim.x + _cuda.threadIdx.x
        lane = t % WARP
        nwarps = _cuda.gridDim.x * _cuda.blockDim.x // WARP
        dim = grad.shape[1]
        for k in range(t // WARP, lo.shape[0], nwarps):
            for col in range(lane, dim, WARP):
                acc = _F32(0.0)
                for j in range(lo[k], hi[k]):
                    acc += grad[order[j], col]
                partial[k, col] = acc

    @c.jit
    def sgd_long(table, partial, rows, chunk_ptr, lr):
        """table[rows[u]] -= lr * sum of its chunks' partials; one warp per long unique row."""
        t = _cuda.blockIdx.x * _cuda.blockDim.x + _cuda.threadIdx.x
        lane = t % WARP
        nwarps = _cuda.gridDim.x * _cuda.blockDim.x // WARP
        dim = table.shape[1]
        for u in range(t // WARP, rows.shape[0], nwarps):
            r = rows[u]
            for col in range(lane, dim, WARP):
                acc = _F32(0.0)
                for k in range(chunk_ptr[u], chunk_ptr[u + 1]):
                    acc += partial[k, col]
                table[r, col] -= lr * acc

    @c.jit
    def fill_pattern(a, scale, const):
        """a[i, j] = const + scale * ((7i + 3j) % 16 - 7.5): deterministic, no host work."""
        i, j = _cuda.grid(2)
        if i < a.shape[0] and j < a.shape[1]:
            a[i, j] = const + scale * _F32((7 * i + 3 * j) % 16 - 7.5)

    return SimpleNamespace(gather_unpooled=gather_unpooled, sgd_short=sgd_short,
                           chunk_sums=chunk_sums, sgd_long=sgd_long, fill_pattern=fill_pattern)


def _warp_launch(kernel: Any, items: int, stream: Any, *args: Any) -> None:
    """One warp per item, THREADS per block (no-op for no items)."""
    if items == 0:
        return
    per_block = THREADS // WARP
    kernel[math.ceil(items / per_block), THREADS, stream](*args)


def fill_pattern(a: Any, scale: float, const: float = 0.0, stream: Any = 0) -> None:
    """Fill a 2-D device (or managed / mapped) array on the GPU with `pattern`'s values."""
    rows, cols = a.shape
    if rows == 0 or cols == 0:
        return
    bx, by = 8, 32
    kernels().fill_pattern[(math.ceil(rows / bx), math.ceil(cols / by)), (bx, by), stream](
        a, np.float32(scale), np.float32(const))


def pattern(rows: int, cols: int, scale: float, const: float = 0.0) -> np.ndarray:
    """The numpy twin of `fill_pattern` (what the tests compare against)."""
    i = np.arange(rows, dtype=np.int64)[:, None]
    j = np.arange(cols, dtype=np.int64)[None, :]
    return np.float32(const) + np.float32(scale) * ((7 * i + 3 * j) % 16 - 7.5).astype(
        np.float32)


def forward(table: Any, ids: Any, out: Any, stream: Any = 0) -> None:
    """out[i] = table[ids[i]] for every lookup (PoolingMode.NONE)."""
    _warp_launch(kernels().gather_unpooled, ids.shape[0], stream, table, ids, out)


# -- backward plan (host sort) ---------------------------------------------------------------
@dataclass
class BackwardPlan:
    """The sorted-ids structure of one batch's backward, built on the host with numpy.

    order: lookup positions sorted by id (stable); short_*: unique rows with at most
    `chunk_rows` lookups and their [lo, hi) range in `order`; long_rows: the others;
    chunk_lo/hi: their chunks' ranges in `order`; long_chunk_ptr[u]..[u+1]: row u's chunks.
    """

    order: np.ndarray
    short_rows: np.ndarray
    short_lo: np.ndarray
    short_hi: np.ndarray
    long_rows: np.ndarray
    chunk_lo: np.ndarray
    chunk_hi: np.ndarray
    long_chunk_ptr: np.ndarray

    @property
    def unique_rows(self) -> int:
        return len(self.short_rows) + len(self.long_rows)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}


def plan_backward(ids: np.ndarray, chunk_rows: int = CHUNK_ROWS) -> BackwardPlan:
    """Sort the ids (numpy, host) and cut each unique id's gradient rows into segments."""
    ids = np.asarray(ids, np.int64)
    n = len(ids)
    i32 = np.int32
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]]) if n else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], n].astype(np.int64)
    lens = ends - starts
    rows = s[starts]
    short = lens <= chunk_rows
    lo_l, end_l = starts[~short], ends[~short]
    nch = -(-(end_l - lo_l) // chunk_rows)
    ptr = np.zeros(len(nch) + 1, np.int64)
    np.cumsum(nch, out=ptr[1:])
    owner = np.repeat(np.arange(len(nch)), nch)
    chunk_lo = lo_l[owner] + (np.arange(int(ptr[-1])) - ptr[owner]) * chunk_rows
    chunk_hi = np.minimum(chunk_lo + chunk_rows, end_l[owner])
    return BackwardPlan(order.astype(i32), rows[short].astype(i32), starts[short].astype(i32),
                        ends[short].astype(i32), rows[~short].astype(i32),
                        chunk_lo.astype(i32), chunk_hi.astype(i32), ptr.astype(i32))


class DevicePlan:
    """A BackwardPlan's arrays on the GPU, plus the partial-sum buffer its long rows need."""

    def __init__(self, plan: BackwardPlan, dim: int, stream: Any = 0) -> None:
        c = cuda()
        for k, v in plan.arrays().items():
            setattr(self, k, c.to_device(v, stream=stream))
        self.n_short = len(plan.short_rows)
        self.n_long = len(plan.long_rows)
        self.n_chunks = len(plan.chunk_lo)
        self.partial = c.device_array((max(self.n_chunks, 1), dim), np.float32, stream=stream)


def backward_sgd(table: Any, grad: Any, dp: DevicePlan, lr: float, stream: Any = 0) -> None:
    """EXACT_SGD: every looked-up row w -= lr * (sum of its gradient rows); others untouched."""
    k = kernels()
    lr32 = np.float32(lr)
    _warp_launch(k.sgd_short, dp.n_short, stream, table, grad, dp.order, dp.short_rows,
                 dp.short_lo, dp.short_hi, lr32)
    _warp_launch(k.chunk_sums, dp.n_chunks, stream, grad, dp.order, dp.chunk_lo, dp.chunk_hi,
                 dp.partial)
    _warp_launch(k.sgd_long, dp.n_long, stream, table, dp.partial, dp.long_rows,
                 dp.long_chunk_ptr, lr32)


# -- placements -------------------------------------------------------------------------------
_CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3
_CU_MEM_ADVISE_SET_ACCESSED_BY = 5
_CU_DEVICE_CPU = -1


def _advise_host_resident(ptr: int, nbytes: int, device: int) -> str | None:
    """FBGEMM's advice for a MANAGED table via libcuda (None when it worked, else why not).

    cuMemAdvise's first ABI (CUdevice, -1 = CPU) is still exported by every driver; the _v2
    form and cuda-bindings' signature differ between CUDA 12 and 13, so ctypes is steadier.
    """
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuMemAdvise
    except (OSError, AttributeError) as e:
        return f"libcuda's cuMemAdvise not found ({e})"
    fn.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    for advice, dev in ((_CU_MEM_ADVISE_SET_PREFERRED_LOCATION, _CU_DEVICE_CPU),
                        (_CU_MEM_ADVISE_SET_ACCESSED_BY, device)):
        rc = fn(ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes), advice, dev)
        if rc != 0:
            return f"cuMemAdvise(advice {advice}, device {dev}) returned CUresult {rc}"
    return None


def _host_fill(a: np.ndarray, value: float, threads: int = 16) -> None:
    """Fill a host-resident table from several threads (numpy releases the GIL in copyto):
    the first touch places its pages in host memory, as FBGEMM's host initialisation does."""
    flat = a.reshape(-1)
    step = -(-len(flat) // threads)
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda k: np.copyto(flat[k:k + step], np.float32(value)),
                    range(0, len(flat), step)))


def allocate_table(rows: int, dim: int, placement: str, alloc: str = "managed",
                   value: float = 0.01) -> tuple[Any, str]:
    """A (rows, dim) fp32 table filled with `value`, and how it was placed (words for JSON).

    DEVICE: device memory, filled by a kernel. MANAGED: managed memory advised host-resident
    (alloc="managed"; mapped pinned host memory when the advice fails) or mapped pinned host
    memory directly (alloc="mapped"), filled by the host so its pages start in host memory.
    """
    c = cuda()
    if placement == "DEVICE":
        t = c.device_array((rows, dim), np.float32)
        fill_pattern(t, 0.0, value)
        return t, "device memory (cuda.device_array)"
    if placement != "MANAGED":
        raise ValueError(f"unknown placement {placement!r}")
    if alloc not in ("managed", "mapped"):
        raise ValueError(f"unknown MANAGED allocation {alloc!r}")
    if is_simulator():  # no driver to advise, and the simulator has no managed_array
        t = c.mapped_array((rows, dim), np.float32)
        fill_pattern(t, 0.0, value)
        return t, f"CUDA simulator: a mapped array stands for {alloc} memory (no PCIe)"
    why = "mapped pinned host memory requested (--managed-alloc mapped)"
    if alloc == "managed":
        t = c.managed_array((rows, dim), np.float32)
        why = _advise_host_resident(t.ctypes.data, t.nbytes, c.get_current_device().id)
        if why is None:
            _host_fill(t, value)
            return t, ("managed memory (cudaMallocManaged) with cudaMemAdvise "
                       "PreferredLocation=CPU and AccessedBy=GPU (FBGEMM's new_managed_tensor), "
                       "filled on the host: the GPU reads it in place over PCIe")
        del t
        _release_gpu_memory()  # the unadvised managed table, before the mapped one
    t = c.mapped_array((rows, dim), np.float32)
    _host_fill(t, value)
    return t, ("mapped pinned host memory (cuda.mapped_array): the GPU reads it in place over "
               f"PCIe, as a host-resident managed table; because: {why}")


# -- measurement -----------------------------------------------------------------------------
@dataclass
class PhaseTimes:
    """Measured phase times of one placement (CUDA events; host sort by perf_counter)."""

    forward_ms: list[float] = field(default_factory=list)
    backward_ms: list[float] = field(default_factory=list)
    host_sort_ms: list[float] = field(default_factory=list)
    index_h2d_ms: list[float] = field(default_factory=list)
    distinct_ids: list[int] = field(default_factory=list)
    placed: str = ""


def _mean(xs: list[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def measure(shape: RunShape, batches: list[np.ndarray], iters: int, warmup_iters: int,
            lr: float = 0.1, alloc: str = "managed", chunk_rows: int = CHUNK_ROWS,
            log: Any = None) -> PhaseTimes:
    """Forward and EXACT_SGD backward of `shape` over `batches` of linear ids, cycled.

    The ids, the sorted-ids plans and the gradient are on the GPU before timing (FBGEMM's
    harness also times kernels only); each phase has its own event pair per iteration.
    """
    if shape.tables * shape.rows_per_table >= 2**31:
        raise ValueError("linear ids must fit int32: fewer tables or rows")
    c = cuda()
    s = c.stream()
    dim = shape.base.dim
    out = PhaseTimes()
    table, out.placed = allocate_table(shape.tables * shape.rows_per_table, dim,
                                       shape.base.placement, alloc)
    if log:
        log(f"{shape.base.placement}: table placed ({shape.table_bytes / 1e9:.1f} GB)")
    d_ids, plans = [], []
    for ids in batches:
        t0 = time.perf_counter()
        plan = plan_backward(ids, chunk_rows)
        out.host_sort_ms.append((time.perf_counter() - t0) * 1e3)
        out.distinct_ids.append(plan.unique_rows)
        timer = EventTimer(s).start()
        plans.append(DevicePlan(plan, dim, s))
        h2d = timer.stop().elapsed_s()
        if h2d is not None:
            out.index_h2d_ms.append(h2d * 1e3)
        d_ids.append(c.to_device(np.asarray(ids, np.int32), stream=s))
    lookups = len(batches[0])
    emb = c.device_array((lookups, dim), np.float32, stream=s)
    grad = c.device_array((lookups, dim), np.float32, stream=s)
    fill_pattern(grad, 1e-3, stream=s)
    forward(table, d_ids[0], emb, s)  # compiles every kernel before any event is recorded
    backward_sgd(table, grad, plans[0], lr, s)
    s.synchronize()
    # queue every iteration, then wait once: the stream runs ahead of numba's launch cost
    # (tens of us per launch in Python), so the events time the GPU work, as in FBGEMM's
    # harness where the GPU runs ahead of PyTorch's launches
    timers = []
    for it in range(warmup_iters + iters):
        k = it % len(batches)
        tf = EventTimer(s).start()
        forward(table, d_ids[k], emb, s)
        tf.stop()
        tb = EventTimer(s).start()
        backward_sgd(table, grad, plans[k], lr, s)
        tb.stop()
        if it >= warmup_iters:
            timers.append((tf, tb))
    s.synchronize()
    for tf, tb in timers:
        f_s, b_s = tf.elapsed_s(), tb.elapsed_s()
        if f_s is not None and b_s is not None:
            out.forward_ms.append(f_s * 1e3)
            out.backward_ms.append(b_s * 1e3)
    return out


def model_config(shape: RunShape, batches: int, preset: str, seed: int = SEED) -> dict:
    """The `run` config of this shape: same tables, ids (Zipf, seed) and batches as measured."""
    b = shape.base
    return {
        "name": f"published-{b.point}-{b.placement.lower()}", "seed": seed,
        "hardware": {"preset": preset},
        "model": {"tables": {"count": shape.tables, "rows": shape.rows_per_table,
                             "dim": b.dim, "bytes_per_element": 4},
                  "pooling": 1, "batch_size": shape.samples_per_table, "optimizer": "sgd",
                  "bottom_mlp": [1, 1], "top_mlp": [1, 1], "num_batches": batches,
                  "warmup_batches": 0},
        "trace": {"distribution": "zipf", "alpha": b.alpha},
        "cache": {"warmup_batches": 0},
        "designs": [b.design],
    }


def predict(shape: RunShape, batches: int, preset: str, seed: int = SEED
            ) -> tuple[list[np.ndarray], dict[str, float]]:
    """The model's trace (its batches as linear ids) and its forward/backward stage means."""
    from scratchpipe_sim.config import load_config  # noqa: PLC0415  (keeps --help light)
    from scratchpipe_sim.timing import build_trace, simulate  # noqa: PLC0415

    cfg = load_config(model_config(shape, batches, preset, seed))
    trace = build_trace(cfg, cache=False)
    ids = [trace.linear_batch(k)[0] for k in range(trace.num_batches)]
    from scratchpipe_sim.timing.stage_columns import stage_ns  # noqa: PLC0415

    row = simulate(cfg, trace=trace, replay_cache=False)[0]
    fwd, bwd = shape.base.stages
    return ids, {"forward": stage_ns(row, fwd) / 1e6, "backward": stage_ns(row, bwd) / 1e6}


def result_rows(shape: RunShape, times: PhaseTimes | None, predicted: dict[str, float],
                preset: str, error: str | None = None) -> list[dict[str, Any]]:
    """One JSON row per phase (the layout of the published points, plus the prediction)."""
    b = shape.base
    rows = []
    for phase, stage in zip(("forward", "backward"), b.stages, strict=True):
        m = None if times is None else _mean(getattr(times, f"{phase}_ms"))
        p = predicted.get(phase)
        rows.append({
            "point": b.point, "placement": b.placement, "phase": phase,
            "tables": shape.tables, "rows_per_table": shape.rows_per_table,
            "samples_per_table": shape.samples_per_table, "lookups": shape.lookups,
            "dim": b.dim, "scale": shape.scale, "published_shape": shape.is_published,
            "distinct_ids_per_iter": None if times is None else _mean(times.distinct_ids),
            "measured_ms": m, "iters": 0 if times is None else len(times.forward_ms),
            "predicted_ms": p, "model": f"{b.design} stage_{stage}",
            "preset": preset,
            "predicted_over_measured": p / m if m and p is not None else None,
            "published_ms": getattr(b, f"{phase}_ms"), "published_gpu": "H100 80GB HBM3",
            "host_sort_ms": None if times is None or phase == "forward"
            else _mean(times.host_sort_ms),
            "index_h2d_ms": None if times is None or phase == "forward"
            else _mean(times.index_h2d_ms),
            "placed": None if times is None else times.placed,
            **({"error": error} if error else {}),
        })
    return rows


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def markdown(rows: list[dict[str, Any]], device: str) -> str:
    """The measured rows as a markdown table (published figure only where the shape is it)."""
    out = [f"Published TBE shapes measured on {device} with scratchpipe_sim's numba-cuda "
           "kernels (mean over iterations after warm-up; sort on the host, not in backward)",
           "",
           "| point | placement | phase | tables x rows | lookups | distinct ids/iter | "
           "measured (ms) | predicted (ms) | model | pred/meas | published H100 (ms) | "
           "host sort (ms) | index H2D (ms) |",
           "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        pub = _f(r["published_ms"]) if r["published_shape"] else "-"
        out.append("| " + " | ".join([
            r["point"] if r["published_shape"] else f"{r['point']}-like",
            r["placement"], r["phase"], f"{r['tables']} x {r['rows_per_table']:,}",
            f"{r['lookups']:,}", _f(r["distinct_ids_per_iter"], ",.0f"),
            _f(r["measured_ms"]), _f(r["predicted_ms"]), f"{r['model']} ({r['preset']})",
            _f(r["predicted_over_measured"], ".2f"), pub, _f(r["host_sort_ms"]),
            _f(r["index_h2d_ms"])]) + " |")
    shown = {r["point"]: r for r in rows if not r["published_shape"]}
    for point, r in shown.items():
        b = published()[r["placement"]]
        out.append(f"\n{point}-like: not the published shape ({b.tables} x "
                   f"{b.rows_per_table:,} rows, {b.tables * b.samples_per_table:,} lookups: "
                   f"forward {b.forward_ms:.3f} ms, backward {b.backward_ms:.3f} ms on H100)")
    for b in (published()[p] for p in dict.fromkeys(r["placement"] for r in rows)):
        out.append(f"\n{b.point} published distinct ids per iteration: "
                   f"{b.distinct_ids_per_iter:,.0f} (10 tables, full size)")
    return "\n".join(out)


def check_host_memory(shape: RunShape) -> None:
    """A MANAGED table must fit in HOST_SHARE of the memory available (the memory guard's:
    $SCRATCHPIPE_MEMORY_BYTES caps it), leaving the rest for the process and the trace."""
    memory_guard.check(math.ceil(shape.table_bytes / HOST_SHARE),
                       f"the MANAGED table ({memory_guard.human(shape.table_bytes)}, at most "
                       f"{HOST_SHARE:.0%} of the memory available)",
                       "lower --managed-tables or --scale", field="--managed-tables")


def _release_gpu_memory() -> None:
    """Free the placement's tables now (numba defers frees), before the next one allocates."""
    import gc  # noqa: PLC0415

    gc.collect()
    if not is_simulator():
        cuda().current_context().deallocations.clear()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m scratchpipe_sim.cuda.published_shapes",
        description="Measure the published FBGEMM TBE shapes (T1.2 DEVICE, T1.10 MANAGED: "
                    "D 128 fp32, 1 id per sample, Zipf 1.05, EXACT_SGD) with this project's "
                    "numba-cuda kernels on this GPU, next to the model's prediction for the "
                    "same ids. Needs a CUDA GPU.")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="folder for published_shapes.json and published_shapes.md")
    p.add_argument("--scale", type=float, default=1.0, metavar="F",
                   help="rows per table and samples per table x F, 0 < F <= 1 (default 1)")
    p.add_argument("--iters", type=int, default=100, metavar="N",
                   help="timed iterations per placement (default 100, as published)")
    p.add_argument("--warmup-iters", type=int, default=10, metavar="N")
    p.add_argument("--id-batches", type=int, default=4, metavar="K",
                   help="distinct id batches cycled through (the model's trace batches)")
    p.add_argument("--device-tables", type=int, default=10, metavar="T")
    p.add_argument("--managed-tables", type=int, default=2, metavar="T",
                   help="MANAGED tables (default 2: 10 at full size are 137 GB of host "
                        "memory; each table's ids are drawn apart, as published)")
    p.add_argument("--placements", nargs="+", choices=list(PLACEMENT_POINTS),
                   default=list(PLACEMENT_POINTS))
    p.add_argument("--managed-alloc", choices=("managed", "mapped"), default="managed",
                   help="managed: cudaMallocManaged advised host-resident (FBGEMM); mapped: "
                        "mapped pinned host memory (default managed)")
    p.add_argument("--preset", default="h200-gen5", help="hardware preset of the prediction")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args(argv)
    if not 0 < a.scale <= 1:
        p.error(f"expected 0 < --scale <= 1, got {a.scale}")
    for k in ("iters", "id_batches", "device_tables", "managed_tables"):
        if getattr(a, k) < 1:
            p.error(f"expected --{k.replace('_', '-')} >= 1, got {getattr(a, k)}")
    if a.warmup_iters < 0:
        p.error(f"expected --warmup-iters >= 0, got {a.warmup_iters}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    st = gpu_status()
    if not st.usable:
        print(f"published_shapes: no usable GPU ({st.reason}); nothing measured",
              file=sys.stderr)
        return 2
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[published_shapes {time.perf_counter() - t_start:6.1f} s] {msg}",
              file=sys.stderr, flush=True)

    a.out.mkdir(parents=True, exist_ok=True)
    meta = {"device": st.reason, "scale": a.scale, "iters": a.iters,
            "warmup_iters": a.warmup_iters, "id_batches": a.id_batches, "seed": a.seed,
            "lr": a.lr, "preset": a.preset, "chunk_rows": CHUNK_ROWS,
            "sort": "host numpy argsort (stable) per batch, outside the timed backward: "
                    "numba-cuda offers no device radix sort; its cost is host_sort_ms",
            "timing": "CUDA events around each phase, every iteration; mean after warm-up"}
    rows: list[dict[str, Any]] = []
    for placement in a.placements:
        tables = a.device_tables if placement == "DEVICE" else a.managed_tables
        shape = RunShape(published()[placement], tables, a.scale)
        times, predicted, error = None, {}, None
        try:
            log(f"{placement}: model trace and prediction ({tables} x "
                f"{shape.rows_per_table:,} rows, {shape.lookups:,} lookups)")
            batches, predicted = predict(shape, a.id_batches, a.preset, a.seed)
            if placement == "MANAGED":
                check_host_memory(shape)
            times = measure(shape, batches, a.iters, a.warmup_iters, a.lr, a.managed_alloc,
                            log=log)
            log(f"{placement}: forward {_f(_mean(times.forward_ms))} ms, backward "
                f"{_f(_mean(times.backward_ms))} ms")
        except Exception as e:  # noqa: BLE001  (keep the other placement's measurement)
            error = f"{type(e).__name__}: {e}"
            log(f"{placement}: failed: {error}")
        rows += result_rows(shape, times, predicted, a.preset, error)
        _release_gpu_memory()
        (a.out / "published_shapes.json").write_text(
            json.dumps({**meta, "published": {k: asdict(v) for k, v in published().items()},
                        "rows": rows}, indent=1), encoding="utf-8")
    md = markdown(rows, st.reason)
    (a.out / "published_shapes.md").write_text(md + "\n", encoding="utf-8")
    print(md)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
