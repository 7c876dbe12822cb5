"""timing/counts.py's small passes against plain-Python oracles: first touches per batch,
the warm-up length, `Workload.tail` and the uncached designs' counts (mutation survivors
of issue 42: each of these was changeable without a test failing)."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.timing.counts import (
    Where,
    Workload,
    first_touches,
    uncached_counts,
    warmup_length,
)
from scratchpipe_sim.traces.csr_trace import Trace


def _trace(seed: int, batches: int = 12, rows: tuple[int, ...] = (30, 50)) -> Trace:
    rng = np.random.default_rng(seed)
    bags = [int(rng.integers(1, 9)) for _ in range(batches)]  # one id a bag, as many a table
    return Trace.from_batches(
        [[rng.integers(0, r, n) for r in rows] for n in bags], list(rows))


def _batch_rows(trace: Trace) -> list[set[int]]:
    """Each batch's linear row ids, as a plain set."""
    ids, ptr = trace.linear_ids(), trace.batch_access_ptr()
    return [set(ids[ptr[b]:ptr[b + 1]].tolist()) for b in range(trace.num_batches)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_touches_are_rows_never_seen_in_an_earlier_batch(seed):
    t = _trace(seed)
    seen: set[int] = set()
    want = []
    for rows in _batch_rows(t):
        want.append(len(rows - seen))
        seen |= rows
    assert first_touches(t).tolist() == want


@pytest.mark.parametrize("seed", [0, 3])
def test_warmup_length_is_the_fewest_batches_touching_the_capacity(seed):
    t = _trace(seed)
    rows = _batch_rows(t)
    for prefix in (1, 5, 12):
        for capacity in (1, 5, 20, 60, 10**6):
            want = prefix
            for k in range(1, prefix + 1):
                if len(set().union(*rows[prefix - k:prefix])) >= capacity:
                    want = k
                    break
            assert warmup_length(t, prefix, capacity) == want, (prefix, capacity)


def test_tail_drops_exactly_the_first_batches():
    w = Workload("lru", 7, {"accesses": np.arange(5), "hits": np.arange(5) * 2}, {"x": 1})
    assert w.tail(0) is w
    for skip in (1, 2, 4):
        t = w.tail(skip)
        assert t.cols["accesses"].tolist() == list(range(skip, 5))
        assert t.cols["hits"].tolist() == [2 * k for k in range(skip, 5)]
        assert (t.policy, t.capacity, t.extra) == ("lru", 7, {"x": 1})


def test_uncached_counts_put_every_row_in_one_place():
    t = _trace(4)
    acc = [t.batch_access_ptr()[b + 1] - t.batch_access_ptr()[b] for b in range(12)]
    uniq = [len(r) for r in _batch_rows(t)]
    host, dev = uncached_counts(t, Where.HOST), uncached_counts(t, Where.DEVICE)
    assert (host.policy, host.capacity) == ("none", 0)
    assert (dev.policy, dev.capacity) == ("all-resident", t.total_rows)
    assert host.cols["misses"].tolist() == host.cols["unplaced"].tolist() == acc
    assert host.cols["unique_unplaced"].tolist() == uniq and host.total("hits") == 0
    assert dev.cols["hits"].tolist() == acc and dev.total("misses") == 0
    assert dev.total("unplaced") == 0 and dev.cols["unique"].tolist() == uniq
    with pytest.raises(TypeError):
        uncached_counts(t, "host")


def test_scaled_counts_closed_form():
    """A sampled run's estimate (factor 1/R): counts scaled and rounded to whole counts,
    float columns scaled, row sizes and samples kept, extras rounded except the ways."""
    w = Workload("lru", 7, {"accesses": np.array([3, 4, 5]), "hits": np.array([1, 0, 2]),
                            "l2_hits": np.array([0.5, 1.5, 2.0]),
                            "samples": np.array([8, 8, 8]),
                            "fill_row_bytes": np.array([256.0, 256.0, 256.0])},
                 {"fills": 7, "ways": 16})
    s = w.scaled(2.5)
    assert s.cols["accesses"].tolist() == [8, 10, 12]  # rint(7.5) = 8, rint(12.5) = 12
    assert s.cols["accesses"].dtype == w.cols["accesses"].dtype
    assert s.cols["hits"].tolist() == [2, 0, 5]
    assert s.cols["l2_hits"].tolist() == [1.25, 3.75, 5.0]
    assert s.cols["samples"].tolist() == [8, 8, 8]
    assert s.cols["fill_row_bytes"].tolist() == [256.0] * 3
    assert s.extra == {"fills": 18, "ways": 16}
    with pytest.raises(AttributeError):  # frozen: a Workload is shared between designs
        w.capacity = 3
