"""Forward and EXACT_SGD backward of a published shape timed on the GPU with CUDA events
(the host sort timed apart), as FBGEMM's harness times kernels only."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scratchpipe_sim.cuda.runtime import EventTimer, cuda
from scratchpipe_sim.cuda.tbe_backward_plan import CHUNK_ROWS, DevicePlan, plan_backward
from scratchpipe_sim.cuda.tbe_kernels import backward_sgd, fill_pattern, forward
from scratchpipe_sim.cuda.tbe_shapes import RunShape
from scratchpipe_sim.cuda.tbe_tables import allocate_table


@dataclass
class PhaseTimes:
    """Measured phase times of one placement (CUDA events; host sort by perf_counter)."""

    forward_ms: list[float] = field(default_factory=list)
    backward_ms: list[float] = field(default_factory=list)
    host_sort_ms: list[float] = field(default_factory=list)
    index_h2d_ms: list[float] = field(default_factory=list)
    distinct_ids: list[int] = field(default_factory=list)
    placed: str = ""

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
