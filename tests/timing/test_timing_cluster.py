"""The multi-node cluster: collectives against NCCL's formulas, one node equal to multi-gpu's
pricing, per-rank streams against a per-lookup oracle, monotonicity and bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml
from rank_count_checks import assert_counts_match
from small_configs import off_chip

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.collectives import (
    Fabric,
    Group,
    allreduce_ns,
    allreduce_split,
    alltoall_ns,
    alltoall_split,
    busbw_factor,
)
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.machine import Collective, price_alone
from scratchpipe_sim.timing.rank_streams import RankPlan, rank_counts
from scratchpipe_sim.traces.csr_trace import Trace

BASE = {
    "hardware": deep_merge(off_chip("dgx-h100-cluster"), {"cluster": {"nodes": 2}}),
    "model": {"tables": {"count": 4, "rows": 500, "dim": 32}, "pooling": 4, "batch_size": 64,
              "num_batches": 6, "warmup_batches": 2, "bottom_mlp": [13, 64, 16],
              "interaction": "cat", "top_mlp": None},  # derived: tests vary the tables
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "designs": ["cluster"],
    "seed": 5,
}


def cfg_of(over=None, sets=()):
    return load_config(deep_merge(BASE, over or {}), sets)


FAB = Fabric(nodes=4, gpus_per_node=8, nvlink_GBps=450.0, nvlink_latency_ns=3000.0,
             alltoall_efficiency=0.6, allreduce_efficiency=0.8, nic_GBps=48.0,
             nics_per_node=8, net_latency_ns=9600.0)


# -- collectives: closed forms ------------------------------------------------------------------
def test_busbw_factors_are_nccl_tests():
    assert busbw_factor("all-reduce", 8) == 2 * 7 / 8
    assert busbw_factor("all-to-all", 64) == 63 / 64
    assert busbw_factor("reduce-scatter", 4) == busbw_factor("all-gather", 4) == 3 / 4
    assert busbw_factor("broadcast", 16) == 1.0
    assert busbw_factor("all-reduce", 1) == 0.0


def test_alltoall_cross_node_share_over_one_nic():
    g = Group(32, 4)
    S = 63e6  # bytes off the GPU; 31 peers
    split = alltoall_split(g, S, S)
    cross = S * 24 / 31  # 24 of 31 peers on other nodes: (N-1)/N of the whole buffer
    assert split.net_send == pytest.approx(cross)
    assert split.nvlink_send == pytest.approx(S * 7 / 31 + cross * 7 / 8)
    net = 9600 + cross / 48.0
    nv = 3000 + split.nvlink_send / (450 * 0.6)
    assert alltoall_ns(FAB, g, S, S) == pytest.approx(max(net, nv))
    assert net > nv  # the network sets the time (nccl-tests issue 130)


def test_allreduce_busbw_is_the_nodes_nics_across_nodes():
    g = Group(32, 4)
    S = 100e6
    bus = 2 * 31 / 32 * S
    # ring 2(N-1) = 6 inter-node steps, tree 2 log2 4 = 4: the faster
    net = 4 * 9600 + bus / (8 * 48.0)
    nv = 3000 + bus / (450 * 0.8)
    assert allreduce_ns(FAB, g, S) == pytest.approx(max(net, nv))
    assert allreduce_split(g, S).net_send == pytest.approx(bus / 8)


def test_one_node_prices_as_multi_gpu_collective():
    """Closed form and SimPy, both collectives: one node is Machine.collective exactly."""
    cfg = cfg_of({"hardware": {"cluster": {"nodes": 1}}})
    fab = Fabric.of(cfg.hardware)
    g = Group(8, 1)
    for kind, send, recv in ((Collective.ALL_TO_ALL, 7e6, 5e6), (Collective.ALL_REDUCE, 9e6,
                                                                 9e6)):
        bus = send if kind is Collective.ALL_TO_ALL else 2 * 7 / 8 * send
        bus_r = recv if kind is Collective.ALL_TO_ALL else bus
        old = price_alone(cfg, 1, lambda m, b, k=kind, s=bus, r=bus_r:
                          m.collective(b, s, r, "x", k), [0])[0]
        new = price_alone(cfg, 1, lambda m, b, k=kind, s=send, r=recv:
                          m.cluster_collective(b, s, r, "x", k, g), [0])[0]
        assert new == old
        closed = (alltoall_ns(fab, g, send, recv) if kind is Collective.ALL_TO_ALL
                  else allreduce_ns(fab, g, send))
        assert closed == pytest.approx(old)


def test_simpy_prices_the_closed_form_across_nodes():
    cfg = cfg_of({"hardware": {"cluster": {"nodes": 4}}})
    fab = Fabric.of(cfg.hardware)
    g = Group(32, 4)
    a2a = price_alone(cfg, 1, lambda m, b: m.cluster_collective(
        b, 8e6, 6e6, "x", Collective.ALL_TO_ALL, g), [0])[0]
    assert a2a == pytest.approx(alltoall_ns(fab, g, 8e6, 6e6))
    ar = price_alone(cfg, 1, lambda m, b: m.cluster_collective(
        b, 8e6, 8e6, "x", Collective.ALL_REDUCE, g), [0])[0]
    assert ar == pytest.approx(allreduce_ns(fab, g, 8e6))


# -- per-rank streams -------------------------------------------------------------------------
def small_trace(seed=3, B=8, T=3, rows=(40, 7, 100), batches=3):
    return _csr(np.random.default_rng(seed), B, T, rows, batches)


def _csr(rng, B, T, rows, batches):
    idx, offs, bounds = [], [0], [0]
    for _ in range(batches):
        for t in range(T):
            for _s in range(B):
                k = int(rng.integers(0, 4))
                idx.extend(int(x) for x in rng.integers(0, rows[t], size=k))
                offs.append(len(idx))
        bounds.append(len(offs) - 1)
    return Trace(np.array(rows, np.int64), np.array(idx, np.int64), np.array(offs, np.int64),
                 np.array(bounds, np.int64), B)


def oracle(trace, plan, dedup):
    """Per lookup, in Python: the rank of its row, counts per rank."""
    n, L = plan.ranks, plan.group
    out = []
    for b in range(trace.num_batches):
        bt = trace.batch(b)
        B = bt.batch_size
        routed = [0] * n
        pairs, rows_on = set(), set()
        sent, recv, look, uniq, recv_all = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
        for t in range(trace.num_tables):
            ind, offs = bt.table(t)
            rows = int(trace.table_rows[t])
            k = plan.span[t]
            for s in range(B):
                src = s * n // B
                for row in ind[offs[s]:offs[s + 1]]:
                    if k == 0:
                        dst = src
                    else:
                        local = plan.start[t] + (int(row) // -(-rows // k) if k > 1 else 0)
                        dst = (src // L) * L + local
                    routed[dst] += 1
                    recv_all[dst] += dst != src
                    if (dst, t, int(row)) not in rows_on:
                        rows_on.add((dst, t, int(row)))
                        uniq[dst] += 1
                    key = (src, t, int(row))
                    if dedup and k > 0 and key in pairs:
                        continue
                    pairs.add(key)
                    look[dst] += 1
                    if dst != src:
                        sent[src] += 1
                        recv[dst] += 1
        out.append((routed, look, sent, recv, uniq, recv_all))
    return out


@pytest.mark.parametrize("plan,dedup", [
    (RankPlan.of_owner(4, 4, (-1, -1, -1)), False),
    (RankPlan.of_owner(4, 4, (-1, -1, -1)), True),
    (RankPlan.of_owner(4, 4, (0, 3, -1)), True),
    (RankPlan.of_owner(4, 2, (1, -1, 0)), False),
    (RankPlan(8, 8, (0, 4, 2), (0, 4, 1)), True),  # data-parallel, row-wise over 4, table
    (RankPlan(8, 4, (0, 0, 1), (0, 2, 3)), False)])
def test_rank_streams_match_a_per_lookup_oracle(plan, dedup):
    trace = small_trace()
    got = rank_counts(trace, plan, dedup)
    assert_counts_match(got, oracle(trace, plan, dedup))


def test_row_wise_every_lookup_lands_on_exactly_one_rank():
    trace = small_trace(seed=9, batches=4)
    got = rank_counts(trace, RankPlan.of_owner(8, 8, (-1, -1, -1)), False)
    per_batch = np.diff(trace.batch_access_ptr())
    assert got.routed.sum(axis=1).tolist() == per_batch.tolist()
    assert (got.lookups == got.routed).all()
    assert (rank_counts(trace, RankPlan.of_owner(8, 8, (-1, -1, -1)), True).lookups
            <= got.lookups).all()


# -- the design -------------------------------------------------------------------------------
def run(over=None, sets=()):
    return simulate(cfg_of(over, sets), ["cluster"])[0]


def test_cluster_runs_on_every_rank_and_reports_them():
    row = run()
    assert row["gpus"] == 16 and row["nodes"] == 2
    assert row["samples_per_s_per_gpu"] == pytest.approx(row["samples_per_s"] / 16)
    assert 0 < row["exchange_share"] < 1


def test_more_network_bandwidth_is_never_slower():
    times = [run(sets=[f"hardware.cluster.nic_GBps={bw}"])["iter_ns_mean"]
             for bw in (5, 12, 25, 48, 400)]
    assert times == sorted(times, reverse=True) and times[0] > times[-1]


def test_dedup_on_is_never_slower():
    over = {"model": {"pooling": 16}, "trace": {"alpha": 1.2}}
    off = run(over)["iter_ns_mean"]
    on = run(deep_merge(over, {"design_params": {"cluster": {"dedup": True}}}))
    assert on["iter_ns_mean"] < off


def test_two_d_groups_add_the_replica_sync_every_n_batches():
    every = run({"design_params": {"cluster": {"shard_group": 8}}})["iter_ns_mean"]
    rarely = run({"design_params": {"cluster": {"shard_group": 8,
                                                "sync_every_batches": 4}}})["iter_ns_mean"]
    assert rarely < every


def test_cluster_is_registered_and_off_by_default():
    assert "cluster" in DESIGNS and not DESIGNS.get("cluster").default


def test_default_cluster_is_one_node():
    cfg = load_config({})
    assert cfg.hardware.cluster.nodes == 1
    assert dataclasses.asdict(cfg.hardware.cluster)["nic_GBps"] > 0


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("over,field", [
    ({"design_params": {"cluster": {"shard_group": 3}}}, "design_params.cluster.shard_group"),
    ({"design_params": {"cluster": {"placement": {"9": [0]}}}},
     "design_params.cluster.placement.9"),
    ({"design_params": {"cluster": {"placement": {"1": [16]}}}},
     "design_params.cluster.placement.1"),
    ({"model": {"tables": {"rows": 1_500_000_000, "dim": 128}}, "cache": {"capacity_rows": 100},
      "design_params": {"cluster": {"sharding": "row-wise"}}}, "hardware.cluster.nodes"),
])
def test_bad_cluster_names_the_key(over, field):
    with pytest.raises(UserError) as e:
        run(over)
    assert e.value.field == field


@pytest.mark.parametrize("key,value", [("nic_GBps", 0), ("nic_GBps", -5),
                                       ("net_latency_ns", -1), ("nodes", 0),
                                       ("nics_per_node", 0)])
def test_bad_network_figures_exit_2_naming_the_key(tmp_path, capsys, key, value):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["run", str(path), "-q", "--out", str(tmp_path / "o"),
                 "--set", f"hardware.cluster.{key}={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"hardware.cluster.{key}" in err


# -- placement spans, hybrid, the traced scope ---------------------------------------------------
def test_all_data_parallel_tables_exchange_nothing():
    """Every table replicated (hybrid, threshold above every table): no ids or rows cross,
    and the tables' gradients join the dense all-reduce."""
    row = run({"design_params": {"cluster": {"sharding": "hybrid", "dp_max_MiB": 1000.0}}})
    assert row["data_parallel_tables"] == 4
    assert row["alltoall_bytes_per_gpu"] == 0.0
    assert row["stage_output_dist_ns"] == row["stage_grad_dist_ns"] == 0.0


