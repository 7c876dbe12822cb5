"""Locality stats: Meta's buckets on a hand-built trace, the file format, exact LRU curve."""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces import Trace
from scratchpipe_sim.traces.generators import generate_trace
from scratchpipe_sim.traces.stats import (
    BUCKET_LABELS,
    bucket_of,
    format_locality_stats,
    lru_miss_ratio_curve,
    read_locality_stats,
    summarize,
)

#: Meta's published locality statistics, copied into the repository (MIT; see its README)
META = Path(__file__).resolve().parents[2] / "traces" / "dlrm_datasets_locality"


def test_bucket_edges_are_metas():
    c = np.array([1, 2, 3, 4, 5, 8, 9, 16, 17, 1024, 1025, 32768, 32769, 10**6])
    assert bucket_of(c).tolist() == [0, 1, 2, 2, 3, 3, 4, 4, 5, 10, 11, 15, 16, 16]
    assert BUCKET_LABELS[0] == "(0, 1]" and BUCKET_LABELS[2] == "(2, 4]"
    assert BUCKET_LABELS[-2] == "(16384, 32768]" and BUCKET_LABELS[-1] == "(32768+"


def test_histogram_of_a_hand_built_trace():
    # row r is accessed counts[r] times; rows 8, 9 never
    counts = [1, 1, 2, 3, 4, 5, 40000, 9, 0, 0]
    ids = np.repeat(np.arange(10), counts)
    np.random.default_rng(0).shuffle(ids)
    t = Trace.single_table(ids, 10, 100, source="hand")
    s = summarize(t)
    h = s.histogram
    assert s.accesses == 40025 and s.distinct_rows == 8
    assert h.num_indices == 40025 and h.num_unique == 8
    want_rows = [2, 1, 2, 1, 1] + [0] * 11 + [1]  # (0,1]:2 (1,2]:1 (2,4]:2 (4,8]:1 (8,16]:1
    want_acc = [2, 2, 7, 5, 9] + [0] * 11 + [40000]
    assert list(h.row_counts) == want_rows and list(h.access_counts) == want_acc
    assert h.row_share == pytest.approx([x / 8 for x in want_rows])
    assert h.access_share == pytest.approx([x / 40025 for x in want_acc])
    assert h.avg_col_size == pytest.approx(40025 / 8)


def test_summary_counts_per_table_and_per_batch():
    t = generate_trace("zipf", [200, 50], 16, 30, [3, 2], seed=3)
    s = summarize(t)
    ids = t.linear_ids()
    assert s.distinct_rows == len(np.unique(ids))
    assert s.distinct_rows_per_table == [len(np.unique(ids[ids < 200])),
                                  len(np.unique(ids[ids >= 200]))]
    assert s.accesses_per_table == [30 * 16 * 3, 30 * 16 * 2]
    ptr = t.batch_access_ptr()
    per_batch = [len(np.unique(ids[ptr[k]:ptr[k + 1]])) for k in range(30)]
    assert s.mean_unique_per_batch == pytest.approx(np.mean(per_batch))
    assert s.mean_pooling == pytest.approx(2.5)


def test_reads_metas_published_files():
    y21 = read_locality_stats(META / "2021_locality_stats.txt")
    y22 = read_locality_stats(META / "2022_locality_stats.txt")
    assert len(y21) == 17 and len(y22) == 16
    a = y21[0]
    assert a.name == "fbgemm_t856_bs65536.pt" and a.batch_size == 65536
    assert a.num_indices == 887017990 and a.num_unique == 128435723
    assert a.avg_col_size == 6.9
    assert a.row_share[:3] == (0.473, 0.152, 0.139) and a.access_share[-1] == 0.019
    b = y22[0]
    assert b.name == "fbgemm_t788_bs131072_0.pt" and b.row_share[0] == 0.342
    for s in y21 + y22:
        assert sum(s.row_share) == pytest.approx(1.0, abs=0.01)
        assert sum(s.access_share) == pytest.approx(1.0, abs=0.01)


