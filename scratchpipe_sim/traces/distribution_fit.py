"""`scratchpipe-sim trace fit`: the `burst` generator's parameters, fitted to a trace.

Per table, the table's own stream (its ids in trace order) is summarised by two curves at
capacities of `FIT_FRACTIONS` of its rows: the exact LRU miss ratio (stack distances) and
the static miss ratio (the top-C rows by access count pinned, their first touches missing,
as `policies/static.py` counts). The four parameters (alpha, head_scale,
repeat_fraction, lag_alpha; see `temporal.py`) minimise the sum of squared differences
between those curves and the same curves of a synthetic stream of the same length, drawn
with a fixed seed (common random numbers keep the objective deterministic and smooth
enough for Nelder-Mead, run in unbounded coordinates from two starts: few repeats and
mostly repeats). Rows, the mean bag length and its spread come straight from the trace.

Cost: about 2 x 150 synthetic streams per table of at most `max_accesses` accesses (the
trace's first ones); a table's curves are O(n log n) in Numba.

The result is a YAML file (`write_fit`) with a comment on every key; `load_fit` reads it
back for `trace gen --from-fit`, and `preset_yaml` writes it as a `configs/traces/` preset
(`trace fit --preset`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.config.loader import load_yaml_text, read_text
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.stats import stack_distances
from scratchpipe_sim.traces.temporal import DEFAULT_MAX_LAG, BurstSampler

FIT_VERSION = 1
#: capacities (shares of a table's rows) at which the LRU and static curves are matched.
FIT_FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
#: and at these absolute capacities (rows), which see repeats at short lags.
FIT_ROWS = (1, 2, 4, 8)
#: default cap on the accesses per table the fit looks at (the trace's first ones).
DEFAULT_MAX_ACCESSES = 1 << 17
#: seed of the synthetic streams inside the fit (part of the fit's definition).
FIT_SEED = 20240611
#: parameter bounds: (alpha, head_scale, repeat_fraction, lag_alpha).
BOUNDS = ((0.01, 20.0), (1e-6, 10.0), (0.0, 0.999), (1.01, 12.0))
PARAM_NAMES = ("alpha", "head_scale", "repeat_fraction", "lag_alpha")


@dataclass(frozen=True)
class TableFit:
    rows: int
    accesses: int
    pooling: int
    pooling_sigma: float
    alpha: float
    head_scale: float
    repeat_fraction: float
    lag_alpha: float
    max_lag: int = DEFAULT_MAX_LAG
    rms_error: float = 0.0


@dataclass(frozen=True)
class Fit:
    source: str
    batch_size: int
    num_batches: int
    accesses: int
    tables: tuple[TableFit, ...]
    check: dict[str, Any] = field(default_factory=dict)

    @property
    def table_rows(self) -> list[int]:
        return [t.rows for t in self.tables]

    def params(self) -> dict[str, list]:
        """The generator's per-table parameter lists (`make_spec(**params)`)."""
        out: dict[str, Any] = {k: [getattr(t, k) for t in self.tables] for k in PARAM_NAMES}
        out["max_lag"] = [t.max_lag for t in self.tables]
        return out


# -- per-table streams and their curves ------------------------------------------------------
def table_streams(trace: Trace, max_accesses: int) -> list[np.ndarray]:
    """Each table's ids (table-relative) in trace order, at most `max_accesses` each."""
    T = trace.num_tables
    parts: list[list[np.ndarray]] = [[] for _ in range(T)]
    have = np.zeros(T, np.int64)
    offs = trace.table_offsets
    for c in trace.iter_chunks():
        order = np.argsort(c.tables, kind="stable")
        counts = np.bincount(c.tables, minlength=T)
        ids = c.ids[order]
        start = 0
        for t in range(T):
            n = int(counts[t])
            take = min(n, max_accesses - int(have[t]))
            if take > 0:
                parts[t].append(ids[start:start + take] - offs[t])
                have[t] += take
            start += n
        if np.all(have >= max_accesses):
            break
    return [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]


def bag_lengths(trace: Trace) -> list[np.ndarray]:
    """Every bag's length, per table."""
    bounds = np.asarray(trace.batch_bounds, np.int64)
    lengths = np.diff(np.asarray(trace.offsets, np.int64))
    T = trace.num_tables
    per_batch = np.diff(bounds)
    batch_of = np.repeat(np.arange(len(per_batch)), per_batch)
    rel = np.arange(len(lengths)) - bounds[batch_of]
    table_of = rel // (per_batch[batch_of] // T)
    return [lengths[table_of == t] for t in range(T)]


