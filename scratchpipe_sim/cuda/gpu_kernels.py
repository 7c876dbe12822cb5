"""Embedding kernels of the reference path (numba-cuda): what the timing model prices.

Rows are float32 with `dim` embedding columns followed by the optimizer's state columns
(0 for SGD, 1 for row-wise Adagrad), so moving a row between CPU, staging and scratchpad
moves its optimizer state with it — as FBGEMM's cache does with its momentum.

Every kernel takes a 2-D grid: x over rows/bags, y over columns, so a warp reads
consecutive columns of one row (coalesced) and small dims still fill a block.
Importing this module imports numba.cuda: call `runtime.use_simulator()` first in tests.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scratchpipe_sim.cuda.runtime import cuda

_cuda = cuda()
_f32 = np.float32

#: threads per block along (rows, columns)
BLOCK = (8, 32)


def grid_for(rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(blocks, threads) covering a rows x cols problem with BLOCK-shaped blocks."""
    bx = min(BLOCK[0], max(rows, 1))
    by = min(BLOCK[1], max(cols, 1))
    return ((max(1, math.ceil(rows / bx)), max(1, math.ceil(cols / by))), (bx, by))


@_cuda.jit
def bag_forward(slots, offsets, table, dim, out):
    """out[b, c] = sum of table[slots[j], c] over the bag's accesses (sum pooling)."""
    b, c = _cuda.grid(2)
    if b < out.shape[0] and c < dim:
        acc = 0.0
        for j in range(offsets[b], offsets[b + 1]):
            acc += table[slots[j], c]
        out[b, c] = acc


@_cuda.jit
def pooled_grad(pooled, target, grad):
    """Gradient of 0.5*||pooled - target||^2 with respect to pooled (the synthetic loss)."""
    b, c = _cuda.grid(2)
    if b < pooled.shape[0] and c < pooled.shape[1]:
        grad[b, c] = pooled[b, c] - target[b, c]


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S40 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(40)


@_cuda.jit
def make_target(key, out):
    """out = training.batch_target(...) for this batch, computed on the GPU (same hash)."""
    b, c = _cuda.grid(2)
    if b < out.shape[0] and c < out.shape[1]:
        z = np.uint64(b * out.shape[1] + c) + key + _GOLDEN
        z = (z ^ (z >> _S30)) * _MIX1
        z = (z ^ (z >> _S27)) * _MIX2
        z = z ^ (z >> _S31)
        out[b, c] = _f32(z >> _S40) * _f32(2.0 ** -23) - _f32(1.0)


@_cuda.jit
def expand_slots(uslots, inv, aslots):
    """aslots[j] = uslots[inv[j]]: the slot of every access, built on the GPU."""
    j = _cuda.grid(1)
    if j < inv.shape[0]:
        aslots[j] = uslots[inv[j]]


@_cuda.jit
def bag_backward(uidx, offsets, grad, ugrad):
    """Scatter-add each bag's output gradient into the unique rows its accesses touch."""
    b, c = _cuda.grid(2)
    if b < grad.shape[0] and c < grad.shape[1]:
        g = grad[b, c]
        for j in range(offsets[b], offsets[b + 1]):
            _cuda.atomic.add(ugrad, (uidx[j], c), g)


@_cuda.jit
def sgd_update(uslots, ugrad, table, lr):
    """table[slot] -= lr * grad, one thread per (unique row, column)."""
    u, c = _cuda.grid(2)
    if u < uslots.shape[0] and c < ugrad.shape[1]:
        table[uslots[u], c] -= lr * ugrad[u, c]


@_cuda.jit
def rowwise_adagrad_update(uslots, ugrad, table, lr, eps):
    """FBGEMM's EXACT_ROWWISE_ADAGRAD: state += mean(g^2); w -= lr*g/(sqrt(state)+eps).

    The state is the column after the embedding (column `dim`); one thread per row.
    """
    u = _cuda.grid(1)
    if u < uslots.shape[0]:
        dim = ugrad.shape[1]
        s = uslots[u]
        sq = 0.0
        for c in range(dim):
            sq += ugrad[u, c] * ugrad[u, c]
        state = table[s, dim] + sq / dim
        table[s, dim] = state
        scale = lr / (math.sqrt(state) + eps)
        for c in range(dim):
            table[s, c] -= scale * ugrad[u, c]


