"""`lru-prefetch`: the `lru-cache` cache with TorchRec's prefetch pipeline (lookahead 1).

TorchRec's PrefetchTrainPipelineSparseDist runs forward(i), then prefetch(i+1) on its own
stream, then backward(i). Here prefetch(i+1) (the `fetch` stage of batch i+1) starts as soon
as the embedding forward of batch i ends (after batch i+1's indices arrived), so it overlaps
batch i's mlp and backward and contends with them for PCIe, DRAM and HBM; forward(i+1)
waits for it. Replacement is
past-only (the same policy counts as `lru-cache`); the rows of batches i and i+1 are locked,
which the counts approximate with the policy's own current-batch lock (documented).
"""

from __future__ import annotations

from scratchpipe_sim.timing.designs._cache_stages import (
    CacheStages,
    FbgemmCacheParams,
    cache_key,
)
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_registry import DESIGNS


@DESIGNS.register("lru-prefetch")
class LruPrefetch(Design):
    default = True
    order = 40
    summary = "lru-cache plus prefetch of batch i+1 during batch i's backward (TorchRec)"
    Params = FbgemmCacheParams

    def workload_key(self) -> WorkloadKey:
        return cache_key(self)

    def run(self, m, w):
        s = CacheStages(self, self.columns(w), state_in_uvm=not self.params.enforce_hbm)
        env = m.env
        n = w.num_batches
        inputs = self.inputs(m, s.c)

        def prefetch(b):
            yield from inputs.wait(b)  # the lookup kernels need batch b's indices
            yield from m.stage("prefetch", b, [s.fetch(m, b)])

        pending = env.process(prefetch(0))
        for b in range(n):
            start = env.now
            yield pending
            m.end_stage("prefetch_wait", b, start)
            yield from m.stage("forward", b, s.forward(m, b))
            if b + 1 < n:
                pending = env.process(prefetch(b + 1))
            yield from m.stage("mlp", b, [m.mlp(b, s.c.samples[b])])
            yield from m.stage("backward", b, s.backward(m, b))
            m.batch_done(b)