def capacities(rows: int) -> np.ndarray:
    """`FIT_ROWS` (short repeats: lag 1 is stack distance 1) and `FIT_FRACTIONS` of rows."""
    caps = np.concatenate((FIT_ROWS, np.round(np.asarray(FIT_FRACTIONS) * rows)))
    return np.unique(np.clip(caps, 1, rows).astype(np.int64))


def curves(ids: np.ndarray, rows: int, caps: np.ndarray) -> np.ndarray:
    """[LRU miss ratio at caps, static miss ratio at caps] of one table's stream."""
    n = len(ids)
    d = stack_distances(ids, rows)
    hist = np.bincount(d, minlength=int(caps.max()) + 1)
    lru = 1.0 - np.cumsum(hist[1:])[caps - 1] / n
    counts = np.sort(np.bincount(ids, minlength=rows))[::-1]
    top = np.cumsum(counts)[np.minimum(caps, rows) - 1]
    touched = np.cumsum(counts > 0)[np.minimum(caps, rows) - 1]
    static = 1.0 - (top - touched) / n
    return np.concatenate([lru, static])


def synthetic_stream(rows: int, n: int, alpha: float, head_scale: float,
                     repeat_fraction: float, lag_alpha: float, max_lag: int = DEFAULT_MAX_LAG,
                     seed: int = FIT_SEED) -> np.ndarray:
    """n accesses of the burst model over `rows` (ids unpermuted: curves ignore labels)."""
    s = BurstSampler(rows, alpha, head_scale, repeat_fraction, lag_alpha, max_lag, None)
    return s.sample(np.random.Generator(np.random.PCG64(seed)), n)


# -- optimisation -----------------------------------------------------------------------------
def _unpack(v: np.ndarray) -> tuple[float, float, float, float]:
    (a0, a1), (h0, h1), (p0, p1), (b0, b1) = BOUNDS
    alpha = min(max(math.exp(v[0]), a0), a1)
    head = min(max(math.exp(v[1]), h0), h1)
    p = min(max(1.0 / (1.0 + math.exp(-v[2])), p0), p1)
    lag = min(max(1.0 + math.exp(v[3]), b0), b1)
    return alpha, head, p, lag


def _pack(alpha: float, head: float, p: float, lag: float) -> np.ndarray:
    return np.array([math.log(alpha), math.log(head), math.log(p / (1 - p)), math.log(lag - 1)])


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: Sequence[float],
                max_evals: int = 150, tol: float = 1e-7) -> tuple[np.ndarray, float]:
    """Minimise f from x0 (standard reflection/expansion/contraction/shrink; deterministic)."""
    n = len(x0)
    pts = [np.asarray(x0, float)] + [np.asarray(x0, float) + step[i] * np.eye(n)[i]
                                     for i in range(n)]
    vals = [f(p) for p in pts]
    evals = len(vals)
    while evals < max_evals:
        order = np.argsort(vals, kind="stable")
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < tol:
            break
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        evals += 1
        if fr < vals[0]:
            xe = c + 2.0 * (c - pts[-1])
            fe = f(xe)
            evals += 1
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            evals += 1
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
                evals += n
    i = int(np.argmin(vals))
    return pts[i], float(vals[i])


#: starting points (alpha, head_scale, repeat_fraction, lag_alpha): popularity-driven and
#: session-driven tables; the better fit wins.
STARTS = ((1.0, 0.01, 0.05, 2.0), (0.5, 0.01, 0.9, 3.0))


def fit_table(ids: np.ndarray, rows: int, max_evals: int = 150) -> tuple[tuple, float]:
    """(alpha, head_scale, repeat_fraction, lag_alpha), RMS curve error."""
    caps = capacities(rows)
    target = curves(ids, rows, caps)
    n = len(ids)

    def loss(v: np.ndarray) -> float:
        y = synthetic_stream(rows, n, *_unpack(v))
        return float(np.sum((curves(y, rows, caps) - target) ** 2))

    best = None
    for s in STARTS:
        x, val = nelder_mead(loss, _pack(*s), [0.5, 1.5, 1.5, 0.7], max_evals)
        if best is None or val < best[1]:
            best = (x, val)
    assert best is not None
    return _unpack(best[0]), math.sqrt(best[1] / len(target))


