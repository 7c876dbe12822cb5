"""Figure specifications: the built-in study figures and the checks on YAML-declared ones.

A figure is a mapping of plain options (no matplotlib here, so an experiment file is
checked without importing it):

    kind:    line | stages (stacked-bar: its old name, the same figure)
    x:       column on the x axis (a swept key); null: guessed from the axes
    y:       a metric column, or a list of them (one line per design per metric)
    series:  column that makes one line per value (default: design)
    facet:   column that makes one panel per value (null: none)
    where:   {column: value} rows to keep (e.g. one representative point)
    stacks:  stages only: the stage columns drawn under each design's iteration bar
             (default: every stage column)
    designs: designs to draw (default: all in the table)
    x_scale: multiply x by this (0.01 load factor x 100 = 1 % of rows)
    logx, logy, x_label, y_label, title
"""

from __future__ import annotations

from typing import Any

from scratchpipe_sim.errors import UserError, closest

KINDS = ("line", "stages", "stacked-bar")
#: the kinds that draw the stage figure (iteration bar + its stages; plots.stage_figure)
STAGE_KINDS = ("stages", "stacked-bar")
OPTION_KEYS = ("kind", "x", "y", "series", "facet", "where", "stacks", "designs", "x_scale",
               "logx", "logy", "x_label", "y_label", "title", "baseline")

#: Metric names the plots read (they are the timing model's result keys).
SPEEDUP = "speedup_vs_hybrid"
ITER_TIME = "iter_ns_mean"
HIT_RATIO = "hit_ratio"
MISS_RATIO = "miss_ratio"  # derived: 1 - hit_ratio when the table lacks it
H2D = "pcie_h2d_bytes_per_sample"
D2H = "pcie_d2h_bytes_per_sample"
STAGE_PREFIX = "stage_"
STAGE_SUFFIX = "_ns"

#: x candidates, in preference order, when a figure does not name its x column.
CACHE_SIZE_KEYS = ("cache.load_factor", "cache.capacity_rows")
ALPHA_KEYS = ("trace.alpha",)

BUILTIN: dict[str, dict[str, Any]] = {
    "speedup-vs-cache-size": {
        "kind": "line", "x": None, "x_candidates": CACHE_SIZE_KEYS, "y": SPEEDUP,
        "y_label": "speedup over hybrid (x)", "title": "Speedup vs cache size"},
    "speedup-vs-alpha": {
        "kind": "line", "x": None, "x_candidates": ALPHA_KEYS, "y": SPEEDUP,
        "x_label": "Zipf alpha (locality, unitless)", "y_label": "speedup over hybrid (x)",
        "title": "Speedup vs locality"},
    "pcie-bytes": {
        "kind": "line", "x": None, "x_candidates": CACHE_SIZE_KEYS + ALPHA_KEYS,
        "y": [H2D, D2H], "y_label": "PCIe traffic (bytes/sample)", "logy": True,
        "title": "PCIe traffic per sample (solid: H2D, dashed: D2H)"},
    "stage-breakdown": {
        "kind": "stages", "title": "Iteration time and the stages under it"},
    "miss-ratio-curve": {
        "kind": "line", "x": None, "x_candidates": CACHE_SIZE_KEYS, "y": MISS_RATIO,
        "y_label": "miss ratio (fraction of lookups)", "logx": True,
        "title": "Miss-ratio curve"},
}


def check_figure(name: str, opts: Any, source: str | None) -> dict[str, Any]:
    where = f"figures.{name}"
    if opts is None:
        opts = {}
    if not isinstance(opts, dict):
        raise UserError("expected a mapping of figure options", source=source, field=where)
    for k in opts:
        if k not in OPTION_KEYS:
            raise UserError(f"unknown figure option{closest(str(k), OPTION_KEYS)}; expected "
                            f"one of: {', '.join(OPTION_KEYS)}", source=source,
                            field=f"{where}.{k}")
    if name not in BUILTIN and "kind" not in opts:
        raise UserError(f"a figure that is not built in ({', '.join(BUILTIN)}) needs 'kind'",
                        source=source, field=f"{where}.kind")
    kind = opts.get("kind", BUILTIN.get(name, {}).get("kind"))
    if kind not in KINDS:
        raise UserError(f"unknown kind {kind!r}; expected one of: {', '.join(KINDS)}",
                        source=source, field=f"{where}.kind")
    if kind == "line" and name not in BUILTIN and "y" not in opts:
        raise UserError("a line figure needs 'y' (a metric column)", source=source,
                        field=f"{where}.y")
    for k in ("where",):
        if k in opts and not isinstance(opts[k], dict):
            raise UserError("expected a mapping column -> value", source=source,
                            field=f"{where}.{k}")
    for k in ("stacks", "designs"):
        if k in opts and not (isinstance(opts[k], list) and opts[k]):
            raise UserError("expected a non-empty list", source=source, field=f"{where}.{k}")
    if "x_scale" in opts and not isinstance(opts["x_scale"], (int, float)):
        raise UserError("expected a number", source=source, field=f"{where}.x_scale")
    return dict(opts)


def check_figures(data: Any, source: str | None) -> dict[str, dict[str, Any]]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError("expected a mapping: figure name -> options", source=source,
                        field="figures")
    return {str(n): check_figure(str(n), o, source) for n, o in data.items()}


def figure_options(name: str, declared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Built-in defaults with the experiment's declared options on top."""
    if name not in BUILTIN and name not in declared:
        known = sorted(set(BUILTIN) | set(declared))
        raise UserError(f"unknown figure '{name}'{closest(name, known)}; expected one of: "
                        f"{', '.join(known)}", field="--figure")
    opts = dict(BUILTIN.get(name, {}))
    opts.update(declared.get(name, {}))
    return opts
