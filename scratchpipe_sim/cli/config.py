"""`scratchpipe-sim config show CONFIG [--set k=v ...]`: the fully resolved config.

Presets expanded, overrides applied, defaults filled: exactly what `run` simulates and
saves as resolved_config.yaml beside its results.
"""

from __future__ import annotations

import argparse

from scratchpipe_sim.cli import COMMANDS
from scratchpipe_sim.cli._options import add_config, add_json, add_overrides
from scratchpipe_sim.config import dump_yaml, flatten, resolve
from scratchpipe_sim.safety import jsonout


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("config", help=COMMANDS["config"],
                              description="Inspect configs: `config show CONFIG` prints what "
                                          "`run` would simulate.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    sub.required = True
    show = sub.add_parser("show", help="print the resolved config (presets expanded, "
                                       "overrides applied, defaults filled)",
                          description="Print the fully resolved config: presets expanded, "
                                      "--set overrides applied, every default filled; "
                                      "exactly what `run` simulates and saves as "
                                      "resolved_config.yaml.")
    add_config(show)
    add_overrides(show)
    fmt = show.add_mutually_exclusive_group()
    add_json(fmt, "JSON instead of YAML")
    fmt.add_argument("--flat", action="store_true", help="print one dotted key=value a line")
    show.set_defaults(func=handle_show)


def handle_show(args: argparse.Namespace) -> int:
    from scratchpipe_sim.timing.designs import with_default_designs

    d = with_default_designs(resolve(args.config, args.overrides))
    if args.json:
        print(jsonout.dumps(d, indent=1))
    elif args.flat:
        for k, v in flatten(d).items():
            print(f"{k}={jsonout.dumps(v)}")
    else:
        print(dump_yaml(d), end="")
    return 0
