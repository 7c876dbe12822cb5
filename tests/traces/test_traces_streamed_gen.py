"""Streaming generation (issue 41): a generated trace written block by block to disk and
memory-mapped is today's in-memory trace bit for bit, for every distribution; the
criteo-terabyte-day preset has MLPerf's published table sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.traces import generators as gen
from scratchpipe_sim.traces import trace_cache as tc
from scratchpipe_sim.traces.store import read_trace

ROOT = Path(__file__).resolve().parents[2]
META = yaml.safe_load((ROOT / "configs/traces/meta-2022.yaml").read_text())["params"]
#: parameters a distribution needs beyond its defaults
NEEDS = {"calibrated": {"row_shares": META["row_shares"],
                        "access_shares": META["access_shares"]},
         "burst": {"repeat_fraction": 0.3, "head_scale": 2.0}}


def spec(dist: str) -> gen.GenSpec:
    return gen.make_spec(dist, [5000, 3000, 800], 16, 23, [3, 1, 2], seed=9, reuse=0.25,
                         **NEEDS.get(dist, {}))


def content(t) -> tuple:
    return (np.asarray(t.indices).dtype.str, np.asarray(t.indices).tobytes(),
            np.asarray(t.offsets).tobytes(), np.asarray(t.batch_bounds).tobytes(),
            list(map(int, t.table_rows)), int(t.batch_size))


@pytest.mark.parametrize("dist", sorted(gen.DISTRIBUTIONS.names()))
def test_streamed_equals_in_memory_for_every_distribution(dist, tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "BLOCK_ACCESSES", 300)  # many RNG blocks, odd sizes
    s = spec(dist)
    mem = gen.trace_from_spec(s)
    monkeypatch.setattr(gen, "STREAM_MIN_BYTES", 0)  # every trace streams
    streamed = gen.trace_from_spec(s, jobs=2)
    assert isinstance(streamed.indices, np.memmap)
    assert content(streamed) == content(mem)
    assert streamed.content_sha256() == mem.content_sha256()
    assert streamed.fingerprint() == mem.fingerprint()
    assert streamed.meta == mem.meta and streamed.source == mem.source


def test_a_streamed_trace_leaves_no_file_and_caches_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "STREAM_MIN_BYTES", 0)
    s = spec("zipf")
    t = gen.streamed_trace(s, folder=tmp_path / "scratch")
    assert list((tmp_path / "scratch").iterdir()) == []  # removed; the maps stay valid
    assert int(np.asarray(t.indices).sum()) > 0
    key = {"k": 1}
    first = tc.cached_trace(key, lambda: gen.trace_from_spec(s), folder=tmp_path / "c")
    again = tc.cached_trace(key, lambda: pytest.fail("rebuilt"), folder=tmp_path / "c")
    assert content(first) == content(again) == content(gen.trace_from_spec(s))


def test_gen_preset_criteo_terabyte_day_has_the_published_table_sizes(tmp_path, capsys):
    # torchrec's MLPerf DLRM-DCNv2 `--num_embeddings_per_feature` (ids mod 40,000,000)
    published = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956,
                 405282, 10, 2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000,
                 590152, 12973, 108, 36]
    d = yaml.safe_load((ROOT / "configs/trace-gen/criteo-terabyte-day.yaml").read_text())
    assert d["rows"] == published
    assert d["batch_size"] * d["batches"] == 182_255_616  # the mean day: 182.2 M samples
    acc = d["trace"]["params"]["accesses"]
    assert acc == [min(d["batch_size"] * d["batches"],
                       {3: 5, 4: 8, 10: 10, 14: 10}.get(r, 12) * r) for r in published]
    # the CLI fills every flag from it (a small table set keeps the test fast)
    out = tmp_path / "p.sptrace"
    assert main(["trace", "gen", "--preset", "criteo-terabyte-day", "--rows", "5000",
                 "--tables", "26", "--param", "accesses=60000", "--batches", "3",
                 "--batch-size", "64", "--seed", "1", "--out", str(out), "-q"]) == 0
    t = read_trace(out)
    g = t.meta["generator"]
    assert g["distribution"] == "calibrated" and g["pooling"] == [1] * 26
    assert g["params"]["row_shares"] == META["row_shares"] and t.num_batches == 3
    assert capsys.readouterr().err == ""
