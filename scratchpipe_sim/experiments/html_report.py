"""One self-contained HTML page for a `run` or `sweep` results folder, to send to colleagues.

The page needs nothing but itself: CSS inline, figures as base64 PNG `data:` URIs, no script
and no link to anything outside it. It says what ran (the resolved config, the versions, the
trace checksum, when), shows the results table with its column legend, the per-stage
breakdown and the figures (drawn by `experiments.plots`, as `plot` draws them), the speedups
over the baseline (`experiments.speedups`, as `compare` prints them), the points that did not
run, optionally a `sensitivity` folder's bands or tornado figure, and how to reproduce it.
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
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:72em;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:.85em}
figure{margin:1em 0}img{max-width:100%;height:auto}
.note{color:#555}.bad{color:#b00}
ul.legend{font-size:.9em;color:#333}
"""


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


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _legend(lines: Iterable[str]) -> str:
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f'<ul class="legend">{items}</ul>' if items else ""


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _note(text: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{html.escape(text)}</p>'


def _png(fig: Any) -> str:
    """A matplotlib figure as an <img> with its PNG inline (base64); the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, metadata={"Software": None})
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="figure" src="data:image/png;base64,{data}">'


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
    out = ["<h2>What ran</h2>", _table(["", "value"], facts)]
    config = _config_text(f)
    if config:
        out.append("<details open><summary>resolved config"
                   + (" (the first point; the others differ in the swept keys)"
                      if f.kind == "sweep" else "") + "</summary>" + _pre(config)
                   + "</details>")
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
    frame = f.results.frame
    cols = [c for c in (f.metadata.get("columns") or frame.columns) if c in frame.columns
            and c != "point"]
    rows = frame[cols].itertuples(index=False, name=None)
    return ("<h2>Results</h2>" + _table(cols, rows) + _legend(_sweep_legend(cols)))


def _not_run(f: Folder) -> str:
    bad = f.results.not_ok()
    if bad.empty:
        return ("<h2>Points that did not run</h2>"
                + _note("none: every design ran at every point"))
    cols = [c for c in ("index", *f.results.axes, "design", "status", "error")
            if c in bad.columns]
    return ("<h2>Points that did not run</h2>"
            + _note(f"{len(bad)} design result(s): infeasible ones are results (the design "
                    "cannot run there), errors are failures (rerun the sweep with "
                    "--retry-failed once fixed)", "bad")
            + _table(cols, bad[cols].itertuples(index=False, name=None)))


def _speedups(f: Folder) -> str:
    from scratchpipe_sim.experiments.speedups import compare

    try:
        c = compare(f.results)
    except UserError as e:
        return "<h2>Speedups</h2>" + _note(f"no speedups: {e.message}")
    head = ["#", *c.axes, *c.designs]
    body = [[i, *(r[a] for a in c.axes), *(_ratio(r[d]) for d in c.designs)]
            for i, (_, r) in enumerate(c.table.iterrows())]
    blank = [""] * len(c.axes)
    body += [["geomean", *blank, *(_ratio(c.geomean[d]) for d in c.designs)],
             ["max", *blank, *(_ratio(c.maximum[d]) for d in c.designs)]]
    title = f"speedup over {c.baseline} ({c.metric}: baseline time / design time)"
    if c.common < len(c.table):
        title += (f"; geomean over the {c.common} of {len(c.table)} points where every "
                  "design ran ('-': did not run)")
    return "<h2>Speedups</h2>" + _note(title) + _table(head, body)


def _ratio(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}x"


def _figures(f: Folder) -> str:
    from scratchpipe_sim.experiments.plots import make_figure

    names = list(f.results.figures) or ["stage-breakdown"]
    out = ["<h2>Figures</h2>"]
    for name in names:
        try:
            img = _png(make_figure(f.results, name))
        except UserError as e:
            out.append(_note(f"{name}: not drawn: {e.message}", "bad"))
            continue
        out.append(f"<figure>{img}<figcaption>{html.escape(name)}</figcaption></figure>")
    return "".join(out)


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
                             str(report_out)]))
    return ("<h2>How to reproduce</h2>"
            + _note("with the versions listed under What ran; results are deterministic "
                    "for a given config and seed (wall-clock columns aside)")
            + _pre("\n".join(lines)))


def build(f: Folder, report_out: Path, bands: Path | None = None) -> str:
    """The report page of results folder `f` (`bands`: a sensitivity folder to include)."""
    title = (f"{f.kind} report: "
             + (f.metadata.get("name") or Path(str(f.metadata.get("config") or f.path)).stem))
    parts = [_what_ran(f),
             _results_run(f) if f.kind == "run" else _results_sweep(f),
             _speedups(f), _figures(f)]
    if f.kind == "sweep":
        parts.append(_not_run(f))
    if bands is not None:
        parts.append(_bands(bands))
    parts.append(_reproduce(f, report_out))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>" + "\n".join(parts) + "</body></html>\n")


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
