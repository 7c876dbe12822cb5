"""The numba-cuda kernels of the published TBE shapes: an unpooled forward and FBGEMM's
split EXACT_SGD backward, written plainly (no warp shuffles, which the CUDA simulator lacks).

- forward, unpooled: one warp per lookup (grid-stride), each lane loads 4 columns before it
  stores them, so a warp has one 512 B row in flight per step;
- backward, EXACT_SGD: per unique row of the host's sorted-ids plan (`tbe_backward_plan`), a
  segment of at most `chunk_rows` gradient rows is summed and applied by one warp
  (`w -= lr * sum g`); a longer segment (a hot id) is summed in chunks into a partial buffer
  by one warp per chunk, and a second kernel adds its partials and applies the update. No
  atomics.

Importing this module does not import numba.cuda; the kernels are built on first use.
"""

from __future__ import annotations

import math
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from scratchpipe_sim.cuda.runtime import cuda

if TYPE_CHECKING:
    from scratchpipe_sim.cuda.tbe_backward_plan import DevicePlan

WARP = 32
#: threads per block of every kernel here (8 warps)
THREADS = 256
#: numba.cuda once `kernels()` ran (see there)
_cuda: Any = None
_F32 = np.float32


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
