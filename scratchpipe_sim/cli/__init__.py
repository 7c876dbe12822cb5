"""`scratchpipe-sim`: one console script, one module per subcommand.

Each module in `COMMANDS` defines `register(subparsers)`, which adds its parser and sets
`func=handler(args) -> int`. User mistakes raise `UserError`: printed as one line on stderr,
exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scratchpipe_sim import __version__
from scratchpipe_sim.errors import UserError

#: subcommand modules under scratchpipe_sim.cli, in the order `--help` lists them.
COMMANDS = ("run", "cache", "trace", "config", "sweep", "plot", "compare", "calibrate",
            "validate", "sensitivity", "plan")


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (it already does; keep the usage short)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="scratchpipe-sim",
                     description="Simulate DLRM training with GPU embedding caches.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"scratchpipe_sim.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"scratchpipe-sim {args.command}: {e.line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
