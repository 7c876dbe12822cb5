"""`static-cache`: hot rows pinned in HBM (policy `static`), the rest served as in `hybrid`.

The pinned rows are chosen from a profiling prefix (the cache warm-up batches; the whole
trace only with `design_params.static-cache.profile: oracle`) and copied to the GPU before
training, so accesses to them are hits and nothing is filled: hit ratio, bytes and time agree.

Per batch: input_wait (the indices: the GPU remaps every id) -> forward = {lookup kernel,
then HBM/L2 gather of the H hit accesses} || {CPU gather of the P unplaced accesses -> H2D
of their partial pooled vectors}; mlp; backward = {sort + segment-reduce of the H GPU-side
contributions, update of the unique pinned rows} || {D2H of the partial gradients -> CPU
aggregation of the P host contributions and update of the unique host rows}.
Partial pooled vectors: one per bag holding at least one host row, bounded by
min(P, B x T) bags (an upper bound: the counts do not say how host rows spread over bags;
an unpooled table's host lookups each send their own row: B x its pooling output rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import Warm, WorkloadKey
from scratchpipe_sim.timing.designs.design_registry import DESIGNS


@dataclass(frozen=True)
class StaticCacheParams:
    policy: str = field(default="static", metadata={
        "help": "the policy whose counts static-cache is priced from (static: the hot rows "
                "pinned; any registered policy, with its default parameters)"})
    profile: str = field(default="prefix", metadata={
        "help": "the static policy picks its hot rows from the warm-up prefix (prefix, as a "
                "deployment would) or from the timed batches too (oracle)",
        "choices": ("prefix", "oracle")})


@DESIGNS.register("static-cache")
class StaticCache(Design):
    default = True
    order = 20
    summary = "hot rows pinned in HBM, the rest in CPU DRAM, both paths in parallel"
    Params = StaticCacheParams

    def workload_key(self) -> WorkloadKey:
        p = self.params
        warm = (Warm.REPLAY if p.policy != "static" else
                Warm.PROFILE_ALL if p.profile == "oracle" else Warm.PROFILE_PREFIX)
        return WorkloadKey(p.policy, self.cfg.capacity_rows(), warm=warm,
                           policy_field="design_params.static-cache.policy",
                           params_field="design_params.static-cache")

    def run(self, m, w):
        c = self.columns(w)
        n_out = self.sample_out_rows  # output rows of a sample (T when every table pools)
        vec = self.sample_out / n_out  # bytes of one output row (the mean over tables)
        inputs = self.inputs(m, c)
        for b in range(w.num_batches):
            A, host, uh = c.accesses[b], c.unplaced[b], c.unique_unplaced[b]
            part = min(host, c.samples[b] * n_out) * vec
            r_h, R_h = c.r_host[b], c.R_host[b]
            r_g = (A * c.r[b] - host * r_h) / (A - host) if A > host else c.r[b]
            R_g = ((c.unique[b] * c.R[b] - uh * R_h) / (c.unique[b] - uh)
                   if c.unique[b] > uh else c.R[b])
            yield from inputs.wait(b)
            gpu_fwd = m.seq(lambda b=b, A=A: m.cache_lookup(b, A, 0, 0),
                            lambda b=b, A=A, host=host, r_g=r_g: m.gpu_forward(
                                b, A - host, c.samples[b], c.l2[b], r_g))
            cpu_fwd = m.seq(lambda b=b, host=host, r_h=r_h: m.cpu_gather(host, r_h, b,
                                                                         "gather"),
                            lambda b=b, part=part: m.pcie.h2d(part, b, "pooled"))
            yield from m.stage("forward", b, [gpu_fwd, cpu_fwd])
            yield from m.stage("mlp", b, [m.mlp(b, c.samples[b])])
            cpu_bwd = m.seq(lambda b=b, part=part: m.pcie.d2h(part, b, "grads"),
                            lambda b=b, host=host, uh=uh, r_h=r_h, R_h=R_h: m.cpu_backward(
                                b, host, uh, 0.0, r_h, R_h))
            yield from m.stage("backward", b, [
                m.gpu_backward(b, A - host, c.unique[b] - uh, c.l2_update[b], r_g, R_g),
                cpu_bwd])
            m.batch_done(b)
