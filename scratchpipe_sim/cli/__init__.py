"""`scratchpipe-sim`: one console script, one module per subcommand.

A subcommand is one file, `cli/NAME.py` (`compare_peers.py` is `compare-peers`), found by
listing this package (modules not starting with `_`). It declares, as module constants,
`HELP` (its one-line help: a string, or strings in parentheses) and `ORDER` (its place in
`--help`, an integer), and defines `register(subparsers)`, which adds its parser with
`help=HELP` and sets `func=handler(args) -> int`. A module that is not a top-level command
says `COMMAND = None` (`trace_convert.py`: a `trace` action). User mistakes raise
`UserError`: printed as one line on stderr, exit status 2, no traceback.

Start-up: `main` imports only the chosen subcommand's module (they pull in numba, pandas,
SimPy, matplotlib...: seconds). The others get a stub parser carrying their `HELP`, read
from their source text (`_declared`: a string search in the file, no import), so `--help`,
`--version` and unknown-command errors import none of them and print what the full parser
would (a test compares the two, which also checks the text read against the constants).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator

from scratchpipe_sim import __version__
from scratchpipe_sim.errors import Terminated, UserError

#: a string literal (the only kind `HELP` holds; several in parentheses are joined)
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
#: commands() by search path: main asks twice (the chosen command, the parser)
_FOUND: dict[tuple[str, ...], dict[str, str]] = {}


def _declared(text: str) -> dict[str, object]:
    """A module's `HELP`, `ORDER` and `COMMAND` constants, read from its source text (a
    `str.find` per name, cheaper than importing the module or compiling a pattern):
    `NAME = "..."`, `NAME = ("..." "...")` up to the `)` ending a line, an integer or None,
    at the start of a line."""
    out: dict[str, object] = {}
    text = "\n" + text
    for name in ("HELP", "ORDER", "COMMAND"):
        at = text.find(f"\n{name} = ")
        if at < 0:
            continue
        rest = text[at + len(name) + 4:] + "\n"
        if rest.startswith(("(", '"')):
            end = rest.find(")\n") + 1 if rest[0] == "(" else rest.find("\n")
            out[name] = "".join(_STRING.findall(rest[:end]))
        else:
            value = rest[:rest.find("\n")].split("#")[0].strip()
            out[name] = None if value == "None" else int(value) if value.isdigit() else value
    return out


def commands() -> dict[str, str]:
    """Every subcommand of this package (`__path__`, so a folder added to it counts):
    {name: one-line help}, in `ORDER` (then name) order."""
    key = tuple(__path__)
    if key in _FOUND:
        return _FOUND[key]
    found: dict[str, tuple[int, str]] = {}
    for folder in __path__:
        for entry in sorted(os.listdir(folder)):
            module, ext = os.path.splitext(entry)
            if ext != ".py" or module.startswith("_"):
                continue
            with open(os.path.join(folder, entry), encoding="utf-8") as f:
                d = _declared(f.read())
            if "COMMAND" in d and d["COMMAND"] is None:
                continue
            if not isinstance(d.get("HELP"), str) or not isinstance(d.get("ORDER"), int):
                raise RuntimeError(f"scratchpipe_sim/cli/{entry}: a subcommand module "
                                   "declares HELP = \"...\" and ORDER = N, or COMMAND = None")
            found.setdefault(module.replace("_", "-"), (d["ORDER"], d["HELP"]))
    _FOUND[key] = {n: h for n, (_, h) in sorted(found.items(), key=lambda kv: (kv[1][0], kv[0]))}
    return _FOUND[key]


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
    for name, help_line in commands().items():
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
    return word if word in commands() else None


@contextlib.contextmanager
def terminated_on_sigterm() -> Iterator[None]:
    """SIGTERM raises `Terminated` in the main thread while a command runs (Python's default
    is to die at once: no `finally`, so a sweep's worker processes were killed without
    their semaphores released); restored after. Elsewhere (a thread): nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated()

    old = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(argv))
    args = parser.parse_args(argv)
    try:
        with terminated_on_sigterm():
            return int(args.func(args) or 0)
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except UserError as e:
        print(f"scratchpipe-sim {args.command}: {e.line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # on a named path no handler caught (or a full disk, named or
        # not): one line, not a traceback
        from scratchpipe_sim.safety.paths import FULL_DISK_ERRNOS, os_error

        if e.filename is None and e.errno not in FULL_DISK_ERRNOS:
            raise
        print(f"scratchpipe-sim {args.command}: {os_error(e).line()}", file=sys.stderr)
        return 2


def console() -> None:
    """The console script's and `python -m scratchpipe_sim`'s entry point: `main`, then exit.

    Why `gc.freeze()` before exiting: the interpreter's teardown runs full collections over
    every object still alive (Numba's, SciPy's and SimPy's modules: ~110k), 0.15-0.25 s of a
    ~3 s cold quickstart `run` on the 2-core VM of docs/performance.md; frozen objects are
    not traversed, and the process's memory is returned whole at exit anyway. Nothing here
    relies on a collection at exit (shared trace memory is an anonymous mapping; temporary
    files are unlinked or closed by their owners). `main` does not freeze: tests and
    notebooks call it in a process that lives on.
    """
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    console()
