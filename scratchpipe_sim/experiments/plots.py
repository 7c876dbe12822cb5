"""Figures from a results table: line plots and the per-design stage figure (matplotlib, Agg).

Every plot function returns its `Figure`, so tests inspect lines and bars instead of pixels.
Looks come from `experiments.styles`: one colour and one marker per design in every figure;
a second metric on the same axes is told apart by line style, as is a further swept key.
Legends sit outside the data. A design that did not run at a point is never drawn as a
value: a hollow marker in a "not run" strip above the panel (its x is the point's), and a
note under the figure gives every reason (text >= styles.MIN_FONT_PT, wrapped, never cut).
The stage figure draws overlap as overlap: each design's iteration time is its bar (the
table's iter_ns_mean, so the picture ranks designs as the table does), with its stages
drawn under it -- end to end where they run one after another, each from 0 in its own lane
where they overlap (pipelined designs), the longest marked as what bounds the iteration.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from scratchpipe_sim.errors import UserError, closest  # noqa: E402
from scratchpipe_sim.experiments.figures import (  # noqa: E402
    HIT_RATIO,
    ITER_TIME,
    MISS_RATIO,
    STAGE_KINDS,
    STAGE_PREFIX,
    STAGE_SUFFIX,
    figure_options,
)
from scratchpipe_sim.experiments.not_run import group  # noqa: E402
from scratchpipe_sim.experiments.results import Results  # noqa: E402
from scratchpipe_sim.experiments.styles import (  # noqa: E402
    MIN_FONT_PT,
    OKABE_ITO,
    design_color,
    design_style,
    plain_log_ticks,
    stage_color,
)
from scratchpipe_sim.safety.atomic_files import atomic_write  # noqa: E402
from scratchpipe_sim.timing.designs import design_order  # noqa: E402

__all__ = ["OKABE_ITO", "design_color", "make_figure", "save_figure"]

LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))

#: axis labels with units for the keys experiments sweep; others fall back to the key.
AXIS_LABELS = {
    "cache.load_factor": ("cache size (% of all rows)", 100.0),
    "cache.capacity_rows": ("cache size (rows)", 1.0),
    "trace.alpha": ("Zipf alpha (unitless)", 1.0),
    "trace.distribution": ("distribution", 1.0),
    "design_params.scratchpipe.lookahead": ("lookahead depth W (batches)", 1.0),
    "design_params.scratchpipe.queue_depth": ("pipeline queue depth (batches)", 1.0),
    "hardware.preset": ("hardware generation (GPU / PCIe)", 1.0),
    "hardware.pcie.h2d_GBps": ("PCIe H2D bandwidth (GB/s)", 1.0),
    "hardware.pcie.d2h_GBps": ("PCIe D2H bandwidth (GB/s)", 1.0),
    "model.batch_size": ("batch size (samples)", 1.0),
    "model.pooling": ("pooling (lookups per sample per table)", 1.0),
}
METRIC_LABELS = {
    "speedup_vs_hybrid": "speedup over hybrid (x)",
    "iter_ns_mean": "iteration time (ns)",
    "hit_ratio": "hit ratio (fraction of lookups)",
    "miss_ratio": "miss ratio (fraction of lookups)",
    "samples_per_s": "throughput (samples/s)",
    "pcie_h2d_bytes_per_sample": "PCIe H2D (bytes/sample)",
    "pcie_d2h_bytes_per_sample": "PCIe D2H (bytes/sample)",
}


def __getattr__(name: str) -> Any:
    """`DESIGN_ORDER`: every registered design in display order, derived from the design
    registry (each class's `order`) at each access, so a design added at run time shows."""
    if name == "DESIGN_ORDER":
        return design_order()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _frame(res: Results, opts: dict[str, Any], name: str) -> pd.DataFrame:
    f = res.ok().copy()
    if MISS_RATIO not in f.columns and HIT_RATIO in f.columns:
        f[MISS_RATIO] = 1.0 - f[HIT_RATIO]
    for col, val in (opts.get("where") or {}).items():
        _need(f, col, name, "where")
        f = f[f[col] == val]
    if opts.get("designs"):
        f = f[f["design"].isin(opts["designs"])]
    if f.empty:
        raise UserError(f"figure '{name}': no successful rows to plot (after where/designs)",
                        source=res.source)
    return f


#: the strip label of a design that did not run at a point, by status
NOT_RUN = ("infeasible", "error")
#: height of the "not run" strip above a panel, per design in it (fraction of the panel)
STRIP_ROW = 0.07


def _not_run(res: Results, opts: dict[str, Any]) -> pd.DataFrame:
    """Rows that did not run, after the figure's where/designs filters."""
    f = res.not_ok()
    for col, val in (opts.get("where") or {}).items():
        if col in f.columns:
            f = f[f[col] == val]
    if opts.get("designs"):
        f = f[f["design"].isin(opts["designs"])]
    return f


def _x_positions(vals: pd.Series, categorical: bool, cats: list, scale: float) -> np.ndarray:
    if categorical:
        return np.array([cats.index(v) for v in vals if v in cats], float)
    return pd.to_numeric(vals, errors="coerce").dropna().to_numpy(float) * scale


def _strip_not_run(ax, part: pd.DataFrame, x: str, categorical: bool, cats: list,
                   scale: float, designs: list[str]):
    """A strip above the panel, outside its data: a hollow marker (the design's own) at the
    x of each point where a design did not run, one row per design and status; None when
    every design ran."""
    if part.empty:
        return None
    keys = [(d, st) for d in designs for st in NOT_RUN
            if not part[(part["design"] == d) & (part["status"] == st)].empty]
    if not keys:
        return None
    strip = ax.inset_axes([0.0, 1.03, 1.0, STRIP_ROW * len(keys)], sharex=ax)
    strip.set_gid("not-run")
    for row, (d, st) in enumerate(keys):
        style = design_style(d)
        xs = _x_positions(part[(part["design"] == d) & (part["status"] == st)][x],
                          categorical, cats, scale)
        strip.plot(xs, np.full(len(xs), row), linestyle="none", marker=style.marker,
                   markersize=6, markerfacecolor="white", markeredgecolor=style.color,
                   markeredgewidth=1.4, gid=f"not-run:{d}:{st}", clip_on=False)
    strip.set_ylim(-0.7, len(keys) - 0.3)
    strip.invert_yaxis()
    strip.set_yticks(range(len(keys)), [f"{d}: {st}" for d, st in keys], fontsize=MIN_FONT_PT)
    strip.tick_params(axis="x", labelbottom=False, bottom=False)
    strip.set_facecolor("#F4F4F4")
    for side in ("top", "right", "left", "bottom"):
        strip.spines[side].set_color("#CCCCCC")
    strip.text(1.0, 1.0, "not run (no value)", transform=strip.transAxes, ha="right",
               va="bottom", fontsize=MIN_FONT_PT, color="#555555")
    return strip


def _x_text(v: Any, scale: float) -> str:
    if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
        return f"{float(v) * scale:g}"
    return str(v)


def _note(fig: Figure, bad: pd.DataFrame, x: str, x_label: str, scale: float) -> None:
    """Under the figure: every reason a design did not run (not_run.group: reasons that
    differ only in their numbers are one line, with the points they hold at), wrapped to
    the figure's width at MIN_FONT_PT so nothing is cut off."""
    import textwrap  # noqa: PLC0415

    if bad.empty:
        return
    xs = bad[x] if x in bad.columns else [None] * len(bad)
    reasons = group(zip(bad["design"], bad["status"],
                        [None if v is None else _x_text(v, scale) for v in xs],
                        bad["error"] if "error" in bad.columns else [None] * len(bad),
                        strict=True))
    width_chars = int(fig.get_size_inches()[0] * 72 / (MIN_FONT_PT * 0.55))
    lines = []
    for r in reasons:
        lines += textwrap.wrap(r.line(x_label.split(" (")[0] + " ="), width_chars,
                               subsequent_indent="    ")
    fig.text(0.01, 0.0, "\n".join(["Did not run (not drawn as values):", *lines]),
             fontsize=MIN_FONT_PT, ha="left", va="top", color="#333333", gid="not-run-note")


def _need(f: pd.DataFrame, col: str, name: str, what: str) -> None:
    if col not in f.columns:
        raise UserError(f"figure '{name}': the table has no column '{col}'"
                        f"{closest(col, [str(c) for c in f.columns])}", field=what)


def _pick_x(res: Results, opts: dict[str, Any], name: str) -> str:
    if opts.get("x"):
        return str(opts["x"])
    for c in opts.get("x_candidates", ()):
        if c in res.axes:
            return c
    if len(res.axes) == 1:
        return res.axes[0]
    raise UserError(f"figure '{name}' needs an x column: expected one of "
                    f"{', '.join(opts.get('x_candidates', ())) or '(any swept key)'} among "
                    f"the table's swept keys ({', '.join(res.axes) or 'none'}); set 'x' in the "
                    "experiment's figures", field="--figure")


def _varying(f: pd.DataFrame, cols: list[str]) -> list[str]:
    return [c for c in cols if c in f.columns and f[c].nunique(dropna=False) > 1]


def _labels(f: pd.DataFrame, cols: list[str], long: bool) -> list[str]:
    """A readable label per row from the values of `cols` (nulls left out)."""
    out = []
    for vals in f[cols].itertuples(index=False) if cols else [()] * len(f):
        parts = []
        for c, v in zip(cols, vals, strict=True):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            name = AXIS_LABELS.get(c, (c, 1.0))[0].split(" (")[0] if long else c.rsplit(".", 1)[-1]
            parts.append(f"{name} = {v}" if long else f"{name}={v}")
        out.append(", ".join(parts))
    return out


def _determined(f: pd.DataFrame, col: str, by: list[str]) -> bool:
    """True when `col` has one value per `by` group: a key zipped with x (or a facet) moves
    with it and must not split the lines."""
    keyed = f[[*by, col]].astype(str)
    return bool(keyed.groupby(by)[col].nunique().max() <= 1)


def _numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values)


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return math.ceil(n / cols), cols


