"""Kernels step through in pure Python: with NUMBA_DISABLE_JIT=1 every policy runs (the
`prefetch` and `trailing_zeros` intrinsics have pure-Python bodies) and counts exactly what
the compiled kernels count, so a debugger can be used on a kernel (issue 23 item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from scratchpipe_sim.policies.fbgemm import trailing_zeros
from scratchpipe_sim.traces._prefetch import prefetch

#: a small two-table trace and every kind of kernel: map-based (lru, lfu, belady),
#: scratchpipe's window, bagpipe's heap, FBGEMM's set-associative SWAR scan, static
PROBE = """
import json
import numpy as np
from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.traces.csr_trace import Trace

rng = np.random.default_rng(7)
rows = [300, 200]
batches = [[np.minimum(rng.zipf(1.2, 64) - 1, r - 1) for r in rows] for _ in range(12)]
trace = Trace.from_batches(batches, rows)
out = {}
for name, params in [("lru", {}), ("lfu", {}), ("belady", {}), ("scratchpipe", {"lookahead": 3}),
                     ("bagpipe", {}), ("fbgemm-lru", {}), ("fbgemm-lfu", {}), ("static", {}),
                     ("belady-bypass", {})]:
    r = run_cache(trace, name, 120, **params)
    out[name] = [r.accesses, r.unique, r.hits, r.misses, r.fills, r.evictions, r.writebacks,
                 r.unplaced, r.unique_unplaced]
print(json.dumps(out))
"""


def _counts(disable_jit: bool) -> dict[str, list[int]]:
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    if disable_jit:
        env["NUMBA_DISABLE_JIT"] = "1"
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", PROBE], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_policy_counts_the_same_in_pure_python_as_compiled():
    compiled = _counts(disable_jit=False)
    pure = _counts(disable_jit=True)
    assert pure == compiled
    assert all(c[2] > 0 and c[4] > 0 for c in compiled.values())  # hits and fills happened


def test_intrinsics_in_pure_python():
    prefetch(np.zeros(4, np.int64), 2)  # a hint: nothing to do, nothing raised
    assert trailing_zeros(np.uint64(8)) == 3 and trailing_zeros(np.uint64(1)) == 0
    assert trailing_zeros(np.uint64(0)) == 64 and trailing_zeros(np.uint8(0)) == 8
    assert trailing_zeros(np.uint64(1 << 63)) == 63
