"""`bagpipe`: Bagpipe's lookahead oracle cacher with a separate prefetch process (SOSP'23).

Counts: the `bagpipe` policy (`design_params.bagpipe.lookahead` batches ahead, time-to-live
eviction, capacity = the cache designs' capacity). Four SimPy processes per run, as Bagpipe's
oracle cacher, prefetcher, trainer and the write-back to the CPU tables are separate:

    oracle(b)     the caching decision on the CPU (Machine.plan: A x plan_ns_per_id core-ns
                  on at most plan_threads cores, design_params.bagpipe's own planner knobs,
                  by default hardware.cpu's, as ScratchPipe's; its TTL rule picks no victim
                  by search, so no per-eviction term),
                  running ahead of training by at most `lookahead` batches
    prefetch(b)   after oracle(b): its F
                  missing rows gathered by the CPU into a pinned buffer (Machine.collect:
                  table reads and buffer writes, cpu_gathers) || H2D of F x R || HBM
                  writes of the fills
    train(b)      forward (HBM gather; rows the capacity could not place read over UVM, as
                  lru-cache's conflict misses) -> mlp -> backward
    writeback(b)  the rows whose time-to-live ended at b: HBM read || D2H || the CPU
                  reads them from the buffer and scatters them into the table
                  (Machine.write_back), after train(b)

prefetch(b) starts after prefetch(b-1) and after writeback(b-2) (so a row evicted at b-2
and needed again by b is read after its newest value landed, and at most one batch is
prefetched beyond the one training: the cache holds two batches' fills); train(b) waits for
prefetch(b). No tag-probe kernel: the oracle remaps ids on the CPU (as Bagpipe does).
"""

from __future__ import annotations

from dataclasses import dataclass

from scratchpipe_sim.policies.bagpipe import BagpipeParams
from scratchpipe_sim.timing.designs._cache_stages import CacheStages
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_registry import DESIGNS
from scratchpipe_sim.timing.machine import PlannerParams


@dataclass(frozen=True)
class BagpipeDesignParams(BagpipeParams, PlannerParams):
    """`design_params.bagpipe`: the policy's knobs (inherited: lookahead, ttl_batches) and
    its oracle's planner cost knobs (`PlannerParams`)."""


@DESIGNS.register("bagpipe")
class Bagpipe(Design):
    order = 80
    plan_alternative = True
    lookahead_grid = (1, 2, 4, 8, 16, 32, 64, 128, 200, 256, 512, 1024)
    summary = "oracle cacher: keeps rows reused within 200 batches, TTL eviction, prefetch"
    #: the policy's own parameters (one default each) and the oracle's cost knobs
    Params = BagpipeDesignParams

    def workload_key(self) -> WorkloadKey:
        p = self.params
        ttl = -1 if p.ttl_batches is None else p.ttl_batches
        return WorkloadKey("bagpipe", self.cfg.capacity_rows(),
                           (("lookahead", p.lookahead), ("ttl_batches", ttl)),
                           params_field="design_params.bagpipe")

    def run(self, m, w):
        env = m.env
        s = CacheStages(self, self.columns(w))
        c = s.c
        n = w.num_batches
        L = self.params.lookahead
        decided = [env.event() for _ in range(n)]  # oracle(b) finished
        ready = [env.event() for _ in range(n)]  # prefetch(b) finished
        trained = [env.event() for _ in range(n)]
        written = [env.event() for _ in range(n)]  # writeback(b) finished
        inputs = self.inputs(m, c)

        def oracle():
            for b in range(n):
                if b >= L:
                    yield trained[b - L]  # it sees at most L batches beyond training
                yield from inputs.ahead_wait(b)  # the loader built batch b (no stage)
                yield from m.stage("oracle", b, [m.plan(b, c.accesses[b], knobs=self.params)])
                decided[b].succeed()

        def prefetch(b):
            R = c.R_fill[b]
            F = c.fills[b]
            start = env.now
            yield decided[b]
            m.end_stage("oracle_wait", b, start)
            yield from m.stage("prefetch", b, [
                m.collect(b, F, R, "prefetch gather"),
                m.pcie.h2d(F * R, b, "prefetch"),
                m.hbm.gather(F, R, b, "prefetch insert")])
            ready[b].succeed()

        def writeback(b):
            R, W = c.R_fill[b], c.writebacks[b]
            yield from m.stage("writeback", b, [
                m.hbm.gather(W, R, b, "victim read"), m.pcie.d2h(W * R, b, "writeback"),
                m.write_back(b, W, R)])
            written[b].succeed()

        def prefetcher():
            for b in range(n):
                if b >= 2:
                    yield written[b - 2]
                yield env.process(prefetch(b))

        env.process(oracle())
        env.process(prefetcher())
        for b in range(n):
            start = env.now
            yield ready[b]
            m.end_stage("prefetch_wait", b, start)
            yield from inputs.wait(b)  # its inputs and indices (input_pipeline.py)
            yield from m.stage("forward", b, s.forward(m, b))
            yield from m.stage("mlp", b, [m.mlp(b, c.samples[b])])
            yield from m.stage("backward", b, s.backward(m, b))
            m.batch_done(b)
            trained[b].succeed()
            env.process(writeback(b))
        yield m.all_of(written)
