"""Write an id stream in libCacheSim's `oracleGeneral` binary format (the test oracle).

Packed little-endian records `<u4 time, u8 obj_id, u4 obj_size, i8 next_access_vtime>`
(24 bytes): time is the request's position, every object has size 1 (so a cache size counts
objects), and next_access_vtime is the position of the next request to the same object,
-1 when there is none (checked against libCacheSim 0.3.5's Belady).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scratchpipe_sim.policies.base import NO_NEXT_USE
from scratchpipe_sim.policies.engine import _next_use_backward

RECORD = np.dtype([("time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"),
                   ("next_access_vtime", "<i8")])
assert RECORD.itemsize == 24


def next_access(ids: np.ndarray) -> np.ndarray:
    """Position of the next request to the same id, -1 when none."""
    ids = np.ascontiguousarray(ids, np.int64)
    out = np.empty(len(ids), np.int64)
    if len(ids):
        last = np.full(int(ids.max()) + 1, NO_NEXT_USE, np.int64)
        _next_use_backward(ids, 0, last, out)
    out[out == NO_NEXT_USE] = -1
    return out


def write_oracle_general(ids: np.ndarray, path: str | Path,
                         chunk: int = 1 << 22) -> Path:
    """Write `ids` (non-negative integers) as an oracleGeneral trace; returns the path."""
    ids = np.asarray(ids, np.int64)
    nxt = next_access(ids)
    path = Path(path)
    with open(path, "wb") as f:
        for lo in range(0, len(ids), chunk):
            hi = min(lo + chunk, len(ids))
            rec = np.empty(hi - lo, RECORD)
            rec["time"] = np.arange(lo, hi, dtype=np.uint64).astype(np.uint32)
            rec["obj_id"] = ids[lo:hi]
            rec["obj_size"] = 1
            rec["next_access_vtime"] = nxt[lo:hi]
            rec.tofile(f)
    return path
