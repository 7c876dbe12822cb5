"""Progress of long work (designs of a `run`, points of a `sweep`) on stderr.

On a terminal: a tqdm bar. Otherwise (a log file, CI, a pipe): one plain line at most every
`interval_s` seconds and one at the end, so a log shows the work advancing without a
carriage-return mess. `quiet` silences both.

    SCRATCHPIPE_PROGRESS_S   seconds between plain lines (default 30; 0: a line per step)
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

DEFAULT_INTERVAL_S = 30.0
ENV = "SCRATCHPIPE_PROGRESS_S"


def interval_from_env() -> float:
    from scratchpipe_sim.safety.limits import env_number  # noqa: PLC0415

    return float(env_number(ENV, DEFAULT_INTERVAL_S, minimum=0.0, integer=False))


class Progress:
    """`update(n, note)` after each unit of work; `close()` at the end (or use `with`)."""

    def __init__(self, total: int, desc: str, unit: str, *, initial: int = 0,
                 quiet: bool = False, stream: TextIO | None = None,
                 interval_s: float | None = None):
        self.total, self.desc, self.unit = total, desc, unit
        self.done = initial
        self.note = ""
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.interval_s = interval_from_env() if interval_s is None else interval_s
        self.t0 = self._last = time.monotonic()
        self._bar = None
        self._closed = False
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        if not quiet and tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit,
                             file=self.stream, dynamic_ncols=True, smoothing=0.1)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(final_line=exc_type is None)  # a failure's one-line error stays alone

    def status(self, note: str) -> None:
        """What is running now (shown beside the count); no step counted."""
        self.note = note
        if self._bar is not None:
            self._bar.set_postfix_str(note, refresh=True)

    def update(self, n: int = 1, note: str | None = None) -> None:
        self.done += n
        if note is not None:
            self.note = note
        if self._bar is not None:
            self._bar.set_postfix_str(self.note, refresh=False)
            self._bar.update(n)
        elif not self.quiet:
            now = time.monotonic()
            if now - self._last >= self.interval_s:
                self._line()
                self._last = now

    def _line(self) -> None:
        elapsed = time.monotonic() - self.t0
        note = f"; {self.note}" if self.note else ""
        print(f"{self.desc}: {self.done}/{self.total} {self.unit}s{note} "
              f"[{elapsed:.0f} s]", file=self.stream, flush=True)

    def close(self, final_line: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif final_line and not self.quiet and self.total:
            self._line()
