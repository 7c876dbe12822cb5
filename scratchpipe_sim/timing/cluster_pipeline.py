"""The `cluster` design's schedule across batches (`design_params.cluster.pipeline`), its
input pipeline, and the node's host shared by the node's ranks.

Pipelines (what of batch i+1.. runs during batch i; the simulated rank's view):

    none         TorchRec's TrainPipelineBase: batch i's ids all-to-all (input_dist) is
                 issued when batch i starts, after batch i - 1's backward, and waited for
                 (stage `input_wait`). The input copy is still the input pipeline's,
                 prefetched on its copy stream.
    sparse-dist  TorchRec's TrainPipelineSparseDist (torchrec/distributed/train_pipeline/
                 train_pipelines.py, `progress`): at the start of iteration i,
                 `start_sparse_data_dist(batches[1])` issues batch i+1's input_dist on the
                 data_dist stream once its H2D copy (memcpy stream, `enqueue_batch`, two
                 batches ahead) is on the GPU; batch i's forward and backward run on the
                 default stream meanwhile. The ids all-to-all of i+1 shares the NVLink port
                 and the NIC share (`net_tx` / `net_rx`, processor sharing) with batch i's
                 output all-to-all, gradient all-to-all and dense all-reduce: not free.
                 The default: it is the schedule this design always had.
    nestpipe     NestPipe's Dual-Buffer Pipelining (arXiv 2604.06956): data prefetch,
                 H2D, key routing, lookup, training as five stages one batch apart, so the
                 key routing (ids all-to-all) of batch i+2 overlaps batch i
                 (NESTPIPE_ROUTE_AHEAD); plus Frozen-Window Pipelining: the output and
                 gradient all-to-alls split into `microbatches` chunks of B / (n M)
                 samples, chunk k+1's exchange overlapping chunk k's dense forward and
                 backward (`fwp`).

The input pipeline (`input_pipeline:`, `timing/input_pipeline.py`) is each rank's own: it
loads its B/n samples and copies them with their ids over its own PCIe link. The node's host
is shared: its DRAM bandwidth and its cores are split evenly over its gpus_per_node ranks
(`share_node_host`), on the assumption that every rank of a node does the same work in the
same phase (they train in lockstep: every collective waits for all) — so the simulated
(critical) rank sees 1/G of both. Each GPU has its own PCIe link; the switch above it may
be shared (`share_pcie_switch`): a DGX A100 puts two GPUs behind each PCIe Gen4 switch,
whose one x16 uplink to the CPU their host copies share (`hardware.pcie.gpus_per_switch`,
`switch_uplink_GBps`); a DGX H100 gives each GPU its own switch and ConnectX-7 (NVIDIA DGX
H100 user guide, "Network Modules"), so its link alone sets the rate.

The batches in flight hold HBM beside the shards (`batches_in_flight`, `BatchBytes`): as
many batches' ids as the pipeline has on the GPU, as many routed ids as it has routed, and
the training batch's outputs, their gradients and its activations.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from scratchpipe_sim.config import Config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.dense_compute import dense_iteration
from scratchpipe_sim.timing.input_pipeline import InputPipeline
from scratchpipe_sim.timing.machine import Machine

#: `design_params.cluster.pipeline` -> batches ahead of training whose ids all-to-all is
#: issued (0: batch i's own, in line)
ROUTE_AHEAD = {"none": 0, "sparse-dist": 1, "nestpipe": 2}
#: NestPipe's five stages (prefetch, H2D, key routing, lookup, train) one batch apart: key
#: routing two batches ahead of training
NESTPIPE_ROUTE_AHEAD = ROUTE_AHEAD["nestpipe"]
#: the dense work's part that runs once per iteration, not once per micro-batch
OPTIMIZER_PART = "optimizer"
#: batches copied to the GPU ahead of the ones routed: TorchRec's pipelines copy the next
#: batch on their memcpy stream (TrainPipelineBase: batch i+1 during batch i;
#: TrainPipelineSparseDist.progress: `enqueue_batch` copies batch i+2 while batch i+1's
#: input_dist runs), NestPipe's H2D stage sits one batch before its key routing
COPY_AHEAD = 1


def batches_in_flight(pipeline: str) -> tuple[int, int]:
    """(batches whose ids are on the GPU, batches whose routed ids are) under `pipeline`:
    the one training, the ROUTE_AHEAD[pipeline] routed ahead of it, and COPY_AHEAD more
    copied. TorchRec's TrainPipelineSparseDist (train_pipelines.py, `progress`) holds
    three: batches[0] training, batches[1] in input_dist, batches[2] copied
    (`enqueue_batch`); TrainPipelineBase two (the next batch's copy); NestPipe four."""
    ahead = ROUTE_AHEAD[pipeline]
    return ahead + 1 + COPY_AHEAD, ahead + 1


@dataclass(frozen=True)
class BatchBytes:
    """What one batch holds in a rank's HBM, bytes by kind (the closed forms are the
    design's, `Cluster.batch_bytes`): `ids` its local ids and offsets (its B/n samples'),
    `routed` the ids the input dist brought to the rank's shards, `outputs` the embedding
    outputs the output all-to-all brings (B/n x the sum of every table's output bytes),
    `sent` the rank's own lookups' outputs before that all-to-all, `activations` what the
    dense forward keeps for the backward (`dense_compute.saved_activation_bytes`)."""

    ids: float
    routed: float
    outputs: float
    sent: float
    activations: float

    def in_flight(self, pipeline: str) -> float:
        """Bytes all the batches in flight hold at the peak (the training batch's backward
        under way): every batch on the GPU its ids, every routed one its routed ids, the
        training batch its outputs received and sent with a gradient of each, and its
        activations."""
        on_gpu, routed = batches_in_flight(pipeline)
        return (on_gpu * self.ids + routed * self.routed
                + 2.0 * (self.outputs + self.sent) + self.activations)


def check_pipeline(cfg: Config, p: Any, samples_per_rank: float, where: str) -> None:
    """`microbatches` only with nestpipe, and dividing a rank's batch (one-line errors
    naming the key)."""
    M = p.microbatches
    if M == 1:
        return
    if p.pipeline != "nestpipe":
        raise UserError(f"microbatches {M} needs pipeline: nestpipe (Frozen-Window "
                        f"Pipelining), got pipeline: {p.pipeline}", source=cfg.source,
                        field=f"{where}.microbatches")
    local = int(round(samples_per_rank))
    if local != samples_per_rank or local % M:
        raise UserError(f"microbatches {M} does not divide a rank's batch of "
                        f"{samples_per_rank:g} samples (model.batch_size over the ranks): "
                        "expected a divisor of it", source=cfg.source,
                        field=f"{where}.microbatches")


def share_node_host(m: Machine, ranks_per_node: int) -> None:
    """The node's host DRAM (and CXL tier) bandwidth and its cores split over its ranks:
    the simulated rank's Machine keeps 1/ranks of each. Exact when the node's ranks issue
    the same host work at the same times (G identical transfers under processor sharing
    each finish when one transfer at 1/G of the server would); called before any
    transfer."""
    if ranks_per_node <= 1:
        return
    servers = [m.dram.server, m.cores] + ([m.cxl.server] if m.cxl is not None else [])
    for s in servers:
        s.GBps /= ranks_per_node


def share_pcie_switch(m: Machine) -> None:
    """The PCIe switch's uplink to the CPU (`hardware.pcie.switch_uplink_GBps`) shared by
    the gpus_per_switch GPUs behind it (DGX A100: two GPUs a switch): every host<->GPU copy
    of the simulated rank also crosses 1 / gpus_per_switch of the uplink
    (`Pcie.share_uplink`). Exact as `share_node_host` is: the ranks of a switch copy the
    same bytes at the same times, so under processor sharing each gets an equal share. No
    uplink set: the GPU's own link sets the rate, nothing changes. GPU<->NIC traffic
    (GPUDirect RDMA through the switch) does not cross the uplink. Called before any
    transfer."""
    pcie = m.cfg.hardware.pcie
    if pcie.switch_uplink_GBps is None:
        return
    m.pcie.share_uplink(pcie.switch_uplink_GBps / pcie.gpus_per_switch)
    for s in m.pcie.uplink or ():
        m.busy_at_window_start[s.name] = 0.0


class RankInputs(InputPipeline):
    """One rank's input pipeline on its 1/G of the node's cores (`share_node_host`): a
    loader worker still runs on one whole core, so its cap on the shared server is G x
    the one-core share of the whole node's (at most the rank's whole share)."""

    def __init__(self, m: Machine, samples, ids, carry_ids: bool, share: float,
                 ranks_per_node: int):
        super().__init__(m, samples, ids, carry_ids, share)
        if not self.resident:  # read by the workers when they run (after this returns)
            self.one_core = min(1.0, self.one_core * ranks_per_node)


def dense_chunk(m: Machine, b: int, samples: float, memo: dict) -> Any:
    """One micro-batch's dense forward and backward (the MLPs and interaction, not the
    optimizer step) on gpu_compute, priced as `Machine.mlp` prices the whole iteration:
    its FLOPs at the kernels' rate after their launch waits; a micro-batch pays its
    kernels' launches again (why many micro-batches can be slower)."""
    if samples not in memo:
        cost = dense_iteration(m.cfg.model, m.cfg.hardware.gpu, float(samples))
        ks = [k for k in cost.kernels if k.part != OPTIMIZER_PART]
        wall = sum(t for part, t in cost.part_ns if part != OPTIMIZER_PART)
        busy = sum(k.exec_ns for k in ks)
        memo[samples] = (sum(k.flops for k in ks), busy, wall)
    flops, busy, wall = memo[samples]
    if flops <= 0 or busy <= 0:
        return m.env.timeout(wall) if wall > 0 else None
    return m.compute.transfer(flops, b, "mlp", GBps=flops / busy,
                              latency_ns=max(wall - busy, 0.0))


def fwp(m: Machine, b: int, M: int, samples: float, exchange, out: tuple, memo: dict
        ) -> Generator:
    """Frozen-Window Pipelining of batch b in M micro-batches: one communication stream
    runs the output all-to-all's chunks (1/M of `out` = (send, recv, intra) each) in order,
    then each gradient chunk once its micro-batch's backward is done; the compute stream
    runs micro-batch k's dense forward and backward once its chunk arrived (the last one
    with the optimizer step and the host's issue, `Machine.mlp`). Stages: `output_dist`
    the compute stream's waits for chunks, `mlp` its work, `grad_dist` the wait for the
    last gradient chunk after it — so they add up to the span, and the exchange's stages
    are what the dense work did not hide. `exchange(b, send, recv, intra, label)` is the
    design's all-to-all process."""
    env = m.env
    send, recv, intra = (x / M for x in out)
    arrived = [env.event() for _ in range(M)]
    trained = [env.event() for _ in range(M)]

    def comm() -> Generator:
        for k in range(M):
            yield env.process(exchange(b, send, recv, intra, "pooled"))
            arrived[k].succeed()
        for k in range(M):
            if not trained[k].triggered:
                yield trained[k]
            yield env.process(exchange(b, recv, send, intra, "grads"))

    stream = env.process(comm())
    per = samples / M
    for k in range(M):
        t = env.now
        if not arrived[k].triggered:
            yield arrived[k]
        m.end_stage("output_dist", b, t)
        t = env.now
        ev = m.mlp(b, per) if k == M - 1 else dense_chunk(m, b, per, memo)
        if ev is not None:
            yield ev
        m.end_stage("mlp", b, t)
        trained[k].succeed()
    t = env.now
    if not stream.triggered:
        yield stream
    m.end_stage("grad_dist", b, t)
