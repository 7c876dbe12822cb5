"""Shared small fixtures (keep minimal: helpers own their test data)."""

from __future__ import annotations

import numpy as np
import pytest


def zipf_stream(n: int, rows: int, alpha: float, seed: int) -> np.ndarray:
    """Seeded Zipf(alpha) ids over `rows` rows, ranks randomly permuted (as FBGEMM's bench)."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(alpha, n) - 1, rows - 1)
    return rng.permutation(rows)[ranks].astype(np.int64)


@pytest.fixture
def zipf_ids():
    """Factory fixture: `zipf_ids(n, rows, alpha, seed)`."""
    return zipf_stream
