"""`multi-gpu`: the tables sharded over N GPUs of one node, as TorchRec's sharded embeddings.

Sharding (`design_params.multi-gpu.sharding`): table-wise, row-wise or auto, placed by
`timing/placement.py` (pure, shared with a cluster model). `design_params.multi-gpu.gpus:
null` = the fewest GPUs whose HBM holds the tables under that sharding.

The global mini-batch of B samples is split data-parallel: each GPU trains B/N samples. The
simulated GPU is the critical one (the largest share s of the lookups, by bytes); every
collective waits for the slowest GPU, so each all-to-all is priced at the largest send and
the largest receive over the GPUs. Per batch:

    input_wait   its B/N samples loaded and copied with their indices over its own PCIe
                 link (`Design.inputs(share=1/N)`, `timing/input_pipeline.py`: prefetched
                 ahead), then the indices all-to-all to the shards' owners, issued when the
                 previous batch starts (TorchRec's TrainPipelineSparseDist)
    emb_forward  gpu_forward(s x A) from its own HBM
    output_dist  pooled vectors all-to-all (an unpooled table's: a row per lookup, so r_t
                 below is its row bytes x pooling): a table-wise table's owner sends B x r_t x
                 (N-1)/N and each other GPU receives (B/N) x r_t of it; a row-wise table is
                 reduce-scattered: every GPU sends and receives B x r_t x (N-1)/N. With every
                 table row-wise that is B x T x dim x bytes x (N-1)/N per GPU each way.
    mlp          mlp(B/N): data-parallel dense part
    grad_dist    the gradients of the pooled vectors, the same all-to-all reversed
    emb_backward gpu_backward(s x A, s x U) || ring all-reduce of the dense gradients
                 (2 (N-1)/N x MLP parameter bytes each way)

All-to-alls run at nvlink_GBps x alltoall_efficiency, the all-reduce at x
allreduce_efficiency, each paying nvlink_latency_ns once. With N = 1 there is no collective
and the design is gpu-only. Approximations: unique rows per GPU scale with its lookup
share; the L2 hit fraction is the single-GPU stream's (each GPU has its own L2 over a 1/N
slice, so this understates hits).

The collectives are priced by `Machine.collective` (the NVLink port is a Machine resource,
so every design that talks to other GPUs prices them alike).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.config.cost import usd_per_million
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.counts import Where
from scratchpipe_sim.timing.dense_compute import dense_params
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_parameters import design_params
from scratchpipe_sim.timing.designs.design_registry import DESIGNS
from scratchpipe_sim.timing.machine import Collective
from scratchpipe_sim.timing.placement import GiB, gpus_to_hold, shard, table_bytes

A2A = Collective.ALL_TO_ALL
#: the config key of this design's parameters (errors name it)
PARAMS_KEY = "design_params.multi-gpu"


@dataclass(frozen=True)
class MultiGpuParams:
    gpus: int | None = field(default=None, metadata={
        "help": "GPUs the tables are sharded over (null: the fewest whose HBM holds them)",
        "min": 1})
    sharding: str = field(default="auto", metadata={
        "help": "table-wise (whole tables per GPU), row-wise (every table split over all "
                "GPUs) or auto (table-wise, row-wise for a table larger than one GPU)",
        "choices": ("table-wise", "row-wise", "auto")})


def scalar_checks(cfg: Config, p: MultiGpuParams) -> None:
    """Its checks that need no table size: the GPUs asked for are at most one node's."""
    per_node = cfg.hardware.interconnect.gpus_per_node
    if p.gpus is not None and p.gpus > per_node:
        raise UserError(f"{p.gpus} GPUs but hardware.interconnect.gpus_per_node is "
                        f"{per_node}: expected at most one node's GPUs", source=cfg.source,
                        field=f"{PARAMS_KEY}.gpus")


def node_gpus(cfg: Config, p: MultiGpuParams) -> int:
    """p.gpus, or the fewest that hold the tables; at most one node's GPUs."""
    scalar_checks(cfg, p)
    return gpus_to_hold(cfg, p.sharding, PARAMS_KEY) if p.gpus is None else p.gpus


def mlp_param_bytes(cfg: Config) -> float:
    """Dense parameters (fp32 weights and biases of both MLPs and the interaction's):
    what the all-reduce moves."""
    return 4.0 * dense_params(cfg.model)


