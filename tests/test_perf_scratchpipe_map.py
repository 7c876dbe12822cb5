"""scratchpipe's row -> slot map is sized in `prepare` from the largest batch (issue 15: at
batch size 1 it holds the resident rows plus a handful of ghosts, not twice the capacity).
The bound it relies on: while batch j is planned the ghosts are the victims of batches
j-W+1..j, at most W x the largest batch; the map must stay at most half full."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.policies._hashmap import EMPTY
from scratchpipe_sim.policies.engine import iter_cache, make_policy, run_cache
from scratchpipe_sim.traces.trace import Trace


@pytest.mark.parametrize("batch,lookahead", [(1, 2), (1, 4), (3, 3), (16, 2), (64, 4)])
def test_ghosts_stay_within_the_bound_the_map_is_sized_for(zipf_ids, batch, lookahead):
    ids = zipf_ids(6000, 900, 1.1, batch)
    trace = Trace.single_table(ids, 900, batch)
    cap = 300
    pol = make_policy("scratchpipe", cap, 900, lookahead=lookahead)
    bound = cap + min(cap, lookahead * batch)
    most_ghosts = 0
    # chunks of one batch: the map is looked at after every plan
    for _ in iter_cache(trace, pol, chunk_accesses=batch):
        keys = pol.table[:, 0] != EMPTY
        ghosts = int(np.sum(keys & (pol.table[:, 1] < 0)))
        most_ghosts = max(most_ghosts, ghosts)
        assert int(np.sum(keys)) <= bound
        assert 2 * bound <= len(pol.table)  # load factor <= 1/2 for the largest batch
    assert 0 < most_ghosts <= lookahead * batch  # victims happen, within the bound
    # the same counts whatever the chunking (and so whatever the map's history)
    one = run_cache(trace, "scratchpipe", cap, lookahead=lookahead)
    cut = run_cache(trace, "scratchpipe", cap, chunk_accesses=7 * batch + 1,
                    lookahead=lookahead)
    drop = {"wall_s": 0, "accesses_per_s": 0}
    assert one.to_dict() | drop == cut.to_dict() | drop


def test_without_ghosts_the_map_is_sized_for_the_capacity():
    pol = make_policy("scratchpipe", 100, 10_000, lookahead=1)
    assert len(pol.table) == 256  # the smallest power of two >= 2 x 100
    pol.prepare(Trace.single_table(np.arange(50), 10_000, 5))
    assert len(pol.table) == 256
