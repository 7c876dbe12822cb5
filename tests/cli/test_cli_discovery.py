"""A subcommand is one file: `cli/NAME.py` with `HELP`, `ORDER` and `register`, found by
listing the package; nothing else is edited to add one."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from pathlib import Path

import pytest

import scratchpipe_sim.cli as cli

CLI_DIR = Path(cli.__file__).parent

HELLO = '''\
"""`scratchpipe-sim hello-world`: a subcommand added by a test."""

import argparse

HELP = ("say hello (a test's subcommand, "
        "two strings)")
ORDER = 15


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hello-world", help=HELP)
    p.add_argument("--name", default="world")
    p.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)
'''


@pytest.fixture
def extra_folder(tmp_path, monkeypatch):
    """A folder added to scratchpipe_sim.cli's search path, as a new file in cli/ would be."""
    monkeypatch.setattr(cli, "__path__", [*cli.__path__, str(tmp_path)])
    yield tmp_path
    sys.modules.pop("scratchpipe_sim.cli.hello_world", None)
    importlib.invalidate_caches()


def test_a_new_module_shows_up_in_help_with_no_other_edit(extra_folder, capsys):
    (extra_folder / "hello_world.py").write_text(HELLO)
    importlib.invalidate_caches()
    names = list(cli.commands())
    assert names.index("hello-world") == names.index("run") + 1   # ORDER 15: after run (10)
    stub = cli.build_parser(None).format_help()
    assert "hello-world" in stub and "say hello (a test's subcommand, two strings)" in stub
    assert "scratchpipe_sim.cli.hello_world" not in sys.modules   # --help imported nothing
    assert cli.build_parser().format_help() == stub
    assert cli.main(["hello-world", "--name", "there"]) == 0
    assert capsys.readouterr().out == "hello there\n"


def test_a_module_without_its_declarations_is_refused(extra_folder):
    (extra_folder / "broken.py").write_text("def register(sub):\n    pass\n")
    with pytest.raises(RuntimeError, match="broken.py: a subcommand module declares HELP"):
        cli.commands()


def test_declarations_read_from_the_text_are_the_modules_constants():
    for entry in sorted(os.listdir(CLI_DIR)):
        name, ext = os.path.splitext(entry)
        if ext != ".py" or name.startswith("_"):
            continue
        declared = cli._declared((CLI_DIR / entry).read_text())
        module = importlib.import_module(f"scratchpipe_sim.cli.{name}")
        if getattr(module, "COMMAND", "") is None:
            assert declared == {"COMMAND": None}, entry
            continue
        assert declared == {"HELP": module.HELP, "ORDER": module.ORDER}, entry
    orders = [cli._declared((CLI_DIR / f"{c.replace('-', '_')}.py").read_text())["ORDER"]
              for c in cli.commands()]
    assert orders == sorted(set(orders)), "two subcommands share an ORDER"
    assert "trace-convert" not in cli.commands()


def test_the_declaration_reader_takes_what_the_docstring_promises():
    text = textwrap.dedent('''\
        HELP = ("a " "b"
                "c")
        ORDER = 7  # a comment
        COMMAND = None
        def f():
            HELP = "inside a function: not read"
        ''')
    assert cli._declared(text) == {"HELP": "a bc", "ORDER": 7, "COMMAND": None}
