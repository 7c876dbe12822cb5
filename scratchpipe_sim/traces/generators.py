"""Seeded synthetic traces: uniform, Zipf(alpha) over permuted ids, hot-set; FBGEMM's reuse.

A trace is a pure function of (distribution, params, table_rows, batch_size, num_batches,
pooling, reuse, seed, GENERATOR_VERSION). Randomness is keyed, never streamed through one
generator: table t's setup (its id permutation) uses `SeedSequence(seed, spawn_key=(0, t))`
and its ids in RNG block j use `(1, t, j)`, reuse positions `(2, t, j)`. A block is a fixed
number of whole batches (about `BLOCK_ACCESSES` ids), so writing a huge trace chunk by chunk
(`generate_to_store`) gives exactly the trace `generate_trace` builds in memory, on any
machine.

A distribution is a factory registered in `DISTRIBUTIONS`:
`factory(rows: int, seed: SeedSequence, **params) -> Sampler`, where the sampler's
`sample(rng, n)` returns n row ids in [0, rows) and `PARAMS` (a dict of defaults on the
factory) names the accepted parameters. Other modules of `scratchpipe_sim.traces` register
more: the registry imports every one of them on first use, so a distribution is one file.
A numeric parameter may also be given as a list, one value per table, or a shorter cycle
whose length divides the table count (`per_table_params`).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.registry import Registry
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces._prefetch import prefetch
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import TraceWriter, index_dtype_for, store_nbytes

GENERATOR_VERSION = 1
#: fewest accesses of a pass (a trace to draw, a replay) for which forking workers pays: a
#: pool costs ~0.05 s to start and ~1M accesses take about that long to replay (speed only;
#: results are identical). `run --jobs` and `generate_trace(jobs=)` run serially below it.
PARALLEL_MIN_ACCESSES = 1 << 20
#: bytes of a generated trace's arrays from which `trace_from_spec` streams it to disk and
#: maps it instead of holding it in memory (speed only: the arrays are identical; below it,
#: `jobs` draw the tables in parallel)
STREAM_MIN_BYTES = 1 << 30
#: ids per RNG block (per call of a sampler); part of the trace's definition.
BLOCK_ACCESSES = 1 << 18
#: Zipf ranks whose cumulative probability is tabulated exactly; beyond, a continuous tail.
ZIPF_EXACT_ROWS = 1 << 25
#: buckets of the Zipf inverse-CDF guide table (speed only; results are identical).
ZIPF_GUIDE_SIZE = 1 << 22
#: tables up to this size get an exact uniformly random permutation; beyond, a Feistel one.
PERMUTATION_EXACT_ROWS = 1 << 25


class Sampler(Protocol):
    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray: ...


Factory = Callable[..., Sampler]

DISTRIBUTIONS: Registry[Factory] = Registry("distribution", package="scratchpipe_sim.traces")


def register_distribution(name: str, params: dict[str, Any]) -> Callable[[Factory], Factory]:
    """Decorator: register `factory(rows, seed, **params)`; `params` maps name -> default."""

    def decorate(factory: Factory) -> Factory:
        factory.PARAMS = dict(params)  # type: ignore[attr-defined]
        DISTRIBUTIONS.register(name)(factory)
        return factory

    return decorate


# -- id permutations ------------------------------------------------------------------------
class Permutation:
    """A seeded bijection of [0, n): exact random permutation, or Feistel for huge n.

    FBGEMM's benchmark permutes Zipf ranks so hot rows are scattered over the table; for
    n > PERMUTATION_EXACT_ROWS a table of n ids would cost 8n bytes, so a 4-round Feistel
    network on the next even power of two, with cycle walking, stands in (a bijection,
    pseudo-random, not uniformly drawn from all n! permutations).
    """

    def __init__(self, n: int, seed: np.random.SeedSequence,
                 exact_max: int = PERMUTATION_EXACT_ROWS):
        self.n = int(n)
        rng = np.random.Generator(np.random.PCG64(seed))
        if self.n <= exact_max:
            dtype = np.int32 if self.n < 2**31 else np.int64
            self.table: np.ndarray | None = rng.permutation(self.n).astype(dtype)
        else:
            self.table = None
            bits = max(2, (self.n - 1).bit_length())
            self.half = (bits + 1) // 2
            self.keys = rng.integers(0, 2**62, size=4, dtype=np.uint64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.table is not None:
            return self.table[x].astype(np.int64)
        return _feistel(np.asarray(x, np.uint64), np.uint64(self.n), self.half, self.keys)


@njit(cache=True)
def _feistel(x, n, half, keys):
    out = np.empty(len(x), np.int64)
    mask = np.uint64((1 << half) - 1)
    h = np.uint64(half)
    for i in range(len(x)):
        v = x[i]
        while True:
            left = v >> h
            right = v & mask
            for k in range(4):
                f = (right * np.uint64(0x9E3779B97F4A7C15) + keys[k]) & np.uint64(2**64 - 1)
                f ^= f >> np.uint64(29)
                f = (f * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(2**64 - 1)
                f ^= f >> np.uint64(32)
                left, right = right, (left ^ f) & mask
            v = (left << h) | right
            if v < n:
                break
        out[i] = np.int64(v)
    return out


# -- distributions --------------------------------------------------------------------------
@dataclass
class UniformSampler:
    rows: int

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(0, self.rows, size=n, dtype=np.int64)


@register_distribution("uniform", {})
def uniform(rows: int, seed: np.random.SeedSequence) -> Sampler:
    """Every row equally likely."""
    return UniformSampler(rows)


class ZipfSampler:
    """P(rank r) ∝ (r + shift)^-alpha over ranks 1..rows, by inverse CDF; ranks -> ids by
    permutation. shift = 0 is Zipf; shift > 0 (Zipf-Mandelbrot) flattens the head, as in
    rating and click logs where the top few hundred items are about equally popular.

    The cumulative weights of the first ZIPF_EXACT_ROWS ranks are tabulated (exact for any
    alpha > 0, including alpha <= 1). Beyond, the tail mass is the integral of x^-alpha from
    K+1/2+shift to rows+1/2+shift (midpoint rule; relative error per rank ~alpha(alpha+1)/
    (24 r^2), below 1e-15 there) and tail draws invert that integral and round to the nearest
    rank.
    """

    _cache: dict[tuple[int, float, float], tuple[np.ndarray, np.ndarray, float, float]] = {}

    def __init__(self, rows: int, alpha: float, perm: Permutation | None, shift: float = 0.0):
        self.rows, self.alpha, self.perm, self.shift = rows, alpha, perm, float(shift)
        key = (rows, alpha, self.shift)
        if key not in self._cache:
            self._cache.clear()  # keep one table: the memory is per distinct (rows, alpha)
            self._cache[key] = self._tabulate(rows, alpha, self.shift)
        self.cdf, self.guide, self.head_mass, self.total = self._cache[key]

    @staticmethod
    def _tabulate(rows: int, alpha: float, shift: float = 0.0
                  ) -> tuple[np.ndarray, np.ndarray, float, float]:
        head = min(rows, ZIPF_EXACT_ROWS)
        cum = np.cumsum((np.arange(1, head + 1, dtype=np.float64) + shift) ** -alpha)
        tail = 0.0 if head == rows else _power_integral(head + 0.5 + shift, rows + 0.5 + shift,
                                                        alpha)
        total = float(cum[-1]) + tail
        cdf = cum / total
        head_mass = 1.0 if tail == 0.0 else float(cdf[-1])
        cdf[-1] = head_mass
        # guide[g] = first index with cdf > g/G: narrows each search to a few entries
        g = min(head, ZIPF_GUIDE_SIZE)
        guide = np.searchsorted(cdf, np.arange(g + 1) / g, side="right").astype(np.int64)
        return cdf, guide, head_mass, total

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        u = rng.random(n)
        head = len(self.cdf)
        if head == self.rows and self.perm is not None and self.perm.table is not None:
            # every rank in the table: search and permute in one kernel, no rank array
            return _guided_searchsorted(self.cdf, self.guide, u, self.perm.table)
        ranks = _guided_searchsorted(self.cdf, self.guide, u)  # 0-based
        if head < self.rows:
            in_tail = ranks >= head
            if in_tail.any():
                v = (u[in_tail] - self.head_mass) * self.total
                x = _power_integral_inverse(head + 0.5 + self.shift, v, self.alpha) - self.shift
                ranks[in_tail] = np.clip(np.floor(x + 0.5).astype(np.int64), head + 1,
                                         self.rows) - 1
        return ranks if self.perm is None else self.perm(ranks)


def _guided_searchsorted(cdf: np.ndarray, guide: np.ndarray, u: np.ndarray,
                         perm: np.ndarray | None = None) -> np.ndarray:
    """np.searchsorted(cdf, u, side='right'), exactly, searching only between guide
    entries (one neighbour of slack on each side absorbs rounding in u*G); with `perm`,
    perm[that] as int64 (the permuted ids, without a rank array in between).

    The guide slot int(u*G) and the output are made here in numpy (truncation, as `int`),
    so the kernel allocates nothing and calls no `int`/`min`/`max`: compiling those
    overloads was most of its first-run JIT time."""
    G = len(guide) - 1
    u = np.asarray(u, np.float64)
    slot = (u * G).astype(np.int64)
    out = np.empty(len(u), np.int64)
    if perm is None:
        _guided_search(cdf, guide, G, u, slot, out)
    else:
        _guided_search_permuted(cdf, guide, G, u, slot, perm, out)
    return out


#: draws ahead whose guide entry (then, half as far ahead, whose first CDF entry) the search
#: prefetches: the guide and CDF are 8 MB each for 1M rows, past the core's L2
_PF_GUIDE = 16


@njit(cache=True)
def _guide_lo(guide, slot, j):
    """The first candidate of draw j's search (the guide entry a slot below its own)."""
    a = slot[j] - 1
    return guide[a if a > 0 else 0]


