"""Numbers in README.md and docs/*.md that come from results files, never typed by hand.

Why: a figure copied into prose goes stale the day the study is rerun, and the docs then
disagree with themselves. A quoted figure is written inside a marker that says where it
comes from; `scratchpipe-sim docs --check` recomputes every marker from the committed
results snapshot (docs/data/) and names the file, line and stale text; `--update` rewrites
them; `--collect` refreshes the snapshot from a study rerun. Two forms:

    <!-- n: QUERY -->1.25<!-- /n -->                      inline, one line
    <!-- numbers: BLOCK -->                              a generated block (a table)
    ...
    <!-- /numbers -->

QUERY is an operation and `key=value` arguments (docs/results.md, "Reproduce", lists
them): `src=` names a results table (`fig1` = docs/data/study/fig1_*.csv, `published` =
`validate --published --json`'s TBE phases, `published-e2e` its end-to-end points (the
breakdown flattened to embedding_ms ... other_ms), `published-cluster` its multi-GPU
points, `bands:fig1` = the sensitivity runs of fig1), `metric=` a
column (default speedup_vs_hybrid), `scale=` a factor it is multiplied by (1e-6: ns to
ms), `fmt=` a format spec (default `.2f`); every other `key=value` keeps the rows whose
column equals it (numbers compared as numbers; `a+b`: either). One argument may list values
separated by commas: the operation runs once per value, the results joined with " / ".
Operations: value (one row), range, max, geomean, worst (the factor furthest from 1), count,
ratio (num=ID over den=ID of the metric, rows named by `id`);
a= b= make each point's value the ratio of design a to design b; on bands: band (nominal
[min-max] over the runs), ahead (runs above 1), lowest; agg=geomean over the points.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scratchpipe_sim.errors import UserError

#: the committed snapshot every marker reads, relative to the repository root
DATA_DIR = Path("docs") / "data"
STUDY_DIR = "study"
BANDS_DIR = "band_runs"
PUBLISHED_FILE = "published.json"
#: `validate --published`'s end-to-end and multi-GPU rows, and the `src=` naming each
PUBLISHED_E2E_FILE = "published_end_to_end.json"
PUBLISHED_CLUSTER_FILE = "published_cluster.json"
JSON_SOURCES = {"published": PUBLISHED_FILE, "published-e2e": PUBLISHED_E2E_FILE,
                "published-cluster": PUBLISHED_CLUSTER_FILE}
#: the kept keys of each kind of row (the breakdown of an end-to-end row is flattened)
TBE_KEYS = ("id", "gpu", "design", "optimizer", "phase", "predicted_ms", "measured_ms",
            "factor", "role", "status")
E2E_KEYS = ("id", "gpu", "design", "gpus", "batch_per_gpu", "predicted_ms", "measured_ms",
            "factor", "predicted_samples_per_s_per_gpu", "measured_samples_per_s_per_gpu",
            "role", "status")
BREAKDOWN = ("embedding", "dense", "interaction", "host_wait", "other")
CLUSTER_KEYS = ("id", "gpu", "design", "quantity", "predicted", "measured", "factor",
                "role", "status")
#: the Markdown files whose markers are checked, relative to the repository root
DOC_GLOBS = ("README.md", "docs/*.md")
#: a query starts with a lower-case operation, so `<!-- n: QUERY -->` in prose is an example
INLINE = re.compile(r"<!-- n: (?P<query>[a-z][^>]*?) -->(?P<text>.*?)<!-- /n -->")
BLOCK = re.compile(r"<!-- numbers: (?P<query>[a-z][^>]*?) -->\n(?P<text>.*?)<!-- /numbers -->",
                   re.DOTALL)
#: arguments that are not row filters
OPTION_KEYS = frozenset({"src", "metric", "scale", "fmt", "a", "b", "agg", "has",
                         "complete", "num", "den", "over"})
JOIN = " / "
MISSING = "-"


@dataclass(frozen=True)
class Stale:
    """A marker whose text is not what its source gives."""

    path: Path
    line: int
    query: str
    found: str
    expected: str

    def describe(self, root: Path) -> str:
        rel = self.path.relative_to(root) if self.path.is_relative_to(root) else self.path
        return (f"{rel}:{self.line}: stale number ({self.query}): the text says "
                f"{self.found!r}, the results give {self.expected!r}")


# -- sources --------------------------------------------------------------------------------
class Sources:
    """The committed snapshot, read lazily and once per source."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self._rows: dict[str, list[dict[str, Any]]] = {}

    def rows(self, src: str) -> list[dict[str, Any]]:
        if src not in self._rows:
            self._rows[src] = self._load(src)
        return self._rows[src]

    def _load(self, src: str) -> list[dict[str, Any]]:
        if src in JSON_SOURCES:
            return _read_json(self.data_dir / JSON_SOURCES[src])
        if src.startswith("bands:"):
            return _read_json(self._one(self.data_dir / BANDS_DIR, src[6:], ".json"))
        with self._one(self.data_dir / STUDY_DIR, src, ".csv").open(encoding="utf-8") as f:
            return list(csv.DictReader(f))

    @staticmethod
    def _one(folder: Path, name: str, ext: str) -> Path:
        exact = folder / f"{name}{ext}"
        found = [exact] if exact.is_file() else sorted(folder.glob(f"{name}_*{ext}"))
        if len(found) != 1:
            raise UserError(f"expected one results file named {name}{ext} or {name}_*{ext}, "
                            f"found {len(found)}", source=str(folder), field="src")
        return found[0]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("missing: expected the snapshot `scratchpipe-sim docs --collect` "
                        "writes", source=str(path)) from None
    except ValueError as e:
        raise UserError(f"unreadable JSON: {e}", source=str(path)) from None