def line_figure(res: Results, name: str, opts: dict[str, Any]) -> Figure:
    """One line per design (x one metric): y against a swept key, a panel per facet value."""
    f = _frame(res, opts, name)
    x = _pick_x(res, opts, name)
    _need(f, x, name, "x")
    ys = opts["y"] if isinstance(opts["y"], list) else [opts["y"]]
    for y in ys:
        _need(f, y, name, "y")
    others = [a for a in res.axes if a != x]
    facet = opts.get("facet")
    if facet is None and "facet" not in opts:
        vary = [c for c in _varying(f, others) if not _determined(f, c, [x])]
        facet = vary[:1]
    facets = [facet] if isinstance(facet, str) else list(facet or [])
    for c in facets:
        _need(f, c, name, "facet")
    extra = [c for c in _varying(f, [a for a in others if a not in facets])
             if not _determined(f, c, [x, *facets])]
    f = f.sort_values("index").assign(_panel=_labels(f, facets, long=True),
                                      _group=_labels(f, extra, long=False))
    label, scale = AXIS_LABELS.get(x, (x, 1.0))
    scale = float(opts.get("x_scale", scale))
    x_label = opts.get("x_label") or label
    categorical = not _numeric(f[x])
    bad = _not_run(res, opts)
    if x in bad.columns and all(c in bad.columns for c in facets):
        bad = bad.assign(_panel=_labels(bad, facets, long=True))
    else:
        bad = bad.iloc[0:0].assign(_panel=[])
    cats = list(dict.fromkeys([*f[x], *bad[x]])) if categorical else []
    panels = list(dict.fromkeys(f["_panel"]))
    rows, cols = _grid(len(panels))
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False,
                             sharey=True)
    designs = _ordered(set(f["design"]) | set(bad["design"]))
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, pv in zip(axes.flat, panels, strict=False):
        sub = f[f["_panel"] == pv]
        groups = list(dict.fromkeys(sub["_group"]))
        for d in designs:
            style = design_style(d)
            for gi, g in enumerate(groups):
                part = sub[(sub["design"] == d) & (sub["_group"] == g)]
                if part.empty:
                    continue
                for yi, y in enumerate(ys):
                    pts = part[[x, y]].dropna()
                    xs = _x_positions(pts[x], categorical, cats, scale)
                    order = np.argsort(xs, kind="stable")
                    lab = d
                    if len(ys) > 1:
                        lab += f" {METRIC_LABELS.get(y, y).split(' (')[0]}"
                    if g:
                        lab += f", {g}"
                    ax.plot(xs[order], pts[y].to_numpy(float)[order], label=lab,
                            color=style.color, marker=style.marker, markersize=5,
                            linestyle=LINESTYLES[(yi * len(groups) + gi) % len(LINESTYLES)],
                            linewidth=1.5)
        if categorical:
            ax.set_xticks(range(len(cats)), [str(c) for c in cats], rotation=15)
        if opts.get("logx") and not categorical:
            ax.set_xscale("log")
            plain_log_ticks(ax.xaxis)
        if opts.get("logy"):
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
        ax.set_xlabel(x_label)
        ax.tick_params(labelsize=MIN_FONT_PT + 1)
        strip = _strip_not_run(ax, bad[bad["_panel"] == pv], x, categorical, cats, scale,
                               designs)
        if pv:
            (strip or ax).set_title(pv, fontsize=MIN_FONT_PT + 1)
        ax.grid(True, alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel(opts.get("y_label") or METRIC_LABELS.get(ys[0], ys[0]))
    handles: dict[str, Any] = {}
    for ax in axes.flat[:len(panels)]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="upper left",
               bbox_to_anchor=(1.0, 0.97), fontsize=MIN_FONT_PT + 1, frameon=False)
    if opts.get("title"):
        fig.suptitle(opts["title"], fontsize=11)
    fig.tight_layout()
    _note(fig, bad, x, x_label, scale)
    return fig


