"""Wall time of pricing one cluster iteration at 8, 64 and 1,024 GPUs (docs/performance.md).

    python benchmarks/cluster_scale.py [--batches N] [--gpus 8 64 1024]

MLPerf DLRM-DCNv2 (model preset mlperf-dlrm-dcnv2, uniform ids) on dgx-h100-cluster with
HugeCTR's hybrid placement, 2,112 samples per GPU at 64 and 1,024 GPUs (MLPerf's 64-GPU
local batch), 6,912 at 8. The 1,024-GPU point is 2D sparse parallelism: shard groups of 64
ranks (one copy of the tables over 8 nodes), 16 data-parallel groups, and
`trace_scope: shard-group`: the trace is one group's batch (135,168 samples) and the 16
groups, statistically identical, are priced once. Each point runs three times, each in a
fresh process on one cache folder: "first" (the folder empty: the Numba kernels compiled,
the trace generated, every pass made), "cold" (every file but the compiled kernels removed:
what a user's second config sees, its kernels cached under the same source state) and
"warm" (trace, replay and per-rank columns read from the on-disk caches). Each gives the
wall and the child's CPU seconds (user + system: on a shared machine the wall is inflated
by other load, the CPU time much less).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

POINTS = (  # (nodes, batch of the trace, shard group or None, trace scope)
    (1, 55_296, None, "global"),
    (8, 135_168, None, "global"),
    (128, 135_168, 64, "shard-group"),
)

CHILD = """
import json, sys
from scratchpipe_sim.config import load_config
from scratchpipe_sim.timing import simulate
nodes, batch, group, scope, batches = json.loads(sys.argv[1])
cluster = {"sharding": "hybrid", "trace_scope": scope}
if group:
    cluster["shard_group"] = group
cfg = load_config({"name": "scale", "seed": 1,
    "hardware": {"preset": "dgx-h100-cluster", "cluster": {"nodes": nodes}},
    "model": {"preset": "mlperf-dlrm-dcnv2", "batch_size": batch, "num_batches": batches,
              "warmup_batches": 1},
    "trace": {"preset": "uniform"}, "cache": {"capacity_rows": 1000},
    "design_params": {"cluster": cluster}, "designs": ["cluster"]})
row = simulate(cfg, ["cluster"])[0]
print(json.dumps({k: row[k] for k in ("gpus", "samples_per_s", "exchange_share")}))
"""


def timed_child(args: list[str], env: dict[str, str]) -> tuple[str, float, float]:
    """A child's stdout, wall seconds and CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, check=True,
                         capture_output=True, text=True).stdout
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, wall, cpu


def keep_only_kernels(cache: str) -> None:
    """Remove every entry of the cache folder but the compiled kernels (`numba/`)."""
    for entry in os.listdir(cache):
        if entry != "numba":
            path = os.path.join(cache, entry)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--gpus", type=int, nargs="*", default=None,
                    help="only these points (8, 64, 1024)")
    args = ap.parse_args()
    print("| GPUs | shard group | trace scope | global batch | ids per traced batch | "
          "first s (CPU) | cold s (CPU) | warm s (CPU) | model samples/s | exchange share |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for nodes, batch, group, scope in POINTS:
        if args.gpus and nodes * 8 not in args.gpus:
            continue
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, SCRATCHPIPE_CACHE_DIR=cache)
            env.pop("NUMBA_CACHE_DIR", None)  # the kernels go to the cache folder
            times = []
            for run in ("first", "cold", "warm"):
                if run == "cold":
                    keep_only_kernels(cache)
                out, wall, cpu = timed_child([json.dumps(
                    [nodes, batch, group, scope, args.batches])], env)
                times.append(f"{wall:.1f} ({cpu:.1f})")
        row = json.loads(out.strip().splitlines()[-1])
        n = row["gpus"]
        glob = batch * (n // group if group else 1)
        print(f"| {n:,} | {group or n} | {scope} | {glob:,} | {batch * 214:,} | "
              f"{' | '.join(times)} | {row['samples_per_s'] / 1e6:.2f} M | "
              f"{row['exchange_share']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
