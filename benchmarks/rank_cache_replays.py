"""Wall time of a cluster point with per-rank caches, cold vs warm (docs/performance.md).

    python benchmarks/rank_cache_replays.py [--nodes 8] [--group 64] [--batch 8192]
                                            [--rank-cache scratchpipe] [--repeats 2]

Fig10's config (experiments/fig10_scale_out.yaml's base: MLPerf DLRM-DCNv2's shape, rows
/ 100, hybrid placement, shard-group trace) at one point, default its scratchpipe point at
64 GPUs. Each run is a fresh process on one cache folder: "first" (the folder empty:
kernels compiled, trace generated), then per repeat "replays cold" (the `replays/` folder
removed: the trace and kernels cached, the per-rank counts and each rank's replay made
again, which every run paid before they were cached) and "warm" (all read back). Wall and
the child's CPU seconds (user + system); the min over repeats.
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

CHILD = """
import json, sys, yaml
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.timing import simulate
path, nodes, group, batch, mode = json.loads(sys.argv[1])
base = yaml.safe_load(open(path))["base"]
cfg = load_config(deep_merge(base, {"name": "rc", "designs": ["cluster"],
    "hardware": {"cluster": {"nodes": nodes}}, "model": {"batch_size": batch},
    "design_params": {"cluster": {"shard_group": group, "rank_cache": mode}}}))
row = simulate(cfg, ["cluster"])[0]
print(json.dumps({k: row[k] for k in ("gpus", "samples_per_s", "rank_cache_hit_ratio")}))
"""


def timed_child(arg: str, env: dict[str, str]) -> tuple[str, float, float]:
    """A child's stdout, wall seconds and CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, arg], env=env, check=True,
                         capture_output=True, text=True).stdout
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--rank-cache", default="scratchpipe")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "experiments", "fig10_scale_out.yaml")
    arg = json.dumps([path, args.nodes, args.group, args.batch, args.rank_cache])
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, SCRATCHPIPE_CACHE_DIR=cache)
        env.pop("NUMBA_CACHE_DIR", None)
        out, wall, cpu = timed_child(arg, env)
        print(f"first: {wall:.1f} s ({cpu:.1f} CPU)  {out.strip()}")
        cold, warm = [], []
        for _ in range(args.repeats):
            shutil.rmtree(os.path.join(cache, "replays"), ignore_errors=True)
            cold.append(timed_child(arg, env)[1:])
            out, wall, cpu = timed_child(arg, env)
            warm.append((wall, cpu))
            print(f"replays cold: {cold[-1][0]:.1f} s ({cold[-1][1]:.1f} CPU)  "
                  f"warm: {wall:.1f} s ({cpu:.1f} CPU)  {out.strip()}", flush=True)
        c, w = min(cold), min(warm)
        print(f"min: replays cold {c[0]:.1f} s ({c[1]:.1f} CPU), warm {w[0]:.1f} s "
              f"({w[1]:.1f} CPU): {c[0] / w[0]:.2f}x wall, {c[1] / w[1]:.2f}x CPU")


if __name__ == "__main__":
    main()
