"""`--distribution burst`: popularity skew plus temporal bursts, with four parameters.

Real interaction logs have both: some rows are popular for the whole trace (what a static
cache exploits) and a row just used is likely used again soon (a user's session, a trending
item: what LRU exploits). Each access of a table's stream is

* with probability `repeat_fraction`, a *repeat*: the row of the access `lag` accesses
  earlier in the same table's stream, lag ~ P(k) ∝ ∫_k^{k+1} x^-lag_alpha dx on
  1..`max_lag` (a large `lag_alpha` means "the previous access": sessions; a small one
  spreads repeats over a long window: trends), or
* a *fresh* draw from the popularity law P(rank r) ∝ (r + head_scale·rows)^-alpha
  (Zipf-Mandelbrot: `head_scale` = 0 is Zipf; > 0 flattens the head), ranks scattered
  over the table by the generators' seeded `Permutation`.

A repeat copies an earlier access, so by induction every access has the popularity law as
its marginal distribution: `alpha` and `head_scale` set the static (frequency) hit curve,
`repeat_fraction`, `lag_alpha` the extra LRU hits. A lag beyond the stream so far draws
fresh. `scratchpipe-sim trace fit` fits the four per table (`distribution_fit.py`); lists
give one value per table (see `generators.per_table_params`).

Memory per table: `max_lag` int64 ids of history (512 KiB at the default) plus the Zipf
table. The history carries over calls, so a trace cut into RNG blocks is one stream.
"""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.generators import Permutation, ZipfSampler, register_distribution

#: default history of repeats, in accesses of one table's stream.
DEFAULT_MAX_LAG = 1 << 16
#: largest `max_lag` accepted (8 bytes of history per access of lag per table).
MAX_MAX_LAG = 1 << 24


@njit(cache=True)
def _repeat(fresh, repeat_u, p, lag, hist, state):
    """out[i] = hist[i - lag[i]] when repeat_u[i] < p and that far back exists, else fresh[i];
    hist is a ring buffer of the last len(hist) outputs, state = [next slot, filled]."""
    H = len(hist)
    n = len(fresh)
    out = np.empty(n, np.int64)
    pos = state[0]
    filled = state[1]
    for i in range(n):
        k = lag[i]
        if repeat_u[i] < p and k <= filled:
            j = pos - k
            if j < 0:
                j += H
            v = hist[j]
        else:
            v = fresh[i]
        hist[pos] = v
        pos += 1
        if pos == H:
            pos = 0
        if filled < H:
            filled += 1
        out[i] = v
    state[0] = pos
    state[1] = filled
    return out


def lag_draws(u: np.ndarray, lag_alpha: float, max_lag: int) -> np.ndarray:
    """Lags in 1..max_lag from uniforms: floor of the density ∝ x^-lag_alpha on
    [1, max_lag+1), by its inverse CDF."""
    top = max_lag + 1.0
    if abs(lag_alpha - 1.0) < 1e-12:
        x = top ** u
    else:
        e = 1.0 - lag_alpha
        x = (1.0 + u * (top ** e - 1.0)) ** (1.0 / e)
    return np.clip(np.floor(x).astype(np.int64), 1, max_lag)


class BurstSampler:
    """One table's stream: repeats of recent accesses mixed with Zipf-Mandelbrot draws."""

    def __init__(self, rows: int, alpha: float, head_scale: float, repeat_fraction: float,
                 lag_alpha: float, max_lag: int, perm: Permutation | None):
        self.rows = int(rows)
        self.p = float(repeat_fraction)
        self.lag_alpha, self.max_lag = float(lag_alpha), int(max_lag)
        self.zipf = ZipfSampler(self.rows, float(alpha), perm,
                                shift=float(head_scale) * self.rows)
        self.hist = np.zeros(self.max_lag, np.int64)
        self.state = np.zeros(2, np.int64)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        fresh = self.zipf.sample(rng, n)
        if self.p <= 0.0:
            u = np.ones(n)
            lag = np.ones(n, np.int64)
        else:
            u = rng.random(n)
            lag = lag_draws(rng.random(n), self.lag_alpha, self.max_lag)
        return _repeat(fresh, u, self.p, lag, self.hist, self.state)


@register_distribution("burst", {"alpha": 1.0, "head_scale": 0.0, "repeat_fraction": 0.0,
                                 "lag_alpha": 2.0, "max_lag": DEFAULT_MAX_LAG,
                                 "permute": True})
def burst(rows: int, seed: np.random.SeedSequence, alpha: float = 1.0,
          head_scale: float = 0.0, repeat_fraction: float = 0.0, lag_alpha: float = 2.0,
          max_lag: int = DEFAULT_MAX_LAG, permute: bool = True) -> BurstSampler:
    """Zipf-Mandelbrot popularity (`alpha`, `head_scale`) with a `repeat_fraction` of
    accesses repeating the access `lag` ~ lag^-`lag_alpha` (1..`max_lag`) earlier."""
    if not head_scale >= 0:
        raise UserError(f"head_scale must be >= 0, got {head_scale}", field="head_scale")
    if not lag_alpha > 0:
        raise UserError(f"lag_alpha must be > 0, got {lag_alpha}", field="lag_alpha")
    if not 1 <= max_lag <= MAX_MAX_LAG:
        raise UserError(f"expected 1 <= max_lag <= {MAX_MAX_LAG} accesses, got {max_lag}",
                        field="max_lag")
    return BurstSampler(rows, alpha, head_scale, repeat_fraction, lag_alpha, max_lag,
                        Permutation(rows, seed) if permute else None)
