"""`scratchpipe-sim run CONFIG`: every design on one trace, side by side.

Prints the comparison table and writes, into a fresh results folder: results.csv (one row
per design, config values as `cfg.*` columns), results.json, resolved_config.yaml,
trace.sha256, metadata.json and timeline_<design>.json (Chrome Trace Event, for Perfetto).
The steps are the Python API's (`scratchpipe_sim.api`: `simulate` is the same run as a
DataFrame, without the folder). A results folder is never overwritten: when `--out DIR`
exists, DIR-1, DIR-2, ... is used and the folder actually written is printed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from scratchpipe_sim.api import (
    DEFAULT_RESULTS,
    check_run,
    make_results_dir,
    run_designs,
    run_trace,
    sample_values,
    write_run,
)
from scratchpipe_sim.cli._options import add_config, add_json, add_overrides, add_ranges
from scratchpipe_sim.errors import UserError, os_reason
from scratchpipe_sim.experiments.progress import Progress
from scratchpipe_sim.experiments.run_tables import render
from scratchpipe_sim.safety import jsonout
from scratchpipe_sim.timing import DESIGNS
from scratchpipe_sim.traces.forked import check_jobs, usable_cores

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "simulate training-system designs on one trace and compare them"
ORDER = 10


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help=HELP,
        description="Run each design on the same trace and print iteration time, "
                    "throughput, hit ratio, bytes moved, resource utilisation and stage "
                    "times; write CSV, JSON, timelines and the resolved config.")
    add_config(p)
    add_overrides(p, example="hardware.pcie.h2d_GBps=22")
    p.add_argument("--design", dest="designs", action="append", metavar="NAME",
                   help="run only this design (repeatable, each name once; default: the "
                        f"config's designs): {', '.join(DESIGNS.names())}")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="results folder (default results/<config name>; never overwritten: "
                        "a numbered sibling is used when it exists)")
    p.add_argument("--no-timeline", action="store_true",
                   help="skip the per-design timeline JSON files")
    p.add_argument("--no-cache", action="store_true",
                   help="recompute every policy replay (and generate the trace) instead of "
                        "reading the on-disk replay and trace caches "
                        "(scratchpipe_sim.policies.replay_cache and "
                        "scratchpipe_sim.traces.trace_cache; results are identical)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="processes for the independent cache replays, on-chip passes and "
                        "a generated trace's tables "
                        "(default: the cores this process may use; replays lowered to what fits "
                        "in memory; results are identical for every N)")
    p.add_argument("--sample", type=float, default=None, metavar="R",
                   help="a sampled run: spatial sampling of the trace's rows at rate R in "
                        "(0, 1] (SHARDS; caches x R, counts x 1/R), each figure the mean over "
                        "the salts with its spread (the config's trace.sample_rate; "
                        "docs/sampling.md)")
    p.add_argument("--salts", type=int, default=None, metavar="N",
                   help="hash salts of a sampled run (trace.sample_salts, default 3)")
    add_ranges(p, "replay each lru cache (other policies are replayed whole, with a warning)")
    add_json(p, "the result rows as one JSON array instead of tables")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress on stderr (default: a bar on a terminal, else a line "
                        "every $SCRATCHPIPE_PROGRESS_S seconds, 30 by default)")
    p.set_defaults(func=handle)


def progress_callback(bar: Progress):
    """simulate()'s progress(event, design, done, total) -> the bar."""
    def cb(event: str, design: str, done: int, total: int) -> None:
        if event == "policy":
            bar.status(f"replaying the cache for {design}")
        elif event == "design":
            bar.update(1, note=f"{design} done")
    return cb


def handle(args: argparse.Namespace) -> int:
    jobs = usable_cores() if args.jobs is None else check_jobs(args.jobs)
    cfg, names = check_run(args.config, args.designs, texts=args.overrides,
                           values=sample_values(args.sample, args.salts),
                           designs_field="--design")
    out = make_results_dir(args.out if args.out is not None
                           else DEFAULT_RESULTS / Path(args.config).stem)
    try:
        trace = run_trace(cfg, replay_cache=not args.no_cache, jobs=jobs)
        with Progress(len(names), "run", "design", quiet=args.quiet) as bar:
            outcome = run_designs(cfg, names, trace,
                                  timeline_dir=None if args.no_timeline else out,
                                  progress=progress_callback(bar),
                                  replay_cache=not args.no_cache,
                                  jobs=jobs, ranges=args.ranges, executor=args.executor,
                                  scheduler=args.scheduler)
        write_run(out, outcome, str(args.config), list(args.overrides))
    except OSError as e:
        shutil.rmtree(out, ignore_errors=True)
        if not str(getattr(e, "filename", "") or "").startswith(str(out)):
            raise  # not our output (a bug, or an input reader's unexpected failure)
        raise UserError(f"cannot write results: {os_reason(e)}", source=str(out),
                        field="--out") from None
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # ours, just made: leave no half result
        raise
    if args.json:
        print(jsonout.dumps(outcome.rows))
    else:
        print(render(outcome.rows))
        print(f"\nresults: {out}", file=sys.stdout)
    return 0
