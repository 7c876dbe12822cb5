"""Speedup of every design over a baseline, per point, and the geometric mean over points.

speedup(design, point) = time(baseline, point) / time(design, point) for a time metric
(lower is better; default iter_ns_mean). The geometric mean is the right average of ratios:
it is the same whichever design is the baseline, up to inversion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.experiments.figures import ITER_TIME
from scratchpipe_sim.experiments.results import Results
from scratchpipe_sim.timing.designs import baseline_design, design_order


@dataclass
class Comparison:
    axes: list[str]
    designs: list[str]
    table: pd.DataFrame          # one row per point: axis values + a speedup per design
    geomean: dict[str, float]    # design -> geometric mean speedup over the common points
    maximum: dict[str, float]
    common: int                  # points where every design ran (the geomean's points)
    baseline: str
    metric: str


def geometric_mean(values) -> float:
    vals = [float(v) for v in values if v is not None and not pd.isna(v)]
    if not vals:
        return float("nan")
    if any(v <= 0 for v in vals):
        raise ValueError("geometric mean of non-positive values")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def compare(res: Results, baseline: str | None = None, metric: str = ITER_TIME) -> Comparison:
    f = res.ok()
    if metric not in f.columns:
        raise UserError(f"no metric column '{metric}'{closest(metric, map(str, f.columns))}",
                        source=res.source, field="--metric")
    if not pd.api.types.is_numeric_dtype(f[metric]) or metric in ("index", *res.axes):
        raise UserError(f"'{metric}' is not a time column (it holds "
                        f"{'swept values' if metric in res.axes else 'text or labels'}); "
                        "expected a numeric metric such as iter_ns_mean", source=res.source,
                        field="--metric")
    present = list(dict.fromkeys(f["design"]))
    if baseline is None:
        baseline = baseline_design()
    if baseline not in present:
        raise UserError(f"no design '{baseline}' in the table{closest(baseline, present)}; "
                        f"expected one of: {', '.join(present)}", source=res.source,
                        field="--baseline")
    DESIGN_ORDER = design_order()
    designs = [d for d in DESIGN_ORDER if d in present] + [d for d in present
                                                            if d not in DESIGN_ORDER]
    axes = res.axes
    wide = f.pivot_table(index="point", columns="design", values=metric, aggfunc="first")
    first = f.sort_values("index").drop_duplicates("point").set_index("point")
    base = wide[baseline]
    out = first[["index", *axes]].copy()
    for d in designs:
        out[d] = base / wide[d] if d in wide.columns else float("nan")
    out = out.sort_values("index").drop(columns="index").reset_index(drop=True)
    # average over the points where every design ran, so designs are compared on the same
    # points; a design that failed somewhere would otherwise be averaged over easier ones
    both = out[designs].notna().all(axis=1)
    if not both.any():
        raise UserError("no point where every design ran; nothing to average (see the "
                        "error column)", source=res.source)
    gm = {d: geometric_mean(out.loc[both, d]) for d in designs}
    mx = {d: float(out[d].max()) for d in designs}
    return Comparison(axes, designs, out, gm, mx, int(both.sum()), baseline, metric)


def format_table(c: Comparison) -> str:
    """A fixed-width text table: a line per point (#, axis values, speedups), then the
    geometric mean and the maximum over points."""
    head = ["#", *(a.rsplit(".", 1)[-1] for a in c.axes), *c.designs]
    body = [[str(i), *(_cell(r[a]) for a in c.axes), *(_ratio(r[d]) for d in c.designs)]
            for i, (_, r) in enumerate(c.table.iterrows())]
    blank = [""] * len(c.axes)
    foot = [["geomean", *blank, *(_ratio(c.geomean[d]) for d in c.designs)],
            ["max", *blank, *(_ratio(c.maximum[d]) for d in c.designs)]]
    widths = [max(len(x) for x in col) for col in zip(head, *body, *foot, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(x.rjust(w) for x, w in zip(cells, widths, strict=True))

    rule = "  ".join("-" * w for w in widths)
    title = f"speedup over {c.baseline} ({c.metric}: baseline / design)"
    n = len(c.table)
    if c.common < n:
        title += (f"; geomean over the {c.common} of {n} points where every design ran "
                  "(- = did not run: infeasible or error, see the error column)")
    return "\n".join([title, line(head), rule, *map(line, body), rule, *map(line, foot)])


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _ratio(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v):.3f}x"
