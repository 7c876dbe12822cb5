"""`scratchpipe-sim sensitivity CONFIG`: how far each unmeasured constant moves the results.

Varies every key of `hardware.ranges` one at a time (low, high) and jointly (Latin
hypercube, seeded), re-prices every design on the same policy counts, and prints per design
the speedup vs hybrid (nominal, min, max) with the parameters that move it most, and whether
the order of the designs ever changes. `--out DIR` writes sensitivity.json and a tornado
figure (tornado.png, tornado.pdf). See scratchpipe_sim/experiments/sensitivity.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scratchpipe_sim.config import load_config


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sensitivity", help="vary the unmeasured hardware constants (hardware.ranges)",
        description="Speedup range of every design over the plausible ranges of the "
                    "constants in hardware.ranges, one at a time and by Latin hypercube.")
    p.add_argument("config", metavar="CONFIG", help="YAML config")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a config value (repeatable)")
    p.add_argument("--design", dest="designs", action="append", metavar="NAME",
                   help="only these designs (repeatable; hybrid is always priced)")
    p.add_argument("--samples", type=int, default=32, metavar="N",
                   help="Latin-hypercube samples (default 32; 0: one at a time only)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="seed of the Latin hypercube (default: the config's seed)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write sensitivity.json and tornado.png / tornado.pdf here")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import sys

    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments.sensitivity import (
        format_report,
        run_sensitivity,
        write_outputs,
    )

    if args.samples < 0:
        raise UserError(f"expected samples >= 0, got {args.samples}", field="--samples")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise UserError("exists and is not a folder: expected a folder for the outputs",
                        source=str(args.out), field="--out")
    cfg = load_config(args.config, args.overrides)

    def log(s: str) -> None:
        print(s, file=sys.stderr)

    res = run_sensitivity(cfg, args.designs, samples=args.samples, seed=args.seed,
                          log=None if args.json else log)
    if args.json:
        print(json.dumps(res.to_json(), indent=1))
    else:
        print(f"sensitivity {cfg.name or Path(args.config).stem}: {len(res.params)} ranges "
              f"(hardware {cfg.hardware.name or 'inline'}), {args.samples} Latin-hypercube "
              f"samples, seed {res.seed}")
        print(format_report(res))
    if args.out is not None:
        for p in write_outputs(res, args.out):
            print(f"wrote {p}", file=sys.stderr if args.json else sys.stdout)
    return 0
