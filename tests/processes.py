"""Forked processes that must all finish cleanly (the concurrent-writer tests of the disk
caches)."""

from __future__ import annotations

from collections.abc import Sequence
from multiprocessing.process import BaseProcess

#: a hang detector, not a timing assertion: each writer finishes in well under a second
JOIN_S = 60


def run_together(procs: Sequence[BaseProcess]) -> None:
    """Start every process, then wait for each and check it exited with 0."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(JOIN_S)
        assert p.exitcode == 0
