"""`scratchpipe-sim compare RESULTS --baseline hybrid`: speedups per point + geometric mean."""

from __future__ import annotations

import argparse
import math

from scratchpipe_sim.safety import jsonout
from scratchpipe_sim.timing.designs import baseline_design

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "speedup of every design over a baseline, per point"
ORDER = 70


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help=HELP,
                       description="speedup = baseline time / design time, per point, with "
                       "the geometric mean and maximum over points.")
    p.add_argument("results", help="a sweep's or a `run`'s results folder (or its "
                   "results.csv / results.parquet)")
    p.add_argument("--baseline", default=None, metavar="DESIGN",
                   help=f"design to divide by (default: {baseline_design()})")
    p.add_argument("--metric", default="iter_ns_mean", metavar="COLUMN",
                   help="a time column of the table, lower is better, e.g. iter_ns_p99 "
                        "(default: iter_ns_mean)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table: aligned text with geomean and max rows; csv: one row per "
                        "point; json: points, geomean, max and why values are missing "
                        "(default: table)")
    p.add_argument("--wide", action="store_true",
                   help="table: print long columns (swept values such as a JSON mapping) "
                        "in full and do not fit the table to 100 columns")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.experiments.results import load_results
    from scratchpipe_sim.experiments.speedups import compare, format_table

    c = compare(load_results(args.results), args.baseline, args.metric)
    if args.format == "table":
        print(format_table(c, wide=args.wide))
    elif args.format == "csv":
        print(c.table.to_csv(index=False), end="")
    else:
        def num(v):
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

        print(jsonout.dumps({
            "baseline": c.baseline, "metric": c.metric, "common_points": c.common,
            "points": [{k: num(v) for k, v in r.items()}
                       for r in c.table.to_dict(orient="records")],
            "geomean": {d: num(v) for d, v in c.geomean.items()},
            "max": {d: num(v) for d, v in c.maximum.items()},
            "missing": [{"point": i, "design": d, "status": st, "reason": r}
                        for i, d, st, r in c.missing]}))
    return 0
