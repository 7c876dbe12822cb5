"""Collectives over a cluster of nodes: how many bytes cross NVLink and the network, and what
one collective costs alone, as NCCL's own performance model prices them (pure, no SimPy).

A cluster is `hardware.cluster.nodes` nodes of `interconnect.gpus_per_node` GPUs (`Fabric`).
Inside a node, NVLink / NVSwitch at nvlink_GBps x the collective's efficiency (the figures
`multi-gpu` uses); between nodes, each GPU's share of the node's NICs, nic_GBps x
min(1, nics_per_node / gpus_per_node) per direction.

Bus bandwidth (nccl-tests doc/PERFORMANCE.md): a collective of S bytes over n ranks moves
S x F per rank, F = 2(n-1)/n for an all-reduce and (n-1)/n for all-gather, reduce-scatter and
all-to-all (`busbw_factor`); busbw reaches the bottleneck link's speed.

All-reduce (ring or tree, NCCL src/graph/tuning.cc): the bus bytes 2(n-1)/n x S cross each
GPU's NVLink port; over several nodes the ring's channels leave a node through its NICs
(one channel per NIC), so the node's egress is the same bus bytes over nics x nic_GBps:
busbw = min(NVLink's, nics_per_node x nic_GBps) (8 HDR NICs: 192 GB/s, the measured DGX A100
multi-node figure). Latency: nvlink_latency_ns (the step `multi-gpu` pays) plus, across
nodes, net_latency_ns x the inter-node steps — 2(N-1) for a ring, 2 log2 N for a tree (as
tuning.cc counts nInterSteps); NCCL picks the faster, so the smaller is taken. Tree and ring
reach the same bus bandwidth here (NCCL's tree caps and corrections are left out).

All-to-all (not in NCCL's model; the rule its maintainers give, nccl-tests issues 130 and
267): with destinations spread evenly, a share (n - G)/(n - 1) of the bytes a GPU sends off
itself go to other nodes, (N-1)/N of all it holds when n = N x G. Hierarchical (rail
aligned, as NCCL's PXN): the cross-node bytes for a GPU of another local index first move
over NVLink to the local GPU on that rail, then every GPU sends its rail's bytes over its
own NIC share (one NIC's bandwidth at most: all-to-all cannot aggregate NICs). The two
phases are pipelined in chunks, so the time is the slower phase, each with its latency:

    nvlink phase: nvlink_latency_ns + (intra + cross x (G-1)/G) / (nvlink_GBps x a2a eff)
    net phase:    net_latency_ns + cross / net_GBps_per_gpu

One node has no net phase: exactly what `Machine.collective` prices for `multi-gpu`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratchpipe_sim.config.hardware import HardwareConfig


@dataclass(frozen=True)
class Fabric:
    """The links of a cluster (every figure from `hardware.interconnect` and `.cluster`)."""

    nodes: int
    gpus_per_node: int
    nvlink_GBps: float
    nvlink_latency_ns: float
    alltoall_efficiency: float
    allreduce_efficiency: float
    nic_GBps: float
    nics_per_node: int
    net_latency_ns: float

    @classmethod
    def of(cls, hw: HardwareConfig) -> Fabric:
        ic, cl = hw.interconnect, hw.cluster
        return cls(cl.nodes, ic.gpus_per_node, ic.nvlink_GBps, ic.nvlink_latency_ns,
                   ic.alltoall_efficiency, ic.allreduce_efficiency, cl.nic_GBps,
                   cl.nics_per_node, cl.net_latency_ns)

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def net_GBps_per_gpu(self) -> float:
        """One GPU's share of its node's NICs, never more than one NIC."""
        return self.nic_GBps * min(1.0, self.nics_per_node / self.gpus_per_node)

    @property
    def node_net_GBps(self) -> float:
        """A node's NICs together: the bus bandwidth of a ring crossing nodes."""
        return self.nic_GBps * self.nics_per_node