def test_our_text_is_metas_layout_and_round_trips(tmp_path):
    t = generate_trace("zipf", 1000, 64, 20, 4, seed=1)
    h = summarize(t).histogram
    text = format_locality_stats(h)
    (tmp_path / "ours.txt").write_text(text + "\n" + text)
    got = read_locality_stats(tmp_path / "ours.txt")
    assert len(got) == 2
    assert got[0].row_share == tuple(round(x, 3) for x in h.row_share)
    assert got[0].num_indices == t.num_accesses and got[0].batch_size == 64 * 20
    # the same lines, in the same order, as Meta's first block
    meta_lines = (META / "2021_locality_stats.txt").read_text().splitlines()[:45]
    ours = text.splitlines()
    assert len(ours) == 45
    for mine, theirs in zip(ours[1:], meta_lines[1:], strict=True):
        assert re.sub(r"[0-9.]+", "#", mine) == re.sub(r"[0-9.]+", "#", theirs)


@pytest.mark.parametrize("content,where", [
    ("x\nnot a header\n", "line 2"),
    ("x\nLocality stats after processing 1 batches of size 4\nAvg # of indices: 3\n", "line 4"),
    ("", "no locality-stats block"),
])
def test_bad_locality_file_names_the_line(tmp_path, content, where):
    (tmp_path / "bad.txt").write_text(content)
    with pytest.raises(UserError, match=where) as e:
        read_locality_stats(tmp_path / "bad.txt")
    assert e.value.source == str(tmp_path / "bad.txt")


# -- LRU miss-ratio curve --------------------------------------------------------------------
def brute_force_lru_misses(ids, capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for x in ids:
        if x in cache:
            cache.move_to_end(x)
        else:
            misses += 1
            cache[x] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return misses


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 15), min_size=1, max_size=120), st.integers(1, 4),
       st.sampled_from([None, 1, 20, 33]))
def test_mrc_equals_brute_force_lru_at_every_capacity(ids, batch, tree_size):
    t = Trace.single_table(np.array(ids), 16, batch)
    caps = list(range(1, 18))
    # several chunks; a small tree forces many renumberings
    curve = lru_miss_ratio_curve(t, caps, chunk_accesses=7, tree_size=tree_size)
    for c in caps:
        assert curve.misses_at(c) == brute_force_lru_misses(ids, c)
    assert curve.cold_misses == len(set(ids))


def test_mrc_on_multi_table_zipf_equals_brute_force_and_the_lru_policy():
    t = generate_trace("zipf", [300, 100], 8, 40, [3, 2], seed=2, reuse=0.3)
    ids = t.linear_ids().tolist()
    curve = lru_miss_ratio_curve(t, [1, 4, 20, 64, 150, 400])
    small_tree = lru_miss_ratio_curve(t, [1, 4, 20, 64, 150, 400], tree_size=500)
    assert small_tree.distance_counts.tolist() == curve.distance_counts.tolist()
    for c in curve.capacities:
        assert curve.misses_at(c) == brute_force_lru_misses(ids, c)
    from scratchpipe_sim.policies import POLICIES
    if "lru" in POLICIES:
        from scratchpipe_sim.policies.engine import run_cache
        for c in (4, 64, 150):
            assert run_cache(t, "lru", c).misses == curve.misses_at(c)
    pts = curve.points()
    assert [p["capacity"] for p in pts] == [1, 4, 20, 64, 150, 400]
    assert all(a["misses"] >= b["misses"] for a, b in zip(pts[:-1], pts[1:], strict=True))
    assert pts[-1]["misses"] == curve.cold_misses  # everything fits


def test_mrc_default_capacities_are_percent_of_rows():
    t = generate_trace("uniform", 1000, 10, 5, 1, seed=0)
    assert lru_miss_ratio_curve(t).capacities == (10, 20, 50, 100, 200)
    with pytest.raises(UserError, match="capacity must be >= 1"):
        lru_miss_ratio_curve(t, [0])
