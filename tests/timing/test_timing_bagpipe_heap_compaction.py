"""Bagpipe's kept-row heap fills up and is compacted in place (`_compact`) on a long trace
with a small cache: the per-batch counts stay exact against the plain-Python reference.
The reference tests' traces (30 batches) never fill the heap (2 x slots + 1024 entries);
here 12 or 20 slots and 600 batches of a 60-row table fill it, and it is compacted 2 or
3 times in each case (counted with the kernels uncompiled)."""

from __future__ import annotations

import numpy as np
import pytest
from reference_bagpipe import bagpipe_reference, random_trace

from scratchpipe_sim.timing.counts import policy_counts


@pytest.mark.parametrize("capacity,lookahead", [(12, 200), (12, 3), (20, 200)])
def test_bagpipe_counts_stay_exact_through_heap_compaction(capacity, lookahead):
    trace = random_trace(11, rows=60, tables=1, batch=8, pooling=2, batches=600)
    ids, ptr = trace.linear_ids(), trace.batch_access_ptr()
    batches = [ids[a:b] for a, b in zip(ptr[:-1], ptr[1:], strict=True)]
    ref = bagpipe_reference(batches, capacity, lookahead)
    w = policy_counts(trace, "bagpipe", capacity, replay_cache=False, lookahead=lookahead)
    got = np.stack([w.cols["hits"], w.cols["fills"], w.cols["evictions"], w.cols["unplaced"]],
                   axis=1)
    np.testing.assert_array_equal(got, ref)
