"""`scratchpipe`: the lookahead scratchpad, pipelined over mini-batches (Kwon & Rhu, ISCA'22).

Five SimPy processes, one per stage, connected by bounded queues (`cache.queue_depth`
batches each):

    plan      CPU planner threads: hit/miss and victims for batch j (the `scratchpipe`
              policy); cost = accesses x plan_ns_per_id / plan_threads (counted, not free)
    collect   CPU gathers the F missed rows into a staging buffer || GPU copies the W victims
              out of the scratchpad
    exchange  H2D of the F fills || D2H of the W victims
    insert    HBM writes of the fills || CPU DRAM writes of the victims
    train     GPU: gather A lookups from HBM (all hits) -> mlp -> update 2U rows; with
              cache.on_overflow=stall, surplus rows are read/updated over UVM instead

A window of `cache.lookahead` tokens bounds the batches in flight: plan(j) takes a token and
train(j) returns it, so plan(j) starts only after train(j - W) finished — the condition under
which the policy's pinned set (batches j-W+1..j) is what is resident. In steady state the
iteration time converges to the slowest stage (when W covers the pipeline depth).
"""

from __future__ import annotations

import simpy

from scratchpipe_sim.timing.designs._cache_stages import CacheStages
from scratchpipe_sim.timing.designs.base import DESIGNS, Columns, Design, WorkloadKey


@DESIGNS.register("scratchpipe")
class ScratchPipe(Design):
    name = "scratchpipe"
    summary = "lookahead scratchpad: plan, collect, exchange, insert, train pipelined"

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey("scratchpipe", self.cfg.capacity_rows(),
                           (("lookahead", self.cfg.cache.lookahead),
                            ("on_overflow", self.cfg.cache.on_overflow)))

    def run(self, m, w):
        env = m.env
        c = Columns(w)
        stages = CacheStages(self, c)
        n = w.num_batches
        R = self.R
        slots = simpy.Container(env, capacity=self.cfg.cache.lookahead,
                                init=self.cfg.cache.lookahead)
        qd = self.cfg.cache.queue_depth
        q = [simpy.Store(env, capacity=qd) for _ in range(4)]

        def plan():
            for b in range(n):
                yield slots.get(1)
                yield from m.stage("plan", b, [m.plan(b, c.accesses[b])])
                yield q[0].put(b)

        def relay(name, q_in, q_out, parts):
            """A middle stage: take a batch from q_in, move its bytes, pass it to q_out."""
            for _ in range(n):
                b = yield q_in.get()
                yield from m.stage(name, b, parts(b))
                yield q_out.put(b)

        middle = (
            ("collect", lambda b: [m.dram.gather(c.fills[b], R, b, "collect"),
                                   m.hbm.gather(c.writebacks[b], R, b, "victim read")]),
            ("exchange", lambda b: [m.pcie.h2d(c.fills[b] * R, b, "fill"),
                                    m.pcie.d2h(c.writebacks[b] * R, b, "victims")]),
            ("insert", lambda b: [m.hbm.gather(c.fills[b], R, b, "insert"),
                                  m.dram.gather(c.writebacks[b], R, b, "writeback")]),
        )
        env.process(plan())
        for i, (name, parts) in enumerate(middle):
            env.process(relay(name, q[i], q[i + 1], parts))
        for _ in range(n):
            b = yield q[3].get()
            # Unplaced accesses exist only with on_overflow=stall: the surplus rows of an
            # overflowing window are read and updated in host memory, as FBGEMM's conflict
            # misses are (the same forward/backward parts as lru-cache).
            train = m.seq(lambda b=b: m.all_of(stages.forward(m, b)),
                          lambda b=b: m.mlp(b, c.samples[b]),
                          lambda b=b: m.all_of(stages.backward(m, b)))
            yield from m.stage("train", b, [train])
            m.batch_done(b)
            yield slots.put(1)
