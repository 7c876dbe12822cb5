"""Column-wise sharding in the cluster (TorchRec's CW and grid): TorchRec's block rule, every
lookup on every column shard against a per-lookup oracle, the output all-to-all and HBM per
rank against hand formulas, one column shard equal to table-wise, monotone where it holds."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from rank_count_checks import assert_counts_match
from small_configs import one_node_two_tables

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.designs.cluster import Cluster
from scratchpipe_sim.timing.placement import column_block, column_shard_bytes, table_bytes
from scratchpipe_sim.timing.rank_streams import RankPlan, rank_counts, rank_stream
from scratchpipe_sim.traces.csr_trace import Trace

BASE = one_node_two_tables()


def cfg_of(cluster=None, over=None):
    return load_config(deep_merge(deep_merge(BASE, over or {}),
                                  {"design_params": {"cluster": cluster or {}}}))


def design(cluster=None, over=None) -> Cluster:
    return DESIGNS.get("cluster")(cfg_of(cluster, over))


def run(cluster=None, over=None) -> dict:
    row = simulate(cfg_of(cluster, over), ["cluster"], replay_cache=False)[0]
    return {k: v for k, v in row.items() if not k.endswith("_wall_s")}  # timings: not model


# -- TorchRec's block rule ----------------------------------------------------------------------
@pytest.mark.parametrize("dim,min_width,block", [
    (128, 128, 128),  # MIN_CW_DIM on a 128-wide table: one shard
    (256, 128, 128), (512, 128, 128), (384, 100, 128),
    (96, 128, 96),  # narrower than the minimum: the whole dim
    (120, 32, 40),  # 40 divides 120 and is a multiple of 4
    (90, 30, 90),  # 30 and 45 divide 90 but are no multiples of 4: the whole dim
    (128, 32, 32), (64, 4, 4)])
def test_column_block_is_torchrecs_find_base_dim(dim, min_width, block):
    assert column_block(dim, min_width) == block


def test_column_wise_places_each_tables_slices_on_the_least_loaded_run():
    d = design({"sharding": "column-wise", "column_shard_dim": 32})
    assert (d.layout.start, d.layout.span, d.layout.cols) == ((0, 4), (4, 4), (4, 4))
    d = design({"sharding": "column-wise", "column_shard_dim": 64})  # 2 slices a table
    assert (d.layout.start, d.layout.span, d.layout.cols) == ((0, 2), (2, 2), (2, 2))
    # placement's table first: every run of 4 meets it, so the first (ties: lowest rank);
    # a slice is 400 rows x 32 x 4 B
    d = design({"sharding": "column-wise", "column_shard_dim": 32,
                "placement": {"0": [2, 3, 4, 5]}})
    assert d.layout.start == (2, 0)
    assert d.layout.used_bytes == (51200.0,) * 2 + (102400.0,) * 2 + (51200.0,) * 2 + (0.0,) * 2


def test_defaults_leave_columns_alone():
    d = design()
    p = d.params
    assert (p.sharding, p.column_shard_dim, p.columns) == ("auto", 128, None)
    assert d.layout.cols == () and d.plan.cols == () and d.plan.split() is d.plan


# -- per-rank streams: every lookup on every column shard -------------------------------------
def small_trace(seed=4, B=8, rows=(40, 9, 100), batches=3):
    rng = np.random.default_rng(seed)
    idx, offs, bounds = [], [0], [0]
    for _ in range(batches):
        for t in range(len(rows)):
            for _s in range(B):
                idx.extend(int(x) for x in rng.integers(0, rows[t], size=int(rng.integers(0, 5))))
                offs.append(len(idx))
        bounds.append(len(offs) - 1)
    return Trace(np.array(rows, np.int64), np.array(idx, np.int64), np.array(offs, np.int64),
                 np.array(bounds, np.int64), B)


def oracle(trace, ranks, group, start, span, cols, dedup, at=None):
    """Per lookup, in Python, written from TorchRec's semantics: a table of c column slices
    sends each lookup to every slice (slice i on the span's i-th run of span / c ranks, or
    from rank at[t][i], row-wise over them), each slice a table of its own for dedup and
    unique rows, also where two slices share a rank. Per batch the per-rank counts, and per
    (rank, table) the ids each rank serves."""
    n, L = ranks, group
    counts, served = [], Counter()
    for b in range(trace.num_batches):
        bt = trace.batch(b)
        B = bt.batch_size
        routed, look, sent, recv, uniq, recv_all = ([0] * n for _ in range(6))
        pairs, rows_on = set(), set()
        for t in range(trace.num_tables):
            ind, offs = bt.table(t)
            rows = int(trace.table_rows[t])
            j = span[t] // cols[t]
            for s in range(B):
                src = s * n // B
                for row in (int(x) for x in ind[offs[s]:offs[s + 1]]):
                    for i in range(cols[t]):
                        block = math.ceil(rows / j)
                        first = at[t][i] if at else start[t] + i * j
                        dst = (src // L) * L + first + row // block
                        routed[dst] += 1
                        recv_all[dst] += dst != src
                        if (dst, t, i, row) not in rows_on:
                            rows_on.add((dst, t, i, row))
                            uniq[dst] += 1
                        if dedup and (src, t, i, row) in pairs:
                            continue
                        pairs.add((src, t, i, row))
                        look[dst] += 1
                        served[(b, dst, t, row)] += 1
                        if dst != src:
                            sent[src] += 1
                            recv[dst] += 1
        counts.append((routed, look, sent, recv, uniq, recv_all))
    return counts, served


PLANS = [  # ranks, group, start, span, cols
    (4, 4, (0, 0, 1), (4, 1, 2), (4, 1, 2)),  # column-wise over 4, table-wise, CW over 2
    (8, 4, (0, 2, 0), (2, 2, 4), (2, 1, 2)),  # 2D groups: CW, row-wise, grid 2 x 2
    (8, 8, (0, 3, 4), (3, 1, 4), (3, 1, 1)),  # CW over 3 ranks, table-wise, row-wise
]


#: slices on named ranks (TorchRec's column_wise(ranks=[...]), which "can reuse ranks"):
#: ranks, group, start, span, cols, at (each table's slices' first ranks)
SCATTERED = [
    (4, 4, (0, 0, 1), (3, 1, 2), (3, 1, 2), ((2, 0, 2), (1,), (3, 0))),  # a rank twice
    (8, 4, (0, 2, 0), (4, 2, 4), (4, 1, 2), ((3, 3, 3, 3), (2,), (2, 0))),  # 4 on one rank
    (8, 8, (0, 3, 4), (6, 1, 4), (3, 1, 1), ((6, 0, 6), (3,), (4,))),  # a grid: j = 2
    (6, 6, (0, 0, 1), (5, 1, 2), (5, 1, 2), ((5, 1, 3, 1, 5), (0,), (4, 4))),
]


@pytest.mark.parametrize("ranks,group,start,span,cols,at",
                         [(*p, None) for p in PLANS] + SCATTERED)
@pytest.mark.parametrize("dedup", [False, True])
def test_column_shards_match_a_per_lookup_oracle(ranks, group, start, span, cols, at, dedup):
    trace = small_trace()
    plan = RankPlan(ranks, group, start, span, cols, at or ())
    got = rank_counts(trace, plan, dedup)
    want, served = oracle(trace, ranks, group, start, span, cols, dedup, at)
    assert_counts_match(got, want)
    for rank in range(ranks):  # what a rank's cache sees: the same ids, slice by slice
        stream = rank_stream(trace, plan, rank, dedup)
        seen = Counter()
        slice_table = [t for t, c in enumerate(cols) for _ in range(c)]
        for b in range(stream.num_batches):
            bt = stream.batch(b)
            for v in range(stream.num_tables):
                ind, _ = bt.table(v)
                for row in ind:
                    seen[(b, rank, slice_table[v], int(row))] += 1
        assert seen == Counter({k: v for k, v in served.items() if k[1] == rank})


def test_every_lookup_lands_on_every_column_shard():
    """The issue's count: with every table column-wise over the L = n ranks, each rank
    serves every lookup of the batch once per slice it holds (all of them)."""
    trace = small_trace(seed=8, batches=4)
    plan = RankPlan(4, 4, (0, 0, 0), (4, 4, 4), (4, 4, 4))
    got = rank_counts(trace, plan, False)
    per_batch = np.diff(trace.batch_access_ptr())
    for g in range(4):
        assert got.routed[:, g].tolist() == per_batch.tolist()
    assert got.routed.sum(axis=1).tolist() == (4 * per_batch).tolist()
    for g in range(4):  # and its stream is the global one: slice g of table t is
        s = rank_stream(trace, plan, g, False)  # the stream's table 4 t + g
        assert s.num_accesses == trace.num_accesses
        for b in range(trace.num_batches):
            for t in range(3):
                assert (s.batch(b).table(4 * t + g)[0].tolist()
                        == trace.batch(b).table(t)[0].tolist())


# -- slices on named ranks, a rank holding several ------------------------------------------------
def test_placement_names_each_slices_rank_repeats_allowed():
    """TorchRec's column_wise(ranks=[5, 5, 1, 6]): slice i on the i-th rank listed, rank 5
    holding two of table 0's four 32-column slices (2 x 400 x 128 B) and counted twice."""
    d = design({"columns": {"0": 4}, "column_shard_dim": 32,
                "placement": {"0": [5, 5, 1, 6], "1": [7]}})
    assert d.layout.at == ((5, 5, 1, 6), (7,)) and d.plan.at == d.layout.at
    assert [a for t, a, _ in d.plan.slices() if t == 0] == [5, 5, 1, 6]
    slice_ = 400 * 128.0
    assert d.layout.used_bytes == (0.0, slice_, 0.0, 0.0, 0.0, 2 * slice_, slice_,
                                   table_bytes(d.cfg)[1])
    assert d.holds[:, 0].tolist() == [0, 1, 0, 0, 0, 2, 1, 0]
    lf = d.cfg.cache.load_factor  # its cache: every row of both slices
    assert d.rank_cache_capacity(5) == math.ceil(lf * 800)
    # a run of consecutive distinct ranks, in any order, is the consecutive layout
    run_ = design({"columns": {"0": 4}, "column_shard_dim": 32,
                   "placement": {"0": [3, 1, 2, 0], "1": [7]}})
    assert run_.layout.at == () and run_.layout.start == (0, 7)