def test_hybrid_places_large_tables_on_one_node_each():
    from scratchpipe_sim.timing.designs.cluster import ClusterParams, cluster_layout

    cfg = cfg_of({"model": {"tables": {"count": 4, "rows": [10, 500_000, 500_000, 20],
                                       "dim": 32}}})
    layout = cluster_layout(cfg, ClusterParams(sharding="hybrid", dp_max_MiB=1.0), 16)
    assert layout.span == (0, 8, 8, 0)
    assert sorted(layout.start[1:3]) == [0, 8]  # one node each (least load first)


def test_unpooled_row_wise_rows_cross_once():
    """Closed form: an unpooled table row-wise over L ranks of one node sends b v (L-1)/L^2
    per rank (each row looked up by one rank), never the pooled reduce-scatter's b v (L-1)/L."""
    from scratchpipe_sim.timing.designs.cluster import Cluster

    cfg = cfg_of({"hardware": {"cluster": {"nodes": 1}}, "model": {"pooling_mode": "none"},
                  "design_params": {"cluster": {"sharding": "row-wise"}}})
    d = Cluster(cfg)
    L, b = 8, 64.0
    v = 4 * 32 * 4.0  # pooling 4 rows of dim 32 x 4 B per sample and table
    send, recv, intra = d.output_bytes(b, 1.0, 1.0)
    assert send == pytest.approx(4 * b * v * (L - 1) / L**2)
    assert recv == pytest.approx(4 * b / L * v * (1 - 1 / L))
    assert intra == 0.0