@njit(cache=True)
def _search_from(cdf, guide, G, u, slot, j):
    """Draw j's rank: the binary search between its guide entries."""
    x = u[j]
    b = slot[j] + 2
    lo = _guide_lo(guide, slot, j)
    hi = guide[b if b < G else G]
    while lo < hi:
        mid = (lo + hi) >> 1
        if cdf[mid] > x:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def _prefetch_search(cdf, guide, slot, j):
    """Hints for the searches ahead of draw j: a guide entry, then a CDF entry."""
    n = len(slot)
    if j + _PF_GUIDE < n:
        prefetch(guide, slot[j + _PF_GUIDE])
    half = j + _PF_GUIDE // 2
    if half < n:
        prefetch(cdf, _guide_lo(guide, slot, half))


@njit(cache=True)
def _guided_search(cdf, guide, G, u, slot, out):
    for j in range(len(u)):
        _prefetch_search(cdf, guide, slot, j)
        out[j] = _search_from(cdf, guide, G, u, slot, j)


@njit(cache=True)
def _guided_search_permuted(cdf, guide, G, u, slot, perm, out):
    for j in range(len(u)):
        _prefetch_search(cdf, guide, slot, j)
        out[j] = perm[_search_from(cdf, guide, G, u, slot, j)]


def _power_integral(a: float, b: float, alpha: float) -> float:
    if alpha == 1.0:
        return math.log(b / a)
    return (b ** (1 - alpha) - a ** (1 - alpha)) / (1 - alpha)


