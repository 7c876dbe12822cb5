"""TorchRec's copies of unpooled rows around the cluster's exchange
(`timing/sequence_copies.py`, `design_params.cluster.sequence_copies`): closed forms, growth
with the ids, HBM pricing in the design, and nothing moved where they do not apply."""

from __future__ import annotations

import math

import pytest
from small_configs import off_chip

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.designs.cluster import Cluster
from scratchpipe_sim.timing.rank_streams import rank_counts
from scratchpipe_sim.timing.runner import build_trace
from scratchpipe_sim.timing.sequence_copies import sequence_copies

BASE = {
    "hardware": deep_merge(off_chip("dgx-h100-cluster"), {"cluster": {"nodes": 1}}),
    "model": {"tables": {"count": 4, "rows": 500, "dim": 32}, "pooling": 4, "batch_size": 64,
              "pooling_mode": "none", "num_batches": 3, "warmup_batches": 1,
              "bottom_mlp": [13, 16], "interaction": "cat", "top_mlp": None},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "design_params": {"cluster": {"sharding": "row-wise", "pipeline": "none"}},
    "designs": ["cluster"],
    "seed": 5,
}


def cfg_of(over=None):
    return load_config(deep_merge(BASE, over or {}))


def run(over=None):
    return simulate(cfg_of(over), ["cluster"])[0]


NONE = {"design_params": {"cluster": {"sequence_copies": "none"}}}
DEDUP = {"design_params": {"cluster": {"dedup": True}}}


# -- closed forms ------------------------------------------------------------------------------
def test_copies_without_dedup_are_six_looked_and_eight_full_passes():
    """permute 2 Lb, unbucket 2 F; split 2 F, unbucket's index_add_ 4 F, permute 2 Lb and
    the gradient division 2 Lb: 6 Lb + 8 F, no sort."""
    c = sequence_copies(looked_bytes=3.0e6, full_bytes=2.0e6, dedup_scale=1.0,
                        own_ids=1000.0, dedup=False)
    assert c.forward_bytes == 2 * 3.0e6 + 2 * 2.0e6
    assert c.backward_bytes == 4 * 3.0e6 + 6 * 2.0e6
    assert c.total_bytes == 6 * 3.0e6 + 8 * 2.0e6
    assert c.dedup_ids == 0.0


def test_copies_with_dedup_add_the_expand_and_its_backward():
    """S = F x scale: forward 2 Lb + 2 S + (S + F), backward 4 Lb + 4 S + 2 F + (3 S + F):
    6 Lb + 10 S + 4 F, and the rank's own ids sorted."""
    Lb, F, s = 1.0e6, 4.0e6, 0.25
    S = F * s
    c = sequence_copies(Lb, F, s, own_ids=5000.0, dedup=True)
    assert c.forward_bytes == pytest.approx(2 * Lb + 3 * S + F, rel=1e-15)
    assert c.backward_bytes == pytest.approx(4 * Lb + 7 * S + 3 * F, rel=1e-15)
    assert c.total_bytes == pytest.approx(6 * Lb + 10 * S + 4 * F, rel=1e-15)
    assert c.dedup_ids == 5000.0


@pytest.mark.parametrize("dedup,scale", [(False, 1.0), (True, 0.3), (True, 1.0)])
def test_copies_grow_with_the_ids(dedup, scale):
    """More ids (looked-up rows or own rows) never copy fewer bytes; dedup's copies grow
    with the ids before dedup (F) at a fixed ratio too."""
    grid = [k * 1.0e5 for k in range(1, 6)]
    for Lb in grid:
        totals = [sequence_copies(Lb, F, scale, F / 512, dedup).total_bytes for F in grid]
        assert totals == sorted(totals) and totals[0] < totals[-1]
    for F in grid:
        totals = [sequence_copies(Lb, F, scale, F / 512, dedup).total_bytes for Lb in grid]
        assert totals == sorted(totals) and totals[0] < totals[-1]


def test_dedup_without_duplicates_copies_more():
    """Nothing to remove (S = F): dedup adds the expand (S + F) and its backward (3 S + F),
    6 F more than without, so it is slower, not faster: TorchRec's dedup has a cost."""
    off = sequence_copies(1.0e6, 1.0e6, 1.0, 0.0, False).total_bytes
    on = sequence_copies(1.0e6, 1.0e6, 1.0, 0.0, True).total_bytes
    assert on == off + 6 * 1.0e6