def test_output_alltoall_of_a_reused_rank_carries_each_slice():
    """One table of v = 512 B in 4 slices on ranks [3, 3, 0, 3] of L = 8 (TorchRec's output
    dist sums the local columns of every shard a rank holds): rank 3 sends its 3 slices'
    B x 3v/4 x (L-1)/L; a rank holding none receives the whole vector, B / L x v. In
    groups of L = 2 on [1, 1, 0, 1] rank 0 holds one slice and receives the three it lacks,
    B / 2 x 3v/4, the most (rank 1 receives one)."""
    d = design({"columns": {"0": 4}, "column_shard_dim": 32,
                "placement": {"0": [3, 3, 0, 3], "1": [7]}},
               {"model": {"tables": {"count": 2, "dim": [128, 4]}}})
    d.pooled_out = np.array([512.0, 0.0])
    B, L, v = 64.0, 8, 512.0
    send, recv, intra = d.output_bytes(B, 1.0, 1.0)
    assert send == pytest.approx(B * 3 * v / 4 * (L - 1) / L, rel=1e-12)
    assert recv == pytest.approx(B / L * v, rel=1e-12)
    assert intra == 0.0
    # shard groups of 2, slices on [1, 1, 0, 1]: rank 0 receives the three it lacks
    d = design({"columns": {"0": 4}, "column_shard_dim": 32, "shard_group": 2,
                "placement": {"0": [1, 1, 0, 1], "1": [0]}},
               {"model": {"tables": {"count": 2, "dim": [128, 4]}}})
    d.pooled_out = np.array([512.0, 0.0])
    send, recv, _ = d.output_bytes(B, 1.0, 1.0)
    assert send == pytest.approx(B * 3 * v / 4 / 2, rel=1e-12)
    assert recv == pytest.approx(B / 2 * 3 * v / 4, rel=1e-12)


