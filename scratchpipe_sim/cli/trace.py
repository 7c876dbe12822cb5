"""`scratchpipe-sim trace gen|stats`: make a synthetic trace; describe any trace's locality.

More `trace` subcommands plug in without editing this file: each module named in
`SUBCOMMAND_MODULES` (e.g. `scratchpipe_sim/cli/trace_convert.py`) that exists defines
`register(trace_subparsers)` and adds its own sub-subcommand with `set_defaults(func=...)`.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

import yaml

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces import generators as gen
from scratchpipe_sim.traces import stats as st
from scratchpipe_sim.traces.io import formats, open_trace

#: modules under scratchpipe_sim.cli that add `trace` sub-subcommands.
SUBCOMMAND_MODULES = ("trace_convert",)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("trace", help="generate traces and print locality statistics",
                              description="Generate synthetic traces; print statistics.")
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION",
                           parser_class=type(p))
    sub.required = True
    _register_gen(sub)
    _register_stats(sub)
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(f"scratchpipe_sim.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"scratchpipe_sim.cli.{name}":
                continue
            raise
        module.register(sub)


# -- gen ------------------------------------------------------------------------------------
def _register_gen(sub: argparse._SubParsersAction) -> None:
    gen.load_distributions()
    g = sub.add_parser("gen", help="write a seeded synthetic trace (.sptrace)",
                       description="Write a seeded synthetic trace into a .sptrace folder, "
                                   "block by block (bounded memory).")
    g.add_argument("--distribution", default="zipf", metavar="NAME",
                   help=f"popularity: {', '.join(gen.DISTRIBUTIONS.names())} (default zipf)")
    g.add_argument("--alpha", type=float, help="zipf exponent (default 1.05)")
    g.add_argument("--no-permute", action="store_true",
                   help="zipf: keep rank r at id r-1 (default: ids randomly permuted)")
    g.add_argument("--hot-fraction", type=float, help="hotset: share of rows that are hot")
    g.add_argument("--hot-access-fraction", type=float,
                   help="hotset: share of accesses that go to the hot rows")
    g.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="any distribution parameter (repeatable)")
    g.add_argument("--rows", required=True, metavar="N[,N...]",
                   help="rows per table: one number (for every table) or one per table")
    g.add_argument("--tables", type=int, metavar="T", help="number of tables (default: "
                   "the number of --rows values)")
    g.add_argument("--batch-size", type=int, required=True, metavar="B")
    g.add_argument("--batches", type=int, required=True, metavar="N")
    g.add_argument("--pooling", default="1", metavar="L[,L...]",
                   help="lookups per sample per table: one or one per table (default 1)")
    g.add_argument("--pooling-sigma", type=float, default=0.0, metavar="S",
                   help="bag lengths ~ trunc(N(pooling, S)), >= 0, drawn once per sample "
                        "slot (FBGEMM's sigma_L; default 0: fixed pooling)")
    g.add_argument("--reuse", type=float, default=0.0, metavar="F",
                   help="share of each batch's ids copied from the previous batch")
    g.add_argument("--seed", type=int, required=True)
    g.add_argument("--out", required=True, metavar="PATH.sptrace")
    g.add_argument("--force", action="store_true", help="overwrite an existing output")
    g.set_defaults(func=handle_gen)


def _int_list(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"expected integers separated by commas, got '{text}'",
                        field=flag) from None


def _params(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"expected KEY=VALUE, got '{item}'", field="--param")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def handle_gen(args: argparse.Namespace) -> int:
    rows = _int_list(args.rows, "--rows")
    pooling = _int_list(args.pooling, "--pooling")
    if args.tables is not None:
        if args.tables < 1:
            raise UserError(f"expected a positive number of tables, got {args.tables}",
                            field="--tables")
        if len(rows) == 1:
            rows = rows * args.tables
        elif len(rows) != args.tables:
            raise UserError(f"{len(rows)} row counts for {args.tables} tables: expected one "
                            "or one per table", field="--rows")
    if len(pooling) == 1:
        pooling = pooling * len(rows)
    params = _params(args.param)
    for flag, key in (("alpha", "alpha"), ("hot_fraction", "hot_fraction"),
                      ("hot_access_fraction", "hot_access_fraction")):
        if getattr(args, flag) is not None:
            params[key] = getattr(args, flag)
    if args.no_permute:
        params["permute"] = False
    out = Path(args.out)
    if out.exists() and not args.force:
        raise UserError("already exists; pass --force to overwrite", source=str(out))
    try:
        spec = gen.make_spec(args.distribution, rows, args.batch_size, args.batches, pooling,
                             args.seed, args.reuse, pooling_sigma=args.pooling_sigma,
                             **params)
    except UserError as e:  # name the flag, not the API argument
        raise UserError(e.message, source=e.source, field=_flag(e.field)) from None
    gen.store_from_spec(spec, out, overwrite=args.force)
    accesses = spec.accesses_per_batch * spec.num_batches
    print(f"wrote {out}: {spec.distribution} {_fmt_params(spec.params)}, "
          f"{spec.num_tables} table(s), {sum(spec.table_rows)} rows, {spec.num_batches} "
          f"batches of {spec.batch_size}, {accesses} accesses, seed {spec.seed}")
    return 0


_FLAGS = {"num_batches": "--batches", "table_rows": "--rows"}


def _flag(field: str | None) -> str | None:
    if not field:
        return field
    base = field.split("[")[0]
    return _FLAGS.get(base, "--" + base.replace("_", "-"))


def _fmt_params(params: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")" if params else ""


# -- stats ----------------------------------------------------------------------------------
def _register_stats(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("stats", help="accesses, unique rows, Meta-style locality histogram, "
                                     "LRU miss-ratio curve",
                       description="Print a trace's accesses, unique rows, the per-row "
                                   "access-count histogram in the buckets of Meta's "
                                   "locality_stats.txt, and the exact LRU miss-ratio curve.")
    s.add_argument("path", metavar="PATH", help=f"a trace ({', '.join(formats())})")
    s.add_argument("--batch-size", type=int, metavar="B",
                   help="mini-batch size for flat id streams (default 1)")
    s.add_argument("--rows", type=int, metavar="N",
                   help="table rows for flat id streams (default max id + 1)")
    s.add_argument("--format", dest="fmt", metavar="FMT", help="override format detection")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--mrc", action=argparse.BooleanOptionalAction, default=True,
                   help="compute the LRU miss-ratio curve (default on; --no-mrc skips it)")
    s.add_argument("--capacities", metavar="C[,C...]",
                   help="curve capacities in rows or percent of rows, e.g. 1000,5%% "
                        "(default 1,2,5,10,20%% of rows)")
    s.add_argument("--meta-format", action="store_true",
                   help="print only the histogram, in locality_stats.txt's exact layout")
    s.set_defaults(func=handle_stats)


def parse_capacities(text: str, total_rows: int) -> list[int]:
    caps = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            if item.endswith("%"):
                pct = float(item[:-1])
                if not pct > 0:
                    raise ValueError
                caps.append(max(1, int(round(pct / 100.0 * total_rows))))
            else:
                c = int(item)
                if c < 1:
                    raise ValueError
                caps.append(c)
        except ValueError:
            raise UserError(f"expected positive row counts or percentages, got '{item}'",
                            field="--capacities") from None
    if not caps:
        raise UserError("expected at least one capacity", field="--capacities")
    return caps


def handle_stats(args: argparse.Namespace) -> int:
    trace = open_trace(args.path, batch_size=args.batch_size, num_rows=args.rows,
                       fmt=args.fmt)
    caps = parse_capacities(args.capacities, trace.total_rows) if args.capacities else None
    summary = st.summarize(trace)
    if args.meta_format:
        print(st.format_locality_stats(summary.histogram), end="")
        return 0
    curve = st.lru_miss_ratio_curve(trace, caps) if args.mrc or caps else None
    if args.json:
        d = summary.to_dict()
        if curve is not None:
            d["lru_mrc"] = curve.points()
            d["cold_misses"] = curve.cold_misses
        print(json.dumps(d))
        return 0
    print(report(summary, curve))
    return 0


def report(s: st.TraceSummary, curve: st.MissRatioCurve | None) -> str:
    rows = sum(s.table_rows)
    lines = [
        f"trace            {s.source}",
        f"tables           {len(s.table_rows)}  rows {rows}",
        f"batches          {s.num_batches}  (batch size {s.batch_size}, mean pooling "
        f"{s.mean_pooling:.3g})",
        f"accesses         {s.accesses}",
        f"unique rows      {s.unique}  ({100.0 * s.unique / rows:.3g}% of rows, "
        f"{s.accesses / max(s.unique, 1):.3g} accesses per touched row)",
        f"unique per batch {s.mean_unique_per_batch:.1f}  (mean)",
    ]
    if len(s.table_rows) > 1:
        lines.append("per table        table  rows  accesses  unique")
        for t, (r, a, u) in enumerate(zip(s.table_rows, s.accesses_per_table,
                                          s.unique_per_table, strict=True)):
            lines.append(f"                 {t}  {r}  {a}  {u}")
    h = s.histogram
    lines.append("histogram        accesses per row   share of rows   share of accesses"
                 "   (Meta locality_stats buckets)")
    for lab, rs, as_ in zip(st.BUCKET_LABELS, h.row_share, h.access_share, strict=True):
        lines.append(f"                 {lab:<18} {rs:>13.3f} {as_:>19.3f}")
    if curve is not None:
        lines.append("LRU miss ratio   capacity (rows)   % of rows   miss ratio   misses")
        for p in curve.points():
            pct = 100.0 * p["capacity"] / rows
            lines.append(f"                 {p['capacity']:>15} {pct:>11.3g}"
                         f" {p['miss_ratio']:>12.6f} {p['misses']:>8}")
        lines.append(f"cold misses      {curve.cold_misses}")
    return "\n".join(lines)
