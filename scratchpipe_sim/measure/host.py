"""Host side of the reference path: row gathers into staging buffers, write-back scatters.

Compiled with Numba because they are per-row loops over the CPU table (the `collect` stage of
ScratchPipe is exactly this gather; its speed is what `cpu.gather_efficiency` models).
"""

from __future__ import annotations

import numba as nb

from scratchpipe_sim.traces._jit import njit


@njit(cache=True, parallel=True, nogil=True)
def gather_rows(table, rows, out):
    """out[i] = table[rows[i]] for i < len(rows) (into a pinned staging buffer).

    Parallel over rows: the model's `collect` uses every core (cpu.cores).
    """
    w = table.shape[1]
    for i in nb.prange(len(rows)):
        r = rows[i]
        for c in range(w):
            out[i, c] = table[r, c]


@njit(cache=True, parallel=True, nogil=True)
def scatter_rows(table, rows, src):
    """table[rows[i]] = src[i]: write evicted rows back (rows are unique: no races)."""
    w = table.shape[1]
    for i in nb.prange(len(rows)):
        r = rows[i]
        for c in range(w):
            table[r, c] = src[i, c]


@njit(cache=True, nogil=True)
def gather_rows_1core(table, rows, out):
    """Single-threaded gather: one core's embedding-op throughput (cpu.embedding_op_GBps)."""
    w = table.shape[1]
    for i in range(len(rows)):
        r = rows[i]
        for c in range(w):
            out[i, c] = table[r, c]


@njit(cache=True, parallel=True, nogil=True)
def stream_copy(src, dst):
    """dst[:] = src[:] in parallel: CPU DRAM streaming bandwidth."""
    n = src.shape[0]
    chunk = 1 << 16
    for b in nb.prange((n + chunk - 1) // chunk):
        lo = b * chunk
        hi = min(n, lo + chunk)
        for i in range(lo, hi):
            dst[i] = src[i]