def _power_integral_inverse(a: float, v: np.ndarray, alpha: float) -> np.ndarray:
    if alpha == 1.0:
        return a * np.exp(v)
    return (a ** (1 - alpha) + (1 - alpha) * v) ** (1 / (1 - alpha))


@register_distribution("zipf", {"alpha": 1.05, "permute": True})
def zipf(rows: int, seed: np.random.SeedSequence, alpha: float = 1.05,
         permute: bool = True) -> Sampler:
    """Zipf(alpha) popularity, hot ranks scattered over the table (FBGEMM TBE benchmark)."""
    return ZipfSampler(rows, alpha, Permutation(rows, seed) if permute else None)


@dataclass
class HotsetSampler:
    rows: int
    hot_rows: int
    p_hot: float
    perm: Permutation

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        u = rng.random(n)
        hot = u < self.p_hot
        idx = np.empty(n, np.int64)
        cold_rows = self.rows - self.hot_rows
        idx[hot] = np.minimum((u[hot] / self.p_hot * self.hot_rows).astype(np.int64),
                              self.hot_rows - 1) if self.hot_rows else 0
        if cold_rows:
            c = ~hot
            pos = (u[c] - self.p_hot) / (1.0 - self.p_hot) * cold_rows
            idx[c] = self.hot_rows + np.minimum(pos.astype(np.int64), cold_rows - 1)
        return self.perm(idx)


@register_distribution("hotset", {"hot_fraction": 0.01, "hot_access_fraction": 0.9})
def hotset(rows: int, seed: np.random.SeedSequence, hot_fraction: float = 0.01,
           hot_access_fraction: float = 0.9) -> Sampler:
    """`hot_access_fraction` of accesses uniform over a random `hot_fraction` of the rows,
    the rest uniform over the others (the 'hot-set' caches of the paper's baselines)."""
    hot_rows = min(rows, int(round(hot_fraction * rows)))
    if hot_fraction > 0 and hot_rows == 0:
        hot_rows = 1
    p_hot = hot_access_fraction
    if hot_rows == 0:
        p_hot = 0.0
    elif hot_rows == rows:
        p_hot = 1.0
    return HotsetSampler(rows, hot_rows, p_hot, Permutation(rows, seed))