def test_more_slices_than_ranks_with_placement_every_lookup_twice_a_rank():
    """16 slices of 8 columns on the 8 ranks, each twice (TorchRec's CW over reused ranks):
    each rank serves every lookup of table 0 twice a batch, and holds two slices."""
    cluster = {"columns": {"0": 16}, "column_shard_dim": 8,
               "placement": {"0": list(range(8)) * 2, "1": [0]}}
    d = design(cluster)
    assert d.layout.used_bytes[1:] == (2 * 400 * 32.0,) * 7
    trace = small_trace(rows=(400, 400), seed=5)
    got = rank_counts(trace, d.plan, False)
    per_batch = [len(trace.batch(b).table(0)[0]) for b in range(trace.num_batches)]
    for g in range(1, 8):
        assert got.routed[:, g].tolist() == [2 * x for x in per_batch]
    row = run(cluster)
    assert row["shard_GiB_per_gpu"] * 2**30 == pytest.approx(2 * 400 * 32 + 400 * 512)


@pytest.mark.parametrize("cluster,field,words", [
    ({"columns": {"0": 4}, "placement": {"0": [0, 1, 8, 2]}},
     "design_params.cluster.placement.0", "rank 8 is beyond the shard group's 8 ranks"),
    ({"columns": {"0": 4}, "placement": {"0": [0, 0, 1]}},
     "design_params.cluster.placement.0", "expected a multiple of 4 ranks"),
    ({"columns": {"0": 2}, "placement": {"0": [0, 2, 4, 6]}},
     "design_params.cluster.placement.0", "slice 0 of table 0 on ranks [0, 2]"),
    ({"columns": {"0": 2}, "placement": {"0": [4, 5, 1, 0]}},
     "design_params.cluster.placement.0", "expected 2 consecutive ascending ranks"),
    ({"placement": {"0": [3, 3]}}, "design_params.cluster.placement.0",
     "expected distinct ranks"),
    ({"placement": {"0": []}}, "design_params.cluster.placement.0", "no ranks"),
    ({"columns": {"0": 16}, "column_shard_dim": 8}, "design_params.cluster.columns.0",
     "or `placement` naming ranks"),
])
def test_bad_slice_ranks_name_the_key(cluster, field, words):
    cluster = {"column_shard_dim": 32, **cluster}
    with pytest.raises(UserError) as e:
        design(cluster)
    assert e.value.field == field and words in e.value.message


