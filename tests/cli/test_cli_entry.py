"""The console script and `python -m scratchpipe_sim` go through `cli.console`: `main`'s
status, and the objects left frozen so the interpreter's teardown does not collect them."""

from __future__ import annotations

import configparser
import gc
import subprocess
import sys
from pathlib import Path

import pytest

import scratchpipe_sim.cli as cli

ROOT = Path(cli.__file__).resolve().parents[2]


def test_console_exits_with_mains_status_after_freezing(monkeypatch):
    monkeypatch.setattr(cli, "main", lambda: 3)
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.console()
        assert exit_.value.code == 3
        assert gc.get_freeze_count() > 0  # teardown's collections will not traverse them
    finally:
        gc.unfreeze()  # this process lives on: its objects collectable again


def test_both_entry_points_are_console():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    scripts = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    assert scripts == ["scratchpipe-sim = scratchpipe_sim.cli:console"]
    p = subprocess.run([sys.executable, "-m", "scratchpipe_sim", "no-such-command"],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "no-such-command" in p.stderr
    assert "Traceback" not in p.stderr
