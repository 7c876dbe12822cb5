"""Synthetic generators: determinism, Zipf law, permutation, hot set, reuse, store equality."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces import generators as gen
from scratchpipe_sim.traces.generators import (
    Permutation,
    ZipfSampler,
    generate_to_store,
    generate_trace,
)
from scratchpipe_sim.traces.store import read_trace


def arrays(t):
    return (np.asarray(t.indices).tolist(), np.asarray(t.offsets).tolist(),
            np.asarray(t.batch_bounds).tolist(), t.table_rows.tolist())


def small(**kw):
    args = dict(distribution="zipf", table_rows=[300, 100], batch_size=8, num_batches=12,
                pooling=[3, 2], seed=5, reuse=0.25)
    args.update(kw)
    return generate_trace(**args)


def rank_probabilities(rows: int, alpha: float) -> np.ndarray:
    w = np.arange(1, rows + 1, dtype=float) ** -alpha
    return w / w.sum()


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    exp = probs * counts.sum()
    return float(((counts - exp) ** 2 / exp).sum())


# -- determinism -----------------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["uniform", "zipf", "hotset"])
def test_same_seed_same_trace_other_seed_other_trace(dist):
    a, b = small(distribution=dist), small(distribution=dist)
    assert arrays(a) == arrays(b)
    c = small(distribution=dist, seed=6)
    assert arrays(c)[0] != arrays(a)[0]
    assert arrays(c)[1:] == arrays(a)[1:]  # same shape, other ids


def test_layout_is_fbgemm_csr_with_fixed_pooling():
    t = small()
    t.validate()
    assert t.num_batches == 12 and t.batch_size == 8 and t.num_tables == 2
    assert t.num_accesses == 12 * 8 * (3 + 2)
    b = t.batch(4)
    idx0, off0 = b.table(0)
    idx1, off1 = b.table(1)
    assert np.diff(off0).tolist() == [3] * 8 and np.diff(off1).tolist() == [2] * 8
    assert idx0.max() < 300 and idx1.max() < 100


@pytest.mark.parametrize("dist", ["uniform", "zipf", "hotset"])
def test_a_shorter_trace_is_a_prefix_of_a_longer_one(dist, monkeypatch):
    monkeypatch.setattr(gen, "BLOCK_ACCESSES", 100)  # several RNG blocks
    long_, short = small(distribution=dist, num_batches=30), small(distribution=dist,
                                                                   num_batches=7)
    n = short.num_accesses
    assert np.asarray(long_.indices)[:n].tolist() == np.asarray(short.indices).tolist()


def test_meta_records_the_generator_config():
    g = small(alpha=1.2).meta["generator"]
    assert g == {"version": gen.GENERATOR_VERSION, "distribution": "zipf",
                 "table_rows": [300, 100], "batch_size": 8, "num_batches": 12,
                 "pooling": [3, 2], "seed": 5, "reuse": 0.25,
                 "params": {"alpha": 1.2, "permute": True}}


# -- store -----------------------------------------------------------------------------------
def test_generate_to_store_equals_generate_trace_across_many_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "BLOCK_ACCESSES", 64)  # 64 // 40 -> one batch per block
    kw = dict(distribution="zipf", table_rows=[300, 100], batch_size=8, num_batches=12,
              pooling=[3, 2], seed=5, reuse=0.5)
    mem = generate_trace(**kw)
    path = generate_to_store(tmp_path / "g.sptrace", **kw)
    disk = read_trace(path)
    assert isinstance(disk.indices, np.memmap)
    assert arrays(disk) == arrays(mem)
    assert disk.meta["generator"] == mem.meta["generator"]
    with pytest.raises(UserError, match="refusing to overwrite"):
        generate_to_store(path, **kw)


def test_block_size_does_not_change_store_equality(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "BLOCK_ACCESSES", 1000)
    kw = dict(distribution="hotset", table_rows=1000, batch_size=10, num_batches=33,
              pooling=4, seed=2, reuse=0.3, hot_fraction=0.1)
    assert arrays(read_trace(generate_to_store(tmp_path / "h.sptrace", **kw))) == \
        arrays(generate_trace(**kw))


# -- zipf ------------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.8, 1.05, 1.2])
def test_zipf_rank_frequencies_follow_the_law_and_reject_a_wrong_alpha(alpha):
    rows, n = 60, 120_000
    t = generate_trace("zipf", rows, 1000, n // 1000, 1, seed=3, alpha=alpha, permute=False)
    counts = np.bincount(np.asarray(t.indices), minlength=rows).astype(float)
    # df = 59: the 0.9999 quantile of chi2(59) is about 107
    assert chi_square(counts, rank_probabilities(rows, alpha)) < 107
    assert chi_square(counts, rank_probabilities(rows, alpha + 0.05)) > 300
    assert chi_square(counts, rank_probabilities(rows, alpha - 0.05)) > 300


def test_zipf_ids_are_the_ranks_through_a_seeded_permutation():
    rows = 500
    seed = np.random.SeedSequence(9)
    plain = gen.zipf(rows, seed, alpha=1.1, permute=False)
    perm = gen.zipf(rows, seed, alpha=1.1, permute=True)
    a = plain.sample(np.random.default_rng(1), 5000)
    b = perm.sample(np.random.default_rng(1), 5000)
    table = perm.perm.table
    assert sorted(table.tolist()) == list(range(rows))
    assert b.tolist() == table[a].tolist()
    assert table[:10].tolist() != list(range(10))
    # trace level: the two tables get different permutations
    t = generate_trace("zipf", [rows, rows], 100, 50, 1, seed=4, alpha=1.1)
    hot0 = np.bincount(t.linear_ids()[t.linear_ids() < rows], minlength=rows).argmax()
    hot1 = np.bincount(t.linear_ids()[t.linear_ids() >= rows] - rows, minlength=rows).argmax()
    assert hot0 != hot1


def test_zipf_continuous_tail_beyond_the_tabulated_ranks(monkeypatch):
    monkeypatch.setattr(gen, "ZIPF_EXACT_ROWS", 50)
    ZipfSampler._cache.clear()
    rows, alpha, n = 5000, 1.05, 400_000
    s = ZipfSampler(rows, alpha, None)
    ids = s.sample(np.random.default_rng(0), n)
    ZipfSampler._cache.clear()
    assert ids.min() >= 0 and ids.max() < rows
    p = rank_probabilities(rows, alpha)
    # log-spaced rank bins spanning the head/tail seam
    edges = np.unique(np.geomspace(1, rows, 25).astype(int))
    edges[-1] = rows
    edges = np.concatenate(([0], edges))
    counts = np.histogram(ids, bins=edges)[0].astype(float)
    probs = np.add.reduceat(p, edges[:-1])
    assert chi_square(counts, probs) < 3 * len(probs)
    # midpoint-rule tail: relative error ~alpha(alpha+1)/(24 K^2) ~ 4e-5 at K = 50
    assert abs(s.head_mass - p[:50].sum()) < 1e-5 * p[:50].sum()


@pytest.mark.parametrize("n", [1, 2, 5, 1000, 1025, 4097])
def test_feistel_permutation_is_a_bijection(n):
    p = Permutation(n, np.random.SeedSequence(3), exact_max=0)
    assert p.table is None
    y = p(np.arange(n))
    assert sorted(y.tolist()) == list(range(n))
    if n > 100:
        assert y[:20].tolist() != list(range(20))


# -- hotset, uniform -------------------------------------------------------------------------
def test_hotset_sends_the_configured_share_to_the_hot_rows():
    rows, n = 10_000, 200_000
    s = gen.hotset(rows, np.random.SeedSequence(1), hot_fraction=0.05,
                   hot_access_fraction=0.8)
    ids = s.sample(np.random.default_rng(2), n)
    hot = set(s.perm(np.arange(500)).tolist())
    assert s.hot_rows == 500
    share = np.isin(ids, list(hot)).mean()
    assert abs(share - 0.8) < 4 * np.sqrt(0.8 * 0.2 / n)
    assert len(np.unique(ids[np.isin(ids, list(hot))])) == 500
    # hot rows are scattered, not the first ids
    assert max(hot) > 5000


def test_uniform_covers_all_rows_evenly():
    t = generate_trace("uniform", 50, 100, 100, 1, seed=1)
    counts = np.bincount(np.asarray(t.indices), minlength=50).astype(float)
    assert chi_square(counts, np.full(50, 1 / 50)) < 100


# -- reuse -----------------------------------------------------------------------------------
@pytest.mark.parametrize("reuse", [0.0, 0.3, 0.8, 1.0])
def test_reuse_copies_exactly_that_share_from_the_previous_batch(reuse, monkeypatch):
    monkeypatch.setattr(gen, "BLOCK_ACCESSES", 1000)  # reuse crosses block boundaries
    B, L, rows = 16, [3, 5], [2**40, 2**40]  # accidental equal ids are ~impossible
    t = generate_trace("uniform", rows, B, 20, L, seed=8, reuse=reuse)
    for k in range(1, t.num_batches):
        prev, cur = t.batch(k - 1), t.batch(k)
        for ti, Lt in enumerate(L):
            same = int((prev.table(ti)[0] == cur.table(ti)[0]).sum())
            assert same == int(B * Lt * reuse)


# -- validation ------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,field", [
    (dict(alpha=0), "alpha"),
    (dict(alpha=-1.0), "alpha"),
    (dict(alpha="big"), "alpha"),
    (dict(reuse=1.5), "reuse"),
    (dict(reuse=-0.1), "reuse"),
    (dict(pooling=[1, 2, 3]), "pooling"),
    (dict(pooling=0), "pooling"),
    (dict(batch_size=0), "batch_size"),
    (dict(num_batches=-2), "num_batches"),
    (dict(table_rows=[10, 0]), "table_rows[1]"),
    (dict(table_rows=[]), "table_rows"),
    (dict(seed=-1), "seed"),
    (dict(hot_fraction=0.1), "hot_fraction"),  # not a zipf parameter
    (dict(distribution="zipff"), "distribution"),
    (dict(distribution="hotset", hot_fraction=1.2), "hot_fraction"),
    (dict(distribution="hotset", hot_access_fraction=-0.5), "hot_access_fraction"),
])
def test_bad_parameters_name_their_field(kw, field):
    with pytest.raises(UserError) as e:
        small(field_prefix="workload.", source="cfg.yaml", **kw)
    assert e.value.field == f"workload.{field}"
    assert e.value.source == "cfg.yaml"


@pytest.mark.parametrize("rows,alpha", [(1, 1.05), (3, 0.5), (997, 1.2), (200_000, 1.0)])
def test_guided_inverse_cdf_equals_searchsorted_exactly(rows, alpha):
    ZipfSampler._cache.clear()
    z = ZipfSampler(rows, alpha, None)
    cdf = z.cdf
    u = np.concatenate([np.random.default_rng(rows).random(50_000), cdf[:-1],
                        np.nextafter(cdf[:-1], 0), np.nextafter(cdf[:-1], 1), [0.0]])
    u = u[u < 1.0]
    got = gen._guided_searchsorted(cdf, z.guide, u)
    assert got.tolist() == np.searchsorted(cdf, u, side="right").tolist()
    # the fused path (search, then the permutation's id) gives the same ids as the two steps
    perm = np.random.default_rng(rows + 1).permutation(rows).astype(np.int32)
    fused = gen._guided_searchsorted(cdf, z.guide, u, perm)
    assert fused.dtype == np.int64
    assert fused.tolist() == perm[np.searchsorted(cdf, u, side="right")].tolist()


def test_zipf_sampler_draws_the_same_ids_through_the_fused_search():
    """`ZipfSampler.sample` takes the fused search + permutation when every rank is in its
    table and the permutation is a table: the ids equal the rank search, then the
    permutation (`Permutation.__call__`), from the same draws."""
    ZipfSampler._cache.clear()
    z = gen.zipf(5000, np.random.SeedSequence(3), alpha=1.1)
    assert z.perm.table is not None and len(z.cdf) == z.rows  # the fused path is taken
    got = z.sample(np.random.default_rng(9), 20_000)
    u = np.random.default_rng(9).random(20_000)
    assert got.tolist() == z.perm(np.searchsorted(z.cdf, u, side="right")).tolist()


# -- pooling jitter --------------------------------------------------------------------------
def test_pooling_sigma_draws_fbgemm_style_bag_lengths_once(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "BLOCK_ACCESSES", 500)
    B, L, sigma, seed = 64, [4, 2], 2.0, 3
    kw = dict(distribution="uniform", table_rows=[2**40, 2**40], batch_size=B,
              num_batches=15, pooling=L, seed=seed, reuse=0.5, pooling_sigma=sigma)
    t = generate_trace(**kw)
    t.validate()
    for ti, Lt in enumerate(L):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed,
                                                                         spawn_key=(3, ti))))
        want = np.maximum(rng.normal(Lt, sigma, B).astype(np.int64), 0)
        assert (want == 0).any()  # some empty bags: a real test of the clamp
        for k in range(t.num_batches):
            assert np.diff(t.batch(k).table(ti)[1]).tolist() == want.tolist()
        for k in range(1, t.num_batches):  # reuse stays exact over the drawn positions
            same = int((t.batch(k - 1).table(ti)[0] == t.batch(k).table(ti)[0]).sum())
            assert same == int(want.sum() * 0.5)
    assert t.meta["generator"]["pooling_sigma"] == 2.0
    assert arrays(read_trace(generate_to_store(tmp_path / "j.sptrace", **kw))) == arrays(t)
    with pytest.raises(UserError) as e:
        small(pooling_sigma=-1.0)
    assert e.value.field == "pooling_sigma"


def test_zipf_tail_ranks_one_by_one(monkeypatch):
    """Each rank around the head/tail seam on its own (a binned test would not see a rounding
    change that moves mass between neighbouring ranks: the first tail rank drawn ~1.5x)."""
    monkeypatch.setattr(gen, "ZIPF_EXACT_ROWS", 50)
    ZipfSampler._cache.clear()
    rows, alpha, n = 5000, 1.05, 400_000
    ids = ZipfSampler(rows, alpha, None).sample(np.random.default_rng(0), n)
    ZipfSampler._cache.clear()
    p = rank_probabilities(rows, alpha)
    counts = np.bincount(ids, minlength=rows)
    for r in range(40, 80):  # 0-based: ten head ranks, then the first thirty tail ranks
        sd = np.sqrt(n * p[r] * (1 - p[r]))
        assert abs(counts[r] - n * p[r]) < 5 * sd, (r, counts[r], n * p[r])


class _FixedDraws:
    """An rng whose `random(n)` returns the given uniforms (the sampler's only draw)."""

    def __init__(self, u):
        self.u = np.asarray(u, float)

    def random(self, n):
        assert n == len(self.u)
        return self.u.copy()


@pytest.mark.parametrize("alpha", [0.8, 1.0, 1.05, 1.3])
def test_zipf_tail_inverts_its_integral_to_the_nearest_rank(monkeypatch, alpha):
    """Closed form: in the tail, rank r (1-based) takes the uniforms whose tail mass lies
    between the integral of x^-alpha from K+1/2 to r-1/2 and to r+1/2 (K tabulated ranks)."""
    K, rows = 50, 5000
    monkeypatch.setattr(gen, "ZIPF_EXACT_ROWS", K)
    ZipfSampler._cache.clear()
    s = ZipfSampler(rows, alpha, None)
    ZipfSampler._cache.clear()
    ranks = np.array([K + 1, K + 2, K + 3, 2 * K, 977, rows - 1, rows])

    def u_at(x):  # the uniform whose tail integral reaches x
        return s.head_mass + gen._power_integral(K + 0.5, x, alpha) / s.total

    mid = [(u_at(r - 0.5) + u_at(r + 0.5)) / 2 for r in ranks]
    assert s.sample(_FixedDraws(mid), len(mid)).tolist() == (ranks - 1).tolist()
    # just inside each rank's interval, on both sides
    lo = [u_at(r - 0.5 + 1e-6) for r in ranks]
    hi = [u_at(r + 0.5 - 1e-6) for r in ranks]
    assert s.sample(_FixedDraws(lo), len(lo)).tolist() == (ranks - 1).tolist()
    assert s.sample(_FixedDraws(hi), len(hi)).tolist() == (ranks - 1).tolist()


# -- mutation survivors (issue 42): block size, reuse positions, the memory check's blame --------
@pytest.mark.parametrize("batch, pooling", [(4, [1, 2]), (4096, [20] * 8), (2**17, [2, 1]),
                                            (2**18, [2])])
def test_block_batches_closed_form(batch, pooling):
    # part of the trace's definition: batches per RNG block, at least one
    spec = gen.make_spec("uniform", [100] * len(pooling), batch, 3, pooling, 1)
    assert spec.block_batches == max(1, gen.BLOCK_ACCESSES // (batch * sum(pooling)))


@pytest.mark.parametrize("width, count", [(10, 1), (10, 3), (37, 36), (1000, 300), (513, 100)])
def test_reuse_positions_are_the_smallest_keys_of_each_batch(width, count):
    """FBGEMM's randperm(B*L)[:count]: per batch, the positions of the `count` smallest of
    `width` uniform keys (the same draws), as a set."""
    got = gen._reuse_positions(np.random.default_rng(5), 6, width, count)
    keys = np.random.default_rng(5).random((6, width))
    want = np.argsort(keys, axis=1)[:, :count]
    assert [sorted(r) for r in got.tolist()] == [sorted(r) for r in want.tolist()]


@pytest.mark.parametrize("batch, pooling, sigma, blamed", [
    (4_000, [1], 2_000.0, "pooling_sigma"),   # the sigma term dominates the widest bag
    (400, [200_000], 1.0, "pooling"),          # the pooling does
    (3_000_000, [1, 1], 0.0, "batch_size"),    # the batch does
])
def test_the_generator_memory_check_blames_the_largest_term(monkeypatch, batch, pooling,
                                                            sigma, blamed):
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", str(10**6))
    with pytest.raises(UserError) as e:
        gen.make_spec("uniform", [100] * len(pooling), batch, 3, pooling, 1,
                      pooling_sigma=sigma)
    assert e.value.field == blamed, (e.value.field, str(e.value))


@pytest.mark.parametrize("n, digest", [(1000, "a7334fa9303d88d6"), (1024, "bc9b457ee4c3f67b"),
                                       (4097, "72a997521f95f639")])
def test_the_feistel_permutation_is_part_of_the_trace_definition(n, digest):
    """A table beyond PERMUTATION_EXACT_ROWS is permuted by the Feistel network: any change
    to its rounds, constants or bit width keeps a bijection (the tests above) but changes
    every trace of such tables for the same seed. Pinned (sha256 of the image of 0..n-1);
    n = 1024 is a power of two, where the bit width's rounding matters."""
    import hashlib

    y = Permutation(n, np.random.SeedSequence(3), exact_max=0)(np.arange(n))
    assert hashlib.sha256(y.astype("<i8").tobytes()).hexdigest()[:16] == digest


# -- second pass (issue 42): the spec's bytes, the hot set's cold rows, the seed's type ----------
@pytest.mark.parametrize("rows, batch, batches, pooling", [([50, 70], 4, 3, [2, 1]),
                                                           ([2**33], 3, 2, [5])])
def test_spec_nbytes_is_the_written_stores_data_files(tmp_path, rows, batch, batches, pooling):
    spec = gen.make_spec("uniform", rows, batch, batches, pooling, 1)
    out = gen.store_from_spec(spec, tmp_path / "s.sptrace")
    on_disk = sum(f.stat().st_size for f in out.glob("*.bin"))
    assert gen.spec_nbytes(spec) >= on_disk  # an upper bound: offsets may be encoded smaller
    assert gen.spec_nbytes(spec) - on_disk <= (spec.num_batches * spec.num_tables
                                               * spec.batch_size + 1) * 8


def test_hotset_cold_accesses_are_uniform_over_the_cold_rows():
    rows, n = 1000, 100_000
    s = gen.hotset(rows, np.random.SeedSequence(1), hot_fraction=0.1, hot_access_fraction=0.5)
    ids = s.sample(np.random.default_rng(2), n)
    hot = set(s.perm(np.arange(100)).tolist())
    cold = ids[~np.isin(ids, list(hot))]
    counts = np.bincount(cold, minlength=rows)[sorted(set(range(rows)) - hot)]
    assert len(counts) == 900 and counts.min() > 0  # every cold row drawn
    exp = len(cold) / 900
    assert counts.std() < 4 * np.sqrt(exp)  # binomial spread, not piled on a few rows


@pytest.mark.parametrize("seed", [1.5, True, -1, "3"])
def test_a_seed_that_is_not_a_non_negative_integer(seed):
    with pytest.raises(UserError, match="non-negative integer seed") as e:
        gen.make_spec("uniform", [50], 4, 2, 1, seed)
    assert e.value.field == "seed"