def _ordered(present: set[str]) -> list[str]:
    """Designs in the registry's display order, unknown names last (sorted)."""
    order = design_order()
    return [d for d in order if d in present] + sorted(present - set(order))


def stage_columns(f: pd.DataFrame) -> list[str]:
    return [c for c in f.columns if str(c).startswith(STAGE_PREFIX)
            and str(c).endswith(STAGE_SUFFIX) and f[c].notna().any()]


#: a design's stages are drawn end to end (in series) when they add up to no more than its
#: iteration time by this fraction; otherwise they overlap and each gets its own lane from 0
SERIAL_SLACK = 0.02
LANE = 0.42        # height of a stage lane (y units; an iteration bar is 0.8)
LANE_STEP = 0.5


@dataclass(frozen=True)
class DesignStages:
    """One design's row of the stage figure: its iteration time and its stages (ns)."""
    design: str
    iter_ns: float
    stages: tuple[tuple[str, float], ...]

    @property
    def serial(self) -> bool:
        """True when the stages run one after another (they fit in the iteration)."""
        total = sum(v for _, v in self.stages)
        return math.isnan(self.iter_ns) or total <= self.iter_ns * (1 + SERIAL_SLACK)


def design_stages(f: pd.DataFrame, stacks: list[str]) -> list[DesignStages]:
    """Each design's iteration time and its non-zero stages, in display order."""
    by = f.set_index("design")
    out = []
    for d in _ordered(set(f["design"])):
        it = float(by.at[d, ITER_TIME]) if ITER_TIME in by.columns else float("nan")
        stages = tuple((_stage_name(s), float(by.at[d, s])) for s in stacks
                       if pd.notna(by.at[d, s]) and float(by.at[d, s]) > 0)
        out.append(DesignStages(d, it, stages))
    return out


