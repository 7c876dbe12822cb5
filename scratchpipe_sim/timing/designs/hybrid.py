"""`hybrid`: embeddings live in CPU DRAM and are trained by the CPU (the baseline).

Per batch, strictly in order (each stage needs the previous one's output):
loader_wait (the batch built by the data loader) -> cpu_gather (A lookups gathered and
pooled by the CPU cores from DRAM or LLC) -> h2d_pooled (B x T x dim pooled vectors, DMA
from host memory) -> input_wait (its dense features, copied while the CPU gathered) -> mlp
(GPU) -> d2h_grads (the same size of gradients) -> cpu_update (aggregate the A gradient
contributions into row gradients on the cores, then update the U unique rows with their
optimizer state: 2U rows). The indices stay on the CPU: no index bytes cross PCIe
(`inputs_carry_ids = False`).
"""

from __future__ import annotations

from scratchpipe_sim.timing.counts import Where
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_registry import DESIGNS


@DESIGNS.register("hybrid")
class Hybrid(Design):
    default = True
    order = 0
    baseline = True
    summary = "tables in CPU DRAM, CPU gathers/updates, pooled vectors over PCIe"
    phase_stages = {"forward": ("cpu_gather",), "backward": ("cpu_update",)}
    inputs_carry_ids = False  # the CPU gathers: only the dense features cross PCIe

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey(None, where=Where.HOST)

    def run(self, m, w):
        c = self.columns(w)
        inputs = self.inputs(m, c)
        for b in range(w.num_batches):
            pooled = c.samples[b] * self.sample_out
            yield from inputs.host_wait(b)
            yield from m.stage("cpu_gather", b, [m.cpu_embedding_bag(
                c.accesses[b], c.r[b], c.samples[b] * m.tables, b, c.llc[b])])
            yield from m.stage("h2d_pooled", b, [m.pcie.h2d(pooled, b, "pooled")])
            yield from inputs.wait(b)  # the dense features, copied during the gather
            yield from m.stage("mlp", b, [m.mlp(b, c.samples[b])])
            yield from m.stage("d2h_grads", b, [m.pcie.d2h(pooled, b, "grads")])
            yield from m.stage("cpu_update", b, [
                m.cpu_backward(b, c.accesses[b], c.unique[b], c.llc_update[b], c.r[b], c.R[b],
                               lookup_onchip=c.llc[b], bags=c.samples[b] * m.tables)])
            m.batch_done(b)
