"""`static-cache`: hot rows pinned in HBM (policy `static`), the rest served as in `hybrid`.

The two paths run in parallel within each stage:
forward = {HBM gather of the H hit accesses} || {CPU gather of the P unplaced accesses ->
H2D of their partial pooled vectors}; mlp; backward = {HBM update of the unique pinned
rows} || {D2H of the partial gradients -> CPU update of the unique host rows}.
Partial pooled vectors: one per bag holding at least one host row, bounded by
min(P, B x T) bags (an upper bound: the counts do not say how host rows spread over bags).
"""

from __future__ import annotations

from scratchpipe_sim.timing.designs.base import DESIGNS, Columns, Design, WorkloadKey


@DESIGNS.register("static-cache")
class StaticCache(Design):
    name = "static-cache"
    summary = "hot rows pinned in HBM, the rest in CPU DRAM, both paths in parallel"

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey(self.cfg.cache.static_policy, self.cfg.capacity_rows(),
                           policy_field="cache.static_policy")

    def run(self, m, w):
        c = Columns(w)
        T = self.cfg.model.tables.count
        vec = self.pooled // T  # bytes of one pooled vector
        for b in range(w.num_batches):
            host = c.unplaced[b]
            uh = c.unique_unplaced[b]
            part = min(host, c.samples[b] * T) * vec
            cpu_fwd = m.seq(lambda b=b, host=host: m.dram.gather(host, self.r, b, "gather"),
                            lambda b=b, part=part: m.pcie.h2d(part, b, "pooled"))
            yield from m.stage("forward", b, [
                m.hbm.gather(c.accesses[b] - host, self.r, b, "gather"), cpu_fwd])
            yield from m.stage("mlp", b, [m.mlp(b, c.samples[b])])
            cpu_bwd = m.seq(lambda b=b, part=part: m.pcie.d2h(part, b, "grads"),
                            lambda b=b, uh=uh: m.dram.gather(2 * uh, self.R, b, "update"))
            yield from m.stage("backward", b, [
                m.hbm.gather(2 * (c.unique[b] - uh), self.R, b, "update"), cpu_bwd])
            m.batch_done(b)