def fit_trace(trace: Trace, max_accesses: int = DEFAULT_MAX_ACCESSES,
              max_evals: int = 150) -> Fit:
    """Fit every table of `trace` (UserError when it is too short to fit)."""
    src = trace.source
    if trace.num_batches < 2 or trace.num_accesses == 0:
        raise UserError(f"the trace has {trace.num_batches} mini-batch(es) and "
                        f"{trace.num_accesses} accesses: expected at least 2 batches to fit "
                        "reuse over time", source=src, field="batches")
    streams = table_streams(trace, max_accesses)
    bags = bag_lengths(trace)
    tables = []
    for t, ids in enumerate(streams):
        rows = int(trace.table_rows[t])
        if len(ids) < 2:
            raise UserError(f"table {t} has {len(ids)} access(es): expected at least 2 per "
                            "table to fit", source=src, field=f"tables[{t}]")
        (alpha, head, p, lag), err = fit_table(ids, rows, max_evals)
        b = bags[t]
        tables.append(TableFit(rows, int(b.sum()), max(1, int(round(float(b.mean())))),
                               round(float(b.std()), 4), round(alpha, 4), round(head, 6),
                               round(p, 4), round(lag, 4), DEFAULT_MAX_LAG, round(err, 5)))
    return Fit(src, int(trace.batch_size), trace.num_batches, trace.num_accesses,
               tuple(tables))


# -- the fit file -----------------------------------------------------------------------------
_HEADER = """\
# `burst` generator parameters fitted by `scratchpipe-sim trace fit` (format {version}).
# Each access of a table's stream repeats the access `lag` accesses earlier in that stream
# with probability repeat_fraction (lag ~ lag^-lag_alpha on 1..max_lag), else draws a row
# from P(rank r) ∝ (r + head_scale * rows)^-alpha over permuted ids. See docs/traces.md.
#   scratchpipe-sim trace gen --from-fit THIS.yaml --batches N --seed S --out X.sptrace
"""

_TABLE_COMMENTS = {
    "rows": "rows of the table (the trace's manifest)",
    "accesses": "ids looked up in the source trace",
    "pooling": "mean ids per sample (bag length), rounded",
    "pooling_sigma": "spread of bag lengths; gen draws trunc(N(pooling, sigma))",
    "alpha": "popularity exponent of the fresh draws",
    "head_scale": "shift of the popularity law, in rows of this table (0: Zipf)",
    "repeat_fraction": "share of accesses repeating an earlier access (bursts)",
    "lag_alpha": "repeat lag in accesses ~ lag^-lag_alpha (large: right after)",
    "max_lag": "longest repeat lag, accesses of this table",
    "rms_error": "RMS gap of the fitted LRU/static miss curves (1 = all)",
}


def fit_yaml(fit: Fit) -> str:
    lines = [_HEADER.format(version=FIT_VERSION).rstrip("\n"),
             f"version: {FIT_VERSION}",
             "distribution: burst",
             f"source: {json.dumps(fit.source)}",
             f"batch_size: {fit.batch_size}      # samples per mini-batch in the source",
             f"num_batches: {fit.num_batches}     # mini-batches in the source (gen: --batches)",
             f"accesses: {fit.accesses}     # ids in the source",
             "tables:"]
    for t, tf in enumerate(fit.tables):
        lines.append(f"  # table {t}")
        first = True
        for k, comment in _TABLE_COMMENTS.items():
            v = getattr(tf, k)
            lead = "  - " if first else "    "
            first = False
            lines.append(f"{lead}{k + ':':<17}{v!s:<12} # {comment}")
    if fit.check:
        lines.append("# LRU and static hit ratios of the source and of a trace generated from "
                     "this fit")
        lines.append("# (same tables, batches and seed 0), over the whole trace:")
        lines.append("check:")
        for k, v in fit.check.items():
            lines.append(f"  {k}: {json_list(v)}")
    return "\n".join(lines) + "\n"