def test_shard_group_scope_prices_every_group_from_one():
    """trace_scope shard-group: the trace is one group's batch; the global batch is n / L
    of them (samples/s = B x n / L per iteration)."""
    row = run({"design_params": {"cluster": {"shard_group": 8,
                                             "trace_scope": "shard-group"}}})
    assert row["samples_per_s"] == pytest.approx(64 * 2 * 1e9 / row["iter_ns_mean"], rel=1e-9)


def test_placement_refuses_ranks_that_are_not_a_run():
    with pytest.raises(UserError) as e:
        run({"design_params": {"cluster": {"placement": {"1": [0, 2]}}}})
    assert e.value.field == "design_params.cluster.placement.1"


def test_cluster_points_load_and_refuse_a_repeated_id(tmp_path):
    from scratchpipe_sim.config.published_points import DATA_FILE, load_cluster_points

    ids = [p.id for p in load_cluster_points()]
    assert {"E3.6", "E3.7", "E3.13a", "E3.13b"} <= set(ids)
    data = yaml.safe_load(DATA_FILE.read_text())
    data["cluster_points"].append(dict(data["cluster_points"][0]))
    bad = tmp_path / "p.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as e:
        load_cluster_points(bad)
    assert e.value.field == f"cluster_points[{len(ids)}].id"


