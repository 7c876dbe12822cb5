"""The policies' open-addressing maps (policies/_hashmap.py): Fibonacci hashing takes the
top `bits` bits of key x 2^64/phi, so every home lies inside the table and consecutive or
strided keys spread over it (a table whose homes collapse to a few buckets still answers
right, but each probe walks the whole run)."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.policies._hashmap import home, new_map, new_pair_map


@pytest.mark.parametrize("capacity", [5, 1000, 1024, 40_000])
@pytest.mark.parametrize("make", ["pair", "plain"])
def test_homes_lie_in_the_table_and_spread(capacity, make):
    if make == "pair":
        table, mask, shift = new_pair_map(capacity)
        size = len(table)
    else:
        keys, _, mask, shift = new_map(capacity)
        size = len(keys)
    # the smallest power of two >= 2 x capacity, at least 8 (1024 -> 2048, 1000 -> 2048)
    assert size == mask + 1 == max(8, 1 << (2 * capacity - 1).bit_length())
    assert size >= 2 * capacity > size // 2
    for keys in (np.arange(capacity), np.arange(capacity) * 4096 + 7):
        homes = np.array([home(int(k), shift) for k in keys])
        assert homes.min() >= 0 and homes.max() <= mask
        assert len(set(homes.tolist())) >= 0.5 * capacity  # no pile-up on a few buckets
