"""User-facing errors.

A `UserError` is a mistake in the user's input (a config key, a file, a number). The CLI
prints it as one line on stderr and exits with status 2, without a traceback; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """An input mistake: names where it is (`source`), what (`field`) and what was expected."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.field = field
        super().__init__(self.line())

    def line(self) -> str:
        where = ": ".join(p for p in (self.source, self.field) if p)
        return f"{where}: {self.message}" if where else self.message


class Terminated(KeyboardInterrupt):
    """SIGTERM received (`timeout`, a batch scheduler, `kill`): raised where the program is,
    so `finally` blocks stop worker processes and release locks as on Ctrl-C, and a sweep
    resumes from the rows it kept."""


def closest(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' hint for an unknown name, or '' when nothing is close: a
    choice the name begins (`h100` -> `h100-gen5`) before one that merely holds it
    (`dgx-h100`), then the closest by difflib's ratio."""
    choices = list(choices)
    low = name.lower()
    if low:
        for test in (str.startswith, str.__contains__):
            held = sorted((c for c in choices if test(c.lower(), low)), key=lambda c: (len(c), c))
            if held:
                return f" (did you mean '{held[0]}'?)"
    match = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def os_reason(e: OSError) -> str:
    """Why a path could not be written, in words (a file where a folder is needed, no
    permission, ...): the strerror, made specific for the common cases."""
    if isinstance(e, (FileExistsError, NotADirectoryError)):
        return "a part of the path is an existing file, not a folder"
    if isinstance(e, PermissionError):
        return "permission denied"
    return e.strerror or str(e)
