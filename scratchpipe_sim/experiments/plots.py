"""Figures from a results table: line plots and stacked per-stage bars (matplotlib, Agg).

Every plot function returns its `Figure`, so tests inspect lines and bars instead of pixels.
Colours: the Okabe-Ito palette (distinguishable with the common colour-vision
deficiencies), one fixed colour per design across every figure; a second metric on the same
axes is told apart by line style, a further swept key by marker. A design that did not run
at a point is marked at the bottom of the panel in its colour: x = infeasible (a result:
e.g. scratchpipe's window does not fit the cache), ! = error; a note under the figure gives
the reasons.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.transforms as mtransforms  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from scratchpipe_sim.errors import UserError, closest  # noqa: E402
from scratchpipe_sim.experiments.figures import (  # noqa: E402
    HIT_RATIO,
    ITER_TIME,
    MISS_RATIO,
    STAGE_PREFIX,
    STAGE_SUFFIX,
    figure_options,
)
from scratchpipe_sim.experiments.results import Results  # noqa: E402
from scratchpipe_sim.safety.atomic_files import atomic_write  # noqa: E402
from scratchpipe_sim.timing.designs import design_order  # noqa: E402

OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7", "#F0E442",
             "#000000")
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
HATCHES = ("", "///", "...", "xxx")  # past 8 stacked stages the colours repeat: hatch them

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


def design_color(design: str, known: list[str]) -> str:
    DESIGN_ORDER = design_order()
    order = list(DESIGN_ORDER) + [d for d in known if d not in DESIGN_ORDER]
    return OKABE_ITO[order.index(design) % len(OKABE_ITO)] if design in order else "#777777"


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


#: marker of a design that did not run at a point, by status.
NOT_RUN_MARKERS = {"infeasible": "x", "error": "$!$"}
NOTE_CHARS = 110


def _not_run(res: Results, opts: dict[str, Any]) -> pd.DataFrame:
    """Rows that did not run, after the figure's where/designs filters."""
    f = res.not_ok()
    for col, val in (opts.get("where") or {}).items():
        if col in f.columns:
            f = f[f[col] == val]
    if opts.get("designs"):
        f = f[f["design"].isin(opts["designs"])]
    return f


def _short(reason: Any) -> str:
    parts = " ".join(str(reason).split()).split(": ")
    # drop the "source: field: " prefix of a UserError line (names without spaces)
    while len(parts) > 1 and (" " not in parts[0] or parts[0] == "sweep point"):
        parts = parts[1:]
    text = ": ".join(parts)
    return text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS - 3] + "..."


def _mark_not_run(ax, part: pd.DataFrame, x: str, categorical: bool, cats: list,
                  scale: float, designs: list[str], labelled: set[str]) -> None:
    """A marker at the panel's bottom for each (design, x) that did not run."""
    trans = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
    for status, marker in NOT_RUN_MARKERS.items():
        rows = part[part["status"] == status]
        for d in dict.fromkeys(rows["design"]):
            vals = rows[rows["design"] == d][x]
            if categorical:
                xs = np.array([cats.index(v) for v in vals if v in cats], float)
            else:
                xs = pd.to_numeric(vals, errors="coerce").dropna().to_numpy(float) * scale
            if not len(xs):
                continue
            key = f"{d} {status}"
            ax.plot(xs, np.full(len(xs), 0.03), transform=trans, linestyle="none",
                    marker=marker, markersize=7, color=design_color(d, designs),
                    label=key if key not in labelled else None, clip_on=False)
            labelled.add(key)


