"""The cluster's per-rank counts and per-rank cache replays through the on-disk replay cache:
read back bit for bit what is made without it, a warm run replays nothing, and a change of
any one thing a rank's replay depends on (its stream: the trace, the plan, dedup, the rank;
its policy, capacity and parameters) misses. Each key test also runs with that one field
dropped from the key and sees the stale entry come back: the field is what keeps it out."""

from __future__ import annotations

import numpy as np
import pytest
from small_configs import one_node_two_tables

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.designs import DESIGNS, cluster
from scratchpipe_sim.traces.generators import generate_trace

BASE = deep_merge(one_node_two_tables(), {
    "cache": {"policy": "fbgemm-lru", "capacity_rows": 200, "params": {"ways": 32}}})
#: two 64-column slices of table 0 on ranks 0 and 1, table 1 on rank 2
CLUSTER = {"columns": {"0": 2}, "column_shard_dim": 64, "placement": {"0": [0, 1], "1": [2]},
           "rank_cache": "lru-prefetch"}


def cfg_of(cluster=None, over=None):
    return load_config(deep_merge(deep_merge(BASE, over or {}),
                                  {"design_params": {"cluster": {**CLUSTER, **(cluster or {})}}}))


def trace_of(seed=3):
    return generate_trace("zipf", [400, 400], 64, 5, 4, seed, alpha=1.05)


def columns(cluster=None, over=None, trace=None, replay_cache=True, totals=None):
    """The design's own columns (`trace_columns`), or with `totals` (per-rank lookups that
    pick the replayed rank) its per-rank cache columns alone."""
    d = DESIGNS.get("cluster")(cfg_of(cluster, over))
    trace = trace if trace is not None else trace_of()
    if totals is not None:
        return d.rank_cache_columns(trace, np.asarray(totals), replay_cache)
    return d.trace_columns(trace, replay_cache)


def same(a: dict, b: dict) -> bool:
    """Equal bit for bit: the same names, dtypes and values."""
    return (a.keys() == b.keys()
            and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def replays(monkeypatch) -> list[int]:
    """The ranks `_replay_rank` replays, as it runs (serially: one cached rank)."""
    seen: list[int] = []
    orig = cluster._replay_rank

    def spy(state, rank):
        seen.append(rank)
        return orig(state, rank)

    monkeypatch.setattr(cluster, "_replay_rank", spy)
    return seen


@pytest.mark.parametrize("mode", ["lru-cache", "lru-prefetch", "scratchpipe"])
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise-adagrad"])
def test_cached_equals_uncached_bit_for_bit(cache_dir, replays, mode, optimizer):
    """Cold (made and stored), warm (read back) and uncached: the same columns, floats
    (the slices' bytes) included; the warm run replays no rank."""
    over = {"model": {"optimizer": optimizer}}
    plain = columns({"rank_cache": mode}, over, replay_cache=False)
    assert any(v.dtype == np.float64 for v in plain.values())  # the slices' bytes
    cold = columns({"rank_cache": mode}, over)
    n = len(replays)
    warm = columns({"rank_cache": mode}, over)
    assert n == 2 and len(replays) == n  # one rank each made; none warm
    assert same(cold, plain) and same(warm, plain)
    assert list(cache_dir.rglob("*.spr"))


def test_a_warm_run_prices_the_same(cache_dir):
    cfg = cfg_of({"rank_cache": "scratchpipe"})
    strip = lambda row: {k: v for k, v in row.items() if not k.endswith("_wall_s")}  # noqa: E731
    rows = [strip(simulate(cfg, ["cluster"], replay_cache=c)[0]) for c in (False, True, True)]
    assert rows[0] == rows[1] == rows[2]


def test_all_hbm_counts_keep_their_float_bytes(cache_dir):
    """Without per-rank caches the counts' entry too gives back the slices' bytes as they
    were made (their float64 bits stored, not truncated to int64)."""
    cl = {"rank_cache": "none", "columns": {"0": 4, "1": 2}, "column_shard_dim": 32,
          "placement": {"0": [0, 1, 2, 2], "1": [0, 1]}}
    over = {"model": {"optimizer": "rowwise-adagrad"}}
    plain = columns(cl, over, replay_cache=False)
    assert any(not np.array_equal(v, np.floor(v)) for v in plain.values()
               if v.dtype == np.float64)  # fractional: truncation would show
    columns(cl, over)
    assert same(columns(cl, over), plain)


#: one field of the replay's key each: (key field, what changes it)
ONE_FIELD = {
    "trace": {"trace": 4},
    "plan": {"cluster": {"placement": {"0": [0, 0], "1": [2]}}},
    "dedup": {"cluster": {"dedup": True}},
    "policy": {"over": {"cache": {"policy": "fbgemm-lfu"}}},
    "capacity": {"over": {"cache": {"capacity_rows": 120}}},
    "params": {"over": {"cache": {"params": {"ways": 4}}}},
    "rank": {"totals": [0, 0, 1, 0, 0, 0, 0, 0]},
}


def changed(field: str, replay_cache: bool):
    ch = ONE_FIELD[field]
    return columns(ch.get("cluster"), ch.get("over"), trace_of(ch.get("trace", 3)),
                   replay_cache, ch.get("totals", [1, 0, 0, 0, 0, 0, 0, 0]))


@pytest.mark.parametrize("field", list(ONE_FIELD))
def test_a_change_of_one_key_field_misses(cache_dir, replays, monkeypatch, field):
    """The base fills the cache (rank 0 replayed); the change alone is then made again, not
    read: its columns equal the uncached ones, which differ from the base's."""
    base = columns(totals=[1, 0, 0, 0, 0, 0, 0, 0], replay_cache=False)
    want = changed(field, False)
    assert not same(want, base)  # the change moves the replay: a stale read would show
    columns(totals=[1, 0, 0, 0, 0, 0, 0, 0])
    n = len(replays)
    assert same(changed(field, True), want) and len(replays) == n + 1


@pytest.mark.parametrize("field", list(ONE_FIELD))
def test_without_the_field_the_stale_entry_comes_back(cache_dir, monkeypatch, field):
    """The same change with `field` dropped from the key reads the base's entry: the
    field is what makes the change miss."""
    orig = cluster.Cluster.rank_replay_key

    def key(self, trace, rank):
        out = orig(self, trace, rank)
        out.pop(field)
        return out

    monkeypatch.setattr(cluster.Cluster, "rank_replay_key", key)
    base = columns(totals=[1, 0, 0, 0, 0, 0, 0, 0])
    got = changed(field, True)
    assert same(got, base) and not same(got, changed(field, False))


def test_several_ranks_forked_then_read_back(cache_dir):
    """Three ranks replayed (forked over the cores where it can), stored by the parent and
    read back: the same columns as without the cache."""
    cl = {"cached_ranks": 3, "placement": {"0": [0, 0], "1": [2]}}
    plain = columns(cl, replay_cache=False)
    assert same(columns(cl), plain) and same(columns(cl), plain)
    assert len(list(cache_dir.rglob("*.spr"))) == 4  # the counts and three ranks
