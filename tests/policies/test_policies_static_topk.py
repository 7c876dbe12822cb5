"""`static`'s top-k selection (histogram of counts) against a plain sort, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.policies import static


def _reference(counts: np.ndarray, k: int) -> np.ndarray:
    """k largest counts, ties to the smaller index: a stable sort by (-count, index)."""
    order = np.lexsort((np.arange(len(counts)), -counts))
    return np.sort(order[:k])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])  # the profile's counts: int32 below 2^31
@pytest.mark.parametrize("cap", [4, 1 << 16])
@pytest.mark.parametrize("seed", range(4))
def test_top_k_matches_a_sort(monkeypatch, cap, seed, dtype):
    """Heavy ties (Zipf-like counts, many zeros), every k; with a tiny histogram cap the
    k-th largest often lies above it and takes the sorted path."""
    monkeypatch.setattr(static, "_HIST_CAP", cap)
    rng = np.random.default_rng(seed)
    counts = np.minimum(rng.zipf(1.5, 300) - 1, 50).astype(dtype)
    for k in (1, 2, 7, 50, 150, 299, 300, 400):
        got = static.top_k(counts, k)
        assert np.array_equal(got, _reference(counts, min(k, len(counts)))), k
        assert got.dtype == np.int64


def test_top_k_all_equal_counts_take_the_smallest_ids():
    assert static.top_k(np.zeros(10, np.int64), 3).tolist() == [0, 1, 2]
    assert static.top_k(np.array([5, 5, 9, 5], np.int64), 2).tolist() == [0, 2]
