"""The bands figure: each design's nominal speedup with its min-max band along a sweep.

Reads a bands table (`sensitivity SWEEP.yaml --out DIR`: bands.json). The x axis is the
first swept key whose values differ and are all numbers (cache.load_factor in fig1), else
the first that differs (hardware.preset in fig4); one panel per combination of the other
swept keys that differ (fig1: one per trace). Points sit at evenly spaced positions labelled
with their values, each design slightly offset so the bars do not hide each other. The
baseline (speedup 1 by definition) is a dashed line; infeasible points and failed points
are left out (bands.csv names them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scratchpipe_sim.errors import UserError


def _key(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def _label(v: Any) -> str:
    if isinstance(v, dict | list):
        return "" if not v else "custom"
    return "none" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def _numeric(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def band_axes(data: dict[str, Any]) -> tuple[str | None, list[str]]:
    """(x key, facet keys) of a bands table: see the module docstring."""
    rows = data["rows"]
    varied = [a for a in data["axes"] if len({_key(r.get(a)) for r in rows}) > 1]
    if not varied:
        return None, []
    x = next((a for a in varied if all(_numeric(r.get(a)) for r in rows)), varied[0])
    return x, [a for a in varied if a != x]


def band_figure(data: dict[str, Any], designs: Sequence[str] | None = None):
    """The figure (matplotlib) of a bands table."""
    from scratchpipe_sim.experiments.plots import plt  # noqa: PLC0415
    from scratchpipe_sim.experiments.styles import design_style  # noqa: PLC0415

    base = data.get("baseline")
    names = [d for d in (designs or data["designs"]) if d != base]
    if not names:
        raise UserError("only the baseline design in this bands table: nothing to draw",
                        field="designs")
    x, facets = band_axes(data)
    rows = [r for r in data["rows"] if r["design"] in names]
    xs: list[Any] = []
    for r in data["rows"]:
        v = r.get(x) if x else None
        if all(_key(v) != _key(o) for o in xs):
            xs.append(v)
    if x and all(_numeric(v) for v in xs):
        xs.sort()
    groups: list[tuple] = []
    for r in data["rows"]:
        g = tuple(_key(r.get(f)) for f in facets)
        if g not in groups:
            groups.append(g)
    cols = min(3, len(groups))
    nrows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.8 * cols, 3.4 * nrows), squeeze=False,
                             sharey=True)
    width = 0.5 / len(names)
    for ax, g in zip(axes.flat, groups, strict=False):
        mine = [r for r in rows if tuple(_key(r.get(f)) for f in facets) == g]
        for j, d in enumerate(names):
            pts = [(xs.index(next(v for v in xs if _key(v) == _key(r.get(x) if x else None))),
                    r) for r in mine if r["design"] == d and r["status"] == "ok"]
            if not pts:
                continue
            pos = [i + (j - (len(names) - 1) / 2) * width for i, _ in pts]
            nom = [r["nominal"] for _, r in pts]
            err = [[r["nominal"] - r["min"] for _, r in pts],
                   [r["max"] - r["nominal"] for _, r in pts]]
            style = design_style(d)  # the design's colour and marker in every figure
            ax.errorbar(pos, nom, yerr=err, fmt="-", marker=style.marker, ms=4, lw=1.0,
                        capsize=2.5, color=style.color, label=d)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(range(len(xs)), [_label(v) for v in xs], fontsize=8)
        ax.set_xlabel(x or "point", fontsize=8)
        sample = mine[0] if mine else {}
        title = ", ".join(f"{f}={_label(sample.get(f))}" for f in facets
                          if _label(sample.get(f)))
        ax.set_title(title or data.get("name", ""), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"speedup vs {base} (x)", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(names), 7), fontsize=8,
               frameon=False)
    fig.suptitle(f"{data.get('name', '')}: nominal speedup, bar = min-max over "
                 f"hardware.ranges ({data.get('samples')} LHS samples + one at a time)",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    return fig


def write_band_figure(data: dict[str, Any], stem: str | Path,
                      formats: Sequence[str] = ("png", "pdf"), dpi: int = 110) -> list[Path]:
    """Draw and save `stem`.png / .pdf; an unwritable place is one line, exit 2."""
    from scratchpipe_sim.errors import os_reason  # noqa: PLC0415
    from scratchpipe_sim.experiments.plots import save_figure  # noqa: PLC0415

    fig = band_figure(data)
    try:
        return save_figure(fig, stem, tuple(formats), dpi)
    except OSError as e:
        raise UserError(f"cannot write the figure: {os_reason(e)}; expected a writable path",
                        source=str(stem), field="--out") from None


def plot_bands(folder: str | Path, out: str | Path | None = None,
               formats: Sequence[str] = ("png", "pdf"), dpi: int = 110) -> list[Path]:
    """`plot DIR` on a bands folder: DIR/figures/bands.{png,pdf} (or the stem `out`)."""
    from scratchpipe_sim.experiments.bands import load_bands  # noqa: PLC0415

    data = load_bands(folder)
    p = Path(folder)
    stem = Path(out) if out else (p if p.is_dir() else p.parent) / "figures" / "bands"
    return write_band_figure(data, stem, formats, dpi)