def test_two_slices_on_one_rank_that_cannot_fit_are_named():
    """51 GB slices: one a rank fits an 80 GB GPU, two on rank 0 do not."""
    big = {"model": {"tables": {"rows": 400_000_000}}}
    design({"columns": {"0": 4}, "column_shard_dim": 32,
            "placement": {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}}, big)
    with pytest.raises(UserError) as e:
        design({"columns": {"0": 4}, "column_shard_dim": 32,
                "placement": {"0": [0, 0, 1, 2], "1": [4, 5, 6, 7]}}, big)
    assert e.value.field == "design_params.cluster.placement"
    assert "rank 0 holds" in e.value.message


# -- closed forms: output all-to-all and HBM per rank --------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_output_alltoall_of_a_column_wise_table_is_the_hand_formula(k):
    """One table of v = 512 B (dim 128, fp32) on k of L = 8 ranks, CW: a slice's rank sends
    B x v / k x (L-1)/L; a rank without a slice receives B / L x v (k slices of v / k), one
    with a slice B / L x v x (k-1)/k."""
    d = design({"columns": {"0": k}, "column_shard_dim": 16,
                "placement": {"0": list(range(k)), "1": [7]}},
               {"model": {"tables": {"count": 2, "dim": [128, 4]}}})
    d.pooled_out = np.array([512.0, 0.0])  # table 1 out of the exchange: table 0 alone
    B, L, v = 64.0, 8, 512.0
    send, recv, intra = d.output_bytes(B, 1.0, 1.0)
    assert send == pytest.approx(B * v / k * (L - 1) / L, rel=1e-12)
    assert recv == pytest.approx(B / L * v if k < L else B / L * v * (k - 1) / k, rel=1e-12)
    assert intra == 0.0


def test_grid_shard_output_is_the_row_wise_slices():
    """Two nodes of 8, one table of 2 column slices each row-wise over one node (TorchRec's
    grid): a node reduces its slice over NVLink (B x v/2 x 7/8 per rank), then each rank
    sends B x v/2 x 15 / (16 x 8); a rank receives v/2 from each slice for its B/16 samples,
    less the 1/8 of its own slice it holds."""
    d = design({"columns": {"0": 2}, "column_shard_dim": 16,
                "placement": {"0": list(range(16))}},
               {"hardware": {"cluster": {"nodes": 2}},
                "model": {"tables": {"count": 1}}})
    B, L, v = 64.0, 16, 512.0
    send, recv, intra = d.output_bytes(B, 1.0, 1.0)
    assert bool(d.node_local[0])
    assert intra == pytest.approx(B * v / 2 * 7 / 8)
    assert send == pytest.approx(B * v / 2 * (L - 1) / (L * 8))
    assert recv == pytest.approx(B / L * v / 2 * (2 - 1 / 8))


