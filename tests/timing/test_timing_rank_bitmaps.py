"""The cluster's fast paths (issue 44, tractable at scale) against slow references, exactly:
`rank_counts` / `rank_stream` (a bit per row, cleared per run of ids) against a sort-based
NumPy reference (np.unique per table) on random plans, `engine.access_unique`'s bit per row
against its stamp per row and np.unique, and the cluster priced the same without the GPU L2
walk it never reads."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.timing.rank_streams import KINDS, RankPlan, rank_counts, rank_stream
from scratchpipe_sim.traces.csr_trace import Trace


def random_trace(rng, B, rows, batches, pooling=5):
    T = len(rows)
    idx, offs, bounds = [], [0], [0]
    for _ in range(batches):
        for t in range(T):
            for _s in range(B):
                k = int(rng.integers(0, pooling + 1))
                idx.extend(int(x) for x in rng.integers(0, rows[t], size=k))
                offs.append(len(idx))
        bounds.append(len(offs) - 1)
    return Trace(np.array(rows, np.int64), np.array(idx, np.int64), np.array(offs, np.int64),
                 np.array(bounds, np.int64), B)


def random_plan(rng, T):
    """n ranks in groups of L (L divides n); per table data-parallel, table-wise or
    row-wise over a run of the group's ranks."""
    n = int(rng.choice([1, 2, 3, 4, 6, 8, 12]))
    L = int(rng.choice([d for d in range(1, n + 1) if n % d == 0]))
    start, span = [], []
    for _ in range(T):
        k = int(rng.integers(0, L + 1))
        start.append(int(rng.integers(0, L - max(k, 1) + 1)))
        span.append(k)
    return RankPlan(n, L, tuple(start), tuple(span))