@_cuda.jit
def adagrad_update(uslots, ugrad, table, lr, eps):
    """Element-wise Adagrad: state[c] += g^2; w[c] -= lr*g/(sqrt(state[c])+eps).

    The `dim` state columns follow the `dim` embedding columns.
    """
    u, c = _cuda.grid(2)
    dim = ugrad.shape[1]
    if u < uslots.shape[0] and c < dim:
        s = uslots[u]
        g = ugrad[u, c]
        state = table[s, dim + c] + g * g
        table[s, dim + c] = state
        table[s, c] -= lr * g / (math.sqrt(state) + eps)


@_cuda.jit
def scratchpad_insert(staged, slots, table):
    """table[slots[i]] = staged[i]: fetched rows into their planned scratchpad slots."""
    i, c = _cuda.grid(2)
    if i < slots.shape[0] and c < table.shape[1]:
        table[slots[i], c] = staged[i, c]


@_cuda.jit
def scratchpad_extract(table, slots, out):
    """out[i] = table[slots[i]]: victims out of the scratchpad, for the D2H write-back."""
    i, c = _cuda.grid(2)
    if i < slots.shape[0] and c < table.shape[1]:
        out[i, c] = table[slots[i], c]


@_cuda.jit
def fill_zero(a):
    """a[:] = 0 for a 2-D device array (device_array does not clear its memory)."""
    i, c = _cuda.grid(2)
    if i < a.shape[0] and c < a.shape[1]:
        a[i, c] = 0.0


@_cuda.jit
def row_gather(table, rows, out):
    """out[i] = table[rows[i]] (HBM gather microbenchmark: no scratchpad bookkeeping)."""
    i, c = _cuda.grid(2)
    if i < rows.shape[0] and c < table.shape[1]:
        out[i, c] = table[rows[i], c]


TILE = 16


@_cuda.jit
def gemm(a, b, c):
    """c = a @ b, fp32, shared-memory tiles: the dense (MLP) work of the reference path.

    Calibrate measures `gpu.tflops` with this same kernel, so the validation compares the
    model with the kernels that actually ran (not with cuBLAS, which numba cannot call).
    """
    sa = _cuda.shared.array((TILE, TILE), dtype=_f32)
    sb = _cuda.shared.array((TILE, TILE), dtype=_f32)
    tx = _cuda.threadIdx.x
    ty = _cuda.threadIdx.y
    row = _cuda.blockIdx.y * TILE + ty
    col = _cuda.blockIdx.x * TILE + tx
    acc = _f32(0.0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sa[ty, tx] = a[row, k + tx] if row < a.shape[0] and k + tx < a.shape[1] else 0.0
        sb[ty, tx] = b[k + ty, col] if col < b.shape[1] and k + ty < b.shape[0] else 0.0
        _cuda.syncthreads()
        for j in range(TILE):
            acc += sa[ty, j] * sb[j, tx]
        _cuda.syncthreads()
    if row < c.shape[0] and col < c.shape[1]:
        c[row, col] = acc


def launch_gemm(a: Any, b: Any, c: Any, stream: Any = 0) -> None:
    m, n = c.shape
    gemm[(math.ceil(n / TILE), math.ceil(m / TILE)), (TILE, TILE), stream](a, b, c)


def launch2(kernel: Any, rows: int, cols: int, stream: Any, *args: Any) -> None:
    """Launch a 2-D kernel over rows x cols on `stream` (no-op for an empty problem)."""
    if rows == 0 or cols == 0:
        return
    blocks, threads = grid_for(rows, cols)
    kernel[blocks, threads, stream](*args)


def launch1(kernel: Any, n: int, stream: Any, *args: Any, threads: int = 128) -> None:
    if n == 0:
        return
    t = min(threads, n)
    kernel[math.ceil(n / t), t, stream](*args)
