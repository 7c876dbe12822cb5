"""`gpu-only`: every table resident in HBM (capacity ignored): the GPU-memory-speed bound.

Per batch: gpu_gather (A lookups from HBM) -> mlp -> gpu_update (2U rows with state).
No PCIe traffic: input ids and dense features are outside the modelled system (as for
every design).
"""

from __future__ import annotations

from scratchpipe_sim.timing.designs.base import DESIGNS, Columns, Design, WorkloadKey


@DESIGNS.register("gpu-only")
class GpuOnly(Design):
    name = "gpu-only"
    summary = "every table in HBM (infinite capacity ideal)"

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey(None, where="device")

    def run(self, m, w):
        c = Columns(w)
        for b in range(w.num_batches):
            yield from m.stage("gpu_gather", b, [m.hbm.gather(c.accesses[b], self.r, b,
                                                              "gather")])
            yield from m.stage("mlp", b, [m.mlp(b, c.samples[b])])
            yield from m.stage("gpu_update", b, [m.hbm.gather(2 * c.unique[b], self.R, b,
                                                              "update")])
            m.batch_done(b)