@dataclass(frozen=True)
class Group:
    """The ranks a collective runs over: `ranks` GPUs on `nodes` nodes, evenly spread."""

    ranks: int
    nodes: int

    @property
    def per_node(self) -> int:
        return max(1, self.ranks // self.nodes)


def busbw_factor(kind: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor: busbw = algbw x this."""
    if n <= 1:
        return 0.0
    if kind == "all-reduce":
        return 2.0 * (n - 1) / n
    if kind in ("all-to-all", "all-gather", "reduce-scatter"):
        return (n - 1) / n
    if kind in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {kind!r}")


@dataclass(frozen=True)
class Split:
    """Bytes of one collective step per GPU, per link and direction."""

    nvlink_send: float
    nvlink_recv: float
    net_send: float
    net_recv: float


def alltoall_split(group: Group, send: float, recv: float) -> Split:
    """A GPU's all-to-all bytes off itself (`send`, `recv`) over NVLink and the network: the
    cross-node share (n - G)/(n - 1) goes over the network, and (G-1)/G of it first over
    NVLink to the GPU on its rail."""
    n, G = group.ranks, group.per_node
    if group.nodes <= 1 or n <= 1:
        return Split(send, recv, 0.0, 0.0)
    cross = (n - G) / (n - 1)
    rail = (G - 1) / G

    def nv(x: float) -> float:
        return x * (1.0 - cross) + x * cross * rail

    return Split(nv(send), nv(recv), send * cross, recv * cross)


def allreduce_split(group: Group, nbytes: float) -> Split:
    """A ring all-reduce of `nbytes` per GPU: 2(n-1)/n x nbytes over every GPU's NVLink port;
    across nodes a node's NICs carry the same bus bytes, 1/G of them per GPU's share."""
    n, G = group.ranks, group.per_node
    bus = busbw_factor("all-reduce", n) * nbytes
    if group.nodes <= 1:
        return Split(bus, bus, 0.0, 0.0)
    return Split(bus, bus, bus / G, bus / G)


def allreduce_net_steps(nodes: int) -> int:
    """Inter-node latency steps of the faster of ring (2(N-1)) and tree (2 log2 N)."""
    if nodes <= 1:
        return 0
    return min(2 * (nodes - 1), 2 * math.ceil(math.log2(nodes)))


def net_share_GBps(fabric: Fabric, group: Group, kind: str) -> float:
    """The network bandwidth a GPU's share of bytes moves at: all-to-all one NIC's at most;
    an all-reduce's bus bytes / G cross a node's NICs together, so a GPU's share is
    node_net_GBps / G."""
    if kind == "all-to-all":
        return fabric.net_GBps_per_gpu
    return fabric.node_net_GBps / group.per_node


def net_latency_ns(fabric: Fabric, group: Group, kind: str) -> float:
    """Latency of a collective's network phase: one step for an all-to-all, the inter-node
    steps of the faster all-reduce algorithm for an all-reduce."""
    if group.nodes <= 1:
        return 0.0
    steps = 1 if kind == "all-to-all" else allreduce_net_steps(group.nodes)
    return steps * fabric.net_latency_ns


def collective_ns(fabric: Fabric, group: Group, kind: str, split: Split) -> float:
    """The time of one collective alone (closed form): the slower of its NVLink phase and
    its network phase, each with its latency (what `Machine.cluster_collective` prices in
    SimPy when nothing else contends)."""
    eff = fabric.alltoall_efficiency if kind == "all-to-all" else fabric.allreduce_efficiency
    nv = max(split.nvlink_send, split.nvlink_recv)
    t_nv = fabric.nvlink_latency_ns + nv / (fabric.nvlink_GBps * eff) if nv > 0 else 0.0
    net = max(split.net_send, split.net_recv)
    t_net = (net_latency_ns(fabric, group, kind) + net / net_share_GBps(fabric, group, kind)
             if net > 0 else 0.0)
    return max(t_nv, t_net)


def alltoall_ns(fabric: Fabric, group: Group, send: float, recv: float) -> float:
    """One all-to-all alone: `send` / `recv` bytes off this GPU."""
    return collective_ns(fabric, group, "all-to-all", alltoall_split(group, send, recv))


def allreduce_ns(fabric: Fabric, group: Group, nbytes: float) -> float:
    """One all-reduce of `nbytes` on every GPU, alone."""
    return collective_ns(fabric, group, "all-reduce", allreduce_split(group, nbytes))
