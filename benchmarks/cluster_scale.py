"""Wall time of pricing one cluster iteration at 8, 64 and 1,024 GPUs (docs/performance.md).

    python benchmarks/cluster_scale.py [--batches N]

MLPerf DLRM-DCNv2 (model preset mlperf-dlrm-dcnv2, uniform ids) on dgx-h100-cluster with
HugeCTR's hybrid placement, 2,112 samples per GPU at 64 and 1,024 GPUs (MLPerf's 64-GPU
local batch), 6,912 at 8. The 1,024-GPU point is 2D sparse parallelism: shard groups of 64
ranks (one copy of the tables over 8 nodes), 16 data-parallel groups, and
`trace_scope: shard-group`: the trace is one group's batch (135,168 samples) and the 16
groups, statistically identical, are priced once. Each point runs in a fresh process with
an empty cache folder, so trace generation and every pass are timed (cold), then again
(warm: trace and replay columns read from the on-disk caches).
"""

from __future__ import annotations

import argparse
import json
import os
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=3)
    args = ap.parse_args()
    print("| GPUs | shard group | trace scope | global batch | ids per traced batch | "
          "cold s | warm s | model samples/s | exchange share |")
    print("|---|---|---|---|---|---|---|---|---|")
    for nodes, batch, group, scope in POINTS:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, SCRATCHPIPE_CACHE_DIR=cache)
            walls = []
            for _ in range(2):
                t = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(
                    [nodes, batch, group, scope, args.batches])], env=env, check=True,
                    capture_output=True, text=True).stdout
                walls.append(time.perf_counter() - t)
        row = json.loads(out.strip().splitlines()[-1])
        n = row["gpus"]
        glob = batch * (n // group if group else 1)
        print(f"| {n:,} | {group or n} | {scope} | {glob:,} | {batch * 214:,} | "
              f"{walls[0]:.1f} | {walls[1]:.1f} | {row['samples_per_s'] / 1e6:.2f} M | "
              f"{row['exchange_share']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
