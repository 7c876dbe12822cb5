"""`uvm`: FBGEMM's `EmbeddingLocation.MANAGED` without a cache: the tables live in host
memory and the GPU kernels read and update them in place over UVM.

Per batch: input_wait (indices and offsets, copied while the previous batch ran) ->
forward = the batch's U distinct rows read in place (`Machine.uvm_read`: the link at
uvm_read_share x h2d_GBps in whole sectors || the host DRAM gather || a GPU page walk per
lookup that misses the TLB, in the lookups' random order; a duplicate id hits the sectors
its first load brought into L2 but is translated again) || the output rows written to HBM
-> mlp -> backward = sort + segment-reduce of the A gradient contributions in HBM (as every
GPU design), then the U unique rows read, updated and written back in place with their
optimizer state
(`Machine.uvm_update`: sorted ids, so one walk per distinct page; FBGEMM keeps a MANAGED
table's state in UVM too). Nothing is cached, so nothing is filled or written back.
Published check: FBGEMM MANAGED on H100, points T1.7-T1.10 (docs/validation.md).
"""

from __future__ import annotations

from scratchpipe_sim.timing.counts import Where
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_registry import DESIGNS


@DESIGNS.register("uvm")
class Uvm(Design):
    order = 70
    embedding_location = "MANAGED"
    summary = "tables in host memory read and updated in place over UVM (FBGEMM MANAGED)"
    phase_stages = {"forward": ("forward",), "backward": ("backward",)}

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey(None, where=Where.HOST)

    def run(self, m, w):
        c = self.columns(w)
        inputs = self.inputs(m, c)
        for b in range(w.num_batches):
            A, U, r, R = c.accesses[b], c.unique[b], c.r[b], c.R[b]
            yield from inputs.wait(b)
            yield from m.stage("forward", b, [m.uvm_read(b, U, r, "uvm gather", accesses=A),
                                              m.gpu_forward(b, 0, c.samples[b])])
            yield from m.stage("mlp", b, [m.mlp(b, c.samples[b])])
            yield from m.stage("backward", b, [m.gpu_backward(
                b, A, 0, 0.0, r, R,
                host=lambda b=b, U=U, R=R: [m.uvm_update(b, U, R, "uvm update")])])
            m.batch_done(b)
