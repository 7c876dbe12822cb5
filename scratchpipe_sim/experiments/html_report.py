"""One self-contained HTML page for a `run` or `sweep` results folder, to send to colleagues.

The page needs nothing but itself: CSS inline, figures as base64 PNG `data:` URIs, no script
and no link to anything outside it. It reads headline first, so a colleague has the answer
on the first screen: what was compared and the speedups over the baseline
(`experiments.speedups`, as `compare` prints them) with the key figure; then every figure
(drawn by `experiments.plots`, as `plot` draws them) with a one-sentence caption; then the
full results table (metrics first; long text columns and, past a screen of rows, the table
itself folded) with its legend and the points that did not run (each reason once);
optionally a `sensitivity` folder's bands or tornado figure; then provenance, folded (the
resolved config, the versions, the trace checksum, when); and how to reproduce it, as
commands that work as written. It fits a 1400-pixel-wide window without sideways scrolling.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import shlex
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scratchpipe_sim.errors import UserError, os_reason
from scratchpipe_sim.experiments.results import Results, load_results
from scratchpipe_sim.experiments.results_store import POINTS
from scratchpipe_sim.experiments.run_folder import (
    RUN_CONFIG,
    RUN_JSON,
    RUN_METADATA,
    RUN_TRACE_SHA,
    WALL_COLUMNS,
    versions,
)
from scratchpipe_sim.safety.atomic_files import atomic_write
from scratchpipe_sim.safety.paths import input_kind

#: the report's file name inside the results folder when no --out is given
REPORT_NAME = "report.html"
#: resolution of the embedded PNG figures (dots per inch; `plot`'s default)
FIGURE_DPI = 110
#: significant digits of a number in the HTML tables
DIGITS = 4
#: a text cell longer than this (a JSON mapping, a path, an error) is a long column: folded
LONG_TEXT = 24
#: a table of more rows than this is folded (a <details> closed), so the page stays short
FOLD_ROWS = 15
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1em auto;
max-width:84em;padding:0 1em;color:#222;line-height:1.35}
h1{font-size:1.5em;margin:.3em 0}h2{font-size:1.2em;border-bottom:1px solid #ccc;
margin-top:1.4em}
table{border-collapse:collapse;margin:.4em 0;font-size:.85em;max-width:100%}
th,td{border:1px solid #ccc;padding:.15em .45em;text-align:right;overflow-wrap:anywhere}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:.85em;white-space:pre-wrap;
overflow-wrap:anywhere}
figure{margin:.8em 0}img{max-width:100%;height:auto}figcaption{color:#444;font-size:.9em}
.note{color:#555}.bad{color:#b00}.lead{font-size:1.05em}
.head{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}
.head>div{flex:0 1 auto;min-width:0}.head figure{flex:1 1 34em;margin:0;min-width:0}
.scroll{max-width:100%;overflow-x:auto}
summary{cursor:pointer;color:#225}
ul.legend{font-size:.9em;color:#333}
"""
#: what each built-in figure shows, in one sentence (a declared one: its title)
CAPTIONS = {
    "speedup-vs-cache-size": "Each design's speedup over the baseline (the baseline's "
    "iteration time / the design's; higher is faster) as the GPU cache grows.",
    "speedup-vs-alpha": "Each design's speedup over the baseline as the trace's locality "
    "(Zipf alpha) grows.",
    "pcie-bytes": "PCIe bytes each design moves per training sample, host-to-device solid "
    "and device-to-host dashed (log scale).",
    "stage-breakdown": "Each design's mean iteration time (thick bar, the table's "
    "iter_ns_mean) with its stages under it: end to end where they run in series, side by "
    "side from 0 where they overlap, so the bars rank designs as the table does.",
    "miss-ratio-curve": "Fraction of embedding lookups that miss the GPU cache as the cache "
    "grows (log x); a design that could not run is marked above the panel, not drawn.",
}


@dataclass(frozen=True)
class Folder:
    """A results folder as the report reads it."""
    path: Path
    results: Results
    kind: str                      # "run" or "sweep"
    metadata: dict[str, Any]       # run: metadata.json; sweep: manifest.json


