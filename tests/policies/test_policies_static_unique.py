"""`static` counts each batch's unique rows and unique unplaced rows with its per-row batch
tags (the engine's set is not walked for it): exact against Python sets, across the tags'
epoch (a tiny tag limit clears them every few batches) and any chunking."""

from __future__ import annotations

import numpy as np
import pytest
from policy_recorder import OutcomeRecorder

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import MISS, UNPLACED
from scratchpipe_sim.policies.engine import COUNTERS, iter_cache, make_policy, replay_columns
from scratchpipe_sim.traces.csr_trace import Trace


@pytest.mark.parametrize("tag_limit", [1, 2, 3, None])
@pytest.mark.parametrize("chunk", [7, 1 << 20])
@pytest.mark.parametrize("preload", [False, True])
def test_static_unique_counts_match_sets(zipf_ids, tag_limit, chunk, preload):
    ids = zipf_ids(4000, 300, 1.1, 11)
    trace = Trace.single_table(ids, 300, 40)
    pol = make_policy("static", 30, 300, profile_fraction=0.5, preload=preload)
    if tag_limit is not None:
        pol.tag_limit = tag_limit
    rec = OutcomeRecorder(pol)
    counts = np.concatenate([bc.counts for bc in iter_cache(trace, rec, chunk)])
    out = np.concatenate(rec.outcomes)
    u, uu = COUNTERS.index("unique"), COUNTERS.index("unique_unplaced")
    for b in range(trace.num_batches):
        rows, outs = ids[b * 40:(b + 1) * 40], out[b * 40:(b + 1) * 40]
        first = {}
        for r, o in zip(rows.tolist(), outs.tolist(), strict=True):
            first.setdefault(r, o)
        assert counts[b, u] == len(first)
        assert counts[b, uu] == sum(o == UNPLACED for o in first.values())
    # the tags never changed an outcome: pinned rows fill once, the rest stay unplaced
    assert (out == MISS).sum() == (0 if preload else len(set(ids[out != UNPLACED].tolist())))
    if tag_limit is not None:
        assert pol.epoch[0] > 0  # the tags were cleared at least once


@pytest.mark.parametrize("tag_limit", [2, None])
@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_preloaded_static_skipping_a_prefix_counts_the_rest_the_same(zipf_ids, tag_limit,
                                                                     chunk):
    """`skip_batches` (what a static-cache run sets to its warm-up prefix): the batches
    after it get exactly the counts of the full replay, the skipped ones zero, the same rows
    pinned (the profile still covers the skipped batches)."""
    ids = zipf_ids(4000, 300, 1.1, 5)
    trace = Trace.single_table(ids, 300, 40)

    def replay(skip):
        pol = make_policy("static", 30, 300, profile_fraction=0.5, preload=True,
                          skip_batches=skip)
        if tag_limit is not None:
            pol.tag_limit = tag_limit
        cols, _ = replay_columns(trace, pol, chunk)
        return cols, pol.chosen()

    full, chosen = replay(0)
    skip = 37
    part, chosen_part = replay(skip)
    assert np.array_equal(chosen, chosen_part)
    for name in COUNTERS:
        assert np.array_equal(part[name][skip:], full[name][skip:]), name
        assert not part[name][:skip].any(), name
    assert full["hits"][skip:].sum() > 0 and full["unplaced"][skip:].sum() > 0


def test_skip_batches_needs_preload():
    with pytest.raises(UserError, match="skip_batches needs preload"):
        make_policy("static", 30, 300, skip_batches=3)
    with pytest.raises(UserError, match="whole number of batches"):
        make_policy("static", 30, 300, preload=True, skip_batches=-1)
