"""lru and belady against libCacheSim (an independent C implementation), exactly.

At batch size 1 our miss counts must equal libCacheSim's LRU and Belady on the same ids
written in its oracleGeneral format: libCacheSim reports a miss ratio, and ratio * n must
round to our integer miss count.
"""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.policies.oracle_general import (
    RECORD,
    next_access,
    write_oracle_general,
)
from scratchpipe_sim.traces.csr_trace import Trace

lcs = pytest.importorskip("libcachesim")


def _lcs_misses(path, cls, capacity: int, n: int) -> int:
    reader = lcs.TraceReader(trace=str(path), trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE)
    ratio, byte_ratio = cls(cache_size=capacity).process_trace(reader)
    assert ratio == pytest.approx(byte_ratio)  # every object has size 1
    misses = ratio * n
    assert abs(misses - round(misses)) < 1e-6 * n
    return round(misses)


def test_oracle_general_records(tmp_path):
    ids = np.array([5, 7, 5, 9, 7, 5], np.int64)
    rec = np.fromfile(write_oracle_general(ids, tmp_path / "t.og", chunk=4), RECORD)
    assert rec.itemsize == 24 and len(rec) == 6
    assert rec["time"].tolist() == [0, 1, 2, 3, 4, 5]
    assert rec["obj_id"].tolist() == [5, 7, 5, 9, 7, 5]
    assert rec["obj_size"].tolist() == [1] * 6
    assert rec["next_access_vtime"].tolist() == [2, 4, 5, -1, -1, -1]
    assert next_access(np.zeros(0, np.int64)).tolist() == []


@pytest.mark.parametrize("seed,rows,alpha", [(1, 2000, 1.05), (2, 20000, 1.2), (3, 500, 1.5)])
def test_lru_and_belady_equal_libcachesim(tmp_path, zipf_ids, seed, rows, alpha):
    n = 30000
    ids = zipf_ids(n, rows, alpha, seed)
    path = write_oracle_general(ids, tmp_path / "z.oracleGeneral")
    trace = Trace.single_table(ids, rows, 1)
    for capacity in (1, 7, rows // 100, rows // 10, rows):
        lru = run_cache(trace, "lru", capacity, chunk_accesses=4096)
        bel = run_cache(trace, "belady", capacity, chunk_accesses=4096)
        assert lru.misses == _lcs_misses(path, lcs.LRU, capacity, n), capacity
        assert bel.misses == _lcs_misses(path, lcs.Belady, capacity, n), capacity
        assert lru.fills == lru.misses and bel.fills == bel.misses
        assert bel.misses <= lru.misses
        # forced admission: the cache fills to capacity, then every fill evicts
        for r in (lru, bel):
            assert r.evictions == r.writebacks == max(0, r.fills - capacity)


def test_per_access_policies_ignore_batch_boundaries(zipf_ids):
    """lru/lfu/belady serve accesses in stream order: batching changes no total."""
    ids = zipf_ids(20000, 3000, 1.1, 4)
    for name in ("lru", "lfu", "belady", "belady-bypass"):
        base = run_cache(Trace.single_table(ids, 3000, 1), name, 100)
        for bs in (7, 256):
            r = run_cache(Trace.single_table(ids, 3000, bs), name, 100, chunk_accesses=1000)
            assert (r.hits, r.misses, r.fills, r.evictions, r.unplaced) == (
                base.hits, base.misses, base.fills, base.evictions, base.unplaced), (name, bs)