@pytest.mark.parametrize("optimizer,state", [("sgd", 0), ("adagrad", 4 * 32),
                                             ("rowwise-adagrad", 4), ("adam", 8 * 32)])
def test_hbm_of_a_column_shard_is_every_row_of_its_slice(optimizer, state):
    """dim 128 in 4 slices of 32 columns: rows x (32 x 4 B + the state of a 32-wide row).
    Element-wise state splits with the columns (the slices add up to the table);
    rowwise-adagrad's per-row fp32 is on every slice (4 x rows x 4 B, not 1 x)."""
    d = design({"columns": {"0": 4, "1": 4}, "column_shard_dim": 32,
                "placement": {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}},
               {"model": {"optimizer": optimizer}})
    rows = 400
    shard = rows * (32 * 4 + state)
    assert d.layout.used_bytes == (shard,) * 8
    whole = table_bytes(d.cfg)[0]
    if optimizer == "rowwise-adagrad":
        assert 4 * shard == whole + 3 * rows * 4
    else:
        assert 4 * shard == whole
    assert column_shard_bytes(d.cfg, 0, 1) == whole
    assert d.rank_R == 32 * 4 + state  # a rank's cached row: its slice's
    lf = d.cfg.cache.load_factor  # of every row of the slice, not rows / 4
    assert d.rank_cache_capacity(0) == math.ceil(lf * rows) and lf * rows / 4 < lf * rows


# -- one column shard is table-wise; the run end to end -------------------------------------------
def test_one_column_shard_equals_table_wise_exactly():
    tw = run({"placement": {"0": [2], "1": [5]}})
    cw1 = run({"placement": {"0": [2], "1": [5]}, "columns": {"0": 1, "1": 1}})
    assert cw1 == tw
    # sharding column-wise with a block of the whole dim: the table-wise placement itself
    assert (run({"sharding": "column-wise", "column_shard_dim": 128})
            == run({"sharding": "table-wise"}))


def spy_row_bytes(monkeypatch) -> dict:
    """The bytes (r, R) the cluster prices its lookups and unique rows at, as it runs."""
    seen: dict = {}
    orig = Cluster.run

    def spy(self, m, w):
        c = self.columns(w)
        seen.update(r=c.r, R=c.R)
        yield from orig(self, m, w)

    monkeypatch.setattr(Cluster, "run", spy)
    return seen


def test_column_wise_prices_the_slices_row_bytes(monkeypatch):
    """Every table in 4 slices of 32 fp32 columns: the critical rank's lookups and unique
    rows are priced at 128 B, not the table's 512 B."""
    seen = spy_row_bytes(monkeypatch)
    row = run({"sharding": "column-wise", "column_shard_dim": 32})
    assert seen["r"] == pytest.approx([128.0] * 5)
    assert seen["R"] == pytest.approx([128.0] * 5)
    assert row["shard_GiB_per_gpu"] * 2**30 == pytest.approx(400 * 128)  # one slice a rank


def test_slices_of_two_widths_price_the_busiest_ranks_bytes(monkeypatch):
    """Rank 0 holds a 32-column slice of table 0 (128 B a lookup) and a 64-column slice of
    table 1 (256 B): each table's 64 x 4 = 256 lookups a batch reach it, 512 lookups of
    256 x 384 B in all, its bytes over the largest count: 192 B a lookup."""
    seen = spy_row_bytes(monkeypatch)
    run({"columns": {"0": 4, "1": 2}, "column_shard_dim": 32,
         "placement": {"0": [0, 1, 2, 3], "1": [0, 1]}})
    assert seen["r"] == pytest.approx([256 * 384 / 512] * 5)
    assert all(128 < R < 256 for R in seen["R"])


