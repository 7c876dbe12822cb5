"""Options several subcommands share, declared once: the CONFIG argument, `--set` overrides
and `--json`, so their names, metavars, defaults and help agree in every command (they were
copied into five modules). Not a command: its name starts with `_`, so `cli/__init__.py`
does not list it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scratchpipe_sim.config import Config

CONFIG_HELP = "YAML config (see configs/)"
SET_HELP = "override a config value by dotted path (repeatable)"


def add_config(p: argparse.ArgumentParser, help: str = CONFIG_HELP) -> None:
    """The positional CONFIG (`args.config`)."""
    p.add_argument("config", metavar="CONFIG", help=help)


def add_overrides(p: argparse.ArgumentParser, example: str = "", note: str = "") -> None:
    """`--set KEY=VALUE`, repeatable, into `args.overrides` (a list, empty by default)."""
    text = SET_HELP + (f"; {note}" if note else "") + (f", e.g. --set {example}"
                                                         if example else "")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help=text)


def add_json(p: argparse._ActionsContainer, what: str) -> None:
    """`--json` (`args.json`): print `what` as JSON instead of text. `p` may be a mutually
    exclusive group."""
    p.add_argument("--json", action="store_true", help=f"print {what}")


def load_config_of(args: argparse.Namespace) -> Config:
    """The validated Config of `args.config` with `args.overrides` applied."""
    from scratchpipe_sim.config import load_config

    return load_config(args.config, args.overrides)


def add_ranges(p: argparse.ArgumentParser, what: str) -> None:
    """`--ranges K`, `--executor`, `--scheduler`: a replay split into time ranges, each its
    own task (`policies/time_ranges.py`, docs/performance.md "Time ranges")."""
    p.add_argument("--ranges", type=int, default=None, metavar="K",
                   help=f"{what} as K time ranges, each replayed from a warm-up overlap as "
                        "its own task (exact for lru: docs/performance.md, Time ranges)")
    p.add_argument("--executor", choices=("local", "process", "dask"), default="process",
                   help="where the time ranges (or a sampled run's salts) run: this "
                        "process, --jobs forked processes (default) or a Dask cluster")
    p.add_argument("--scheduler", metavar="ADDR",
                   help="Dask scheduler address (tcp://host:8786); without it the dask "
                        "executor starts a local cluster of --jobs workers")
