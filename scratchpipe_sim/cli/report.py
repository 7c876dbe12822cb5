"""`scratchpipe-sim report RESULTS [--out report.html]`: one self-contained HTML page.

The page (scratchpipe_sim.experiments.html_report) embeds everything: the config, versions,
tables and figures; it loads nothing from anywhere. An existing report is never replaced
silently: exit 2 unless --force.
"""

from __future__ import annotations

import argparse

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "one self-contained HTML page for a run or sweep results folder"
ORDER = 90


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help=HELP,
                       description="Write one HTML file for a `run` or `sweep` results "
                       "folder, headline first: what was compared, the speedups over the "
                       "baseline and the key figure; then the figures with captions, the "
                       "results table with its legend, the points that did not run, "
                       "provenance (resolved config, versions, trace checksum, date; "
                       "folded) and how to reproduce it. Figures are embedded; the page "
                       "loads nothing from elsewhere and fits a 1400-pixel window.")
    p.add_argument("results", help="a `run` or `sweep` results folder (or its results.csv "
                   "/ results.parquet)")
    p.add_argument("--out", metavar="FILE", help="the HTML file (default: "
                   "RESULTS/report.html; a folder: FOLDER/report.html)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing report (default: refuse, exit 2)")
    p.add_argument("--bands", metavar="DIR",
                   help="also embed the figure of a `sensitivity --out` folder (its bands "
                        "or tornado)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.experiments.html_report import write

    print(write(args.results, args.out, force=args.force, bands=args.bands))
    return 0
