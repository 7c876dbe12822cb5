"""`--distribution calibrated`: per-row popularity that reproduces a Meta locality histogram.

Meta's `locality_stats.txt` gives, per power-of-two bucket of "accesses per distinct row",
the share of distinct rows and the share of accesses. Drawing ids i.i.d. from popularity
weights blurs the small buckets (a row with weight 3 is drawn 1, 2, 5 times), so instead the
sampler fixes every touched row's access count and then emits a uniformly random order of
that multiset:

1. `plan_counts`: for the stream length N (the table's accesses), choose rows per bucket
   n_b and accesses per bucket S_b (S_b ~ a_b N, n_b ~ u_b U) minimising the larger of the
   two per-bucket share errors, searching the number of distinct rows U (<= table rows);
   a bucket whose share is too small for one row of its size at this N is folded into the
   next lower one (that is what limits the distance at small N: the (32768+ bucket needs
   N >~ 32769 / a_16 accesses).
2. Counts inside a bucket follow a truncated power law whose exponent gives the bucket mean
   S_b / n_b, then are nudged by +-1 to sum to S_b exactly, staying inside the bucket.
3. The touched rows are a seeded random subset of the table; the stream is a uniform
   random order of the count multiset, generated window by window (`CalibratedSampler`)
   with memory O(U). Past N accesses the counts are refilled (another pass).

The histogram of the generated trace therefore equals the plan's exactly. The plan's
distance (max absolute per-bucket difference, rows and accesses) is `plan.distance`; for
any trace, `scratchpipe-sim trace locality TRACE --target FILE` prints it. Temporal order is
i.i.d. given the counts; for reuse-distance (temporal) locality see `reuse_distance.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.generators import register_distribution
from scratchpipe_sim.traces.stats import NUM_BUCKETS, LocalityStats, read_locality_stats

#: inclusive access-count range of each bucket: (0,1] -> 1..1, (1,2] -> 2..2, (2,4] -> 3..4,
#: ..., (32768+ -> 32769.. (upper end open; see `_bucket_counts`).
BUCKET_LO = np.array([1, 2] + [(1 << (k - 1)) + 1 for k in range(2, 16)] + [32769], np.int64)
BUCKET_HI = np.array([1, 2] + [1 << k for k in range(2, 16)] + [-1], np.int64)


@dataclass(frozen=True)
class Target:
    """Target shares per bucket (each normalised to sum to 1)."""

    name: str
    row_share: np.ndarray
    access_share: np.ndarray

    @staticmethod
    def from_shares(rows, accesses, name: str = "inline", source: str | None = None) -> Target:
        r = np.asarray(rows, np.float64)
        a = np.asarray(accesses, np.float64)
        for arr, fld in ((r, "row_shares"), (a, "access_shares")):
            if arr.shape != (NUM_BUCKETS,) or np.any(~np.isfinite(arr)) or np.any(arr < 0) \
                    or arr.sum() <= 0:
                raise UserError(f"expected {NUM_BUCKETS} non-negative shares (Meta's buckets "
                                f"(0,1] .. (32768+), got {np.atleast_1d(arr).tolist()}",
                                source=source, field=fld)
        return Target(name, r / r.sum(), a / a.sum())


def load_target(path: str, block: str | int = "mean") -> Target:
    """A target from a `locality_stats.txt`: one block (index or file name) or the mean."""
    blocks: list[LocalityStats] = read_locality_stats(Path(path))
    if not blocks:
        raise UserError("no histogram blocks in the file", source=str(path))
    if block == "mean":
        r = np.mean([b.row_share for b in blocks], axis=0)
        a = np.mean([b.access_share for b in blocks], axis=0)
        return Target.from_shares(r, a, f"{Path(path).name}:mean", str(path))
    names = [b.name for b in blocks]
    if isinstance(block, int) or (isinstance(block, str) and block.isdigit()):
        i = int(block)
        if not 0 <= i < len(blocks):
            raise UserError(f"block {i} out of range: the file has {len(blocks)}",
                            source=str(path), field="block")
        b = blocks[i]
    elif block in names:
        b = blocks[names.index(block)]
    else:
        raise UserError(f"no block '{block}': expected 'mean', an index or one of "
                        f"{', '.join(names)}", source=str(path), field="block")
    return Target.from_shares(b.row_share, b.access_share, f"{Path(path).name}:{b.name}",
                              str(path))


@dataclass(frozen=True)
class Plan:
    """Rows and accesses per bucket for one stream, and how far it is from the target."""

    rows: np.ndarray  # n_b
    accesses: np.ndarray  # S_b
    row_share: np.ndarray
    access_share: np.ndarray
    distance: float  # max over buckets of |plan share - target share|, rows and accesses

    @property
    def unique(self) -> int:
        return int(self.rows.sum())


def _largest_remainder(shares: np.ndarray, total: int) -> np.ndarray:
    raw = shares * total
    out = np.floor(raw).astype(np.int64)
    rest = total - int(out.sum())
    if rest > 0:
        out[np.argsort(-(raw - out), kind="stable")[:rest]] += 1
    return out


def _plan_for(target: Target, S0: np.ndarray, U: float) -> tuple[np.ndarray, np.ndarray]:
    S = S0.copy()
    n = np.zeros(NUM_BUCKETS, np.int64)
    carry = 0
    for b in range(NUM_BUCKETS - 1, 0, -1):  # high buckets first; overflow moves down
        s = int(S[b]) + carry
        carry = 0
        lo = int(BUCKET_LO[b])
        hi = int(BUCKET_HI[b]) if BUCKET_HI[b] > 0 else max(s, lo)
        if s < lo:
            carry, S[b] = s, 0
            continue
        want = int(round(target.row_share[b] * U))
        nb_ = min(max(want, -(-s // hi), 1), s // lo)
        S[b] = min(max(s, lo * nb_), hi * nb_)
        carry = s - int(S[b])
        n[b] = nb_
    S[0] += carry
    n[0] = S[0]
    return n, S


def plan_counts(target: Target, accesses: int, max_rows: int) -> Plan:
    """Rows and accesses per bucket for a stream of `accesses`, at most `max_rows` rows."""
    N = int(accesses)
    S0 = _largest_remainder(target.access_share, N)
    a = target.access_share
    # distinct rows: bucket (0,1] has one access per row, so U ~ N a_0 / u_0; else N/2
    u0 = target.row_share[0]
    mean = N * a[0] / u0 if u0 > 0 and a[0] > 0 else N / 2.0
    best = None
    fewest = None  # the fewest distinct rows any searched plan needs: the true minimum
    for U in np.geomspace(max(1.0, 0.5 * mean), 2.0 * mean, 161):
        n, S = _plan_for(target, S0, float(U))
        fewest = int(n.sum()) if fewest is None else min(fewest, int(n.sum()))
        if n.sum() > max_rows:
            continue
        rs, as_ = n / n.sum(), S / N
        d = float(max(np.abs(rs - target.row_share).max(), np.abs(as_ - a).max()))
        if best is None or d < best[0]:
            best = (d, n, S, rs, as_)
    if best is None:
        raise UserError(f"calibrated: {N} accesses need at least {fewest} distinct rows "
                        f"but the table has {max_rows}; expected more rows or fewer "
                        "accesses", field="table_rows")
    d, n, S, rs, as_ = best
    return Plan(n, S, rs, as_, d)


def _bucket_counts(rng: np.random.Generator, n: int, total: int, lo: int, hi: int) -> np.ndarray:
    """n counts in [lo, hi] summing to `total` (lo*n <= total <= hi*n), power-law shaped."""
    if n == 0:
        return np.zeros(0, np.int64)
    if lo == hi:
        return np.full(n, lo, np.int64)
    m = min(total / n + 0.5, hi + 0.5)  # floor() below lowers the mean by about 1/2
    beta = _power_exponent(lo, hi + 1.0, m)
    u = rng.random(n)
    x = _power_inverse(lo, hi + 1.0, beta, u)
    c = np.clip(np.floor(x).astype(np.int64), lo, hi)
    diff = total - int(c.sum())
    while diff != 0:
        room = np.flatnonzero(c < hi) if diff > 0 else np.flatnonzero(c > lo)
        k = min(abs(diff), len(room))
        pick = rng.choice(room, size=k, replace=False)
        c[pick] += 1 if diff > 0 else -1
        diff -= k if diff > 0 else -k
    return c


def _power_mean(a: float, b: float, beta: float) -> float:
    """Mean of density ∝ x^-beta on [a, b)."""
    if abs(beta - 1.0) < 1e-9:
        return (b - a) / math.log(b / a)
    if abs(beta - 2.0) < 1e-9:
        return math.log(b / a) / (1.0 / a - 1.0 / b)
    num = (b ** (2 - beta) - a ** (2 - beta)) / (2 - beta)
    den = (b ** (1 - beta) - a ** (1 - beta)) / (1 - beta)
    return num / den


def _power_exponent(a: float, b: float, mean: float) -> float:
    lo, hi = -30.0, 30.0  # mean falls as beta rises
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _power_mean(a, b, mid) > mean:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _power_inverse(a: float, b: float, beta: float, u: np.ndarray) -> np.ndarray:
    if abs(beta - 1.0) < 1e-9:
        return a * (b / a) ** u
    e = 1.0 - beta
    return (a ** e + u * (b ** e - a ** e)) ** (1.0 / e)


def row_counts(plan: Plan, rng: np.random.Generator) -> np.ndarray:
    """Access count of each touched row (bucket by bucket, then shuffled)."""
    parts = []
    for b in range(NUM_BUCKETS):
        hi = int(BUCKET_HI[b]) if BUCKET_HI[b] > 0 else int(plan.accesses[b])
        parts.append(_bucket_counts(rng, int(plan.rows[b]), int(plan.accesses[b]),
                                    int(BUCKET_LO[b]), max(hi, int(BUCKET_LO[b]))))
    counts = np.concatenate(parts)
    return counts[rng.permutation(len(counts))]


# -- the sampler ------------------------------------------------------------------------------
#: accesses per shuffle window (see `CalibratedSampler`); part of the stream's definition.
WINDOW_ACCESSES = 1 << 20


class CalibratedSampler:
    """A uniform shuffle of a fixed per-row count multiset, streamed window by window.

    Each occurrence gets an i.i.d. uniform window among W = ceil(N / WINDOW_ACCESSES)
    (sequential binomial splitting of every row's remaining count, vectorised), each window
    is shuffled, and windows are concatenated: exactly a uniform random order of the
    multiset, with O(rows) memory. The sampler's own seeded generator drives it, so the
    stream does not depend on how the caller cuts it into blocks.
    """

    def __init__(self, rows: int, seed: np.random.SeedSequence, target: Target,
                 accesses: int):
        self.plan = plan_counts(target, accesses, rows)
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self.counts = row_counts(self.plan, self._rng)
        self.row_ids = self._rng.choice(rows, size=len(self.counts), replace=False)
        self.windows = max(1, -(-int(self.counts.sum()) // WINDOW_ACCESSES))
        self._buf = np.zeros(0, np.int64)
        self._refill()

    def _refill(self) -> None:
        self._left = self.counts.copy()
        self._active = np.flatnonzero(self._left > 0)
        self._windows_left = self.windows

    def _window(self) -> np.ndarray:
        if self._windows_left == 0:  # past N accesses: another pass over the same counts
            self._refill()
        rem = self._left[self._active]
        x = rem if self._windows_left == 1 else self._rng.binomial(rem, 1.0 / self._windows_left)
        self._left[self._active] = rem - x
        self._windows_left -= 1
        ids = np.repeat(self._active, x)
        self._rng.shuffle(ids)
        self._active = self._active[rem - x > 0]
        return ids

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        parts, have = [self._buf], len(self._buf)
        while have < n:
            w = self._window()
            parts.append(w)
            have += len(w)
        buf = np.concatenate(parts)
        self._buf = buf[n:]
        return self.row_ids[buf[:n]]


@register_distribution("calibrated", {"target": "", "block": "mean", "row_shares": [],
                                      "access_shares": [], "accesses": 0})
def calibrated(rows: int, seed: np.random.SeedSequence, target: str = "",
               block: str | int = "mean", row_shares: list | None = None,
               access_shares: list | None = None, accesses: int = 0) -> CalibratedSampler:
    """Per-row counts matching a Meta locality histogram (`target` file, or inline shares).

    `accesses` is the stream length the histogram is matched over (0: the table's whole
    trace, filled in by the generator)."""
    if target and (row_shares or access_shares):
        raise UserError("give either target (a locality_stats.txt) or row_shares and "
                        "access_shares, not both", field="target")
    if target:
        tgt = load_target(str(target), block)
    elif row_shares or access_shares:
        tgt = Target.from_shares(row_shares or [], access_shares or [])
    else:
        raise UserError("calibrated needs target=FILE (a locality_stats.txt) or inline "
                        "row_shares and access_shares", field="target")
    if isinstance(accesses, bool) or not isinstance(accesses, int) or accesses < 1:
        raise UserError(f"expected a positive number of accesses, got {accesses!r}",
                        field="accesses")
    return CalibratedSampler(rows, seed, tgt, accesses)

