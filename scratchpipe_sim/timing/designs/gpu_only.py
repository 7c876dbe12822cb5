"""`gpu-only`: every table resident in HBM (capacity ignored): the GPU-memory-speed bound.

Per batch: input_wait (its indices and offsets, copied while the previous batch ran) ->
gpu_gather (A lookups from HBM or L2) -> mlp -> gpu_update (sort + segment-reduce of the A
gradient contributions, then 2U row updates with state).
"""

from __future__ import annotations

from scratchpipe_sim.timing.counts import Where
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_registry import DESIGNS


@DESIGNS.register("gpu-only")
class GpuOnly(Design):
    default = True
    order = 10
    embedding_location = "DEVICE"
    summary = "every table in HBM (infinite capacity ideal)"
    phase_stages = {"forward": ("gpu_gather",), "backward": ("gpu_update",)}

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey(None, where=Where.DEVICE)

    def run(self, m, w):
        c = self.columns(w)
        inputs = self.inputs(m, c)
        for b in range(w.num_batches):
            yield from inputs.wait(b)
            yield from m.stage("gpu_gather", b, [
                m.gpu_forward(b, c.accesses[b], c.samples[b], c.l2[b], c.r[b])])
            yield from m.stage("mlp", b, [m.mlp(b, c.samples[b])])
            yield from m.stage("gpu_update", b, [
                m.gpu_backward(b, c.accesses[b], c.unique[b], c.l2_update[b], c.r[b], c.R[b])])
            m.batch_done(b)
