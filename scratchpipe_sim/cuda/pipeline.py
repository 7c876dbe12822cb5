"""The reference ScratchPipe iteration on a GPU: plan, collect, exchange, insert, train.

Schedule (L = lookahead). In step s the host, in this order:
  1. applies the write-backs of exchange(s) (issued in step s-1): waits for its D2H and
     scatters the victims into the CPU table;
  2. plans batch s+L and collects its misses from the CPU table into a pinned buffer;
  3. issues exchange(s+1): victims extracted and copied D2H on the d2h stream (after
     train(s-1) has finished with the scratchpad), missed rows copied H2D and inserted into
     their slots on the h2d stream (after the extract has read the victims' slots);
  4. issues train(s) on the compute stream (after insert(s)).
Exchange(s+1) is issued before train(s), so on a GPU they overlap; step 2 runs on a host
thread while steps 3-4 are issued (for L >= 2), so planning overlaps the GPU too.

Planning is the simulator's `scratchpipe` policy with window W = L + 1 (scratchpad_plan.py): plan(k)
pins batches k-L..k, the ones planned and not yet trained, so the scratchpad needs the
union of the rows of any L+1 consecutive batches (`min_scratchpipe_capacity(trace, L+1)`).

Hazards, and why this order avoids them:
* a victim of plan(k) still needed by batch k-1: insert(k) is issued before train(k-1) (to
  overlap), so it would overwrite the slot before that batch reads it, and the extracted
  copy would miss its update. Batches <= k-2 are safe: extract(k) waits for train(k-2) and
  insert(k) waits for extract(k). The pinned window (k-L..k, L >= 1) never evicts a row of
  batch k-1; `pin_window=1` (tests only) pins batch k alone and shows the race.
* refetch: a row evicted by plan(j) and fetched again for batch b > j while its newer copy
  is still on its way back to the CPU table: collect(b) runs in step b-L but the write-back
  lands in step j, so for b - j < L the gather reads a stale row. The policy may evict such
  a row (it is the farthest-used candidate), so the pipeline *orders* the fetch: collect(b)
  gathers it again right after writeback(j) has scattered it (step j <= b-1, before
  exchange(b) copies the staging buffer) - the timing model's `cache.refetch: wait`.
  `order_refetch=False` (tests only) skips that and trains on stale rows.
Turning either off corrupts the trained table; see tests/cuda/test_cuda_pipeline.py.
Under the CUDA simulator everything runs in issue order, so those races show up
deterministically — exactly the interleaving a GPU is allowed to pick.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scratchpipe_sim.cuda import gpu_kernels as K
from scratchpipe_sim.cuda.runtime import EventTimer, cuda
from scratchpipe_sim.cuda.scratchpad_plan import Plan, ScratchpadState
from scratchpipe_sim.cuda.training import (
    BatchIds,
    TrainSpec,
    initial_table,
    target_key,
    trace_batches,
)
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.measure.host import gather_rows, scatter_rows
from scratchpipe_sim.traces.csr_trace import Trace

#: stages timed per batch (seconds; None where timing is not available)
STAGES = ("plan", "collect", "h2d", "h2d_index", "d2h", "insert", "writeback", "train")


@dataclass(frozen=True)
class PipelineOptions:
    capacity_rows: int
    lookahead: int = 2
    #: the planner's window W; None = lookahead + 1 (what is planned and not trained)
    pin_window: int | None = None
    order_refetch: bool = True
    #: dense layers run in train, as (samples, in, out): 3 GEMMs each (forward, data grad,
    #: weight grad all cost 2*samples*in*out FLOPs), standing in for the MLPs the model prices
    mlp: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.lookahead < 1:
            raise UserError(f"expected lookahead >= 1, got {self.lookahead}",
                            field="design_params.scratchpipe.lookahead")
        if self.capacity_rows < 1:
            raise UserError(f"expected capacity_rows >= 1, got {self.capacity_rows}",
                            field="cache.capacity_rows")


@dataclass
class PipelineResult:
    table: np.ndarray  # the CPU table after training and the final flush
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    #: per stage, one entry per batch: seconds, or None when not measured
    stage_s: dict[str, list[float | None]] = field(default_factory=dict)
    #: per batch, compute-stream time between consecutive train ends (None: not measured)
    iteration_s: list[float | None] = field(default_factory=list)
    wall_s: float = 0.0


@dataclass
class _InFlight:
    plan: Plan
    batch: BatchIds
    ring: int
    collect_s: float
    plan_s: float
    writeback_s: float = 0.0
    timers: dict[str, EventTimer] = field(default_factory=dict)
    d2h_done: Any = None
    insert_done: Any = None
    h2d_done: Any = None
    dev: dict[str, Any] = field(default_factory=dict)


class ScratchPipeReference:
    """Train `trace` through the GPU scratchpad pipeline; see the module docstring."""

    def __init__(self, trace: Trace, spec: TrainSpec, opts: PipelineOptions,
                 table: np.ndarray | None = None) -> None:
        self.trace = trace
        self.spec = spec
        self.opts = opts
        self.batches = trace_batches(trace)
        self.cpu_table = (initial_table(trace.total_rows, spec) if table is None
                          else np.ascontiguousarray(table, np.float32))
        self.state = ScratchpadState(trace, opts.capacity_rows,
                                     opts.pin_window or opts.lookahead + 1)
        c = cuda()
        self.cuda = c
        self.s_compute, self.s_h2d, self.s_d2h = c.stream(), c.stream(), c.stream()
        w = spec.width
        cap = opts.capacity_rows
        self.dev_table = c.device_array((cap, w), np.float32, stream=self.s_compute)
        K.launch2(K.fill_zero, cap, w, self.s_compute, self.dev_table)
        nring = opts.lookahead + 2
        most = max(len(np.unique(b.ids)) for b in self.batches)
        most = min(most, cap)
        self.pin_in = [c.pinned_array((most, w), np.float32) for _ in range(nring)]
        self.pin_out = [c.pinned_array((most, w), np.float32) for _ in range(nring)]
        self.dev_in = [c.device_array((most, w), np.float32) for _ in range(nring)]
        self.dev_out = [c.device_array((most, w), np.float32) for _ in range(nring)]
        self.ring_h2d_done: list[Any] = [None] * nring
        self.mlp_bufs = [(c.to_device(np.full((b, i), 0.01, np.float32)),
                          c.to_device(np.full((i, o), 0.01, np.float32)),
                          c.device_array((b, o), np.float32)) for b, i, o in opts.mlp]
        self.flight: dict[int, _InFlight] = {}
        self.written_back = -1  # last batch whose victims are back in the CPU table
        #: write-back batch j -> [(batch b, indices into b's misses)]: refetches to gather
        #: again once writeback(j) is applied
        self.refetch_after: dict[int, list[tuple[int, np.ndarray]]] = {}
        self.refetched_late = 0
        self.train_done: dict[int, Any] = {}
        self.result = PipelineResult(self.cpu_table, stage_s={s: [] for s in STAGES})

    # -- stages -----------------------------------------------------------------------------
    def _plan_collect(self, k: int) -> None:
        t0 = time.perf_counter()
        batch = self.batches[k]
        plan = self.state.plan(k)
        t1 = time.perf_counter()
        ring = k % len(self.pin_in)
        if self.ring_h2d_done[ring] is not None:  # the buffer's previous H2D must be done
            self.ring_h2d_done[ring].synchronize()
        gather_rows(self.cpu_table, plan.miss_rows, self.pin_in[ring])
        if self.opts.order_refetch:  # rows whose write-back has not landed: gather them later
            late = np.flatnonzero(plan.evicted_by > self.written_back)
            for j in np.unique(plan.evicted_by[late]).tolist():
                idx = late[plan.evicted_by[late] == j]
                self.refetch_after.setdefault(j, []).append((k, idx))
                self.refetched_late += len(idx)
        t2 = time.perf_counter()
        self.flight[k] = _InFlight(plan, batch, ring, t2 - t1, t1 - t0)
        r = self.result
        r.hits += plan.hits
        r.misses += len(plan.miss_rows)
        r.evictions += len(plan.victim_rows)

    def _exchange(self, k: int) -> None:
        c, f = self.cuda, self.flight[k]
        p, w = f.plan, self.spec.width
        nv, nm = len(p.victim_rows), len(p.miss_rows)
        # victims: wait until train(k-2) (the last that may have updated them) is done
        prev = self.train_done.get(k - 2)
        if prev is not None:
            prev.wait(self.s_d2h)
        f.timers["d2h"] = EventTimer(self.s_d2h).start()
        vslots = c.to_device(p.victim_slots, stream=self.s_d2h)
        K.launch2(K.scratchpad_extract, nv, w, self.s_d2h, self.dev_table, vslots,
                  self.dev_out[f.ring])
        extracted = c.event()
        extracted.record(self.s_d2h)
        if nv:
            self.dev_out[f.ring][:nv].copy_to_host(self.pin_out[f.ring][:nv], stream=self.s_d2h)
        f.timers["d2h"].stop()
        f.d2h_done = c.event()
        f.d2h_done.record(self.s_d2h)
        # misses: H2D into device staging, then into their slots once the victims are out
        f.timers["h2d"] = EventTimer(self.s_h2d).start()
        if nm:
            self.dev_in[f.ring][:nm].copy_to_device(self.pin_in[f.ring][:nm], stream=self.s_h2d)
        f.timers["h2d"].stop()
        f.h2d_done = c.event()
        f.h2d_done.record(self.s_h2d)
        self.ring_h2d_done[f.ring] = f.h2d_done
        # the batch's indices (int32), timed apart: the model prices fills and victims only
        f.timers["h2d_index"] = EventTimer(self.s_h2d).start()
        mslots = c.to_device(p.miss_slots.astype(np.int32), stream=self.s_h2d)
        f.dev["uslots"] = c.to_device(p.uslots.astype(np.int32), stream=self.s_h2d)
        f.dev["inv"] = c.to_device(p.inv.astype(np.int32), stream=self.s_h2d)
        f.dev["offsets"] = c.to_device(f.batch.offsets.astype(np.int32), stream=self.s_h2d)
        f.timers["h2d_index"].stop()
        f.dev["aslots"] = c.device_array(len(p.inv), np.int32, stream=self.s_h2d)
        K.launch1(K.expand_slots, len(p.inv), self.s_h2d, f.dev["uslots"], f.dev["inv"],
                  f.dev["aslots"])
        extracted.wait(self.s_h2d)
        f.timers["insert"] = EventTimer(self.s_h2d).start()
        K.launch2(K.scratchpad_insert, nm, w, self.s_h2d, self.dev_in[f.ring], mslots,
                  self.dev_table)
        f.timers["insert"].stop()
        f.insert_done = c.event()
        f.insert_done.record(self.s_h2d)

    def _writeback(self, k: int) -> None:
        f = self.flight[k]
        f.d2h_done.synchronize()  # exchange(k) was issued in step k-1
        t0 = time.perf_counter()
        nv = len(f.plan.victim_rows)
        scatter_rows(self.cpu_table, f.plan.victim_rows, self.pin_out[f.ring][:nv])
        self.written_back = k
        for b, idx in self.refetch_after.pop(k, []):  # refetches that waited for this one
            g = self.flight[b]
            rows = np.empty((len(idx), self.spec.width), np.float32)
            gather_rows(self.cpu_table, g.plan.miss_rows[idx], rows)
            self.pin_in[g.ring][idx] = rows
        f.writeback_s = time.perf_counter() - t0

    def _train(self, k: int) -> None:
        c, f, s = self.cuda, self.flight[k], self.s_compute
        spec = self.spec
        dim, bags, nu = spec.dim, f.batch.bags, len(f.plan.uniq)
        f.insert_done.wait(s)
        f.timers["train"] = EventTimer(s).start()
        pooled = c.device_array((bags, dim), np.float32, stream=s)
        grad = c.device_array((bags, dim), np.float32, stream=s)
        ugrad = c.device_array((nu, dim), np.float32, stream=s)
        target = c.device_array((bags, dim), np.float32, stream=s)
        K.launch2(K.make_target, bags, dim, s, target_key(spec.seed, k), target)
        K.launch2(K.bag_forward, bags, dim, s, f.dev["aslots"], f.dev["offsets"],
                  self.dev_table, dim, pooled)
        K.launch2(K.pooled_grad, bags, dim, s, pooled, target, grad)
        K.launch2(K.fill_zero, nu, dim, s, ugrad)
        K.launch2(K.bag_backward, bags, dim, s, f.dev["inv"], f.dev["offsets"], grad, ugrad)
        for a, b, out in self.mlp_bufs:
            for _ in range(3):
                K.launch_gemm(a, b, out, s)
        lr, eps = np.float32(spec.lr), np.float32(spec.eps)
        if spec.optimizer == "sgd":
            K.launch2(K.sgd_update, nu, dim, s, f.dev["uslots"], ugrad, self.dev_table, lr)
        elif spec.optimizer == "rowwise-adagrad":
            K.launch1(K.rowwise_adagrad_update, nu, s, f.dev["uslots"], ugrad, self.dev_table,
                      lr, eps)
        else:
            K.launch2(K.adagrad_update, nu, dim, s, f.dev["uslots"], ugrad, self.dev_table,
                      lr, eps)
        f.timers["train"].stop()
        done = c.event()
        done.record(s)
        self.train_done[k] = done

    def _retire(self, k: int) -> None:
        """Collect batch k's timings once nothing of it is pending; free its buffers."""
        f = self.flight.pop(k)
        r = self.result
        r.stage_s["plan"].append(f.plan_s)
        r.stage_s["collect"].append(f.collect_s)
        r.stage_s["writeback"].append(f.writeback_s)
        for name in ("h2d", "h2d_index", "d2h", "insert", "train"):
            r.stage_s[name].append(f.timers[name].elapsed_s())
        self.train_done.pop(k - 3, None)

    # -- driver -------------------------------------------------------------------------------
    def run(self) -> PipelineResult:
        n, L = len(self.batches), self.opts.lookahead
        t0 = time.perf_counter()
        ends: list[EventTimer] = []
        # plan + collect run on a host thread (the Numba kernels release the GIL) while this
        # thread applies write-backs and issues GPU work, as the model's separate stages do.
        # collect(s+L) must follow writeback(s); exchange(s+1) needs plan(s+1) (L == 1:
        # planned in the same step, so that case runs inline).
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plan")
        pending: Future | None = None
        try:
            for s in range(-L, n):
                if pending is not None:
                    pending.result()
                    pending = None
                if s >= 0:
                    self._writeback(s)
                if s + L < n:
                    if L == 1:
                        self._plan_collect(s + L)
                    else:
                        pending = pool.submit(self._plan_collect, s + L)
                if 0 <= s + 1 < n:
                    self._exchange(s + 1)
                if s >= 0:
                    self._train(s)
                    ends.append(self.train_done[s])
                    if s - 1 >= 0 and (s - 1) in self.flight:
                        self._retire(s - 1)
            if pending is not None:
                pending.result()
        finally:
            pool.shutdown(wait=True)
        self.cuda.synchronize()
        if n and (n - 1) in self.flight:
            self._retire(n - 1)
        self._flush()
        self.result.wall_s = time.perf_counter() - t0
        r = self.result
        r.iteration_s = [None] + [_elapsed(a, b) for a, b in zip(ends, ends[1:], strict=False)]
        return r

    def _flush(self) -> None:
        """Write every resident row back: the CPU table is then the whole trained model."""
        rows, slots = self.state.resident()
        if len(rows) == 0:
            return
        c = self.cuda
        out = c.device_array((len(rows), self.spec.width), np.float32, stream=self.s_compute)
        K.launch2(K.scratchpad_extract, len(rows), self.spec.width, self.s_compute,
                  self.dev_table, c.to_device(slots, stream=self.s_compute), out)
        host = out.copy_to_host(stream=self.s_compute)
        self.s_compute.synchronize()
        scatter_rows(self.cpu_table, rows, host)


def _elapsed(a: Any, b: Any) -> float | None:
    b.synchronize()
    ms = a.elapsed_time(b)
    return None if ms is None or ms < 0 else float(ms) * 1e-3


def train_on_gpu(trace: Trace, spec: TrainSpec, opts: PipelineOptions) -> PipelineResult:
    """Run the reference pipeline over `trace` and return the trained CPU table and times."""
    return ScratchPipeReference(trace, spec, opts).run()
