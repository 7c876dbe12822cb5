"""Shared small fixtures (keep minimal: helpers own their test data)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

# CI (CI=true) replays the same examples on every run, so a red build is reproducible and a
# green one is not luck; local runs keep exploring new examples.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def zipf_stream(n: int, rows: int, alpha: float, seed: int) -> np.ndarray:
    """Seeded Zipf(alpha) ids over `rows` rows, ranks randomly permuted (as FBGEMM's bench)."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(alpha, n) - 1, rows - 1)
    return rng.permutation(rows)[ranks].astype(np.int64)


@pytest.fixture
def zipf_ids():
    """Factory fixture: `zipf_ids(n, rows, alpha, seed)`."""
    return zipf_stream
