"""`lru-cache`: an on-demand GPU embedding cache (policy `cache.policy`: lru, lfu, fbgemm-*).

Per batch, in order: input_wait (indices copied while the previous batch ran) -> fetch
(lookup kernels, write back evictions, fill misses) -> forward -> mlp -> backward; see
`_cache_stages` for what each stage moves. Nothing else overlaps across batches.
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


@DESIGNS.register("lru-cache")
class LruCache(Design):
    default = True
    order = 30
    embedding_location = "MANAGED_CACHING"
    summary = "on-demand cache: misses fetched and evictions written back before training"
    Params = FbgemmCacheParams
    phase_stages = {"forward": ("fetch", "forward"), "backward": ("backward",)}

    def workload_key(self) -> WorkloadKey:
        return cache_key(self)

    def run(self, m, w):
        s = CacheStages(self, self.columns(w), state_in_uvm=not self.params.enforce_hbm)
        inputs = self.inputs(m, s.c)
        for b in range(w.num_batches):
            yield from inputs.wait(b)
            yield from m.stage("fetch", b, [s.fetch(m, b)])
            yield from m.stage("forward", b, s.forward(m, b))
            yield from m.stage("mlp", b, [m.mlp(b, s.c.samples[b])])
            yield from m.stage("backward", b, s.backward(m, b))
            m.batch_done(b)
