"""timing/collectives.py's closed forms where the cluster tests do not reach: a fabric's
rank count and per-GPU NIC share when a node has fewer NICs than GPUs, a one-rank group, the
inter-node step count of the faster of ring and tree, and an empty collective."""

from __future__ import annotations

import pytest

from scratchpipe_sim.timing.collectives import (
    Fabric,
    Group,
    Split,
    allreduce_net_steps,
    allreduce_ns,
    allreduce_split,
    alltoall_ns,
    alltoall_split,
    busbw_factor,
    collective_ns,
    net_latency_ns,
)


def fabric(nodes: int = 4, gpus: int = 8, nics: int = 8) -> Fabric:
    return Fabric(nodes=nodes, gpus_per_node=gpus, nvlink_GBps=450.0,
                  nvlink_latency_ns=3000.0, alltoall_efficiency=0.6,
                  allreduce_efficiency=0.8, nic_GBps=48.0, nics_per_node=nics,
                  net_latency_ns=9600.0)


def test_ranks_are_nodes_times_gpus_per_node():
    assert fabric(4, 8).ranks == 32
    assert fabric(3, 2).ranks == 6


def test_a_gpu_gets_its_share_of_fewer_nics_and_never_more_than_one():
    assert fabric(gpus=8, nics=2).net_GBps_per_gpu == 48.0 * 2 / 8
    assert fabric(gpus=8, nics=8).net_GBps_per_gpu == 48.0
    assert fabric(gpus=4, nics=8).net_GBps_per_gpu == 48.0  # one NIC at most
    assert fabric(gpus=8, nics=2).node_net_GBps == 96.0


def test_alltoall_over_a_shared_nic_is_slower_by_the_share():
    """With 2 NICs for 8 GPUs the network phase moves the cross bytes at a quarter NIC."""
    g = Group(32, 4)
    S = 63e6
    cross = alltoall_split(g, S, S).net_send
    assert alltoall_ns(fabric(nics=2), g, S, S) == pytest.approx(9600 + cross / 12.0)


def test_a_single_rank_exchanges_nothing_with_the_network():
    """One rank has no peer: whatever the node count, its bytes stay on NVLink's side (and
    its split is defined, no 0/0 share)."""
    assert alltoall_split(Group(1, 2), 5e6, 4e6) == Split(5e6, 4e6, 0.0, 0.0)
    assert alltoall_split(Group(8, 1), 5e6, 4e6) == Split(5e6, 4e6, 0.0, 0.0)


@pytest.mark.parametrize("nodes, steps", [(1, 0), (2, 2), (3, 4), (4, 4), (5, 6), (16, 8),
                                          (64, 12)])
def test_allreduce_takes_the_fewer_inter_node_steps_of_ring_and_tree(nodes, steps):
    # ring 2(N-1), tree 2 ceil(log2 N)
    assert allreduce_net_steps(nodes) == steps


def test_an_empty_collective_costs_nothing_and_a_one_way_one_pays_its_larger_side():
    fab, g = fabric(), Group(32, 4)
    assert collective_ns(fab, g, "all-to-all", Split(0.0, 0.0, 0.0, 0.0)) == 0.0
    assert allreduce_ns(fab, Group(1, 1), 1e6) == 0.0  # one rank: bus factor 0
    # receive-heavy: the larger direction sets each phase
    t = collective_ns(fab, g, "all-to-all", Split(1e3, 9e6, 2e3, 4e6))
    assert t == pytest.approx(max(3000 + 9e6 / (450 * 0.6), 9600 + 4e6 / 48.0))


def test_unknown_collective_is_refused():
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("gather", 4)


def test_more_nics_than_gpus_speed_up_an_allreduce_but_not_an_alltoall():
    """4 GPUs, 8 NICs of 48 GB/s: an all-to-all moves a GPU's bytes over one NIC at most
    (48), an all-reduce's bus bytes cross the node's NICs together, a GPU's share 8 x 48 / 4
    = 96."""
    fab, g = fabric(nodes=2, gpus=4, nics=8), Group(8, 2)
    S = 6e6
    t_a2a = collective_ns(fab, g, "all-to-all", Split(0.0, 0.0, S, S))
    assert t_a2a == pytest.approx(9600 + S / 48.0)
    t_ar = collective_ns(fab, g, "all-reduce", Split(0.0, 0.0, S, S))
    assert t_ar == pytest.approx(2 * 9600 + S / 96.0)  # 2 nodes: 2 inter-node steps


def test_one_node_has_no_network_phase():
    """Inside one node an all-reduce's bus bytes stay on NVLink and no step pays the
    network's latency, whatever the kind."""
    bus = 2 * 7 / 8 * 9e6
    assert allreduce_split(Group(8, 1), 9e6) == Split(bus, bus, 0.0, 0.0)
    fab = fabric(nodes=1)
    for kind in ("all-to-all", "all-reduce"):
        assert net_latency_ns(fab, Group(8, 1), kind) == 0.0
    assert net_latency_ns(fabric(), Group(32, 4), "all-to-all") == 9600.0
    assert net_latency_ns(fabric(), Group(32, 4), "all-reduce") == 4 * 9600.0


def test_two_ranks_move_a_bus_factor_and_one_rank_nothing():
    assert busbw_factor("all-reduce", 2) == 1.0
    assert busbw_factor("all-to-all", 2) == 0.5
    assert busbw_factor("broadcast", 2) == 1.0
    for kind in ("all-reduce", "all-to-all", "broadcast", "reduce"):
        assert busbw_factor(kind, 1) == 0.0
