"""TorchRec cache statistics from a trace (issue 45): the curves against independent
replays of FBGEMM's cache, TorchRec's contract at the ends, the file and its digest check,
and `trace stats --torchrec`. The CacheStatistics subclass needs torchrec (skips without)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from peer_packages import torchrec_reason

from scratchpipe_sim.cli import main
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments import torchrec_stats as ts
from scratchpipe_sim.policies.engine import make_policy, replay_columns
from scratchpipe_sim.traces.csr_trace import Trace

needs_torchrec = pytest.mark.skipif(torchrec_reason() is not None, reason=str(torchrec_reason()))

ROWS = (300, 500)
BATCHES, SAMPLES, POOL = 12, 48, 2


def _batches(seed: int = 3):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(BATCHES):
        out.append([np.minimum(rng.zipf(1.3, SAMPLES * POOL) - 1, r - 1) for r in ROWS])
    return out


def _trace(seed: int = 3) -> Trace:
    lens = [[np.full(SAMPLES, POOL, np.int64) for _ in ROWS] for _ in range(BATCHES)]
    return Trace.from_batches(_batches(seed), list(ROWS), lens)


def _oracle_miss(t: int, clf: float, seed: int = 3, policy: str = "fbgemm-lru") -> float:
    """Table t alone (built independently), replayed by the engine at clf x rows."""
    batches = [[b[t]] for b in _batches(seed)]
    lens = [[np.full(SAMPLES, POOL, np.int64)] for _ in range(BATCHES)]
    sub = Trace.from_batches(batches, [ROWS[t]], lens)
    cap = max(1, round(clf * ROWS[t]))
    cols, _ = replay_columns(sub, make_policy(policy, cap, ROWS[t], ways=32))
    w = BATCHES // 2
    return ((cols["fills"][w:].sum() + cols["unique_unplaced"][w:].sum())
            / cols["unique"][w:].sum())


def test_table_trace_is_the_tables_own_trace():
    tr = _trace()
    for t in range(len(ROWS)):
        sub = ts.table_trace(tr, t)
        want = Trace.from_batches([[b[t]] for b in _batches()], [ROWS[t]],
                                  [[np.full(SAMPLES, POOL, np.int64)]] * BATCHES)
        for name in ("table_rows", "indices", "offsets", "batch_bounds"):
            assert np.array_equal(getattr(sub, name), getattr(want, name)), name


def test_curve_ends_monotone_and_equal_to_replays():
    stats = ts.trace_stats(_trace())
    assert stats.warm_batches == BATCHES // 2 and stats.table_rows == ROWS
    for t, c in enumerate(stats.tables):
        assert c.miss_rate(0.0) == 1.0 and c.miss_rate(1.0) == 0.0
        grid = np.linspace(0, 1, 201)
        vals = [c.miss_rate(x) for x in grid]
        assert all(b <= a for a, b in zip(vals, vals[1:], strict=False))
        # at each replayed load factor: the running minimum of the replays (oracle)
        running = 1.0
        for clf in ts.LOAD_FACTORS:
            raw = _oracle_miss(t, clf)
            running = min(running, raw)
            assert c.miss_rate(clf) == pytest.approx(running, abs=1e-12), (t, clf)
        # distinct ids per batch, over the counted batches
        uniq = [len(np.unique(b[t])) for b in _batches()[BATCHES // 2:]]
        assert c.expected_lookups == pytest.approx(np.mean(uniq))
        assert c.accesses_per_batch == SAMPLES * POOL
        # TorchRec's cacheability: the area under the curve (trapezoids over its knots)
        x, y = np.array(c.load_factors), np.array(c.miss)
        assert c.cacheability == pytest.approx(np.trapezoid(y, x))
        assert 0.0 < c.cacheability < 1.0


def test_a_trace_that_fits_misses_nothing_once_warm():
    """20 distinct ids of 1000 rows: every cache of one set or more holds them, so after
    the warm half nothing misses at any replayed load factor."""
    rng = np.random.default_rng(0)
    ids = rng.choice(20, size=BATCHES * 64)
    tr = Trace.single_table(ids, 1000, 64)
    c = ts.trace_stats(tr).tables[0]
    assert c.miss_rate(0.0) == 1.0
    assert all(c.miss_rate(x) == 0.0 for x in ts.LOAD_FACTORS)
    assert c.cacheability == pytest.approx(ts.LOAD_FACTORS[0] / 2)


def test_file_round_trip_and_digest(tmp_path):
    tr = _trace()
    stats = ts.trace_stats(tr)
    p = ts.write_stats(stats, tmp_path / "s.json")
    back = ts.read_stats(p)
    assert back.as_dict() == stats.as_dict()
    back.check_trace(tr)
    back.check_rows(ROWS, None, "model.tables")
    with pytest.raises(UserError, match="another trace"):
        back.check_trace(_trace(seed=4))
    with pytest.raises(UserError, match="the config has 2 of rows 300,400"):
        back.check_rows((300, 400), None, "model.tables")


@pytest.mark.parametrize("edit", [
    lambda d: d.update(format="x"), lambda d: d.update(version=2),
    lambda d: d["tables"][0].update(miss=[1.0, 0.5]),
    lambda d: d["tables"][0].update(miss=[0.0] + d["tables"][0]["miss"][1:]),
    lambda d: d["tables"][1].update(load_factors=[0.5, 1.0]),
    lambda d: d.pop("trace_sha256"), lambda d: d.update(policy="lru"),
])
def test_bad_file_is_one_user_error(tmp_path, edit):
    d = ts.trace_stats(_trace()).as_dict()
    edit(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(UserError) as e:
        ts.read_stats(p)
    assert str(p) in e.value.line() and "\n" not in e.value.line()


def test_trace_stats_cli_writes_the_file(tmp_path, capsys):
    src = tmp_path / "t.sptrace"
    assert main(["trace", "gen", "--rows", "300,500", "--batch-size", "48", "--batches",
                 "8", "--pooling", "2", "--seed", "1", "--out", str(src)]) == 0
    out = tmp_path / "s.json"
    assert main(["trace", "stats", str(src), "--torchrec", str(out)]) == 0
    from scratchpipe_sim.traces.io import open_trace

    tr = open_trace(str(src))
    got = ts.read_stats(out)
    got.check_trace(tr)
    assert got.as_dict() == {**ts.trace_stats(tr).as_dict(), "source": got.source}
    capsys.readouterr()
    assert main(["trace", "stats", str(src), "--torchrec",
                 str(tmp_path / "no" / "s.json")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@needs_torchrec
def test_cache_statistics_is_torchrecs():
    from torchrec.distributed.types import CacheStatistics

    c = ts.trace_stats(_trace()).tables[1]
    s = ts.cache_statistics(c)
    assert isinstance(s, CacheStatistics)
    assert s.expected_lookups == c.expected_lookups
    assert s.cacheability == c.cacheability
    assert s.expected_miss_rate(0.0) == 1.0 and s.expected_miss_rate(1.0) == 0.0
    assert s.expected_miss_rate(0.1) == c.miss_rate(0.1)


def test_lfu_statistics_are_fbgemm_lfus_replays(tmp_path):
    """--torchrec-algorithm lfu: the curve is the fbgemm-lfu replays' running minimum (the
    same oracle as LRU's, with FBGEMM's LFU policy), recorded as the file's policy."""
    stats = ts.trace_stats(_trace(), algorithm="lfu")
    assert stats.policy == "fbgemm-lfu"
    for t, c in enumerate(stats.tables):
        running = 1.0
        for clf in ts.LOAD_FACTORS:
            running = min(running, _oracle_miss(t, clf, policy="fbgemm-lfu"))
            assert c.miss_rate(clf) == pytest.approx(running, abs=1e-12), (t, clf)
    lru = ts.trace_stats(_trace())
    assert any(a.raw_miss != b.raw_miss for a, b in zip(stats.tables, lru.tables, strict=True))
    with pytest.raises(UserError, match="unknown cache algorithm 'mru'"):
        ts.trace_stats(_trace(), algorithm="mru")


def test_trace_stats_cli_lfu_option(tmp_path, capsys):
    src = tmp_path / "t.sptrace"
    assert main(["trace", "gen", "--rows", "300,500", "--batch-size", "48", "--batches",
                 "8", "--pooling", "2", "--seed", "1", "--out", str(src)]) == 0
    out = tmp_path / "s.json"
    assert main(["trace", "stats", str(src), "--torchrec", str(out),
                 "--torchrec-algorithm", "lfu"]) == 0
    assert ts.read_stats(out).policy == "fbgemm-lfu"
    capsys.readouterr()
    assert main(["trace", "stats", str(src), "--torchrec-algorithm", "lfu"]) == 2
    assert "--torchrec-algorithm: only with --torchrec" in capsys.readouterr().err