# -- parameters -----------------------------------------------------------------------------
#: how a generator's messages name its arguments: a prefix for every name (`trace gen`:
#: "", so `--batch-size` style names are the caller's), or a mapping from an argument to
#: the key the user wrote (`run`: batch_size -> model.batch_size), its "" entry the prefix
#: of the names it leaves out (trace.params.) -- one key, one name in every message
FieldNames = str | Mapping[str, str]


def field_namer(fields: FieldNames) -> Callable[[str], str]:
    """The function naming a generator argument in a message (see FieldNames)."""
    if isinstance(fields, str):
        return lambda k: f"{fields}{k}"
    prefix = fields.get("", "")
    return lambda k: fields.get(k, f"{prefix}{k}")


def _check_params(distribution: str, params: dict[str, Any], source: str | None,
                  name: Callable[[str], str]) -> dict[str, Any]:
    factory = DISTRIBUTIONS.get(distribution, source=source, field=name("distribution"))
    known: dict[str, Any] = factory.PARAMS  # type: ignore[attr-defined]
    out = dict(known)
    for k, v in params.items():
        if k not in known:
            hint = ", ".join(sorted(known)) or "none"
            raise UserError(f"unknown parameter for distribution '{distribution}'; expected "
                            f"one of: {hint}", source=source, field=name(k))
        out[k] = v
    for k, v in out.items():
        default = known[k]
        if isinstance(default, bool):
            if not isinstance(v, bool):
                raise UserError(f"expected true or false, got {v!r}", source=source,
                                field=name(k))
        elif isinstance(default, list):
            if not isinstance(v, (list, tuple)) or any(
                    isinstance(x, bool) or not isinstance(x, (int, float)) for x in v):
                raise UserError(f"expected a list of numbers, e.g. [0.3, 0.7] or 0.3,0.7, got "
                                f"{v!r}", source=source, field=name(k))
            out[k] = list(v)
        elif isinstance(default, (int, float)):
            # a numeric parameter may be one value (every table) or a list (per table)
            vals = v if isinstance(v, (list, tuple)) else [v]
            if not vals:
                raise UserError("expected a number or a non-empty list of numbers (one per "
                                "table), got []", source=source, field=name(k))
            for i, x in enumerate(vals):
                if isinstance(x, bool) or not isinstance(x, (int, float)) \
                        or not math.isfinite(x) \
                        or (isinstance(default, int) and not float(x).is_integer()):
                    kind = "an integer" if isinstance(default, int) else "a number"
                    where = name(k) + (f"[{i}]" if vals is v else "")
                    raise UserError(f"expected {kind}, got {x!r}", source=source, field=where)
            conv = [float(x) if isinstance(default, float) else int(x) for x in vals]
            out[k] = conv if isinstance(v, (list, tuple)) else conv[0]
    for k in out:
        for i, x in enumerate(_as_list(out[k])):
            where = name(k) + (f"[{i}]" if isinstance(out[k], list) else "")
            if k == "alpha" and not x > 0:
                raise UserError(f"alpha must be > 0, got {x}", source=source, field=where)
            # by convention, every "*_fraction" parameter is a share in [0, 1]
            if k.endswith("_fraction") and isinstance(x, (int, float)) \
                    and not 0.0 <= x <= 1.0:
                raise UserError(f"expected a fraction in [0, 1], got {x}", source=source,
                                field=where)
    return out


def _as_list(v: Any) -> list:
    return v if isinstance(v, list) else [v]


def per_table_params(params: dict[str, Any], defaults: dict[str, Any], t: int
                     ) -> dict[str, Any]:
    """Table t's parameters: a list given for a numeric parameter holds one value per table
    (or a shorter cycle whose length divides the table count: table t takes entry t mod k)."""
    out = {}
    for k, v in params.items():
        d = defaults.get(k)
        numeric = isinstance(d, (int, float)) and not isinstance(d, bool)
        out[k] = v[t % len(v)] if numeric and isinstance(v, list) else v
    return out


