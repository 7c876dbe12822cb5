"""A policy wrapper for engine tests: every outcome the wrapped policy wrote, kept (the
engine reuses its outcome buffer from chunk to chunk)."""

from __future__ import annotations

import numpy as np


class OutcomeRecorder:
    """Delegates to `inner` (attributes included); `outcomes` holds each chunk's copy."""

    def __init__(self, inner):
        self.inner = inner
        self.outcomes: list[np.ndarray] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def process(self, chunk, next_use, outcome, events):
        self.inner.process(chunk, next_use, outcome, events)
        self.outcomes.append(outcome.copy())