def _note(fig: Figure, bad: pd.DataFrame) -> None:
    """Under the figure: why designs did not run (a few distinct reasons)."""
    if bad.empty:
        return
    lines = []
    for status, marker in NOT_RUN_MARKERS.items():
        rows = bad[bad["status"] == status]
        reasons = list(dict.fromkeys(f"{d}: {_short(r)}" for d, r in
                                     zip(rows["design"], rows.get("error", ""), strict=False)))
        if reasons:
            more = f" (+{len(reasons) - 2} more)" if len(reasons) > 2 else ""
            lines.append(f"{marker.strip('$')} {status}: " + "; ".join(reasons[:2]) + more)
    fig.text(0.01, 0.005, "\n".join(lines), fontsize=6, ha="left", va="bottom",
             color="#444444")
    fig.subplots_adjust(bottom=min(0.35, 0.12 + 0.035 * len(lines)))


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
    labelled: set[str] = set()
    panels = list(dict.fromkeys(f["_panel"]))
    rows, cols = _grid(len(panels))
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False,
                             sharey=True)
    DESIGN_ORDER = design_order()
    designs = [d for d in DESIGN_ORDER if d in set(f["design"])] + sorted(
        set(f["design"]) - set(DESIGN_ORDER))
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, pv in zip(axes.flat, panels, strict=False):
        sub = f[f["_panel"] == pv]
        groups = list(dict.fromkeys(sub["_group"]))
        for d in designs:
            for gi, g in enumerate(groups):
                part = sub[(sub["design"] == d) & (sub["_group"] == g)]
                if part.empty:
                    continue
                for yi, y in enumerate(ys):
                    pts = part[[x, y]].dropna()
                    if categorical:
                        xs = np.array([cats.index(v) for v in pts[x]], float)
                    else:
                        xs = pts[x].to_numpy(float) * scale
                    order = np.argsort(xs, kind="stable")
                    lab = d
                    if len(ys) > 1:
                        lab += f" {METRIC_LABELS.get(y, y).split(' (')[0]}"
                    if g:
                        lab += f", {g}"
                    ax.plot(xs[order], pts[y].to_numpy(float)[order], label=lab,
                            color=design_color(d, designs),
                            linestyle=LINESTYLES[yi % len(LINESTYLES)],
                            marker=MARKERS[gi % len(MARKERS)], markersize=4, linewidth=1.5)
        _mark_not_run(ax, bad[bad["_panel"] == pv], x, categorical, cats, scale, designs,
                      labelled)
        if categorical:
            ax.set_xticks(range(len(cats)), [str(c) for c in cats], rotation=15)
        if opts.get("logx") and not categorical:
            ax.set_xscale("log")
        if opts.get("logy"):
            ax.set_yscale("log")
        ax.set_xlabel(x_label)
        if pv:
            ax.set_title(pv, fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel(opts.get("y_label") or METRIC_LABELS.get(ys[0], ys[0]))
    first = axes.flat[0]
    first.legend(fontsize=7, frameon=False, loc="best")
    if opts.get("title"):
        fig.suptitle(opts["title"], fontsize=11)
    fig.tight_layout()
    _note(fig, bad)
    return fig


def stage_columns(f: pd.DataFrame) -> list[str]:
    return [c for c in f.columns if str(c).startswith(STAGE_PREFIX)
            and str(c).endswith(STAGE_SUFFIX) and f[c].notna().any()]


def stacked_bar_figure(res: Results, name: str, opts: dict[str, Any]) -> Figure:
    """Per-stage time per iteration, one bar per design at one point (the first remaining
    point when `where` leaves several). Pipelined stages overlap, so a bar can be taller
    than the iteration time, which is marked on each bar."""
    f = _frame(res, opts, name)
    first = f.sort_values("index")["point"].iloc[0]
    f = f[f["point"] == first]
    stacks = list(opts.get("stacks") or stage_columns(f))
    if not stacks:
        raise UserError(f"figure '{name}': no stage columns ({STAGE_PREFIX}*{STAGE_SUFFIX}) "
                        "in the table; add them to the experiment's metrics", field="stacks")
    for s in stacks:
        _need(f, s, name, "stacks")
    DESIGN_ORDER = design_order()
    designs = [d for d in DESIGN_ORDER if d in set(f["design"])] + sorted(
        set(f["design"]) - set(DESIGN_ORDER))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(designs) + 3.5), 4.4))
    bottom = np.zeros(len(designs))
    by = f.set_index("design")
    for i, s in enumerate(stacks):
        vals = np.array([by.at[d, s] if pd.notna(by.at[d, s]) else 0.0 for d in designs],
                        float) / 1e6
        label = s[len(STAGE_PREFIX):-len(STAGE_SUFFIX)] if s.startswith(STAGE_PREFIX) else s
        ax.bar(range(len(designs)), vals, bottom=bottom, label=label,
               color=OKABE_ITO[i % len(OKABE_ITO)], edgecolor="white", linewidth=0.5,
               hatch=HATCHES[(i // len(OKABE_ITO)) % len(HATCHES)])
        bottom += vals
    if ITER_TIME in by.columns:
        it = np.array([by.at[d, ITER_TIME] for d in designs], float) / 1e6
        ax.scatter(range(len(designs)), it, marker="_", s=600, color="black", zorder=3,
                   label="iteration time")
    ax.set_xticks(range(len(designs)), designs, rotation=20)
    ax.set_xlabel("training-system design")
    ax.set_ylabel(opts.get("y_label") or "time per iteration (ms)")
    vals = {a: by[a].iloc[0] for a in res.axes if a in by.columns}
    where = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in vals.items())
    ax.set_title((opts.get("title") or "Per-stage time") + (f"\n({where})" if where else ""),
                 fontsize=10)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              ncol=1 if len(stacks) <= 12 else 2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def make_figure(res: Results, name: str, overrides: dict[str, Any] | None = None) -> Figure:
    """The named figure (built in, or declared in the experiment) from `res`."""
    opts = figure_options(name, res.figures)
    opts.update(overrides or {})
    if opts.get("kind") == "stacked-bar":
        return stacked_bar_figure(res, name, opts)
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
        fig.savefig(buf, format=fmt, dpi=dpi,
                    metadata={"Software": None} if fmt == "png" else None)
        atomic_write(p, buf.getvalue())
        paths.append(p)
    plt.close(fig)
    return paths