def cell(v: Any) -> str:
    """A table cell's text: numbers to DIGITS significant digits, missing values as '-'."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)) or hasattr(v, "item"):
        v = v.item() if hasattr(v, "item") else v
        if isinstance(v, float):
            if math.isnan(v):
                return "-"
            if math.isinf(v):
                return str(v)
            return f"{v:.{DIGITS}g}"
    return str(v)


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]], ident: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in r) + "</tr>"
                   for r in rows)
    attr = f' id="{ident}"' if ident else ""
    return (f'<div class="scroll"><table{attr}><thead><tr>{head}</tr></thead><tbody>{body}'
            "</tbody></table></div>")


def _fold(summary: str, body: str, open_: bool = False) -> str:
    return (f"<details{' open' if open_ else ''}><summary>{html.escape(summary)}</summary>"
            f"{body}</details>")


def _legend(lines: Iterable[str]) -> str:
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f'<ul class="legend">{items}</ul>' if items else ""


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _note(text: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{html.escape(text)}</p>'


def _png(fig: Any, alt: str = "figure") -> str:
    """A matplotlib figure as an <img> with its PNG inline (base64); the figure is closed.
    Saved as `plot` saves it (tight box: the legends and notes outside the axes kept)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, bbox_inches="tight", pad_inches=0.15,
                metadata={"Software": None})
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def open_folder(path: str | Path) -> Folder:
    """The results (a folder, or its results.csv / results.parquet) of a run or a sweep;
    a path that is neither is a UserError."""
    p = Path(path)
    input_kind(p, "`run` or `sweep` results folder")  # missing, a loop, a FIFO: one line
    res = load_results(p)
    folder = p if p.is_dir() else p.parent
    if res.manifest.get("kind") == "run":
        return Folder(folder, res, "run", _read_json(folder / RUN_METADATA))
    return Folder(folder, res, "sweep", dict(res.manifest))


# -- sections --------------------------------------------------------------------------------

