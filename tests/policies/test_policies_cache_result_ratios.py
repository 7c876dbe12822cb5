"""`CacheResult`'s derived figures: the hit ratio and the replay's accesses per second."""

from __future__ import annotations

from scratchpipe_sim.policies.engine import CacheResult


def test_hit_ratio_and_accesses_per_second():
    r = CacheResult("lru", 10, 100, accesses=1000, hits=250, misses=750, wall_s=4.0)
    assert r.hit_ratio == 0.25
    assert r.accesses_per_s == 250.0
    d = r.to_dict()
    assert d["hit_ratio"] == 0.25 and d["accesses_per_s"] == 250.0


def test_empty_and_instant_replays():
    assert CacheResult("lru", 10, 100).hit_ratio == 0.0  # no accesses
    assert CacheResult("lru", 10, 100, accesses=5, wall_s=0.0).accesses_per_s == float("inf")
