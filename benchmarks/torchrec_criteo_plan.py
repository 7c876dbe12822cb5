"""TorchRec's planner on Criteo Terabyte's 26 tables, as shipped and simulator-backed (issue 45).

Not a test: run it by hand and record the output in docs/validation.md ("TorchRec's planner,
sized and priced by the simulator").

    python benchmarks/torchrec_criteo_plan.py                          # 1 GPU
    python benchmarks/torchrec_criteo_plan.py --world-size 2 --json

What `scratchpipe-sim torchrec-plan configs/criteo-terabyte-plan.yaml` does, with one change
that lets the statistics fit this machine: FBGEMM's cache is replayed at the load factors of
`torchrec_kernel_picks.LOAD_FACTORS` (up to 0.2) instead of `torchrec_stats.LOAD_FACTORS`
(up to 0.75: a replay of a 40M-row table at 0.75 holds 30M rows). Prints both plans, each
priced by both estimators, the table differences, wall seconds and the peak memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "criteo-terabyte-plan.yaml"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.experiments import torchrec_planner as tp
    from scratchpipe_sim.experiments.torchrec_kernel_picks import LOAD_FACTORS
    from scratchpipe_sim.experiments.torchrec_stats import trace_stats
    from scratchpipe_sim.timing import build_trace

    t0 = time.perf_counter()
    cfg = load_config(args.config)
    trace = build_trace(cfg)
    t1 = time.perf_counter()
    stats = trace_stats(trace, load_factors=LOAD_FACTORS)
    t2 = time.perf_counter()
    a, b = tp.plan_both(cfg, stats, args.world_size)
    t3 = time.perf_counter()
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if args.json:
        print(json.dumps({"torchrec": a.as_json(), "simulator": b.as_json(),
                          "differences": tp.differences(a, b)}, indent=1))
    else:
        print(tp.format_plans(a, b))
        print("\n".join(tp.differences(a, b)) or "both planners place every table the same")
    print(f"trace {t1 - t0:.1f} s ({trace.num_batches} batches x {trace.batch_size} samples x "
          f"{trace.num_tables} tables), statistics {t2 - t1:.1f} s, planners {t3 - t2:.1f} s; "
          f"peak RSS {peak_gib:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