def json_list(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(json_list(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_fit(fit: Fit, path: str | os.PathLike) -> None:
    Path(path).write_text(fit_yaml(fit))


def load_fit(path: str | os.PathLike) -> Fit:
    """Read a fit file back (UserError naming the key on anything malformed)."""
    src = str(path)
    p = Path(path)
    d = load_yaml_text(read_text(p, "fit file"), src)
    if not isinstance(d, dict):
        raise UserError("expected a mapping written by `trace fit`", source=src)
    if d.get("distribution") != "burst":
        raise UserError(f"expected 'burst', got {d.get('distribution')!r}", source=src,
                        field="distribution")

    def num(x: Any, key: str, lo: float, hi: float, integer: bool = False) -> Any:
        ok = not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) \
            and lo <= x <= hi and (not integer or float(x).is_integer())
        if not ok:
            kind = "an integer" if integer else "a number"
            raise UserError(f"expected {kind} in [{lo:g}, {hi:g}], got {x!r}", source=src,
                            field=key)
        return int(x) if integer else float(x)

    batch_size = num(d.get("batch_size"), "batch_size", 1, 2**31, True)
    num_batches = num(d.get("num_batches", 1), "num_batches", 1, 2**62, True)
    accesses = num(d.get("accesses", 0), "accesses", 0, 2**62, True)
    tabs = d.get("tables")
    if not isinstance(tabs, list) or not tabs:
        raise UserError("expected a non-empty list of tables", source=src, field="tables")
    tables = []
    for i, t in enumerate(tabs):
        k = f"tables[{i}]"
        if not isinstance(t, dict):
            raise UserError("expected a mapping", source=src, field=k)
        tables.append(TableFit(
            rows=num(t.get("rows"), f"{k}.rows", 1, 2**62, True),
            accesses=num(t.get("accesses", 0), f"{k}.accesses", 0, 2**62, True),
            pooling=num(t.get("pooling", 1), f"{k}.pooling", 1, 2**31, True),
            pooling_sigma=num(t.get("pooling_sigma", 0.0), f"{k}.pooling_sigma", 0, 1e9),
            alpha=num(t.get("alpha"), f"{k}.alpha", 1e-9, 100),
            head_scale=num(t.get("head_scale", 0.0), f"{k}.head_scale", 0, 1e6),
            repeat_fraction=num(t.get("repeat_fraction", 0.0), f"{k}.repeat_fraction", 0, 1),
            lag_alpha=num(t.get("lag_alpha", 2.0), f"{k}.lag_alpha", 1e-9, 100),
            max_lag=num(t.get("max_lag", DEFAULT_MAX_LAG), f"{k}.max_lag", 1, 1 << 24, True),
            rms_error=num(t.get("rms_error", 0.0), f"{k}.rms_error", 0, 1)))
    return Fit(str(d.get("source", "")), batch_size, num_batches, accesses, tuple(tables),
               dict(d.get("check") or {}))


def preset_yaml(fit: Fit, name: str) -> str:
    p = fit.params()
    rows = ", ".join(str(r) for r in fit.table_rows)
    lines = [
        f"# `burst` locality fitted by `scratchpipe-sim trace fit {fit.source}` ({name}).",
        f"# Source: {len(fit.tables)} table(s) of {rows} rows, batch {fit.batch_size}, "
        f"{fit.num_batches} batches.",
        "# One value per table (a list shorter than the model's tables repeats: table t takes",
        "# entry t mod len, and its length must divide the table count). See docs/traces.md.",
        f"#   trace: {{preset: {name}}}",
        "distribution: burst",
        "alpha: null",
        "reuse: 0.0",
        "params:",
    ]
    comments = {"alpha": "popularity exponent", "head_scale": "popularity shift / rows",
                "repeat_fraction": "share of accesses repeating a recent one",
                "lag_alpha": "repeat lag ~ lag^-lag_alpha", "max_lag": "accesses"}
    for k, v in p.items():
        lines.append(f"  {k}: {json_list(v)}   # {comments[k]}")
    return "\n".join(lines) + "\n"


def spec_from_fit(fit: Fit, num_batches: int, seed: int,
                  rows: Sequence[int] | None = None, batch_size: int | None = None,
                  source: str | None = None):
    """The generator spec of a fit (rows and batch size overridable)."""
    from scratchpipe_sim.traces.generators import make_spec

    table_rows = list(rows) if rows is not None else fit.table_rows
    return make_spec("burst", table_rows, batch_size or fit.batch_size, num_batches,
                     [t.pooling for t in fit.tables], seed, 0.0, source=source,
                     pooling_sigma=[t.pooling_sigma for t in fit.tables], **fit.params())
