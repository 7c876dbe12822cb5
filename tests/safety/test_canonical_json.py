"""One canonical-JSON hasher (issue 23): `safety.jsonout.canonical_json` serves the sweep
point keys (`experiments.hashing.config_hash`, lenient) and the replay / trace cache keys
(`policies.replay_cache`, strict). The values below were computed before the two hashers
were merged: results folders on disk are named by them, so they must never change."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from scratchpipe_sim.experiments.hashing import canonical_json, config_hash
from scratchpipe_sim.policies import replay_cache as rc
from scratchpipe_sim.safety import jsonout

PINNED = [
    ({"trace": {"distribution": "zipf", "alpha": 1.05, "rows": 1000000}, "seed": 1,
      "designs": ["lru-cache", "scratchpipe"]},
     "e46f995f7ccbe1db4ed474990f8e63c2bb934aaa6f8d1665710d78c6ffdbda23",
     '{"designs":["lru-cache","scratchpipe"],"seed":1,'
     '"trace":{"alpha":1.05,"distribution":"zipf","rows":1000000}}'),
    ({"a": 1, "b": 1.0, "c": -0.0, "d": float("nan"), "e": float("inf"), "f": (1, 2.5),
      "g": None, "h": True},
     "b92ec73c7c83c1bb43b8f4a5189ada6bde637f12229c9b3e2a75d5672ecd933c",
     '{"a":1,"b":1.0,"c":0.0,"d":{"__float__":"nan"},"e":{"__float__":"inf"},"f":[1,2.5],'
     '"g":null,"h":true}'),
    ({"n": np.int64(7), "x": np.float64(0.1), "p": Path("/tmp/x"), 3: "int key", "s": "ünï"},
     "5c0a7f0a2831688351910b4ce106923f26ad5452f8345a578e2876b4c7d075dc",
     '{"3":"int key","n":7,"p":"/tmp/x","s":"\\u00fcn\\u00ef","x":0.1}'),
    ([], "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945", "[]"),
]


@pytest.mark.parametrize("value,digest,text", PINNED)
def test_config_hash_is_pinned(value, digest, text):
    assert canonical_json(value) == text
    assert config_hash(value) == digest[:16]
    assert config_hash(value, 64) == digest


def test_strict_canonical_json_of_a_cache_key_is_pinned():
    """The replay cache's key text (strict: numpy scalars and paths only, floats exactly as
    JSON writes them, so a stored key reads back equal) is as before the merge."""
    key = {"trace": "abc", "policy": "lru", "capacity": np.int64(400000),
           "params": {"lookahead": 5, "x": 0.5, "z": -0.0, "nan": float("nan")},
           "p": Path("/a")}
    text = ('{"capacity":400000,"p":"/a","params":{"lookahead":5,"nan":NaN,"x":0.5,'
            '"z":-0.0},"policy":"lru","trace":"abc"}')
    assert jsonout.canonical_json(key, strict=True) == text
    assert hashlib.sha256(text.encode()).hexdigest() == \
        "debbd5a608f7f3d696ff6e560ffef9076365ed4750e392184939b6a92f668f0d"


@pytest.mark.parametrize("bad", [object(), np.zeros(3), {1, 2}])
def test_strict_refuses_unknown_types_lenient_writes_them_as_text(bad):
    with pytest.raises(TypeError, match="strict JSON"):
        jsonout.canonical_json({"k": [bad]}, strict=True)
    if not isinstance(bad, np.ndarray):  # lenient: an array is numpy's .item() (as before)
        assert jsonout.canonical_json({"k": bad}) == canonical_json({"k": str(bad)})
    with pytest.raises(TypeError):
        rc.key_digest({"k": bad})
