"""`scratchpipe-sim sweep EXPERIMENT.yaml`: run a resumable sweep into a results folder.

Exit status: 0 when every point ran (infeasible design results are results: they are marked
in figures); 1 when the table holds error rows, which are listed on every rerun until rerun
with --retry-failed; 2 for a user mistake (bad experiment, folder busy or unwritable).
"""

from __future__ import annotations

import argparse
import sys

from scratchpipe_sim.cli._options import add_json
from scratchpipe_sim.safety import jsonout

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "run an experiment YAML (resumable, parallel)"
ORDER = 50


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help=HELP,
                       description="Run every point of an experiment YAML. A rerun skips "
                       "finished points; a killed sweep resumes where it stopped.")
    p.add_argument("experiment", help="experiment YAML (see experiments/ and "
                   "docs/experiments.md)")
    p.add_argument("--out", metavar="DIR", help="results folder (default: results/NAME); "
                   "one sweep at a time per folder (a lock names the running one)")
    p.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="points in parallel, one process each (default: 1)")
    p.add_argument("--executor", choices=("local", "process", "dask"), default=None,
                   help="local (one process), process (pool of --jobs), dask (a cluster); "
                   "default: local for --jobs 1, else process")
    p.add_argument("--scheduler", metavar="ADDR",
                   help="Dask scheduler address (tcp://host:8786); without it the dask "
                        "executor starts a local cluster of --jobs workers")
    p.add_argument("--retry-failed", action="store_true",
                   help="run points recorded with errors again (infeasible results are "
                        "kept)")
    p.add_argument("--no-cache", action="store_true",
                   help="recompute every policy replay (and generate the traces) instead of "
                        "reading the on-disk replay and trace caches "
                        "(scratchpipe_sim.policies.replay_cache and "
                        "scratchpipe_sim.traces.trace_cache; results are identical)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the points (hash and axis values) and exit")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress on stderr (default: a bar on a terminal, else a line "
                        "every $SCRATCHPIPE_PROGRESS_S seconds, 30 by default)")
    add_json(p, "the summary as JSON")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.api import SweepOptions, run_experiment, summary_dict
    from scratchpipe_sim.experiments.spec import iter_points, load_experiment

    spec = load_experiment(args.experiment)
    options = SweepOptions(jobs=args.jobs, executor=args.executor, scheduler=args.scheduler,
                           retry_failed=args.retry_failed, replay_cache=not args.no_cache,
                           quiet=args.quiet)
    if args.dry_run:
        for p in iter_points(spec):
            vals = ", ".join(f"{k}={v}" for k, v in p.values.items())
            print(f"{p.index:4d} {p.key} {vals}")
        return 0
    summary = run_experiment(spec, args.out, options)
    if args.json:
        print(jsonout.dumps(summary_dict(summary)))
    else:
        print(summary.line())
    if summary.errors:
        for line in summary.error_lines():
            print(line, file=sys.stderr)
        print(f"scratchpipe-sim sweep: {summary.failed} point(s) have errors; fix the cause "
              "and rerun with --retry-failed (finished points are kept)", file=sys.stderr)
        return 1
    return 0
