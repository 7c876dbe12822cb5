"""`run` on a memory-mapped `.sptrace` with every pass chunked and the next uses on disk
(issue 41) gives every design's row bit for bit as the in-memory run, at chunk sizes of one
batch, an odd size and more than the trace; and under an address-space limit that the
in-memory next uses exceed, the streamed run completes."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from small_configs import TWO_SMALL_TABLES

from scratchpipe_sim.config import load_config
from scratchpipe_sim.policies import engine
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.runner import build_trace, simulate
from scratchpipe_sim.traces import csr_trace
from scratchpipe_sim.traces.store import read_trace, write_trace

#: one batch (each chunk holds at least one), an odd size, more than the trace
CHUNKS = ("1", "37", str(1 << 30))


def _rows(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("_wall_s")} for r in rows]


def test_every_design_streamed_equals_in_memory(tmp_path, monkeypatch):
    cfg = load_config({**TWO_SMALL_TABLES, "hardware": {"preset": "a100-gen4"}})
    names = DESIGNS.names()
    trace = build_trace(cfg, cache=False)
    want = _rows(simulate(cfg, names, trace=trace, replay_cache=False))
    mapped = read_trace(write_trace(trace, tmp_path / "t.sptrace"))
    assert mapped.mapped and not trace.mapped
    monkeypatch.setenv(engine.NEXT_USE_MEMORY_ENV, "0")
    monkeypatch.setattr(csr_trace, "_REBASE_IN_MEMORY", 0)  # the timed slice spilled too
    for chunk in CHUNKS:
        monkeypatch.setenv(csr_trace.CHUNK_ENV, chunk)
        got = _rows(simulate(cfg, names, trace=mapped, replay_cache=False))
        assert got == want, chunk


#: the child: imports everything, sets RLIMIT_AS (argv[2] bytes, 0: none), runs `simulate`
#: on the config (argv[1]) and prints its rows and the peak address space (VmPeak)
CHILD = """
import json, resource, sys
from scratchpipe_sim.config import load_config
from scratchpipe_sim.timing.runner import simulate
cfg = load_config(sys.argv[1])
limit = int(sys.argv[2])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    rows = simulate(cfg, replay_cache=False)
except MemoryError:
    print(json.dumps({"memory_error": True}))
    sys.exit(0)
peak = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmPeak"))
keep = ("hits", "misses", "fills", "evictions", "iter_ns_mean")
print(json.dumps({"peak_kib": peak, "rows": [{k: r.get(k) for k in keep} for r in rows]}))
"""
#: accesses of the limited run's trace (8 tables x 4,000 rows, batch 512, pooling 20:
#: 81,920 a batch); next uses in memory take 4 B each, 42 MB here
BATCHES = 128
#: what the limit allows above the streamed run's own peak address space
MARGIN_BYTES = 12 << 20


def _child(cfg: Path, limit: int, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(cfg), str(limit)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 or limit, out.stderr[-2000:]
    if out.returncode != 0:  # a limit hit outside numpy (an import, a thread) says so too
        return {"memory_error": True, "stderr": out.stderr[-500:]}
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux (VmPeak)")
def test_a_streamed_run_completes_under_a_limit_the_in_memory_one_exceeds(tmp_path):
    from scratchpipe_sim.traces.generators import generate_trace

    trace = generate_trace("zipf", [4000] * 8, 512, BATCHES, [20] * 8, 3, alpha=1.05)
    path = write_trace(trace, tmp_path / "big.sptrace")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "hardware": {"preset": "a100-gen4"}, "seed": 3,
        "model": {"tables": {"count": 8, "rows": 4000, "dim": 16}, "pooling": 20,
                  "batch_size": 512, "num_batches": BATCHES - 4, "warmup_batches": 2,
                  "bottom_mlp": [13, 16], "top_mlp": [52, 1]},
        "trace": {"path": str(path)}, "cache": {"capacity_rows": 30000},
        "designs": ["scratchpipe"],
        "design_params": {"scratchpipe": {"lookahead": 3, "pipeline": [
            ["plan"], ["collect", "exchange", "insert"], ["train"]]}}}))
    base = {**os.environ, csr_trace.CHUNK_ENV: str(1 << 16),
            "PYTHONPATH": os.pathsep.join(sys.path)}
    streamed = {**base, engine.NEXT_USE_MEMORY_ENV: "0"}
    in_memory = {**base, engine.NEXT_USE_MEMORY_ENV: str(1 << 40)}  # today's in-memory path
    _child(cfg, 0, streamed)  # compiles what is not cached yet
    free = _child(cfg, 0, streamed)
    limit = free["peak_kib"] * 1024 + MARGIN_BYTES
    assert resource.getrlimit(resource.RLIMIT_AS)[0] in (resource.RLIM_INFINITY,) or \
        resource.getrlimit(resource.RLIMIT_AS)[0] > limit
    limited = _child(cfg, limit, streamed)
    assert limited.get("rows") == free["rows"]  # completes, with the same results
    assert _child(cfg, limit, in_memory).get("memory_error")  # next uses in memory: no