def _stage_name(column: str) -> str:
    if column.startswith(STAGE_PREFIX) and column.endswith(STAGE_SUFFIX):
        return column[len(STAGE_PREFIX):-len(STAGE_SUFFIX)]
    return column


def stage_figure(res: Results, name: str, opts: dict[str, Any]) -> Figure:
    """Per design, at one point (the first remaining when `where` leaves several): a bar of
    its mean iteration time -- the bar a reader compares, the table's iter_ns_mean -- and
    under it its mean stage times per batch, end to end when they run in series, each from
    0 in its own lane when they overlap (the longest marked): overlap drawn as overlap, so
    stages that run hidden beside each other never add up to time that does not pass."""
    f = _frame(res, opts, name)
    first = f.sort_values("index")["point"].iloc[0]
    f = f[f["point"] == first]
    stacks = list(opts.get("stacks") or stage_columns(f))
    if not stacks:
        raise UserError(f"figure '{name}': no stage columns ({STAGE_PREFIX}*{STAGE_SUFFIX}) "
                        "in the table; add them to the experiment's metrics", field="stacks")
    for s in stacks:
        _need(f, s, name, "stacks")
    rows = design_stages(f, stacks)
    heights = [1.0 + LANE_STEP * (1 if r.serial else max(1, len(r.stages))) + 0.35
               for r in rows]
    fig, ax = plt.subplots(figsize=(9.0, 1.0 + 0.42 * sum(heights)))
    top = max([r.iter_ns for r in rows if not math.isnan(r.iter_ns)]
              + [v for r in rows for _, v in r.stages] + [1.0]) / 1e3
    seen: dict[str, Any] = {}
    ticks, y = [], 0.0
    for r, h in zip(rows, heights, strict=True):
        style = design_style(r.design)
        ticks.append(y)
        if not math.isnan(r.iter_ns):
            ax.barh(y, r.iter_ns / 1e3, height=0.8, color=style.color, edgecolor="black",
                    linewidth=0.6, gid=f"iteration:{r.design}")
            total = sum(v for _, v in r.stages)
            how = ("stages in series" if r.serial else
                   f"stages overlap; their sum, {total / 1e3:,.0f} us, is not time spent")
            ax.text(r.iter_ns / 1e3 + 0.01 * top, y, f"{r.iter_ns / 1e3:,.1f} us  ({how})",
                    va="center", ha="left", fontsize=MIN_FONT_PT + 1)
        lane = y + 0.4 + LANE_STEP
        if r.serial:
            left = 0.0
            for st, v in r.stages:
                bar = ax.barh(lane, v / 1e3, left=left, height=LANE, color=stage_color(st),
                              edgecolor="white", linewidth=0.5, gid=f"stage:{r.design}:{st}")
                seen.setdefault(st, bar)
                left += v / 1e3
        else:
            longest = max((v for _, v in r.stages), default=0.0)
            for st, v in r.stages:
                bar = ax.barh(lane, v / 1e3, height=LANE, color=stage_color(st),
                              edgecolor="white", linewidth=0.5, gid=f"stage:{r.design}:{st}")
                seen.setdefault(st, bar)
                ax.text(v / 1e3 + 0.01 * top, lane, st + ("  (longest)" if v == longest
                                                            else ""),
                        va="center", ha="left", fontsize=MIN_FONT_PT)
                lane += LANE_STEP
        y += h
    ax.set_yticks(ticks, [r.design for r in rows], fontsize=MIN_FONT_PT + 1)
    ax.set_ylim(y - 0.2, -0.6)
    ax.set_xlim(0, top * 1.7)  # room for the labels right of the longest bar
    ax.set_xlabel("microseconds per iteration: thick bar = mean iteration time "
                  "(iter_ns_mean); thin bars = mean stage time per batch", fontsize=MIN_FONT_PT + 1)
    vals = {a: f[a].iloc[0] for a in res.axes if a in f.columns}
    where = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in vals.items())
    ax.set_title((opts.get("title") or "Iteration time and the stages under it")
                 + (f"\n({where})" if where else ""), fontsize=10)
    ax.legend(list(seen.values()), list(seen), title="stage", fontsize=MIN_FONT_PT,
              title_fontsize=MIN_FONT_PT + 1, frameon=False, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), ncol=1 if len(seen) <= 16 else 2)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def make_figure(res: Results, name: str, overrides: dict[str, Any] | None = None) -> Figure:
    """The named figure (built in, or declared in the experiment) from `res`."""
    opts = figure_options(name, res.figures)
    opts.update(overrides or {})
    if opts.get("kind") in STAGE_KINDS:
        return stage_figure(res, name, opts)
    if res.manifest.get("kind") == "run":
        raise UserError(f"figure '{name}' draws a line over swept values, and a `run` folder "
                        "is one point: expected a sweep's results folder, or --figure "
                        "stage-breakdown", source=res.source, field="--figure")
    return line_figure(res, name, opts)


