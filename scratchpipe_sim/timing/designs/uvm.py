"""`uvm`: FBGEMM's `EmbeddingLocation.MANAGED` without a cache: the tables live in host
memory and the GPU kernels read and update them in place over UVM.

Per batch: input_wait (indices and offsets, copied while the previous batch ran) ->
forward = every lookup's row read from host memory (CPU DRAM gather of A rows of r bytes
|| H2D of A x r at pcie.uvm_efficiency) -> mlp -> backward = sort + segment-reduce of the A
gradient contributions in HBM (as every GPU design) || the U unique rows updated in place
with their state (DRAM 2U x R || H2D and D2H of U x R at uvm_efficiency), exactly as
lru-cache prices its unplaced rows. Nothing is cached,
so nothing is filled or written back; the GPU L2 is not credited for host rows (a lookup's
row bytes all cross the link: the closed form the tests check).
"""

from __future__ import annotations

from scratchpipe_sim.timing.designs.base import DESIGNS, Design, InputCopies, WorkloadKey


@DESIGNS.register("uvm")
class Uvm(Design):
    order = 70
    summary = "tables in host memory read and updated in place over UVM (FBGEMM MANAGED)"

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey(None, where="host")

    def run(self, m, w):
        c = self.columns(w)
        inputs = InputCopies(m, c, w.num_batches)
        for b in range(w.num_batches):
            A, U, r, R = c.accesses[b], c.unique[b], c.r[b], c.R[b]
            yield from inputs.wait(b)
            yield from m.stage("forward", b, [m.dram.gather(A, r, b, "uvm gather"),
                                              m.pcie.h2d(A * r, b, "uvm", uvm=True)])
            yield from m.stage("mlp", b, [m.mlp(b, c.samples[b])])
            # as lru-cache's unplaced rows: the sort + segment-reduce on the GPU || the
            # read-modify-write of each unique row in host memory
            yield from m.stage("backward", b, [
                m.gpu_backward(b, A, 0, 0.0, r, R),
                m.dram.gather(2 * U, R, b, "uvm update"),
                m.pcie.h2d(U * R, b, "uvm update", uvm=True),
                m.pcie.d2h(U * R, b, "uvm update", uvm=True)])
            m.batch_done(b)