# -- in the design -------------------------------------------------------------------------------
def test_design_prices_the_forward_copies_on_hbm():
    """pipeline none, dedup off: the forward stage grows by the copies' bytes at hbm_GBps x
    stream_efficiency plus one HBM latency, from the rank's own counts (the most loaded
    rank's lookups, B / n samples x a sample's unpooled bytes)."""
    cfg = cfg_of()
    d = Cluster(cfg)
    trace = build_trace(cfg)
    counts = rank_counts(trace, d.plan, False)
    gpu = cfg.hardware.gpu
    n, B = d.ranks, cfg.model.batch_size
    wu, nb = cfg.model.warmup_batches, cfg.model.num_batches
    first = trace.num_batches - nb  # the trace's cache warm-up prefix comes first
    extra = []
    for b in range(first + wu, first + nb):
        look = float(counts.lookups[b].max())
        c = d.sequence_copies(B / n, look, 1.0, 1.0)
        assert c.forward_bytes == 2 * look * 32 * 4 + 2 * (B / n) * 4 * 4 * 32 * 4
        extra.append(gpu.hbm_latency_ns + c.forward_bytes / (gpu.hbm_GBps
                                                             * gpu.stream_efficiency))
    on, off = run(), run(NONE)
    assert on["stage_emb_forward_ns"] - off["stage_emb_forward_ns"] == pytest.approx(
        sum(extra) / len(extra), rel=1e-9)
    # the backward's copies run beside the dense all-reduce, which is longer here
    assert on["stage_emb_backward_ns"] >= off["stage_emb_backward_ns"]
    for k in ("stage_output_dist_ns", "stage_grad_dist_ns"):
        assert on[k] == pytest.approx(off[k], rel=1e-12)


def test_dedup_prices_its_sort_then_the_copies():
    """With dedup the forward first sorts the rank's own unpooled ids (a radix sort of
    int64 keys over log2(rows) + 1 bits with int64 values at aggregate_efficiency, then
    four index passes), and its copies use dedup's ratio of ids: each step one HBM latency
    plus its bytes alone on HBM."""
    cfg = cfg_of(DEDUP)
    d = Cluster(cfg)
    trace = build_trace(cfg)
    counts = rank_counts(trace, d.plan, True)
    gpu = cfg.hardware.gpu
    n, B, ib = d.ranks, cfg.model.batch_size, cfg.model.index_bytes
    wu, nb = cfg.model.warmup_batches, cfg.model.num_batches
    bits = int(math.log2(cfg.total_rows + 1)) + 1
    first = trace.num_batches - nb  # the trace's cache warm-up prefix comes first
    extra = []
    for b in range(first + wu, first + nb):
        c = d.sequence_copies(B / n, float(counts.lookups[b].max()),
                              float(counts.ids_recv[b].sum()),
                              float(counts.ids_recv_all[b].sum()))
        ids = B / n * 4 * 4  # 4 tables x pooling 4
        assert c.dedup_ids == ids
        sort = ids * (ib + math.ceil(bits / 8) * 2 * (ib + ib))
        extra.append(3 * gpu.hbm_latency_ns
                     + sort / (gpu.hbm_GBps * gpu.aggregate_efficiency)
                     + ids * 4 * ib / gpu.hbm_GBps
                     + c.forward_bytes / (gpu.hbm_GBps * gpu.stream_efficiency))
    on, off = run(DEDUP), run(deep_merge(DEDUP, NONE))
    assert on["stage_emb_forward_ns"] - off["stage_emb_forward_ns"] == pytest.approx(
        sum(extra) / len(extra), rel=1e-9)


def test_iteration_grows_with_the_ids_per_sample():
    """More ids a sample (pooling), with or without dedup: never a faster iteration."""
    for over in ({}, DEDUP):
        times = [run(deep_merge(over, {"model": {"pooling": k}}))["iter_ns_mean"]
                 for k in (2, 4, 8)]
        assert times == sorted(times) and times[0] < times[-1]


def test_nothing_moves_where_the_copies_do_not_apply():
    """Pooled tables (the study's, MLPerf's) and `sequence_copies: none`: no copy priced,
    the same numbers bit for bit as the copies switched off."""
    pooled = {"model": {"pooling_mode": "sum"}}
    a, b = run(pooled), run(deep_merge(pooled, NONE))
    for k, v in a.items():
        if isinstance(v, float) and not k.endswith("wall_s"):
            assert v == b[k], k
    assert Cluster(cfg_of(NONE)).sequence_copies(8.0, 100.0, 1.0, 1.0) is None
    assert Cluster(cfg_of(pooled)).sequence_copies(8.0, 100.0, 1.0, 1.0) is None


