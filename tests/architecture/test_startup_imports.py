"""Start-up (issue 15): a command imports the heavy libraries only where it uses them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

PROBE = """
import json, sys
{body}
print(json.dumps(sorted(m for m in ("pandas", "pyarrow", "numba") if m in sys.modules)))
"""


def _heavy_after(body: str) -> list[str]:
    """Which of pandas/pyarrow/numba a fresh interpreter holds after running `body`."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_trace_format_discovery_imports_no_pandas():
    # what `cache --trace` and `trace convert` do first: list the formats, which imports
    # every reader module of scratchpipe_sim.traces (ratings and tabular among them)
    heavy = _heavy_after("from scratchpipe_sim.traces.io import READERS\n"
                         "READERS.names()\n"
                         "assert 'scratchpipe_sim.traces.ratings' in sys.modules\n"
                         "assert 'scratchpipe_sim.traces.tabular' in sys.modules")
    assert "pandas" not in heavy


def test_tabular_reader_still_reads_csv(tmp_path):
    # the reader imports pandas itself when it runs
    from scratchpipe_sim.traces.convert import ConvertOptions
    from scratchpipe_sim.traces.tabular import iter_rows

    p = tmp_path / "t.csv"
    p.write_text("sample,table,id\n0,0,5\n0,1,7\n1,0,2\n")
    blocks = list(iter_rows(p, "csv", ConvertOptions()))
    cols = [np.concatenate([b[k] for b in blocks]) for k in range(3)]
    assert [c.tolist() for c in cols] == [[0, 0, 1], [0, 1, 0], [5, 7, 2]]


#: a run as `scratchpipe-sim` makes it, in a fresh interpreter: [exit status, numba imported]
RUN_PROBE = """
import contextlib, io, json, sys
from scratchpipe_sim.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(sys.argv[1:])
print(json.dumps([rc, "numba" in sys.modules]))
"""
TINY = """
hardware: {preset: a100-gen4}
model:
  tables: {count: 2, rows: 400, dim: 16}
  pooling: 3
  batch_size: 32
  num_batches: 12
  warmup_batches: 2
  bottom_mlp: [13, 32, 16]
  top_mlp: [19, 16, 1]
trace: {distribution: zipf, alpha: 1.1}
cache: {capacity_rows: 500}
design_params: {scratchpipe: {lookahead: 5}}
seed: 5
"""
WALL = ("policy_wall_s", "simpy_wall_s")


def _run(cfg, out, env) -> list:
    done = subprocess.run([sys.executable, "-c", RUN_PROBE, "run", str(cfg), "-q", "--out",
                           str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _results(out) -> list[dict]:
    rows = json.loads((out / "results.json").read_text())
    rows = rows if isinstance(rows, list) else rows["results"]
    return [{k: v for k, v in r.items() if k not in WALL} for r in rows]


def test_a_fully_cached_run_imports_no_numba(tmp_path):
    # issue 26: the second run reads the trace and every replay from the cache, so it calls
    # no kernel and never imports Numba (the kernels' modules define them lazily,
    # traces/_jit.py); the first one compiles (or loads) them and the results are the same.
    # The compiled kernels are this process's (its numba_cache_folder, passed on as the
    # user's NUMBA_CACHE_DIR), the trace and replay caches a private folder's.
    import os

    import scratchpipe_sim

    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY)
    env = dict(os.environ, SCRATCHPIPE_CACHE_DIR=str(tmp_path / "cache"))
    env.setdefault("NUMBA_CACHE_DIR", scratchpipe_sim.numba_cache_folder())
    env.pop("NUMBA_DISABLE_JIT", None)
    assert _run(cfg, tmp_path / "cold", env) == [0, True]
    assert _run(cfg, tmp_path / "warm", env) == [0, False]
    assert _results(tmp_path / "warm") == _results(tmp_path / "cold")


LAZY_PROBE = """
import sys
import numpy as np
from scratchpipe_sim.policies import lru
from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.traces import _jit
from scratchpipe_sim.traces.csr_trace import Trace
assert "numba" not in sys.modules and not _jit.built()
assert isinstance(lru._lru_chunk, _jit.LazyKernel) and isinstance(lru.probe_pair, _jit.LazyKernel)
held = lru.probe_pair  # a reference taken before the build still works
rng = np.random.default_rng(3)
trace = Trace.from_batches([[rng.integers(0, 50, 16)] for _ in range(6)], [50])
r = run_cache(trace, "lru", 20)
assert r.hits + r.misses == r.accesses == 96 and r.hits > 0
from numba.core.registry import CPUDispatcher
assert _jit.built()
assert isinstance(lru._lru_chunk, CPUDispatcher) and isinstance(lru.probe_pair, CPUDispatcher)
assert held.dispatcher is lru.probe_pair and held.py_func is lru.probe_pair.py_func
from scratchpipe_sim.traces._jit import njit
@njit(cache=False)
def late(x):
    return x + 1
assert isinstance(late, CPUDispatcher) and late(1) == 2
print("ok")
"""


def test_lazy_kernels_become_numba_dispatchers_on_first_call():
    out = subprocess.run([sys.executable, "-c", LAZY_PROBE], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "ok"


READY_PROBE = """
import sys
from scratchpipe_sim.policies import lru
from scratchpipe_sim.traces import _jit
assert "numba" not in sys.modules and not _jit.built()
_jit.ready_target()
from numba.core.registry import CPUDispatcher
assert _jit.built() and isinstance(lru._lru_chunk, CPUDispatcher)
# the trivial kernel was called, so this process has Numba's CPU target set up
assert isinstance(_jit._first_kernel, CPUDispatcher) and _jit._first_kernel.signatures
_jit.ready_target()  # again: nothing more to do
print("ok")
"""


def test_ready_target_builds_the_kernels_and_calls_one_before_a_fork():
    """`fork_map` calls `ready_target` so forked workers inherit Numba's CPU target (~0.1 s
    a process otherwise pays on its first kernel call): every kernel is a dispatcher and
    the trivial kernel has been compiled or loaded."""
    out = subprocess.run([sys.executable, "-c", READY_PROBE], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "ok"