def check_resolution(fig: Figure, dpi: int) -> None:
    """Refuse a figure of more than limits.FIGURE_PIXELS pixels before drawing it
    (matplotlib would allocate the whole raster, or fail deep in its C++ code)."""
    from scratchpipe_sim.safety import limits  # noqa: PLC0415

    w_in, h_in = fig.get_size_inches()
    pixels = float(w_in) * float(h_in) * float(dpi) ** 2
    if pixels > limits.FIGURE_PIXELS.value():
        plt.close(fig)
        raise UserError(f"a {w_in:g} x {h_in:g} inch figure at {dpi} dpi is {pixels:.3g} "
                        f"pixels: expected a smaller --dpi ({limits.FIGURE_PIXELS.advice()})",
                        field="--dpi")


def save_figure(fig: Figure, stem: str | Path, formats: tuple[str, ...] = ("png", "pdf"),
                dpi: int = 110) -> list[Path]:
    check_resolution(fig, dpi)
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        p = stem.with_suffix(f".{fmt}")
        buf = io.BytesIO()  # drawn whole in memory, then written whole or not at all
        fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight", pad_inches=0.15,
                    metadata={"Software": None} if fmt == "png" else None)
        atomic_write(p, buf.getvalue())
        paths.append(p)
    plt.close(fig)
    return paths