def _check_param_lengths(distribution: str, params: dict[str, Any], num_tables: int,
                         source: str | None, name: Callable[[str], str]) -> None:
    defaults = DISTRIBUTIONS.get(distribution).PARAMS  # type: ignore[attr-defined]
    for k, v in params.items():
        d = defaults.get(k)
        if isinstance(d, (int, float)) and not isinstance(d, bool) and isinstance(v, list) \
                and num_tables % len(v):
            raise UserError(f"{len(v)} values for {num_tables} tables: expected one value, "
                            f"one per table, or a cycle whose length divides {num_tables}",
                            source=source, field=name(k))


@dataclass(frozen=True)
class GenSpec:
    """A validated generator configuration."""

    distribution: str
    table_rows: tuple[int, ...]
    batch_size: int
    num_batches: int
    pooling: tuple[int, ...]
    seed: int
    reuse: float
    params: dict[str, Any]
    pooling_sigma: float | tuple[float, ...] = 0.0

    def sigma(self, t: int) -> float:
        s = self.pooling_sigma
        return float(s[t]) if isinstance(s, tuple) else float(s)

    @property
    def num_tables(self) -> int:
        return len(self.table_rows)

    @functools.cached_property
    def bag_lengths(self) -> tuple[np.ndarray, ...]:
        """Per table, the B bag lengths every batch uses. With `pooling_sigma` > 0 they are
        drawn once, as FBGEMM's `generate_pooling_factors_from_stats`: trunc(N(L, sigma)),
        negatives -> 0, the same for every batch (key (3, t))."""
        out = []
        for t, L in enumerate(self.pooling):
            if self.sigma(t) > 0:
                x = _rng(self, 3, t).normal(L, self.sigma(t), self.batch_size)
                out.append(np.maximum(x.astype(np.int64), 0))
            else:
                out.append(np.full(self.batch_size, L, np.int64))
        return tuple(out)

    @property
    def accesses_per_batch(self) -> int:
        return int(sum(int(x.sum()) for x in self.bag_lengths))

    @property
    def block_batches(self) -> int:
        nominal = self.batch_size * sum(self.pooling)
        return max(1, BLOCK_ACCESSES // nominal)

    def meta(self) -> dict[str, Any]:
        return {"generator": {
            "version": GENERATOR_VERSION, "distribution": self.distribution,
            "table_rows": list(self.table_rows), "batch_size": self.batch_size,
            "num_batches": self.num_batches, "pooling": list(self.pooling),
            "seed": self.seed, "reuse": self.reuse, "params": dict(self.params),
            **({"pooling_sigma": (list(self.pooling_sigma) if isinstance(
                self.pooling_sigma, tuple) else self.pooling_sigma)}
               if self.pooling_sigma else {})}}


def _positive_int(v: Any, field: str, source: str | None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise UserError(f"expected a positive integer, got {v!r}", source=source, field=field)
    return int(v)


def make_spec(distribution: str, table_rows: Sequence[int] | int, batch_size: int,
              num_batches: int, pooling: int | Sequence[int], seed: int, reuse: float = 0.0,
              source: str | None = None, field_prefix: FieldNames = "",
              pooling_sigma: float | Sequence[float] = 0.0,
              **dist_params: Any) -> GenSpec:
    """Validate a generator configuration (UserError naming the field)."""
    name = field_namer(field_prefix)
    rows = [table_rows] if isinstance(table_rows, (int, np.integer)) else list(table_rows)
    if not rows:
        raise UserError("expected at least one table", source=source,
                        field=name("table_rows"))
    rows = [_positive_int(r, f"{name('table_rows')}[{i}]", source)
            for i, r in enumerate(rows)]
    pool = ([pooling] * len(rows) if isinstance(pooling, (int, np.integer))
            else list(pooling))
    if len(pool) != len(rows):
        raise UserError(f"expected one pooling factor per table ({len(rows)}), got "
                        f"{len(pool)}", source=source, field=name("pooling"))
    pool = [_positive_int(x, name("pooling"), source) for x in pool]
    batch_size = _positive_int(batch_size, name("batch_size"), source)
    num_batches = _positive_int(num_batches, name("num_batches"), source)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserError(f"expected a non-negative integer seed, got {seed!r}", source=source,
                        field=name("seed"))
    if isinstance(reuse, bool) or not isinstance(reuse, (int, float)) or not 0 <= reuse <= 1:
        raise UserError(f"expected a fraction in [0, 1], got {reuse!r}", source=source,
                        field=name("reuse"))
    sigmas = list(pooling_sigma) if isinstance(pooling_sigma, (list, tuple)) \
        else [pooling_sigma]
    if len(sigmas) not in (1, len(rows)):
        raise UserError(f"expected one pooling_sigma or one per table ({len(rows)}), got "
                        f"{len(sigmas)}", source=source, field=name("pooling_sigma"))
    for s in sigmas:
        if (isinstance(s, bool) or not isinstance(s, (int, float))
                or not math.isfinite(s) or s < 0):
            raise UserError(f"expected a standard deviation >= 0, got {s!r}",
                            source=source, field=name("pooling_sigma"))
    sigma: float | tuple[float, ...] = (float(sigmas[0]) if len(sigmas) == 1
                                        else tuple(float(x) for x in sigmas))
    # a batch is drawn whole (bag lengths, ids): check its memory before anything is drawn;
    # a bag drawn with sigma is at most a few sigma above its pooling
    widest = sum(L + 8 * max(sigmas) for L in pool)
    cause = ("batch_size" if batch_size >= widest else
             "pooling_sigma" if 8 * max(sigmas) * len(pool) > sum(pool) else "pooling")
    per_batch = math.ceil(batch_size * widest)
    memory_guard.check_generator(len(rows), batch_size, per_batch,
                                 min(BLOCK_ACCESSES, per_batch * num_batches), source=source,
                                 field=name(cause))
    params = _check_params(distribution, dist_params, source, name)
    _check_param_lengths(distribution, params, len(rows), source, name)
    spec = GenSpec(distribution, tuple(rows), batch_size, num_batches, tuple(pool), int(seed),
                   float(reuse), params, sigma)
    if spec.accesses_per_batch == 0:
        raise UserError("every drawn bag length is 0, so the trace would be empty: expected a "
                        "smaller pooling_sigma", source=source, field=name("pooling_sigma"))
    return spec


# -- generation -----------------------------------------------------------------------------
def _seed(spec: GenSpec, *key: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(spec.seed, spawn_key=key)


def _rng(spec: GenSpec, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(_seed(spec, *key)))


def _samplers(spec: GenSpec, tables: Sequence[int]) -> dict[int, Sampler]:
    """The sampler of each table in `tables` (its permutation built once), keyed by
    (0, t); a distribution whose `accesses` parameter is 0 (auto) is told its table's
    stream length."""
    factory = DISTRIBUTIONS.get(spec.distribution)
    auto = "accesses" in spec.params and spec.params["accesses"] == 0
    defaults = factory.PARAMS  # type: ignore[attr-defined]
    widths = _widths(spec)
    return {t: factory(spec.table_rows[t], _seed(spec, 0, t), **{
        **per_table_params(spec.params, defaults, t),
        **({"accesses": spec.num_batches * widths[t]} if auto else {})})
        for t in tables}


def _widths(spec: GenSpec) -> list[int]:
    """Ids of each table in one batch (the sum of its bag lengths)."""
    return [int(x.sum()) for x in spec.bag_lengths]


def _table_blocks(spec: GenSpec, t: int, sampler: Sampler) -> Iterator[np.ndarray]:
    """Table t's ids of each RNG block, shape (batches of the block, ids a batch): its
    own keyed draws, then FBGEMM's reuse from the block before (a table's stream depends
    on no other table's, so tables can be drawn apart and interleaved)."""
    width = _widths(spec)[t]
    count = int(width * spec.reuse)
    prev: np.ndarray | None = None
    for j, first in enumerate(range(0, spec.num_batches, spec.block_batches)):
        nbk = min(spec.block_batches, spec.num_batches - first)
        ids = sampler.sample(_rng(spec, 1, t, j), nbk * width).reshape(nbk, width)
        if count > 0:
            pos = _reuse_positions(_rng(spec, 2, t, j), nbk, width, count)
            start = 1 if prev is None else 0
            _apply_reuse(ids, pos, ids[0] if prev is None else prev, start)
        prev = ids[-1].copy()
        yield ids


def _block_layout(spec: GenSpec, nbk: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, batch bounds) of `nbk` whole batches, relative to their first."""
    T, B = spec.num_tables, spec.batch_size
    lengths = np.tile(np.concatenate(spec.bag_lengths), nbk)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets, np.arange(nbk + 1, dtype=np.int64) * (T * B)


def iter_blocks(spec: GenSpec) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(indices, offsets, batch_bounds) of each RNG block, relative to the block: each
    batch holds table 0's bags, then table 1's, ... (memory: one block)."""
    T = spec.num_tables
    samplers = _samplers(spec, range(T))
    streams = [_table_blocks(spec, t, samplers[t]) for t in range(T)]
    for first in range(0, spec.num_batches, spec.block_batches):
        nbk = min(spec.block_batches, spec.num_batches - first)
        cols = [next(s) for s in streams]
        indices = np.concatenate(cols, axis=1).ravel() if T > 1 else cols[0].ravel()
        offsets, bounds = _block_layout(spec, nbk)
        yield indices, offsets, bounds


def _fill_tables(spec: GenSpec, tables: Sequence[int], out: np.ndarray) -> None:
    """Write the ids of `tables` into `out` (num_batches x ids a batch, the in-memory
    trace's indices): table t's at columns sum(widths[:t]).. of every batch."""
    widths = _widths(spec)
    col = np.concatenate(([0], np.cumsum(widths))).astype(np.int64)
    for t, sampler in _samplers(spec, tables).items():
        first = 0
        for ids in _table_blocks(spec, t, sampler):
            out[first:first + len(ids), col[t]:col[t + 1]] = ids
            first += len(ids)


def _fill_group(state: tuple[GenSpec, np.ndarray], tables: list[int]) -> None:
    """A forked worker's share of `_fill_parallel` (`fork_map`)."""
    spec, out = state
    _fill_tables(spec, tables, out)


def _fill_parallel(spec: GenSpec, out: np.ndarray, jobs: int) -> bool:
    """Draw the tables in `jobs` forked processes, each writing its tables' columns into
    `out` (shared memory); False where `fork` is unavailable (the caller draws serially)."""
    from scratchpipe_sim.traces.forked import can_fork, fork_map

    if not can_fork():
        return False
    widths = _widths(spec)
    groups: list[list[int]] = [[] for _ in range(jobs)]
    load = [0] * jobs
    for t in sorted(range(spec.num_tables), key=lambda t: -widths[t]):  # longest first
        k = load.index(min(load))
        groups[k].append(t)
        load[k] += widths[t]
    fork_map(_fill_group, (spec, out), [g for g in groups if g], jobs)
    return True


def _reuse_positions(rng: np.random.Generator, nbk: int, width: int, count: int) -> np.ndarray:
    """`count` distinct positions per batch, uniformly (FBGEMM: randperm(B*L)[:count])."""
    if count >= width:
        return np.tile(np.arange(width, dtype=np.int64), (nbk, 1))
    keys = rng.random((nbk, width))
    return np.argpartition(keys, count - 1, axis=1)[:, :count]


@njit(cache=True)
def _apply_reuse(ids, pos, prev, start):
    """Batch k copies ids[k-1] at its reuse positions, in order (k-1 already reused)."""
    for k in range(start, ids.shape[0]):
        src = prev if k == 0 else ids[k - 1]
        for p in pos[k]:
            ids[k, p] = src[p]


def generate_trace(distribution: str, table_rows: Sequence[int] | int, batch_size: int,
                   num_batches: int, pooling: int | Sequence[int], seed: int,
                   reuse: float = 0.0, source: str | None = None,
                   field_prefix: FieldNames = "",
                   pooling_sigma: float = 0.0, jobs: int = 1, **dist_params: Any) -> Trace:
    """A synthetic trace in memory: `num_batches` batches of `batch_size` samples, each
    sample with `pooling[t]` ids of table t drawn from `distribution`; `reuse` of each
    batch's ids (per table) copied from the previous batch at the same positions;
    `pooling_sigma` > 0 draws bag lengths around `pooling` (see `GenSpec.bag_lengths`);
    `jobs` processes draw the tables (the same trace for every value)."""
    spec = make_spec(distribution, table_rows, batch_size, num_batches, pooling, seed, reuse,
                     source, field_prefix, pooling_sigma, **dist_params)
    return trace_from_spec(spec, jobs)


def trace_from_spec(spec: GenSpec, jobs: int = 1) -> Trace:
    """The trace `spec` describes, in memory; `jobs > 1` draws its tables in that many
    forked processes into shared memory (the same ids: each table's stream is keyed by its
    index alone). A trace of `STREAM_MIN_BYTES` or more is written to disk block by block
    instead and memory-mapped (`streamed_trace`): the same arrays, bounded memory."""
    W = spec.accesses_per_batch
    n = spec.num_batches * W
    jobs = min(int(jobs), spec.num_tables)
    # uint32 ids where every table fits, as a store holds them (half the memory and the
    # traffic of every pass over the trace; the ids and `content_sha256` are the same)
    dtype = index_dtype_for(spec.table_rows)
    if spec_nbytes(spec) >= STREAM_MIN_BYTES:
        return streamed_trace(spec)
    if jobs > 1 and n >= PARALLEL_MIN_ACCESSES:
        import mmap

        # MAP_SHARED | MAP_ANONYMOUS: the workers' writes
        buf = mmap.mmap(-1, max(n, 1) * dtype.itemsize)
        indices = np.frombuffer(buf, dtype, count=n)
        if not _fill_parallel(spec, indices.reshape(spec.num_batches, W), jobs):
            _fill_tables(spec, range(spec.num_tables), indices.reshape(spec.num_batches, W))
    else:
        indices = np.empty(n, dtype)
        _fill_tables(spec, range(spec.num_tables), indices.reshape(spec.num_batches, W))
    offsets, bounds = _block_layout(spec, spec.num_batches)
    return Trace(np.asarray(spec.table_rows, np.int64), indices, offsets, bounds,
                 spec.batch_size, spec.meta(), f"<{spec.distribution} seed={spec.seed}>")


def generate_to_store(path: str | os.PathLike, distribution: str,
                      table_rows: Sequence[int] | int, batch_size: int, num_batches: int,
                      pooling: int | Sequence[int], seed: int, reuse: float = 0.0,
                      overwrite: bool = False, source: str | None = None,
                      field_prefix: FieldNames = "", pooling_sigma: float = 0.0,
                      **dist_params: Any) -> Path:
    """The same trace as `generate_trace`, written block by block into a `.sptrace`
    (memory: one RNG block of ids plus the samplers' tables)."""
    spec = make_spec(distribution, table_rows, batch_size, num_batches, pooling, seed, reuse,
                     source, field_prefix, pooling_sigma, **dist_params)
    return store_from_spec(spec, path, overwrite)


def spec_nbytes(spec: GenSpec) -> int:
    """Bytes of the trace's arrays (ids, bag offsets, batch bounds), in memory or on disk."""
    bags = spec.num_batches * spec.num_tables * spec.batch_size
    index_bytes = index_dtype_for(spec.table_rows).itemsize
    return (spec.num_batches * spec.accesses_per_batch * index_bytes + (bags + 1) * 8
            + (spec.num_batches + 1) * 8)


def spec_disk_bytes(spec: GenSpec) -> int:
    """Bytes of the trace's `.sptrace` data files (`store.store_nbytes`): no offsets when
    every bag holds the same number of ids."""
    lengths = {int(x) for arr in spec.bag_lengths for x in np.unique(arr)}
    bags = spec.num_batches * spec.num_tables * spec.batch_size
    return store_nbytes(spec.num_batches * spec.accesses_per_batch,
                        index_dtype_for(spec.table_rows).itemsize, bags, spec.num_batches,
                        len(lengths) == 1)


def streamed_trace(spec: GenSpec, folder: str | os.PathLike | None = None) -> Trace:
    """The trace `spec` describes, written block by block into a private `.sptrace` under
    `folder` (default: the user cache folder's `traces/`) and memory-mapped; the folder is
    removed at once (the maps keep its data until they close), so nothing is left behind
    and memory stays one RNG block whatever the trace's length. Same arrays, meta and
    source as the in-memory trace."""
    import shutil
    import tempfile

    from scratchpipe_sim.traces.disk_cache import cache_subfolder
    from scratchpipe_sim.traces.store import read_trace

    root = Path(folder) if folder is not None else cache_subfolder("traces")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".generated.", dir=root))
    try:
        stored = read_trace(store_from_spec(spec, tmp / "t.sptrace"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Trace(np.asarray(spec.table_rows, np.int64), stored.indices, stored.offsets,
                 stored.batch_bounds, spec.batch_size, spec.meta(),
                 f"<{spec.distribution} seed={spec.seed}>")


def store_from_spec(spec: GenSpec, path: str | os.PathLike, overwrite: bool = False,
                    progress: Callable[[int], None] | None = None) -> Path:
    """Write the trace `spec` describes to a `.sptrace` folder, block by block, after
    checking that it fits on the disk; `progress(batches)` after each block."""
    need = spec_disk_bytes(spec)
    memory_guard.check_disk(need, Path(path).resolve().parent,
                            f"a trace of {spec.num_batches} batches x "
                            f"{spec.accesses_per_batch} ids", "expected fewer batches",
                            source=str(path), field="num_batches")
    with TraceWriter(path, spec.table_rows, spec.batch_size, spec.meta(), overwrite) as w:
        for indices, offsets, bounds in iter_blocks(spec):
            w.append_batches(indices, offsets, bounds)
            if progress is not None:
                progress(len(bounds) - 1)
    return Path(path)