def lookups_of(trace, plan, b, t):
    """Table t's lookups of batch b in order: rows, source ranks, serving ranks, replicas."""
    bt = trace.batch(b)
    B, n, L = bt.batch_size, plan.ranks, plan.group
    ind, offs = bt.table(t)
    ind = np.asarray(ind, np.int64)
    src = np.repeat(np.arange(B), np.diff(np.asarray(offs))) * n // B
    k = plan.span[t]
    if k == 0:
        return ind, src, src.copy(), src.copy()
    block = int(plan.block_rows(np.asarray(trace.table_rows))[t])
    rep = src // L
    dst = rep * L + plan.start[t] + (ind // block if k > 1 else 0)
    return ind, src, dst, rep


def first_of(*keys):
    """Whether each position holds the first occurrence of its key tuple."""
    if not len(keys[0]):
        return np.zeros(0, bool)
    _, idx = np.unique(np.stack(keys, axis=1), axis=0, return_index=True)
    first = np.zeros(len(keys[0]), bool)
    first[idx] = True
    return first


def reference_counts(trace, plan, dedup):
    """rank_counts by sorting (np.unique per table), no stamps or bits."""
    n = plan.ranks
    out = np.zeros((len(KINDS), trace.num_batches, n), np.int64)
    for b in range(trace.num_batches):
        for t in range(trace.num_tables):
            ind, src, dst, rep = lookups_of(trace, plan, b, t)
            cross = dst != src
            keep = first_of(src, ind) if dedup and plan.span[t] > 0 else np.ones(len(ind), bool)
            for kind, where, who in (("routed", None, dst), ("ids_recv_all", cross, dst),
                                     ("unique", first_of(rep, ind), dst), ("lookups", keep, dst),
                                     ("ids_send", keep & cross, src),
                                     ("ids_recv", keep & cross, dst)):
                sel = who if where is None else who[where]
                out[KINDS.index(kind), b] += np.bincount(sel, minlength=n)
    return out


CASES = list(range(40))


@pytest.mark.parametrize("case", CASES)
def test_rank_counts_equal_the_sorted_reference(case, monkeypatch):
    rng = np.random.default_rng(1000 + case)
    T = int(rng.integers(1, 5))
    rows = [int(rng.integers(1, 400)) for _ in range(T)]
    B = int(rng.integers(1, 20))
    trace = random_trace(rng, B, rows, int(rng.integers(1, 4)))
    plan = random_plan(rng, T)
    if case % 4 == 3:  # tables renumbered densely per batch for the bitmaps
        from scratchpipe_sim.timing import rank_streams

        monkeypatch.setattr(rank_streams, "STAMP_ROWS", 50)
    for dedup in (False, True):
        got = rank_counts(trace, plan, dedup)
        want = reference_counts(trace, plan, dedup)
        for i, kind in enumerate(KINDS):
            assert getattr(got, kind).tolist() == want[i].tolist(), (kind, plan, dedup)


@pytest.mark.parametrize("case", CASES[:16])
def test_rank_stream_equals_the_sorted_reference(case):
    rng = np.random.default_rng(2000 + case)
    T = int(rng.integers(1, 4))
    rows = [int(rng.integers(1, 300)) for _ in range(T)]
    trace = random_trace(rng, int(rng.integers(1, 16)), rows, 2)
    plan = random_plan(rng, T)
    for dedup in (False, True):
        for r in range(plan.ranks):
            s = rank_stream(trace, plan, r, dedup)
            for b in range(trace.num_batches):
                got = s.batch(b)
                for t in range(T):
                    ind, src, dst, _rep = lookups_of(trace, plan, b, t)
                    keep = dst == r
                    if plan.span[t] == 0:
                        keep[:] = False
                    elif dedup:
                        keep &= first_of(src, ind)
                    assert np.asarray(got.table(t)[0]).tolist() == ind[keep].tolist()


def test_bitmaps_are_clear_between_batches_at_word_edges():
    """Rows 63, 64, 127, 128 (the edges of 64-bit words) repeated inside and across runs,
    one replica over four batches: counts equal the reference (a bit left set would hide a
    row of the next run)."""
    rows = (200, 200)
    edge = np.array([63, 64, 127, 128, 0, 199], np.int64)
    idx, offs, bounds = [], [0], [0]
    for b in range(4):
        for t in range(2):
            for s in range(6):
                idx.extend(np.roll(edge, b + s + t)[: 1 + (s + b) % 6].tolist())
                offs.append(len(idx))
        bounds.append(len(offs) - 1)
    trace = Trace(np.array(rows, np.int64), np.array(idx, np.int64), np.array(offs, np.int64),
                  np.array(bounds, np.int64), 6)
    for plan in (RankPlan(3, 3, (0, 1), (3, 1)), RankPlan(4, 2, (0, 0), (0, 2)),
                 RankPlan(12, 4, (1, 0), (2, 4))):
        for dedup in (False, True):
            got = rank_counts(trace, plan, dedup)
            want = reference_counts(trace, plan, dedup)
            for i, kind in enumerate(KINDS):
                assert getattr(got, kind).tolist() == want[i].tolist()


# -- engine.access_unique: a bit per row where the set would be a stamp per row ---------------
@pytest.mark.parametrize("seed", range(6))
def test_access_unique_bits_equal_the_stamps_and_numpy(seed, monkeypatch):
    from scratchpipe_sim.policies import engine

    rng = np.random.default_rng(seed)
    rows = [int(rng.integers(1, 300)) for _ in range(int(rng.integers(1, 4)))]
    trace = random_trace(rng, int(rng.integers(20, 60)), rows, int(rng.integers(1, 6)))
    seen = engine.SeenSet(trace, trace.batch_access_ptr(), lazy=True)
    assert seen.shift < 0  # batches comparable to the rows: the per-row path
    bits = engine.access_unique(trace)
    monkeypatch.setattr(engine, "_SEEN_PER_ROW_BITS", False)
    stamps = engine.access_unique(trace)
    ptr, ids = trace.batch_access_ptr(), trace.linear_ids()
    want = [len(np.unique(ids[ptr[b]:ptr[b + 1]])) for b in range(trace.num_batches)]
    assert bits[1].tolist() == stamps[1].tolist() == want
    assert bits[0].tolist() == stamps[0].tolist() == np.diff(ptr).tolist()


# -- the cluster design reads no on-chip hits -------------------------------------------------
def test_cluster_priced_the_same_without_the_l2_walk(monkeypatch):
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.timing import simulate
    from scratchpipe_sim.timing.designs import cluster as cl
    from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey

    cfg = load_config({
        "hardware": {"preset": "dgx-h100-cluster", "cluster": {"nodes": 2}},
        "model": {"tables": {"count": 4, "rows": 3000, "dim": 32}, "pooling": 4,
                  "batch_size": 64, "num_batches": 3, "warmup_batches": 1},
        "designs": ["cluster"], "seed": 2})
    without = simulate(cfg, ["cluster"], replay_cache=False)[0]
    assert "l2_hit_ratio" not in without
    original = cl.Cluster.workload_key

    def with_l2(self):
        key = original(self)
        assert isinstance(key, WorkloadKey) and not key.onchip
        return WorkloadKey(key.policy, key.capacity, key.params, key.where, key.warm)

    monkeypatch.setattr(cl.Cluster, "workload_key", with_l2)
    walked = simulate(cfg, ["cluster"], replay_cache=False)[0]
    assert 0 < walked.pop("l2_hit_ratio") <= 1
    for k in ("policy_wall_s", "simpy_wall_s"):
        walked.pop(k), without.pop(k)
    assert walked == without


# -- the cluster's per-rank columns through the on-disk replay cache --------------------------
def test_cluster_rank_columns_are_read_back_from_the_cache(monkeypatch, tmp_path):
    """A warm run reads the per-rank columns (no pass over the trace): equal to the ones
    computed without the cache; `replay_cache=False` (`--no-cache`) writes nothing."""
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.timing.designs import cluster as cl
    from scratchpipe_sim.timing.runner import timed_batches
    from scratchpipe_sim.timing.trace_setup import build_trace

    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path))
    def spec(dedup):
        return {"hardware": {"preset": "dgx-h100-cluster", "cluster": {"nodes": 2}},
                "model": {"tables": {"count": 4, "rows": 3000, "dim": 32}, "pooling": 4,
                          "batch_size": 64, "num_batches": 3, "warmup_batches": 1},
                "design_params": {"cluster": {"sharding": "row-wise", "dedup": dedup}},
                "designs": ["cluster"], "seed": 2}

    cfg = load_config(spec(True))
    timed = timed_batches(cfg, build_trace(cfg, cache=False))
    design = cl.Cluster(cfg)
    plain = design.trace_columns(timed, replay_cache=False)
    assert not (tmp_path / "replays").exists() or not any((tmp_path / "replays").iterdir())
    first = design.trace_columns(timed)

    def no_pass(*_args):
        raise AssertionError("a warm run makes no pass over the trace")

    monkeypatch.setattr(cl, "rank_counts", no_pass)
    warm = design.trace_columns(timed)
    assert sorted(plain) == sorted(first) == sorted(warm)
    for k in plain:
        assert plain[k].tolist() == first[k].tolist() == warm[k].tolist()
    with pytest.raises(AssertionError, match="no pass"):  # dedup off: another key
        cl.Cluster(load_config(spec(False))).trace_columns(timed)