@DESIGNS.register("multi-gpu")
class MultiGpu(Design):
    order = 60
    summary = "tables sharded over N GPUs' HBM (TorchRec), all-to-all over NVLink"
    Params = MultiGpuParams
    plan_alternative = True
    scales_out = True

    @classmethod
    def gpu_counts(cls, cfg: Config) -> tuple[int, ...]:
        """From the fewest GPUs that hold the tables to one node's."""
        p = design_params(cfg, cls.name, cross_check=False)
        lo = gpus_to_hold(cfg, p.sharding, PARAMS_KEY)
        return tuple(range(lo, cfg.hardware.interconnect.gpus_per_node + 1))

    @classmethod
    def gpus_of(cls, cfg: Config) -> int:
        return node_gpus(cfg, design_params(cfg, cls.name, cross_check=False))

    @classmethod
    def check_config(cls, cfg: Config) -> None:
        """Every check of its construction (the GPUs, the tables' placement on their HBM):
        whole where the config sizes every table (a generated trace); with a trace file,
        whose tables may size the model, the GPU count (`scalar_checks`), the placement
        when the trace is read (`Design.check_placing`)."""
        cls.check_placing(cfg, scalar_checks)

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.gpus = node_gpus(cfg, self.params)
        self.sharding = shard(cfg, self.gpus, self.params.sharding, PARAMS_KEY)
        m = cfg.model
        self.r_t = tuple(float(r) for r in m.row_bytes_per_table)
        weights = tuple(p * r for p, r in zip(m.poolings, self.r_t, strict=True))
        self.share = self.sharding.lookup_share(weights)
        #: each table's embedding outputs per sample: what the all-to-alls move
        self.out_t = tuple(r * k for r, k in zip(self.r_t, m.output_rows_per_table,
                                                  strict=True))

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey(None, where=Where.DEVICE)

    def run(self, m, w):
        env = m.env
        # TorchRec issues each sharding group's input and output dists (host_dispatch)
        m.set_sharding_types(frozenset("row-wise" if rw else "table-wise"
                                       for rw in self.sharding.row_wise))
        c = self.columns(w)
        n = w.num_batches
        N, s = self.gpus, self.share
        ib = m.index_bytes
        k = (N - 1) / N
        ar = 2 * k * mlp_param_bytes(self.cfg)
        inputs: dict[int, simpy.Process] = {}
        pipeline = self.inputs(m, c, share=1 / N)  # its B/N samples, loaded and copied

        def input_copy(b):
            A, B = c.accesses[b], c.samples[b]
            ev = pipeline.ready_event(b)
            if ev is not None:
                yield ev
            ids = (A + B * m.tables) * ib
            ev = m.collective(b, ids / N * k, ids * s * k, "input_dist", A2A)
            if ev is not None:
                yield ev

        def start(b):
            if b < n and b not in inputs:
                inputs[b] = env.process(input_copy(b))

        a2a_per_batch = []
        busy0 = {}
        for b in range(n):
            A, U, B = c.accesses[b], c.unique[b], c.samples[b]
            start(b)
            yield from m.stage("input_wait", b, [inputs.pop(b)])
            start(b + 1)
            yield from m.stage("emb_forward", b, [
                m.gpu_forward(b, s * A, s * c.samples[b], c.l2[b], c.r[b])])
            send, recv = self.sharding.alltoall_bytes(B, self.out_t)
            a2a_per_batch.append(max(send, recv))
            yield from m.stage("output_dist", b, [
                m.collective(b, send, recv, "pooled", A2A)])
            yield from m.stage("mlp", b, [m.mlp(b, B / N)])
            yield from m.stage("grad_dist", b, [
                m.collective(b, recv, send, "grads", A2A)])
            yield from m.stage("emb_backward", b, [
                m.gpu_backward(b, s * A, s * U, c.l2_update[b], c.r[b], c.R[b]),
                m.collective(b, ar, ar, "allreduce", Collective.ALL_REDUCE)])
            m.batch_done(b)
            if b == m.warmup - 1:
                busy0 = {x.name: x.busy_now() for x in m.nvlink}
        self._report(m, c, busy0, a2a_per_batch)

    def _report(self, m, c, busy0: dict, a2a: list[float]) -> None:
        wu = m.warmup
        done = m.done
        span = float(done[-1] - (done[wu - 1] if wu > 0 else 0.0))
        samples = sum(c.samples[wu:])
        sps = samples / span * 1e9 if span > 0 else float("inf")
        window = float(done[-1]) - m.window_start_ns
        m.counters.update({
            "gpus": self.gpus,
            "gpus_to_hold_tables": gpus_to_hold(self.cfg, self.params.sharding, PARAMS_KEY),
            "table_GiB": sum(table_bytes(self.cfg)) / GiB,
            "lookup_share_per_gpu": self.share,
            "samples_per_s_per_gpu": sps / self.gpus,
            # priced at N GPUs (run_metrics.summarize should price every design alike)
            "usd_per_million_samples": usd_per_million(self.cfg, sps, self.gpus),
            "alltoall_bytes_per_gpu": (sum(a2a[wu:]) / len(a2a[wu:])) if a2a[wu:] else 0.0,
        })
        for x in m.nvlink:
            busy = x.busy_now() - busy0.get(x.name, 0.0)
            m.counters[f"busy_{x.name}"] = busy / window if window > 0 else 0.0
