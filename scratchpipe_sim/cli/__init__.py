"""`scratchpipe-sim`: one console script, one module per subcommand.

Each module in `COMMANDS` defines `register(subparsers)`, which adds its parser and sets
`func=handler(args) -> int`. User mistakes raise `UserError`: printed as one line on stderr,
exit status 2, no traceback.

Start-up: `main` imports only the chosen subcommand's module (they pull in numba, pandas,
SimPy, matplotlib...: seconds). The other commands get a stub parser carrying the one-line
help of `COMMANDS`, so `--help`, `--version` and unknown-command errors import none of them
and print what the full parser would (a test compares the two).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scratchpipe_sim import __version__
from scratchpipe_sim.errors import UserError

#: subcommand module under scratchpipe_sim.cli -> its one-line help, in `--help`'s order:
#: the one source of that line (each module's register() passes `help=COMMANDS[name]`, and
#: the stub parsers of the commands not imported use it too).
COMMANDS: dict[str, str] = {
    "run": "simulate training-system designs on one trace and compare them",
    "cache": "run one cache policy over a trace (hits, misses, evictions)",
    "trace": "generate traces and print locality statistics",
    "config": "show the fully resolved config",
    "sweep": "run an experiment YAML (resumable, parallel)",
    "plot": "draw a figure from sweep results (PNG + PDF)",
    "compare": "speedup of every design over a baseline, per point",
    "compare-peers": "TorchRec's planner estimates beside gpu-only, uvm and lru-cache "
                     "(peers extra)",
    "report": "one self-contained HTML page for a run or sweep results folder",
    "calibrate": "measure PCIe, HBM, DRAM and GEMM speed; write a hardware preset",
    "validate": "compare the timing model with the GPU reference pipeline (--cpu: the "
                "CPU stages run for real, --against fbgemm: FBGEMM's CPU TBE; "
                "--published: published FBGEMM GPU runs)",
    "sensitivity": "vary the unmeasured hardware constants (hardware.ranges)",
    "plan": "smallest cache / lookahead / PCIe / GPUs that reach a target fraction of "
            "gpu-only throughput, with a cost per sample",
}
_ALL = object()


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (it already does; keep the usage short)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(only: object = _ALL) -> argparse.ArgumentParser:
    """The full parser (every subcommand module imported); with `only=NAME` just that
    module is imported and registered, with `only=None` none: the others are stubs that
    carry their one-line help (enough for `--help` and for naming the choices)."""
    parser = _Parser(prog="scratchpipe-sim",
                     description="Simulate DLRM training with GPU embedding caches.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, help_line in COMMANDS.items():
        if only is _ALL or only == name:
            module = name.replace("-", "_")  # compare-peers -> compare_peers
            importlib.import_module(f"scratchpipe_sim.cli.{module}").register(sub)
        else:
            sub.add_parser(name, help=help_line)
    return parser


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand `argv` names: its first word not starting with "-" (no top-level
    option takes a value), when that is a command; else None."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(argv))
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
    except OSError as e:  # on a named path no handler caught: one line, not a traceback
        if e.filename is None:
            raise
        from scratchpipe_sim.safety.paths import os_error

        print(f"scratchpipe-sim {args.command}: {os_error(e).line()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
