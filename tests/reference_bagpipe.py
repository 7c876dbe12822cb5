"""Bagpipe's rule in plain Python (the oracle of the bagpipe policy's tests) and the small
random Zipf traces they replay; shared by the design and the heap-compaction tests."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from scratchpipe_sim.traces.csr_trace import Trace


def bagpipe_reference(batches, capacity, window):
    """Per batch (hits, fills, evictions, unplaced) by Bagpipe's rule, in plain Python."""
    where: dict[int, list[int]] = {}
    for g, ids in enumerate(batches):
        for r in dict.fromkeys(ids.tolist()):
            where.setdefault(r, []).append(g)

    def next_batch(r, g):
        lst = where[r]
        i = bisect_right(lst, g)
        return lst[i] if i < len(lst) else None

    expiry: dict[int, int] = {}
    out = []
    for g, ids in enumerate(batches):
        pinned, unplaced = [], set()
        hits = fills = ev = unpl = 0
        for r in ids.tolist():
            if r in unplaced:
                unpl += 1
            elif r in pinned or r in expiry:
                if r not in pinned:
                    pinned.append(r)
                hits += 1
            else:
                if len(expiry) >= capacity:
                    cands = [(e, v) for v, e in expiry.items() if v not in pinned]
                    if not cands:
                        unplaced.add(r)
                        unpl += 1
                        continue
                    del expiry[max(cands)[1]]
                    ev += 1
                expiry[r] = g
                pinned.append(r)
                fills += 1
        for r in pinned:
            n = next_batch(r, g)
            if n is not None and n - g <= window:
                expiry[r] = n
            else:
                del expiry[r]
                ev += 1
        out.append((hits, fills, ev, unpl))
    return np.array(out, np.int64)


def random_trace(seed, rows=300, tables=2, batch=16, pooling=3, batches=30):
    rng = np.random.default_rng(seed)
    out = [[np.minimum(rng.zipf(1.2, batch * pooling) - 1, rows - 1).astype(np.int64)
            for _ in range(tables)] for _ in range(batches)]
    lens = [[np.full(batch, pooling, np.int64)] * tables for _ in range(batches)]
    return Trace.from_batches(out, [rows] * tables, lens)
