"""The sorted-ids structure of a batch's EXACT_SGD backward, built on the host (numpy:
numba-cuda has no device sort; the sort's host cost is reported apart), and its arrays on
the GPU for `tbe_kernels.backward_sgd`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scratchpipe_sim.cuda.runtime import cuda

#: a unique id with more gradient rows than this is summed in chunks (FBGEMM: long segments)
CHUNK_ROWS = 32


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