def test_cluster_point_embedding_ms_is_every_stage_but_the_mlp():
    from scratchpipe_sim.config.published_points import ClusterPoint
    from scratchpipe_sim.experiments import published_cluster as pc

    p = ClusterPoint(id="X", source="s", gpu="g", config=deep_merge(BASE, {}),
                     quantity="embedding_ms", measured=1.0, role="check", note="n")
    got = pc.run_point(p)
    row = simulate(load_config(pc.config_dict(p)), ["cluster"])[0]
    stages = [v for k, v in row.items() if k.startswith("stage_") and k.endswith("_ns")]
    assert got.predicted == pytest.approx((sum(stages) - row["stage_mlp_ns"]) / 1e6)
    assert got.factor == pytest.approx(got.predicted)


# -- per-rank caches over host memory -----------------------------------------------------------
@pytest.mark.parametrize("plan,dedup", [
    (RankPlan.of_owner(4, 4, (-1, -1, -1)), False),
    (RankPlan.of_owner(4, 2, (1, -1, 0)), True),
    (RankPlan(8, 8, (0, 4, 2), (0, 4, 1)), True)])
def test_rank_stream_holds_exactly_the_rank_s_model_parallel_lookups(plan, dedup):
    from scratchpipe_sim.timing.rank_streams import rank_stream

    trace = small_trace(seed=4)
    counts = rank_counts(trace, plan, dedup)
    seen = np.zeros((trace.num_batches, plan.ranks), np.int64)
    for r in range(plan.ranks):
        s = rank_stream(trace, plan, r, dedup)
        assert s.num_batches == trace.num_batches and s.batch_size == 1
        seen[:, r] = np.diff(s.batch_access_ptr())
        ids = np.concatenate([s.linear_batch(b)[0] for b in range(s.num_batches)])
        table = np.searchsorted(trace.table_offsets, ids, side="right") - 1
        assert all(plan.span[t] > 0 for t in table)
    oracle_rows = oracle(trace, plan, dedup)
    for b, (_routed, look, *_rest) in enumerate(oracle_rows):
        # every served lookup but the data-parallel tables' (kept in HBM, no cache)
        bt = trace.batch(b)
        B = bt.batch_size
        dp_on = [0] * plan.ranks
        for t in range(trace.num_tables):
            if plan.span[t] == 0:
                _ind, offs = bt.table(t)
                for s_ in range(B):
                    dp_on[s_ * plan.ranks // B] += int(offs[s_ + 1] - offs[s_])
        assert seen[b].tolist() == [x - d for x, d in zip(look, dp_on, strict=True)]
    assert counts.lookups.sum() >= seen.sum()


def test_rank_caches_price_misses_and_never_beat_all_hbm():
    """Shards in host DRAM behind a per-rank cache: misses are fetched, so no cache mode is
    faster than every shard in HBM; scratchpipe's fetch ahead of the batch hides more of it
    than on-demand lru-cache."""
    over = {"model": {"tables": {"count": 4, "rows": 20_000, "dim": 32}, "pooling": 8},
            "cache": {"capacity_rows": 1500}}
    hbm = run(over)
    rows = {mode: run(deep_merge(over, {"design_params": {"cluster": {"rank_cache": mode}}}))
            for mode in ("lru-cache", "lru-prefetch", "scratchpipe")}
    for r in rows.values():
        assert 0 < r["rank_cache_hit_ratio"] < 1
        assert r["iter_ns_mean"] >= hbm["iter_ns_mean"] * (1 - 1e-12)
    assert rows["lru-cache"]["iter_ns_mean"] > hbm["iter_ns_mean"]
    assert rows["lru-cache"]["stage_rank_fetch_ns"] > rows["lru-prefetch"]["stage_rank_fetch_ns"]
    assert rows["scratchpipe"]["stage_rank_fetch_ns"] <= rows["lru-prefetch"][
        "stage_rank_fetch_ns"]


def test_rank_caches_fit_a_model_larger_than_hbm():
    """A model that the cluster's HBM cannot hold prices with per-rank caches over host
    DRAM (16 GPUs of 256 KiB; four tables of 20,000 rows x 128 B: 10 MB)."""
    over = {"hardware": {"gpu": {"hbm_capacity_GiB": 1 / 4096}},
            "model": {"tables": {"count": 4, "rows": 20_000, "dim": 32}},
            "cache": {"capacity_rows": 300},
            "design_params": {"cluster": {"sharding": "row-wise"}}}
    with pytest.raises(UserError) as e:
        run(over)
    assert e.value.field == "hardware.cluster.nodes"
    row = run(deep_merge(over, {"design_params": {"cluster": {"rank_cache": "lru-cache"}}}))
    assert 0 < row["rank_cache_hit_ratio"] < 1


def test_dense_stamp_keys_of_large_tables_count_the_same(monkeypatch):
    """Tables above STAMP_ROWS are renumbered per batch for the stamps: same counts."""
    from scratchpipe_sim.timing import rank_streams

    trace = small_trace(seed=6)
    plan = RankPlan(8, 4, (0, 0, 1), (1, 2, 3))
    want = rank_counts(trace, plan, True)
    monkeypatch.setattr(rank_streams, "STAMP_ROWS", 30)
    got = rank_counts(trace, plan, True)
    for k in ("routed", "lookups", "unique", "ids_send", "ids_recv", "ids_recv_all"):
        assert (getattr(got, k) == getattr(want, k)).all()


def test_replays_forked_over_cores_equal_the_serial_ones(monkeypatch):
    """cached_ranks > 1: the ranks' replays in forked workers give the serial counts."""
    from scratchpipe_sim.timing.designs import cluster as cl

    over = {"model": {"tables": {"count": 4, "rows": 20_000, "dim": 32}, "pooling": 8},
            "cache": {"capacity_rows": 1500},
            "design_params": {"cluster": {"rank_cache": "lru-cache", "cached_ranks": 3}}}
    forked = run(over)
    monkeypatch.setattr(cl, "can_fork", lambda: False)
    serial = run(over)
    assert forked["iter_ns_mean"] == serial["iter_ns_mean"]
    assert forked["rank_cache_hit_ratio"] == serial["rank_cache_hit_ratio"]
    one = run(deep_merge(over, {"design_params": {"cluster": {"cached_ranks": 1}}}))
    assert serial["iter_ns_mean"] >= one["iter_ns_mean"]  # the max over more ranks


def test_more_gpus_in_a_node_at_a_fixed_global_batch_is_never_slower():
    """One node, global batch fixed, 8 tables table-wise: 2, 4, 8 GPUs never slower. Not
    true in general: an owner sends its tables' vectors of every sample not its own,
    b v (L-1)/L a table, which grows with L once a rank owns one table (4 tables on 8 GPUs);
    row-wise every rank sends that for every table. Nor across nodes: the second node puts
    (n-G)/(n-1) of the all-to-all on one NIC a GPU, ~9x slower than NVLink, so 16 GPUs on 2
    nodes can be slower than 8 on one."""
    times = [run({"hardware": {"cluster": {"nodes": 1}, "interconnect": {"gpus_per_node": g}},
                  "model": {"batch_size": 2048, "tables": {"count": 8, "rows": 500,
                                                           "dim": 32}},
                  "design_params": {"cluster": {"sharding": "table-wise"}}})["iter_ns_mean"]
             for g in (2, 4, 8)]
    assert times == sorted(times, reverse=True)


@pytest.mark.parametrize("key,value", [("rank_cache", "fifo"), ("trace_scope", "all"),
                                       ("dp_max_MiB", -1), ("cached_ranks", 0),
                                       ("sharding", "diagonal"), ("sequence_copies", "fbgemm"),
                                       ("unpooled_exchange", "mean")])
def test_bad_cluster_params_exit_2_naming_the_key(tmp_path, capsys, key, value):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["run", str(path), "-q", "--out", str(tmp_path / "o"),
                 "--set", f"design_params.cluster.{key}={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"design_params.cluster.{key}" in err


def test_one_node_iteration_equals_multi_gpu_table_wise():
    """One node, table-wise: the cluster prices every stage as multi-gpu does. Row-wise it
    takes the most loaded rank's lookups where multi-gpu takes an even 1/n share, so only
    the lookup stages may be (never less) slower."""
    for sharding in ("table-wise", "row-wise"):
        cfg = cfg_of({"hardware": {"cluster": {"nodes": 1}},
                      "design_params": {"cluster": {"sharding": sharding},
                                        "multi-gpu": {"sharding": sharding, "gpus": 8}},
                      "designs": ["cluster", "multi-gpu"]})
        cl, mg = simulate(cfg, ["cluster", "multi-gpu"])
        stages = [k for k in mg if k.startswith("stage_") and k.endswith("_ns")]
        for k in stages:
            if sharding == "table-wise" or k not in ("stage_emb_forward_ns",
                                                     "stage_emb_backward_ns"):
                assert cl[k] == pytest.approx(mg[k], rel=1e-12), k
            else:
                assert cl[k] >= mg[k] * (1 - 1e-12), k


def test_sensitivity_prices_the_cluster_with_its_own_columns():
    """A band of the cluster design: sensitivity's pricer adds the design's per-rank
    columns (`trace_columns`) as `run` does (it once priced without them: MissingColumn),
    and its nominal equals the run's iteration time."""
    from scratchpipe_sim.experiments.sensitivity_analysis import run_sensitivity

    cfg = cfg_of()
    res = run_sensitivity(cfg, ["cluster"], samples=2, seed=1)
    assert res.nominal["cluster"] > 0
    row = simulate(cfg, ["cluster"])[0]
    hybrid = simulate(cfg, ["hybrid"])[0]
    assert res.nominal["cluster"] == pytest.approx(
        hybrid["iter_ns_mean"] / row["iter_ns_mean"], rel=1e-12)