def test_more_column_shards_send_less_per_rank_and_hold_less():
    """Monotone where it holds: more slices of a table over more ranks, less HBM and fewer
    output bytes per holding rank. Not monotone: the ids all-to-all (each id goes to every
    slice: k destinations) and a non-holder's receive (the whole vector either way)."""
    sends, used, ids = [], [], []
    trace = small_trace(rows=(400, 400), seed=2)
    for k in (1, 2, 4, 8):
        d = design({"columns": {"0": k, "1": k}, "column_shard_dim": 16,
                    "placement": {"0": list(range(k)), "1": list(range(8 - k, 8))}})
        sends.append(d.output_bytes(64.0, 1.0, 1.0)[0])
        used.append(max(d.layout.used_bytes))
        ids.append(int(rank_counts(trace, d.plan, False).ids_send.sum()))
    assert sends == sorted(sends, reverse=True) and sends[0] > sends[-1]
    assert used == sorted(used, reverse=True) and used[0] > used[-1]
    assert ids == sorted(ids) and ids[-1] > ids[0]


def test_column_wise_with_rank_caches_runs():
    row = run({"sharding": "column-wise", "column_shard_dim": 32, "rank_cache": "lru-prefetch",
               "dedup": True})
    assert 0 < row["rank_cache_hit_ratio"] <= 1 and row["samples_per_s"] > 0


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster,field,words", [
    ({"columns": {"0": 3}, "column_shard_dim": 4}, "design_params.cluster.columns.0",
     "expected a divisor of 128"),
    ({"columns": {"0": 8}, "column_shard_dim": 32}, "design_params.cluster.columns.0",
     "16 columns wide"),
    ({"columns": {"1": 64}, "column_shard_dim": 4}, "design_params.cluster.columns.1",
     "2 columns wide"),
    ({"columns": {"0": 16}, "column_shard_dim": 4}, "design_params.cluster.columns.0",
     "a shard group has 8 ranks"),
    ({"columns": {"7": 2}}, "design_params.cluster.columns.7", "no table '7'"),
    ({"sharding": "column-wise", "column_shard_dim": 8}, "design_params.cluster.column_shard_dim",
     "16 column shards"),
    ({"columns": {"0": 4}, "column_shard_dim": 32, "placement": {"0": [0, 1, 2]}},
     "design_params.cluster.placement.0", "expected a multiple of 4 ranks"),
])
def test_bad_column_shards_name_the_key(cluster, field, words):
    with pytest.raises(UserError) as e:
        design(cluster)
    assert e.value.field == field and words in e.value.message


def test_a_column_shard_that_cannot_fit_is_named():
    big = {"model": {"tables": {"rows": 400_000_000}}}  # 205 GB a table, 51 GB a slice
    with pytest.raises(UserError) as e:
        design({"columns": {"0": 4, "1": 4}, "column_shard_dim": 32,
                "placement": {"0": [0, 1, 2, 3], "1": [0, 1, 2, 3]}}, big)
    assert e.value.field == "design_params.cluster.placement"
    assert "rank 0 holds" in e.value.message
    with pytest.raises(UserError) as e:
        design({"columns": {"0": 2, "1": 2}, "column_shard_dim": 32}, big)
    assert e.value.field == "design_params.cluster.columns.0"
    assert "fit on no run of 2" in e.value.message
    d = design({"sharding": "column-wise", "column_shard_dim": 32}, big)
    assert max(d.layout.used_bytes) == pytest.approx(400_000_000 * 128)


def test_cached_rank_counts_key_the_slices_row_sizes(tmp_path, monkeypatch):
    """The per-rank columns are read back from the replay cache by trace, plan and dedup:
    with column slices they also carry the slices' row bytes, which the optimizer sets, so a
    run that changes only the optimizer must not read the other's bytes."""
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path))
    cluster = {"columns": {"0": 4, "1": 2}, "column_shard_dim": 32,
               "placement": {"0": [0, 1, 2, 3], "1": [0, 1]}}

    def cached(optimizer):
        row = simulate(cfg_of(cluster, {"model": {"optimizer": optimizer}}), ["cluster"])[0]
        return {k: v for k, v in row.items() if not k.endswith("_wall_s")}

    cached("sgd")  # fills the cache for this trace and plan
    assert cached("adagrad") == run(cluster, {"model": {"optimizer": "adagrad"}})
