"""The run summary's percentile: numpy's "linear" percentile, float for float."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.timing.run_metrics import percentile


@pytest.mark.parametrize("seed", range(40))
def test_percentile_equals_numpys_bit_for_bit(seed):
    """Lognormal times and many ties, n from 1 to 300, every q the summary or a user might
    ask: the same float as np.percentile (which the summary no longer calls: numpy.ma)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    values = rng.lognormal(10.0, 1.0, n) if seed % 3 else rng.integers(0, 5, n) * 1e3
    for q in (0, 1, 25, 50, 90, 99, 99.9, 100):
        assert percentile(values, q) == float(np.percentile(values, q)), (n, q)
