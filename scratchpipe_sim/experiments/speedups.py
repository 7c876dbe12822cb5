"""Speedup of every design over a baseline, per point, and the geometric mean over points.

speedup(design, point) = time(baseline, point) / time(design, point) for a time metric
(lower is better; default iter_ns_mean). The geometric mean is the right average of ratios:
it is the same whichever design is the baseline, up to inversion.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import pandas as pd

from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.experiments.figures import ITER_TIME
from scratchpipe_sim.experiments.not_run import Reason, group, ranges
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
    #: (point number in `table`, design, status, reason) of every missing speedup
    missing: list[tuple[int, str, str, str]] = field(default_factory=list)

    def reasons(self) -> list[Reason]:
        """The missing speedups' reasons, grouped (points as table numbers)."""
        found = group((d, st, str(i), r) for i, d, st, r in self.missing)
        return [Reason(r.design, r.status, tuple(ranges(int(w) for w in r.where)), r.reasons)
                for r in found]


#: the width `compare` fits its table to (characters) unless --wide
TERMINAL_COLUMNS = 100
#: an axis value longer than this (a JSON mapping, a path) is a long column: left out of
#: the table unless --wide, and named under it
LONG_CELL = 16


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
    return Comparison(axes, designs, out, gm, mx, int(both.sum()), baseline, metric,
                      _missing(res, out, designs, baseline, metric))


def _missing(res: Results, out: pd.DataFrame, designs: list[str], baseline: str,
             metric: str) -> list[tuple[int, str, str, str]]:
    """Why each '-' of the speedup table is missing: the design's row status and reason,
    or its baseline's, from the results table."""
    points = list(res.frame.drop_duplicates("point").sort_values("index")["point"])
    rows = {(p, d): r for p, d, r in zip(res.frame["point"], res.frame["design"],
                                         res.frame.to_dict(orient="records"), strict=True)}

    def why(p: str, d: str) -> tuple[str, str] | None:
        r = rows.get((p, d))
        if r is None:
            return "absent", "no row for this design at this point"
        if r.get("status", "ok") != "ok":
            return str(r["status"]), str(r.get("error") or "")
        if pd.isna(r.get(metric)):
            return "no value", f"its {metric} is empty"
        return None

    found = []
    for i, p in enumerate(points[:len(out)]):
        for d in designs:
            if not pd.isna(out.at[i, d]):
                continue
            own = why(p, d)
            if own is not None:
                found.append((i, d, *own))
            else:
                st, r = why(p, baseline) or ("no value", "")
                found.append((i, d, f"no baseline ({baseline} {st})", r))
    return found


def format_table(c: Comparison, wide: bool = False, width: int = TERMINAL_COLUMNS) -> str:
    """A fixed-width text table: a line per point (#, axis values, speedups), then the
    geometric mean and the maximum over points, then why each '-' is missing. It fits
    `width` columns: long axis columns are left out (named under the table; `wide` keeps
    them and does not fit), design names break at '-' onto two header lines when the table
    would not fit otherwise, and designs that still do not fit go to a second block with
    the same # and axis columns."""
    cells = {a: [_cell(r[a]) for _, r in c.table.iterrows()] for a in c.axes}
    long_axes = [] if wide else [a for a in c.axes if max(map(len, cells[a]), default=0)
                                 > LONG_CELL]
    axes = [a for a in c.axes if a not in long_axes]
    n = len(c.table)
    left = [["", "#", *map(str, range(n)), "", "geomean", "max"]]
    for a in axes:
        left.append(["", a.rsplit(".", 1)[-1], *cells[a], "", "", ""])
    def columns(broken: bool) -> list[list[str]]:
        out = []
        for d in c.designs:
            top, bottom = _header(d) if broken else ("", d)
            out.append([top, bottom, *(_ratio(c.table.at[i, d]) for i in range(n)), "",
                        _ratio(c.geomean[d]), _ratio(c.maximum[d])])
        return out

    right = columns(False)
    if not wide and _width(left + right) > width:  # break long names only to fit
        right = columns(True)
    blocks, block, used = [], [], _width(left)
    for col in right:
        w = max(map(len, col)) + 2
        if block and not wide and used + w > width:
            blocks.append(block)
            block, used = [], _width(left)
        block.append(col)
        used += w
    blocks.append(block)
    out = _wrap(f"speedup over {c.baseline} ({c.metric}: baseline / design)", width, wide)
    if c.common < n:
        out += _wrap(f"geomean over the {c.common} of {n} points where every design ran; "
                     "- = no value (why: under the table)", width, wide)
    for b in blocks:
        out += ["", *_render(left + b)]
    if c.missing:
        out += ["", "no value (-), by design; # = the table's point numbers:"]
        for r in c.reasons():
            out += _wrap("  " + r.line("#"), width, wide, indent="      ")
    if long_axes:
        out += ["", *_wrap("left out (long values; --wide prints them): "
                           + ", ".join(long_axes), width, wide)]
    return "\n".join(out[1:] if out and not out[0] else out)


def _header(design: str) -> tuple[str, str]:
    """A design name on two header lines, broken at its last '-' when that is narrower."""
    if "-" not in design or len(design) <= 8:
        return "", design
    head, tail = design.rsplit("-", 1)
    return head + "-", tail


def _width(cols: list[list[str]]) -> int:
    return sum(max(map(len, col)) + 2 for col in cols) - 2


def _render(cols: list[list[str]]) -> list[str]:
    """Columns of [header 1, header 2, points..., "", geomean, max] as aligned lines."""
    widths = [max(map(len, col)) for col in cols]

    def line(i: int) -> str:
        return "  ".join(col[i].ljust(w) if j == 0 else col[i].rjust(w)
                         for j, (col, w) in enumerate(zip(cols, widths, strict=True))).rstrip()

    rows = len(cols[0])
    rule = "  ".join("-" * w for w in widths)
    head = [line(0)] if any(col[0] for col in cols) else []
    return [*head, line(1), rule, *map(line, range(2, rows - 3)), rule, line(rows - 2),
            line(rows - 1)]


def _wrap(text: str, width: int, wide: bool, indent: str = "    ") -> list[str]:
    return [text] if wide else textwrap.wrap(text, width, subsequent_indent=indent,
                                             break_on_hyphens=False)


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _ratio(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v):.3f}x"