def _what_ran(f: Folder) -> str:
    meta = f.metadata
    recorded = meta.get("versions") or {k: meta[k] for k in ("scratchpipe_sim", "python")
                                        if k in meta}
    facts: list[tuple[str, Any]] = [("results", str(f.path)), ("kind", f.kind)]
    if f.kind == "run":
        sha_file = f.path / RUN_TRACE_SHA
        sha = meta.get("trace_sha256") or (sha_file.read_text().strip()
                                           if sha_file.is_file() else None)
        facts += [("config", meta.get("config")), ("overrides", " ".join(
            meta.get("overrides") or []) or "none"), ("designs", ", ".join(
                meta.get("designs") or [])), ("trace sha256", sha or "not recorded")]
    else:
        facts += [("experiment", meta.get("experiment")), ("name", meta.get("name")),
                  ("experiment hash", meta.get("experiment_hash")),
                  ("points", meta.get("points")), ("swept keys", ", ".join(
                      meta.get("axes") or []) or "none"),
                  ("designs", ", ".join(meta.get("designs") or [])),
                  ("trace sha256", "not recorded by sweeps (each point's trace follows "
                   "from its resolved config and seed)")]
    facts.append(("ran at (UTC)", meta.get("created_utc") or "not recorded"))
    facts += [(f"{k} (at run)", v) for k, v in recorded.items()]
    now = versions()
    facts.append(("report made (UTC)", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
    facts += [(f"{k} (report)", v) for k, v in now.items() if recorded.get(k) != v]
    out = ["<h2>What ran</h2>", _fold("versions, checksum, dates",
                                      _table(["", "value"], facts))]
    config = _config_text(f)
    if config:
        out.append(_fold("resolved config" + (" (the first point; the others differ in the "
                                              "swept keys)" if f.kind == "sweep" else ""),
                         _pre(config)))
    return "".join(out)


def _config_text(f: Folder) -> str:
    if f.kind == "run":
        p = f.path / RUN_CONFIG
        return p.read_text(encoding="utf-8") if p.is_file() else ""
    p = f.path / POINTS
    try:
        first = json.loads(p.read_text(encoding="utf-8").splitlines()[0])
    except (OSError, ValueError, IndexError):
        return ""
    from scratchpipe_sim.config import dump_yaml

    return dump_yaml(first.get("config") or {})


def _run_rows(f: Folder) -> list[dict[str, Any]]:
    """A run's result rows as `run --json` printed them (results.json), else the table's."""
    p = f.path / RUN_JSON
    try:
        rows = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(rows, list) and rows:
            return rows
    except (OSError, ValueError):
        pass
    from scratchpipe_sim.experiments.figures import SPEEDUP

    frame = f.results.frame
    added = ("point", "index", "status")  # load_results' columns for a one-point table
    keep = [c for c in frame.columns if not c.startswith("cfg.") and c not in added]
    rows = []
    for r in frame[keep].to_dict(orient="records"):
        # an empty cell is a column this design does not report (its stages): drop it, as
        # results.json would; a speedup without the baseline is None there
        row = {k: v for k, v in r.items() if not (isinstance(v, float) and math.isnan(v))}
        row.setdefault(SPEEDUP, None)
        rows.append(row)
    return rows


def _results_run(f: Folder) -> str:
    from scratchpipe_sim.experiments.run_tables import run_tables

    rows = _run_rows(f)
    try:
        tables = run_tables(rows)
    except KeyError as e:
        return ("<h2>Results</h2>" + _note(f"the table lacks column {e}: showing it as is")
                + _all_columns(rows))
    main, *rest = tables
    out = ["<h2>Results</h2>", _table(main.header, main.rows), _legend(main.legend)]
    for t in rest:
        if t.rows:
            out += [f"<h3>{html.escape(t.title)}</h3>", _table(t.header, t.rows)]
    out.append(_all_columns(rows))
    return "".join(out)


def _all_columns(rows: list[dict[str, Any]]) -> str:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys and k not in WALL_COLUMNS]
    return ("<details><summary>every result column (as in results.csv, without the cfg.* "
            "columns)</summary>" + _table(keys, ([r.get(k) for k in keys] for r in rows))
            + "</details>")


def _sweep_legend(columns: Sequence[str]) -> list[str]:
    from scratchpipe_sim.experiments.plots import AXIS_LABELS, METRIC_LABELS

    lines = ["point, index: the point's config hash and its number in the experiment",
             "status: ok; infeasible (the design cannot run there: a result, reason in "
             "error); error (a failure, reason in error)"]
    for c in columns:
        if c in AXIS_LABELS:
            lines.append(f"{c}: {AXIS_LABELS[c][0]} (swept)")
        elif c in METRIC_LABELS:
            lines.append(f"{c}: {METRIC_LABELS[c]}")
    return lines


def _results_sweep(f: Folder) -> str:
    """The full table: point number, design and swept keys, then the metrics; long text
    columns in a table of their own, folded; the whole folded past FOLD_ROWS rows. Rows
    that did not run are under "Points that did not run", once."""
    frame = f.results.ok().sort_values("index")
    cols = [c for c in (f.metadata.get("columns") or frame.columns) if c in frame.columns
            and c not in ("point", "status", "error")]
    long_cols = [c for c in cols if not pd_numeric(frame[c])
                 and frame[c].astype(str).str.len().max() > LONG_TEXT]
    first = [c for c in ("index", "design") if c in cols]
    axes = [c for c in f.results.axes if c in cols and c not in long_cols]
    metrics = [c for c in cols if c not in (*first, *axes, *long_cols)]
    main = first + axes + metrics
    table = _table(main, frame[main].itertuples(index=False, name=None))
    n = len(frame)
    out = ["<h2>Results</h2>",
           table if n <= FOLD_ROWS else _fold(f"the full table: {n} rows (every design at "
                                              "every point it ran)", table),
           _legend(_sweep_legend(main))]
    if long_cols:
        keys = first + long_cols
        out.append(_fold(f"long text columns ({', '.join(long_cols)})",
                         _table(keys, frame[keys].itertuples(index=False, name=None))))
    return "".join(out)


def pd_numeric(values: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(values))


def _not_run(f: Folder) -> str:
    from scratchpipe_sim.experiments.not_run import group, ranges

    bad = f.results.not_ok().sort_values("index")
    if bad.empty:
        return ("<h2>Points that did not run</h2>"
                + _note("none: every design ran at every point"))
    reasons = group(zip(bad["design"], bad["status"], bad["index"].astype(str),
                        bad["error"] if "error" in bad.columns else [None] * len(bad),
                        strict=True))
    lines = [f"{r.design} {r.status} at point {', '.join(ranges(int(w) for w in r.where))}: "
             + ("e.g. " if len(r.reasons) > 1 else "") + r.reasons[0] for r in reasons]
    cols = [c for c in ("index", *f.results.axes, "design", "status", "error")
            if c in bad.columns]
    return ("<h2>Points that did not run</h2>"
            + _note(f"{len(bad)} design result(s): infeasible ones are results (the design "
                    "cannot run there), errors are failures (rerun the sweep with "
                    "--retry-failed once fixed)", "bad")
            + _legend(lines)
            + _fold("each of them", _table(cols, bad[cols].itertuples(index=False,
                                                                      name=None))))


def _speedups(f: Folder) -> tuple[str, str]:
    """(the headline table, the per-point table or ""): for a run, each design's iteration
    time and speedup; for a sweep, each design's geometric mean and maximum speedup over the
    points, and the per-point table (folded past FOLD_ROWS points)."""
    from scratchpipe_sim.experiments.speedups import compare

    try:
        c = compare(f.results)
    except UserError as e:
        return _note(f"no speedups: {e.message}", "bad"), ""
    what = f"speedup over {c.baseline} ({c.metric}: baseline time / design time; higher " \
           "is faster)"
    n = len(c.table)
    if f.kind == "run":
        ok = f.results.ok().set_index("design")
        body = [[d, ok.at[d, c.metric] / 1e3 if d in ok.index else None,
                 _ratio(c.table.at[0, d])] for d in c.designs]
        head = _table(["design", "iteration (us)", f"speedup over {c.baseline}"], body,
                      "speedups")
        return _note(what) + head, ""
    ran = {d: n - sum(1 for _, x, _, _ in c.missing if x == d) for d in c.designs}
    body = [[d, _ratio(c.geomean[d]), _ratio(c.maximum[d]), f"{ran[d]} of {n}"]
            for d in c.designs]
    note = what + (f"; geometric mean over the {c.common} of {n} points where every design "
                   "ran" if c.common < n else f"; geometric mean over the {n} points")
    head = _note(note) + _table(["design", "geomean", "max", "points ran"], body, "speedups")
    table = [[i, *(r[a] for a in c.axes), *(_ratio(r[d]) for d in c.designs)]
             for i, (_, r) in enumerate(c.table.iterrows())]
    per = _table(["#", *c.axes, *c.designs], table)
    per = per if n <= FOLD_ROWS else _fold(f"speedup at each of the {n} points", per)
    return head, "<h2>Speedup at each point</h2>" + _note("'-': the design has no value "
                                                           "there (why: Points that did "
                                                           "not run)") + per


def _ratio(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}x"


def _figure_names(f: Folder) -> list[str]:
    """The figures in report order: the key one first (a speedup figure when declared)."""
    names = list(f.results.figures) or ["stage-breakdown"]
    return sorted(names, key=lambda n: not n.startswith("speedup"))


def caption(f: Folder, name: str) -> str:
    """One sentence saying what figure `name` shows."""
    if name in CAPTIONS:
        return CAPTIONS[name]
    opts = f.results.figures.get(name, {})
    ys = opts.get("y")
    y = ", ".join(ys) if isinstance(ys, list) else ys
    return str(opts.get("title") or (f"{y} per design" + (f" against {opts['x']}"
                                                          if opts.get("x") else "")) + ".")


def _figure(f: Folder, name: str) -> str:
    from scratchpipe_sim.experiments.plots import make_figure

    try:
        img = _png(make_figure(f.results, name), name)
    except UserError as e:
        return _note(f"{name}: not drawn: {e.message}", "bad")
    return (f'<figure id="fig-{html.escape(name)}">{img}<figcaption><b>{html.escape(name)}'
            f"</b>: {html.escape(caption(f, name))}</figcaption></figure>")


def _figures(f: Folder, names: list[str]) -> str:
    if not names:
        return ""
    return "<h2>Figures</h2>" + "".join(_figure(f, n) for n in names)


def sensitivity_kind(path: Path) -> str:
    """Which figure a `sensitivity --out` folder holds: "bands" (a sweep's) or "tornado"
    (a config's); any other path is a UserError."""
    from scratchpipe_sim.experiments.bands import BANDS_JSON
    from scratchpipe_sim.experiments.sensitivity_analysis import SENSITIVITY_JSON

    if (path / BANDS_JSON).is_file():
        return "bands"
    if (path / SENSITIVITY_JSON).is_file():
        return "tornado"
    raise UserError(f"no {BANDS_JSON} or {SENSITIVITY_JSON}; expected a `sensitivity --out` "
                    "folder", source=str(path), field="--bands")


def _bands(path: Path) -> str:
    """The figure of a `sensitivity --out` folder, as `plot` draws it."""
    if sensitivity_kind(path) == "bands":
        from scratchpipe_sim.experiments.band_plots import band_figure
        from scratchpipe_sim.experiments.bands import load_bands

        fig, what = band_figure(load_bands(path)), "bands over the unmeasured constants"
    else:
        from scratchpipe_sim.experiments.sensitivity_analysis import (
            load_sensitivity,
            tornado_figure,
        )

        fig, what = tornado_figure(load_sensitivity(path)), "sensitivity (tornado)"
    return (f"<h2>Sensitivity</h2>{_note(f'{what}, from {path}')}<figure>{_png(fig)}"
            f"<figcaption>{html.escape(what)}</figcaption></figure>")


def _reproduce(f: Folder, report_out: Path) -> str:
    meta = f.metadata
    if f.kind == "run":
        cmd = ["scratchpipe-sim", "run", str(meta.get("config") or "CONFIG")]
        for o in meta.get("overrides") or []:
            cmd += ["--set", o]
        lines = [shlex.join(cmd),
                 "# or from this folder alone (the resolved config is a complete config):",
                 shlex.join(["scratchpipe-sim", "run", str(f.path / RUN_CONFIG)])]
    else:
        lines = [shlex.join(["scratchpipe-sim", "sweep", str(meta.get("experiment")
                                                              or "EXPERIMENT.yaml"),
                             "--out", str(f.path)]),
                 "# (resumes: finished points are skipped; a fresh --out runs them all)"]
    lines.append(shlex.join(["scratchpipe-sim", "report", str(f.path), "--out",
                             str(report_out), "--force"]))
    lines.append("# (--force: this page is there already, and is replaced)")
    return ("<h2>How to reproduce</h2>"
            + _note("with the versions listed under What ran; results are deterministic "
                    "for a given config and seed (wall-clock columns aside)")
            + _pre("\n".join(lines)))


def _summary(f: Folder) -> str:
    """One sentence: what was compared, on what."""
    meta = f.metadata
    designs = ", ".join(sorted(set(f.results.frame["design"]),
                               key=list(f.results.frame["design"]).index))
    if f.kind == "run":
        on = f"on {meta.get('config') or f.path}"
        if meta.get("overrides"):
            on += " with " + " ".join(meta["overrides"])
        return f"{designs} {on}, one point."
    axes = ", ".join(f.results.axes) or "no swept key"
    return (f"{designs} over {meta.get('points') or f.results.frame['point'].nunique()} "
            f"points of {meta.get('experiment') or f.path} (swept: {axes}).")


def build(f: Folder, report_out: Path, bands: Path | None = None) -> str:
    """The report page of results folder `f` (`bands`: a sensitivity folder to include):
    the headline (what was compared, the speedups, the key figure) first, provenance last."""
    title = (f"{f.kind} report: "
             + (f.metadata.get("name") or Path(str(f.metadata.get("config") or f.path)).stem))
    names = _figure_names(f)
    head, per_point = _speedups(f)
    parts = [f'<p class="lead">{html.escape(_summary(f))}</p>',
             '<div class="head"><div><h2>Speedups</h2>' + head + "</div>"
             + (_figure(f, names[0]) if names else "") + "</div>",
             _figures(f, names[1:]), per_point,
             _results_run(f) if f.kind == "run" else _results_sweep(f)]
    if f.kind == "sweep":
        parts.append(_not_run(f))
    if bands is not None:
        parts.append(_bands(bands))
    parts += [_what_ran(f), _reproduce(f, report_out)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>" + "\n".join(p for p in parts if p)
            + "</body></html>\n")


def write(results: str | Path, out: str | Path | None = None, *, force: bool = False,
          bands: str | Path | None = None) -> Path:
    """Write the report of `results` to `out` (default RESULTS/report.html). An existing
    file is replaced only with `force`: otherwise a UserError, nothing written."""
    f = open_folder(results)
    if bands is not None:
        sensitivity_kind(Path(bands))  # a wrong folder fails before any figure is drawn
    target = Path(out) if out is not None else f.path / REPORT_NAME
    if target.is_dir():
        target = target / REPORT_NAME
    if target.exists() and not force:
        raise UserError("exists; expected a new file: pass --force to replace it, or --out "
                        "another path", source=str(target), field="--out")
    page = build(f, target, Path(bands) if bands is not None else None)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, page.encode("utf-8"))
    except OSError as e:
        raise UserError(f"cannot write the report: {os_reason(e)}; expected a writable "
                        "path", source=str(target), field="--out") from None
    return target