# -- queries --------------------------------------------------------------------------------
def parse_query(query: str) -> tuple[str, dict[str, str]]:
    """'OP k=v k=v' -> (OP, {k: v})."""
    op, *rest = query.split()
    args: dict[str, str] = {}
    for token in rest:
        key, eq, value = token.partition("=")
        if not eq or not key:
            raise UserError(f"expected key=value, got {token!r}", field=query)
        args[key] = value
    return op, args


def _same(a: Any, b: str) -> bool:
    """A row's cell equals a filter's value (as numbers when both are numbers)."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == b


def _matches(row: dict[str, Any], filters: dict[str, str]) -> bool:
    """Every filter holds: the cell equals its value, or one of its values joined by '+'."""
    return all(k in row and any(_same(row[k], one) for one in v.split("+"))
               for k, v in filters.items())


def _filters(args: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in args.items() if k not in OPTION_KEYS}


def _ok(row: dict[str, Any]) -> bool:
    return row.get("status", "ok") == "ok"


def _num(v: float | None, fmt: str) -> str:
    return MISSING if v is None else format(v, fmt)


def _metric(row: dict[str, Any], args: dict[str, str]) -> float | None:
    key = args.get("metric", "speedup_vs_hybrid")
    if not _ok(row) or row.get(key) in (None, ""):
        return None
    return float(row[key]) * float(args.get("scale", 1.0))


def _selected(src: Sources, args: dict[str, str], query: str) -> list[dict[str, Any]]:
    rows = [r for r in src.rows(args.get("src", "")) if _matches(r, _filters(args))]
    if "complete" in args:  # points where every design (or every one listed) ran
        points: dict[str, list[dict[str, Any]]] = {}
        for r in src.rows(args["src"]):
            points.setdefault(r.get("index", ""), []).append(r)
        need = None if args["complete"] == "all" else set(args["complete"].split("+"))
        full = {i for i, rs in points.items()
                if all(_ok(r) for r in rs if need is None or r["design"] in need)}
        rows = [r for r in rows if r.get("index", "") in full]
    if not rows:
        raise UserError("no row matches", field=query)
    return rows


def _values(src: Sources, args: dict[str, str], query: str) -> list[float | None]:
    """The metric of each selected row, or with a= and b= the ratio a / b per point."""
    rows = _selected(src, args, query)
    if "a" not in args:
        return [_metric(r, args) for r in rows]
    by_point: dict[str, dict[str, float | None]] = {}
    for r in rows:
        by_point.setdefault(r.get("index", ""), {})[r["design"]] = _metric(r, args)
    out = []
    for designs in by_point.values():
        a, b = designs.get(args["a"]), designs.get(args["b"])
        out.append(None if a is None or b is None else a / b)
    return out


def op_value(src: Sources, args: dict[str, str], query: str) -> str:
    """One row's metric (or one point's ratio)."""
    vals = _values(src, args, query)
    if len(vals) != 1:
        raise UserError(f"expected one row, {len(vals)} match", field=query)
    return _num(vals[0], args.get("fmt", ".2f"))


def op_range(src: Sources, args: dict[str, str], query: str) -> str:
    """min-max of the selected rows' metric (one value when they are equal as printed)."""
    vals = [v for v in _values(src, args, query) if v is not None]
    fmt = args.get("fmt", ".2f")
    lo, hi = format(min(vals), fmt), format(max(vals), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def op_max(src: Sources, args: dict[str, str], query: str) -> str:
    return format(max(v for v in _values(src, args, query) if v is not None),
                  args.get("fmt", ".2f"))


def op_worst(src: Sources, args: dict[str, str], query: str) -> str:
    """The factor furthest from 1, as a factor above 1 ("within 1.2x")."""
    vals = [v for v in _values(src, args, query) if v is not None]
    return format(max(max(vals), 1.0 / min(vals)), args.get("fmt", ".2f"))


def op_geomean(src: Sources, args: dict[str, str], query: str) -> str:
    vals = [v for v in _values(src, args, query) if v is not None]
    return format(math.exp(sum(map(math.log, vals)) / len(vals)), args.get("fmt", ".2f"))


def op_ratio(src: Sources, args: dict[str, str], query: str) -> str:
    """The metric of the row whose id is num= over the one whose id is den= (a published
    pair's ratio: E3.7 / E3.6); with over=METRIC, that ratio over the same ratio of the
    other metric (the model's ratio over the published one)."""
    if "num" not in args or "den" not in args:
        raise UserError("expected num=ID and den=ID", field=query)

    def one(point: str, metric: str) -> float:
        rows = [r for r in _selected(src, args, query) if str(r.get("id")) == point]
        v = _metric(rows[0], {**args, "metric": metric}) if len(rows) == 1 else None
        if v is None:
            raise UserError(f"expected one row with id {point} and its {metric}",
                            field=query)
        return v

    def pair(metric: str) -> float:
        return one(args["num"], metric) / one(args["den"], metric)

    metric = args.get("metric", "speedup_vs_hybrid")
    value = pair(metric) / (pair(args["over"]) if "over" in args else 1.0)
    return format(value, args.get("fmt", ".2f"))


def op_count(src: Sources, args: dict[str, str], query: str) -> str:
    """How many rows (points, with a= b=) the selection holds."""
    return str(len(_values(src, args, query)))


# -- bands: the sensitivity runs of a sweep, common random numbers at every point -----------
def _band_runs(src: Sources, args: dict[str, str], query: str) -> list[float]:
    """Per run, the design's speedup (over= another design: their ratio), at the one
    selected point, or with agg=geomean its geometric mean over the selected points."""
    has = set(args["has"].split("+")) if "has" in args else set()
    design, over = args["a"], args.get("b")
    pts = [p for p in src.rows(args["src"])
           if _matches(p["values"], _filters(args)) and has <= set(p["runs"][0])
           and design in p["runs"][0]]
    if not pts:
        raise UserError("no point matches", field=query)
    if args.get("agg") != "geomean" and len(pts) != 1:
        raise UserError(f"expected one point, {len(pts)} match (agg=geomean?)", field=query)

    def one(run: dict[str, float]) -> float:
        return run[design] / (run[over] if over else 1.0)

    n = min(len(p["runs"]) for p in pts)
    return [math.exp(sum(math.log(one(p["runs"][i])) for p in pts) / len(pts))
            for i in range(n)]


def op_band(src: Sources, args: dict[str, str], query: str) -> str:
    """nominal [min-max] over the runs (the first run is the nominal one)."""
    runs = _band_runs(src, args, query)
    fmt = args.get("fmt", ".2f")
    return f"{runs[0]:{fmt}} [{min(runs):{fmt}}-{max(runs):{fmt}}]"


def op_ahead(src: Sources, args: dict[str, str], query: str) -> str:
    """'K of N': the runs in which the ratio (or speedup) is above 1."""
    runs = _band_runs(src, args, query)
    return f"{sum(1 for v in runs if v > 1.0)} of {len(runs)}"


def op_lowest(src: Sources, args: dict[str, str], query: str) -> str:
    """The lowest value over the runs ("at least ...")."""
    return format(min(_band_runs(src, args, query)), args.get("fmt", ".2f"))


def op_runs(src: Sources, args: dict[str, str], query: str) -> str:
    """How many runs each point of the bands has."""
    return str(len(_band_runs(src, args, query)))


# -- blocks ---------------------------------------------------------------------------------
def block_published_table(src: Sources, args: dict[str, str], query: str) -> str:
    """`validate --published`'s table and its per-role summary, as the command prints them
    (a fenced code block)."""
    from scratchpipe_sim.experiments.run_tables import table

    rows = src.rows("published")
    cells = [[r["id"], r["gpu"], r["design"], r["optimizer"] or "-", r["phase"],
              _num(r["predicted_ms"], ".3f"), _num(r["measured_ms"], ".3f"),
              _num(r["factor"], ".2f"), r["role"] if r["status"] == "ok"
              else f"{r['role']} (skipped)"] for r in rows]
    out = table(cells, ["id", "gpu", "design", "optimizer", "phase", "predicted_ms",
                        "measured_ms", "factor", "role"]).splitlines()
    for role in ("fit", "check"):
        rs = [r for r in rows if r["role"] == role and r["factor"] is not None]
        logs = [abs(math.log(r["factor"])) for r in rs]
        worst = max(rs, key=lambda r: abs(math.log(r["factor"])))
        out.append(f"{role}: {len(rs)} phases, typical factor "
                   f"{math.exp(sum(logs) / len(logs)):.2f}x (geometric mean of |log factor|), "
                   f"worst {worst['factor']:.2f} ({worst['id']} {worst['phase']})")
    return "\n".join(["```", "$ scratchpipe-sim validate --published", *out, "```", ""])


def _ms(v: float | None) -> str:
    """ms to the microsecond; a rounding residue (-1e-15) prints as 0.000, not -0.000."""
    return _num(None if v is None else (0.0 if abs(v) < 5e-4 else v), ".3f")


def block_end_to_end_table(src: Sources, args: dict[str, str], query: str) -> str:
    """`validate --published`'s end-to-end points as a Markdown table: the whole iteration
    predicted and measured, its factor, role and breakdown."""
    head = ("| id | design | batch/GPU | predicted ms | measured ms | factor | role | "
            "breakdown (ms): " + " / ".join(BREAKDOWN) + " |")
    lines = [head, "|" + "---|" * 8]
    for r in src.rows("published-e2e"):
        ok = r["status"] == "ok"
        parts = " / ".join(_ms(r.get(f"{k}_ms")) for k in BREAKDOWN) if ok else MISSING
        lines.append(f"| {r['id']} | {r['design']} x {r['gpus']} | {r['batch_per_gpu']} | "
                     f"{_ms(r['predicted_ms']) if ok else 'skipped'} | "
                     f"{_ms(r['measured_ms'])} | {_num(r['factor'], '.2f')} | "
                     f"{r['role'] if ok else r['role'] + ' (skipped)'} | {parts} |")
    return "\n".join(lines) + "\n"


def _quantity(v: float | None, quantity: str) -> str:
    if v is None:
        return MISSING
    return f"{v / 1e6:.2f} M" if quantity == "samples_per_s" else f"{v:.2f}"


def block_cluster_table(src: Sources, args: dict[str, str], query: str) -> str:
    """`validate --published`'s multi-GPU points as a Markdown table (factor: predicted
    over measured time, > 1 the model is slower)."""
    lines = ["| id | GPUs | quantity | predicted | measured | factor (time) | role |",
             "|" + "---|" * 7]
    for r in src.rows("published-cluster"):
        q = r["quantity"]
        lines.append(f"| {r['id']} | {r['gpu']} | {q} | {_quantity(r['predicted'], q)} | "
                     f"{_quantity(r['measured'], q)} | {_num(r['factor'], '.2f')} | "
                     f"{r['role'] if r['status'] == 'ok' else r['role'] + ' (skipped)'} |")
    return "\n".join(lines) + "\n"


Op = Callable[[Sources, dict[str, str], str], str]
#: inline operations by name
OPS: dict[str, Op] = {"value": op_value, "range": op_range, "max": op_max, "worst": op_worst,
                      "geomean": op_geomean, "count": op_count, "band": op_band,
                      "ahead": op_ahead, "lowest": op_lowest, "runs": op_runs,
                      "ratio": op_ratio}
#: block generators by name
BLOCKS: dict[str, Op] = {"published-table": block_published_table,
                         "end-to-end-table": block_end_to_end_table,
                         "cluster-table": block_cluster_table}


def evaluate(query: str, src: Sources, ops: dict[str, Op]) -> str:
    """The text a marker's query gives (joined with " / " over a comma-listed argument)."""
    op, args = parse_query(query)
    if op not in ops:
        raise UserError(f"unknown operation {op!r}: expected one of {', '.join(sorted(ops))}",
                        field=query)
    listed = [k for k, v in args.items() if "," in v and k != "fmt"]  # fmt=,.0f: commas
    if len(listed) > 1:
        raise UserError("expected at most one comma-listed argument", field=query)
    if not listed:
        return ops[op](src, args, query)
    key = listed[0]
    return JOIN.join(ops[op](src, {**args, key: v}, query) for v in args[key].split(","))


# -- files ----------------------------------------------------------------------------------
def doc_files(root: Path) -> list[Path]:
    return [p for g in DOC_GLOBS for p in sorted(root.glob(g))]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _first_difference(old: str, new: str) -> tuple[int, str, str]:
    """(line index, old line, new line) of the first line that differs: a block's stale
    number is named by its own line, not by the whole block."""
    a, b = old.split("\n"), new.split("\n")
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return i, (a[i] if i < len(a) else "").strip(), (b[i] if i < len(b) else "").strip()


def render(text: str, src: Sources, path: Path) -> tuple[str, list[Stale]]:
    """The file's text with every marker regenerated, and the markers that were stale."""
    stale: list[Stale] = []

    def sub(pattern: re.Pattern[str], ops: dict[str, Op], block: bool) -> Callable:
        def one(m: re.Match[str]) -> str:
            query = m.group("query")
            try:
                new = evaluate(query, src, ops)
            except UserError as e:
                raise UserError(e.message, source=f"{path}:{_line_of(text, m.start())}",
                                field=e.field) from None
            if new != m.group("text"):
                line, found, expected = _first_difference(m.group("text"), new)
                stale.append(Stale(path, _line_of(text, m.start()) + block * (1 + line),
                                   query, found, expected))
            head = "<!-- numbers: " if block else "<!-- n: "
            tail = "<!-- /numbers -->" if block else "<!-- /n -->"
            return f"{head}{query} -->{chr(10) if block else ''}{new}{tail}"
        return one

    # inline first: a one-line marker never moves a line, so both passes' lines are the file's
    text = INLINE.sub(sub(INLINE, OPS, False), text)
    text = BLOCK.sub(sub(BLOCK, BLOCKS, True), text)
    return text, stale


def check(root: Path, data_dir: Path | None = None,
          files: Sequence[Path] | None = None) -> list[Stale]:
    """Every stale marker of the docs (nothing written)."""
    src = Sources(data_dir or root / DATA_DIR)
    out: list[Stale] = []
    for path in files or doc_files(root):
        out += render(path.read_text(encoding="utf-8"), src, path)[1]
    return out


def update(root: Path, data_dir: Path | None = None) -> list[Stale]:
    """Rewrite every stale marker in place; the ones rewritten."""
    from scratchpipe_sim.safety.atomic_files import atomic_write

    src = Sources(data_dir or root / DATA_DIR)
    out: list[Stale] = []
    for path in doc_files(root):
        new, stale = render(path.read_text(encoding="utf-8"), src, path)
        if stale:
            atomic_write(path, new)
        out += stale
    return out


def count_markers(root: Path) -> int:
    return sum(len(BLOCK.findall(t)) + len(INLINE.findall(t))
               for t in (p.read_text(encoding="utf-8") for p in doc_files(root)))


# -- the snapshot ---------------------------------------------------------------------------
def compact_bands(bands: dict[str, Any]) -> list[dict[str, Any]]:
    """A `sensitivity SWEEP --out` table as the runs of every point that ran: each run is
    the speedup of every design (nominal, each one-at-a-time end, each Latin-hypercube
    sample, in that order: the same hardware at every point). Full precision: a value
    rounded to fewer digits can land on a printed half (19.515) and print the other way."""
    out = []
    for p in bands["points"]:
        if p["error"] is not None:
            continue
        sens = p["sensitivity"]
        runs = [sens["nominal"]]
        for param in sens["params"]:
            oat = sens["one_at_a_time"][param["key"]]
            runs += [oat["low"], oat["high"]]
        lhs = sens["lhs"]["speedup"]
        n = len(next(iter(lhs.values()), []))
        runs += [{d: lhs[d][i] for d in lhs} for i in range(n)]
        out.append({"values": p["values"],
                    "runs": [{d: v for d, v in r.items() if v is not None} for r in runs]})
    return out


def collect(data_dir: Path, results: Path | None, bands: Path | None,
            published: Path | None) -> list[Path]:
    """Copy a study rerun into the snapshot: each sweep's results.csv (without the point
    hash, which changes with any new config field), each sweep's bands compacted, and a
    `validate --published --json` output. Returns the files written."""
    from scratchpipe_sim.experiments.bands import load_bands
    from scratchpipe_sim.safety import jsonout
    from scratchpipe_sim.safety.atomic_files import atomic_write

    written: list[Path] = []
    for folder, sub in ((results, STUDY_DIR), (bands, BANDS_DIR)):
        if folder is not None:
            (data_dir / sub).mkdir(parents=True, exist_ok=True)
    for table in sorted(results.glob("*/results.csv")) if results else []:
        with table.open(encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        cols = [c for c in (rows[0] if rows else {}) if c != "point"]
        written.append(_write_csv(data_dir / STUDY_DIR / f"{table.parent.name}.csv", cols,
                                  rows, atomic_write))
    for folder in sorted(p.parent for p in bands.glob("*/bands.json")) if bands else []:
        path = data_dir / BANDS_DIR / f"{folder.name}.json"
        atomic_write(path, jsonout.dumps(compact_bands(load_bands(folder))) + "\n")
        written.append(path)
    if published is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        for name, rows in split_published(_read_json(published)).items():
            path = data_dir / name
            atomic_write(path, jsonout.dumps(rows, indent=1) + "\n")
            written.append(path)
    return written


def split_published(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`validate --published --json`'s rows by snapshot file: the TBE phases (a `phase`),
    the end-to-end points (`kind` end-to-end; the breakdown flattened to `<part>_ms`) and
    the multi-GPU points (`quantity`), each with its kept keys (a file with no row of its
    kind is written empty: a rerun that dropped them shows in `docs --check`)."""
    tbe = [{k: r[k] for k in TBE_KEYS} for r in rows if "phase" in r]
    e2e = []
    for r in rows:
        if r.get("kind") == "end-to-end":
            row = {k: r.get(k) for k in E2E_KEYS}
            row.update({f"{k}_ms": r.get("breakdown_ms", {}).get(k) for k in BREAKDOWN})
            e2e.append(row)
    cluster = [{k: r.get(k) for k in CLUSTER_KEYS} for r in rows if "quantity" in r]
    return {PUBLISHED_FILE: tbe, PUBLISHED_E2E_FILE: e2e, PUBLISHED_CLUSTER_FILE: cluster}


def _write_csv(path: Path, cols: Sequence[str], rows: Iterable[dict[str, Any]],
               write: Callable[[Path, str], Any]) -> Path:
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    write(path, buf.getvalue())
    return path
