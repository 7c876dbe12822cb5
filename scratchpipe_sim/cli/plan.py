"""`scratchpipe-sim plan CONFIG`: what it takes to train at GPU memory speed, and its price.

For the config's trace and hardware: the smallest cache (rows and GiB), lookahead and PCIe
bandwidth at which each cache design reaches `--target` of gpu-only throughput, the GPUs
multi-gpu needs for it, and a cost per million samples (hardware.prices). Bisection over
each axis's grid (the capacity search: scratchpipe_sim/experiments/capacity_search.py).
"""

from __future__ import annotations

import argparse
import sys

from scratchpipe_sim.cli._options import add_config, add_json, add_overrides, load_config_of
from scratchpipe_sim.safety import jsonout

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = ("smallest cache / lookahead / PCIe / GPUs that reach a target fraction of "
        "gpu-only throughput, with a cost per sample")
ORDER = 130


def register(sub: argparse._SubParsersAction) -> None:
    from scratchpipe_sim.experiments.capacity_search import AXES

    p = sub.add_parser("plan", help=HELP,
                       description="Search each axis (one at a time, the others as "
                       "configured) by bisection on a fixed grid for the smallest value at "
                       "which each design reaches the target; price each answer from "
                       "hardware.prices. Exit 2 when nothing reaches the target.")
    add_config(p)
    p.add_argument("--target", type=float, default=0.95, metavar="FRACTION",
                   help="fraction of gpu-only samples/s to reach, in (0, 1] (default 0.95)")
    add_overrides(p)
    p.add_argument("--design", dest="designs", action="append", metavar="NAME",
                   help="plan only this design (repeatable; default: the config's cache "
                        "designs, bagpipe and multi-gpu)")
    p.add_argument("--axis", dest="axes", action="append", choices=AXES,
                   help="search only this axis (repeatable; default: all)")
    add_json(p, "the plan as one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.experiments.capacity_search import AXES, check_target, format_plan, plan

    check_target(args.target)
    cfg = load_config_of(args)

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"plan: {msg}", file=sys.stderr, flush=True)

    p = plan(cfg, args.target, args.designs, tuple(args.axes or AXES), progress)
    print(jsonout.dumps(p.to_dict()) if args.json else format_plan(p))
    return 0
