"""The one-line error check of the CLI tests: bad input is one line on stderr, exit code 2
(or `code`), no traceback, naming each of `words`."""

from __future__ import annotations

from scratchpipe_sim.cli import main


def one_line_error(capsys, argv: list[str], *words: str, code: int = 2) -> str:
    """Run the CLI on `argv` and check its error is one line holding every word; returns
    the line."""
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)
    return err
