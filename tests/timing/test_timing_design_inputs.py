"""What a design is priced from is typed: `WorkloadKey.warm` / `.where` are enums (a plain or
misspelt string is an error, never a silent default) whose values are the texts they were,
so the replay cache's keys stay byte-identical; the per-batch columns are declared fields,
and a column beyond them that the counts do not hold raises (never a column of zeros)."""

from __future__ import annotations

import copy
import json

import pytest
from small_configs import TWO_SMALL_TABLES

from scratchpipe_sim.config import load_config
from scratchpipe_sim.policies import replay_cache as rc
from scratchpipe_sim.safety.jsonout import canonical_json
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.counts import Where, Workload, uncached_counts
from scratchpipe_sim.timing.designs.design_inputs import (
    COUNT_COLUMNS,
    Columns,
    MissingColumn,
    Warm,
    WorkloadKey,
)
from scratchpipe_sim.timing.designs.design_registry import DESIGNS
from scratchpipe_sim.timing.trace_setup import build_trace


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))


def _cfg(**design_params):
    raw = copy.deepcopy(TWO_SMALL_TABLES)
    raw["hardware"] = {"preset": "a100-gen4"}
    raw["design_params"].update(design_params)
    return load_config(raw)


@pytest.mark.parametrize("kwargs", [{"warm": "replay"}, {"warm": "profile-some"},
                                    {"where": "host"}, {"where": None}])
def test_a_key_refuses_anything_but_the_enums(kwargs):
    with pytest.raises(TypeError, match=f"WorkloadKey.{next(iter(kwargs))}: expected a"):
        WorkloadKey("lru", 10, **kwargs)


def test_uncached_counts_refuses_a_string():
    trace = build_trace(_cfg())
    with pytest.raises(TypeError, match="where: expected a Where"):
        uncached_counts(trace, "device")


def test_the_values_are_the_texts_they_were():
    assert [w.value for w in Warm] == ["replay", "profile-prefix", "profile-all"]
    assert [w.value for w in Where] == ["host", "device"]
    typed = {"warm": Warm.PROFILE_ALL, "where": Where.DEVICE, Warm.REPLAY: Where.HOST}
    plain = {"warm": "profile-all", "where": "device", "replay": "host"}
    assert canonical_json(typed, strict=True) == canonical_json(plain, strict=True)
    assert json.dumps(typed, sort_keys=True) == json.dumps(plain, sort_keys=True)
    assert f"{Warm.PROFILE_PREFIX} {Where.HOST}" == "profile-prefix host"


def test_every_design_keys_its_counts_with_the_enums():
    cfg = _cfg()
    for name in DESIGNS.names():
        key = DESIGNS.get(name)(cfg).workload_key()
        assert type(key.warm) is Warm and type(key.where) is Where, name
    want = {"prefix": Warm.PROFILE_PREFIX, "oracle": Warm.PROFILE_ALL}
    for profile, warm in want.items():
        key = DESIGNS.get("static-cache")(
            _cfg(**{"static-cache": {"profile": profile}})).workload_key()
        assert key.warm is warm
    lru = DESIGNS.get("static-cache")(_cfg(**{"static-cache": {"policy": "lru"}}))
    assert lru.workload_key().warm is Warm.REPLAY
    assert DESIGNS.get("hybrid")(cfg).workload_key().where is Where.HOST
    assert DESIGNS.get("gpu-only")(cfg).workload_key().where is Where.DEVICE


def test_a_profiled_replay_is_kept_under_the_key_written_in_plain_values():
    """static-cache's profile replay lands in the replay cache under the key built from
    plain values (what it was before the enums): the entry is found without computing."""
    cfg = _cfg()
    simulate(cfg, ["static-cache"])
    trace = build_trace(cfg)
    prefix = trace.num_batches - cfg.model.num_batches
    params = {"preload": True, "profile_fraction": (prefix - 0.5) / trace.num_batches,
              "skip_batches": prefix}
    key = rc.policy_key(trace, "static", cfg.capacity_rows(), params)
    with rc.lookup_only():
        cols, _ = rc.cached_columns(key, lambda: pytest.fail("not in the cache"))
    assert len(cols["accesses"]) == trace.num_batches


def _replay_columns(cfg, name):
    """The `Columns` design `name` is priced from under cfg (its own replay)."""
    from scratchpipe_sim.timing.replay_passes import Replays
    from scratchpipe_sim.timing.trace_setup import sized_config

    trace = build_trace(cfg)
    cfg = sized_config(cfg, trace)
    design = DESIGNS.get(name)(cfg)
    replays = Replays(cfg, trace, cached=True)
    return design.columns(replays.get(design.workload_key())[0])


def test_a_column_the_replay_did_not_make_raises():
    """scratchpipe's refetch distances (W = 3: d = 1, 2) are its policy's columns; any
    other distance, or the same name on a policy that makes none, is an error, not zeros."""
    cfg = _cfg()
    sp = _replay_columns(cfg, "scratchpipe")
    n = cfg.model.num_batches
    assert [len(sp.column(f"refetch_d{d}")) for d in (1, 2)] == [n, n]
    with pytest.raises(MissingColumn, match="no per-batch column 'refetch_d3'"):
        sp.column("refetch_d3")
    lru = _replay_columns(cfg, "lru-cache")
    with pytest.raises(MissingColumn, match="'refetch_d1'"):
        lru.column("refetch_d1")
    with pytest.raises(AttributeError):
        lru.refetch_d1  # noqa: B018 (no attribute by a column's name any more)


def test_the_declared_counts_are_the_workloads_and_a_missing_one_raises():
    cfg = _cfg()
    trace = build_trace(cfg)
    w = uncached_counts(trace, Where.HOST)
    c = Columns.of(w, 8.0, 16.0)
    for name in COUNT_COLUMNS:
        assert getattr(c, name) == w.cols[name].tolist(), name
    assert c.r == [8.0] * trace.num_batches and c.R_fill == [16.0] * trace.num_batches
    renamed = Workload(w.policy, w.capacity,
                       {("fill" if k == "fills" else k): v for k, v in w.cols.items()}, {})
    with pytest.raises(MissingColumn, match="hold no fills column"):
        Columns.of(renamed, 8.0, 16.0)
