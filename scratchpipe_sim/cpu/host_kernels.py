"""The CPU stages as real compiled code: embedding-bag gather + pool, gradient aggregation,
optimizer apply (SGD, Adagrad, row-wise Adagrad).

`calibrate --cpu` times them on synthetic ids (micro-benchmarks) and `validate --cpu` on a
config's trace; the collect and write-back of ScratchPipe are the reference path's
`measure.host.gather_rows` / `scatter_rows`. Every loop over lookups or rows is here, compiled
and parallel over the cores Numba is allowed (`numba.set_num_threads`).

Row store: one float32 array (rows, R/4) per run; the first `dim` columns are the embedding,
the rest its optimizer state (Adagrad: dim floats; row-wise: 1), so a moved row is R bytes.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from scratchpipe_sim.traces._jit import njit


@njit(cache=True, parallel=True, nogil=True)
def bag_pool(store, dim, ids, bag_ptr, out):
    """out[k] = sum of store[ids[j], :dim] over the lookups j of bag k (an embedding bag)."""
    for k in nb.prange(len(bag_ptr) - 1):
        for c in range(dim):
            out[k, c] = 0.0
        for j in range(bag_ptr[k], bag_ptr[k + 1]):
            r = ids[j]
            for c in range(dim):
                out[k, c] += store[r, c]


@njit(cache=True, parallel=True, nogil=True)
def aggregate(ids, bag_of, grad_bags, slot, parts, uniq, grad_rows, counts):
    """Turn per-lookup gradient contributions into one gradient per unique row.

    Lookup j contributes grad_bags[bag_of[j]] to row ids[j]. Rows are split among `parts`
    workers by id modulo parts, so no two workers touch one row (no atomics): each scans the
    ids, numbers its new rows in `slot` (a per-row array, -1 = unseen) and accumulates.
    Returns the number of unique rows; uniq[:n] lists them, grad_rows[:n] their gradients.
    """
    dim = grad_bags.shape[1]
    n = len(ids)
    base = np.zeros(parts + 1, np.int64)
    for p in nb.prange(parts):  # pass 1: number each worker's rows
        c = 0
        for j in range(n):
            r = ids[j]
            if r % parts == p and slot[r] < 0:
                slot[r] = c
                c += 1
        counts[p] = c
    for p in range(parts):
        base[p + 1] = base[p] + counts[p]
    for p in nb.prange(parts):  # pass 2: accumulate into the worker's block
        b0 = base[p]
        for s in range(counts[p]):
            for c in range(dim):
                grad_rows[b0 + s, c] = 0.0
        for j in range(n):
            r = ids[j]
            if r % parts == p:
                s = b0 + slot[r]
                uniq[s] = r
                g = bag_of[j]
                for c in range(dim):
                    grad_rows[s, c] += grad_bags[g, c]
    return base[parts]


@njit(cache=True, parallel=True, nogil=True)
def reset_slots(slot, uniq, n):
    for i in nb.prange(n):
        slot[uniq[i]] = -1


@njit(cache=True, parallel=True, nogil=True)
def apply_sgd(store, uniq, grad_rows, n, lr):
    dim = grad_rows.shape[1]
    for i in nb.prange(n):
        r = uniq[i]
        for c in range(dim):
            store[r, c] -= lr * grad_rows[i, c]


@njit(cache=True, parallel=True, nogil=True)
def apply_adagrad(store, uniq, grad_rows, n, lr, eps):
    """Element-wise Adagrad: state (columns dim..2dim) += g^2; w -= lr g / sqrt(state)."""
    dim = grad_rows.shape[1]
    for i in nb.prange(n):
        r = uniq[i]
        for c in range(dim):
            g = grad_rows[i, c]
            store[r, dim + c] += g * g
            store[r, c] -= lr * g / (np.sqrt(store[r, dim + c]) + eps)


@njit(cache=True, parallel=True, nogil=True)
def apply_rowwise_adagrad(store, uniq, grad_rows, n, lr, eps):
    """Row-wise Adagrad: one state float per row (column dim) += mean(g^2)."""
    dim = grad_rows.shape[1]
    for i in nb.prange(n):
        r = uniq[i]
        acc = 0.0
        for c in range(dim):
            acc += grad_rows[i, c] * grad_rows[i, c]
        store[r, dim] += acc / dim
        scale = lr / (np.sqrt(store[r, dim]) + eps)
        for c in range(dim):
            store[r, c] -= scale * grad_rows[i, c]


def state_columns(optimizer: str, dim: int) -> int:
    """Float32 columns of optimizer state per row (matches ModelConfig.moved_row_bytes)."""
    return {"sgd": 0, "adagrad": dim, "rowwise-adagrad": 1}[optimizer]


def apply(optimizer: str, store: np.ndarray, uniq: np.ndarray, grad_rows: np.ndarray,
          n: int, lr: float = 0.01, eps: float = 1e-8) -> None:
    if optimizer == "sgd":
        apply_sgd(store, uniq, grad_rows, n, lr)
    elif optimizer == "adagrad":
        apply_adagrad(store, uniq, grad_rows, n, lr, eps)
    else:
        apply_rowwise_adagrad(store, uniq, grad_rows, n, lr, eps)


def bag_of_lookups(bag_ptr: np.ndarray) -> np.ndarray:
    """Bag index of every lookup (bag_ptr: offsets of the bags, len bags + 1)."""
    return np.repeat(np.arange(len(bag_ptr) - 1, dtype=np.int64), np.diff(bag_ptr))


class Backward:
    """Buffers for one aggregate + apply over at most `max_lookups` lookups of a row store."""

    def __init__(self, num_rows: int, dim: int, max_lookups: int, parts: int):
        self.slot = np.full(num_rows, -1, np.int64)
        self.uniq = np.zeros(max_lookups, np.int64)
        self.grad_rows = np.zeros((max_lookups, dim), np.float32)
        self.counts = np.zeros(parts, np.int64)
        self.parts = parts

    def aggregate(self, ids: np.ndarray, bag_of: np.ndarray, grad_bags: np.ndarray) -> int:
        return int(aggregate(ids, bag_of, grad_bags, self.slot, self.parts, self.uniq,
                             self.grad_rows, self.counts))

    def apply(self, optimizer: str, store: np.ndarray, n: int) -> None:
        apply(optimizer, store, self.uniq, self.grad_rows, n)
        reset_slots(self.slot, self.uniq, n)


@njit(cache=True, nogil=True, fastmath=True)
def _sum(a):
    acc = np.float32(0.0)
    for i in range(a.shape[0]):
        acc += a[i]  # fastmath: vectorized, so the adds never limit the read
    return acc


@njit(cache=True, parallel=True, nogil=True)
def stream_read(src):
    """Sum of src in parallel chunks: DRAM read bandwidth (a gather's traffic is reads).
    Each chunk is summed by a serial helper: a loop inside prange is not vectorized."""
    n = src.shape[0]
    chunk = 1 << 18
    nchunks = (n + chunk - 1) // chunk
    part = np.zeros(nchunks, np.float64)
    for b in nb.prange(nchunks):
        lo = b * chunk
        part[b] = _sum(src[lo : min(n, lo + chunk)])
    return part.sum()


@njit(cache=True, nogil=True)
def pointer_chase(nxt, steps):
    """Follow a random cycle `steps` times: each load waits for the previous (latency)."""
    p = 0
    for _ in range(steps):
        p = nxt[p]
    return p


def random_cycle(n: int, seed: int) -> np.ndarray:
    """nxt[i] for one random cycle through all n slots (Sattolo's permutation)."""
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    nxt = np.empty(n, np.int64)
    nxt[order[:-1]] = order[1:]
    nxt[order[-1]] = order[0]
    return nxt