# -- the busiest rank's unpooled rows, counted ---------------------------------------------------
MIXED = {"model": {"tables": {"count": 4, "rows": [3, 500, 40, 900], "dim": [32, 16, 32, 8]},
                   "pooling_mode": ["none", "sum", "none", "none"],
                   "top_mlp": None}}


def exchange_oracle(cfg, dedup):
    """Per trace batch, per rank: the unpooled bytes it sends (rows it serves for other
    ranks) and receives (its own ids served elsewhere), one lookup at a time."""
    d = Cluster(cfg)
    trace = build_trace(cfg)
    n, L = d.plan.ranks, d.plan.group
    rows = cfg.model.rows_per_table
    v = d.unpooled_row_bytes()
    out = []
    for b in range(trace.num_batches):
        batch = trace.batch(b)
        B, offs, ind = batch.batch_size, batch.offsets, batch.indices
        send, recv = [0.0] * n, [0.0] * n
        for t in range(trace.num_tables):
            k, s0 = d.plan.span[t], d.plan.start[t]
            seen = set()
            for i in range(B):
                src = i * n // B
                for j in range(offs[t * B + i], offs[t * B + i + 1]):
                    row = int(ind[j])
                    if k == 0 or (dedup and (src, row) in seen):
                        continue
                    seen.add((src, row))
                    dst = (src // L) * L + s0 + (row // math.ceil(rows[t] / k) if k > 1 else 0)
                    if dst != src:
                        send[dst] += v[t]
                        recv[src] += v[t]
        out.append((max(send), max(recv)))
    return out


@pytest.mark.parametrize("dedup", [False, True])
def test_unpooled_exchange_is_the_busiest_rank_s_counted_rows(dedup):
    """Tables of three row sizes, one pooled: the design's per-batch unpooled bytes are the
    per-lookup oracle's busiest rank's (send and receive), deduplicated per source."""
    cfg = cfg_of(deep_merge(MIXED, {"design_params": {"cluster": {"dedup": dedup}}}))
    d = Cluster(cfg)
    assert d.unpooled_row_bytes() == [128.0, 0.0, 128.0, 32.0]
    trace = build_trace(cfg)
    cols = d.unpooled_exchange(trace, rank_counts(trace, d.plan, dedup))
    want = exchange_oracle(cfg, dedup)
    assert cols["rank_unpooled_send"].tolist() == [s for s, _ in want]
    assert cols["rank_unpooled_recv"].tolist() == [r for _, r in want]


def test_a_small_row_wise_table_loads_its_first_ranks_without_dedup():
    """A 3-row table row-wise over 8 ranks lives on ranks 0-2: without dedup every one of
    its ids goes there, so the busiest rank sends more than the even spread
    (`output_bytes` without counts) and the output all-to-all is priced at it; dedup
    leaves each source 3 ids of it at most."""
    over = {"model": {"tables": {"count": 2, "rows": [3, 5000]}, "pooling": 8}}
    cfg = cfg_of(over)
    d = Cluster(cfg)
    trace = build_trace(cfg)
    cols = d.unpooled_exchange(trace, rank_counts(trace, d.plan, False))
    B = cfg.model.batch_size
    even = d.output_bytes(float(B), 1.0, 1.0)[0]
    assert cols["rank_unpooled_send"].min() > 1.2 * even
    ic = cfg.hardware.interconnect
    nb, wu = cfg.model.num_batches, cfg.model.warmup_batches
    first = trace.num_batches - nb  # the trace's cache warm-up prefix comes first
    want = [ic.nvlink_latency_ns + max(cols["rank_unpooled_send"][b],
                                       cols["rank_unpooled_recv"][b])
            / (ic.nvlink_GBps * ic.alltoall_efficiency) for b in range(first + wu, first + nb)]
    skew = run(over)["stage_output_dist_ns"]
    assert skew == pytest.approx(sum(want) / len(want), rel=1e-9)
    assert skew > run(deep_merge(over, DEDUP))["stage_output_dist_ns"]
    # unpooled_exchange even: the closed form's even spread, as before the counts
    evenly = run(deep_merge(over, {"design_params": {"cluster": {
        "unpooled_exchange": "even"}}}))["stage_output_dist_ns"]
    assert evenly == pytest.approx(ic.nvlink_latency_ns + max(d.output_bytes(
        float(B), 1.0, 1.0)[:2]) / (ic.nvlink_GBps * ic.alltoall_efficiency), rel=1e-9)
    assert evenly < skew


def test_pooled_tables_count_no_unpooled_rows():
    cfg = cfg_of({"model": {"pooling_mode": "sum"}})
    d = Cluster(cfg)
    trace = build_trace(cfg)
    assert d.unpooled_exchange(trace, rank_counts(trace, d.plan, False)) == {}
