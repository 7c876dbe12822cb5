"""Sensitivity pricing benchmark: SimPy seconds of a sensitivity's varied configs, A/B.

    python benchmarks/bench_sensitivity.py                      # this tree, fig4, 4 samples
    python benchmarks/bench_sensitivity.py --ab /path/to/base   # base vs this tree, alternating
    python benchmarks/bench_sensitivity.py --config configs/quickstart.yaml --samples 8

Why: a sensitivity point is ~87% SimPy (every varied config re-prices every design from
the same replays), so its wall time is the timing model's speed. This times
`price_all(..., jobs=1)` in one process (no fork, so the CPU seconds are the pricing's
alone) around the run's trace and replays, which are built first and not timed. With
`--ab`, each repeat runs the base tree and this tree in turn as subprocesses and the
report gives the medians and their ratio (same machine, same minute: the 2-core VM is
shared and noisy, so only such ratios are compared). A result digest per tree shows
whether both priced the same floats.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(config: str, samples: int, seed: int, point: int) -> dict:
    """Price one sensitivity in this process (a sweep: its `point`-th point, as `sensitivity
    SWEEP` analyses it); seconds in `price_all` and a digest."""
    import scratchpipe_sim.experiments.sensitivity_analysis as sens  # noqa: PLC0415
    from scratchpipe_sim.config import load_config  # noqa: PLC0415
    from scratchpipe_sim.config.model import Config  # noqa: PLC0415
    from scratchpipe_sim.errors import UserError  # noqa: PLC0415

    spent = [0.0]
    inner = sens.price_all

    def timed(pricer, cfgs, jobs=1):  # noqa: ANN001, ANN202 - a thin wrapper
        t0 = time.process_time()
        out = inner(pricer, cfgs, 1)
        spent[0] += time.process_time() - t0
        return out

    sens.price_all = timed
    try:
        res = sens.run_sensitivity(load_config(config), samples=samples, seed=seed, jobs=1)
    except UserError:  # a sweep: one of its points
        from scratchpipe_sim.experiments.bands import pinned_by  # noqa: PLC0415
        from scratchpipe_sim.experiments.spec import expand_points, load_experiment  # noqa: PLC0415
        from scratchpipe_sim.experiments.sweep_runner import point_trace  # noqa: PLC0415

        spec = load_experiment(config)
        pt = expand_points(spec)[point]
        cfg = Config.from_dict(pt.config, source="sweep point")
        res = sens.run_sensitivity(cfg, samples=samples, seed=seed, jobs=1,
                                   trace=point_trace(pt.config, cfg),
                                   pinned=pinned_by(spec.axes), skip_infeasible=True)
    blob = json.dumps([res.nominal, res.oat, res.lhs], sort_keys=True, default=str)
    return {"price_s": spent[0], "digest": hashlib.sha256(blob.encode()).hexdigest()[:16]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "experiments" / "fig4_hardware.yaml"))
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--point", type=int, default=0, help="a sweep: which point")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ab", metavar="BASE_TREE", help="a checkout to compare against")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one or not args.ab:
        print(json.dumps(one(args.config, args.samples, args.seed, args.point)))
        return
    times: dict[str, list[float]] = {"base": [], "new": []}
    digests: dict[str, set[str]] = {"base": set(), "new": set()}
    for _ in range(args.repeat):
        for name, tree in (("base", args.ab), ("new", str(ROOT))):
            env = dict(os.environ, PYTHONPATH=tree)
            out = subprocess.run(
                [sys.executable, str(ROOT / "benchmarks" / "bench_sensitivity.py"), "--one",
                 "--config", args.config, "--samples", str(args.samples),
                 "--seed", str(args.seed), "--point", str(args.point)],
                env=env, check=True, capture_output=True, text=True, cwd=tree).stdout
            r = json.loads(out.strip().splitlines()[-1])
            times[name].append(r["price_s"])
            digests[name].add(r["digest"])
    mb, mn = statistics.median(times["base"]), statistics.median(times["new"])
    print(json.dumps({"base_s": times["base"], "new_s": times["new"], "base_median": mb,
                      "new_median": mn, "speedup": mb / mn,
                      "same_results": digests["base"] == digests["new"]
                      and len(digests["new"]) == 1}, indent=1))


if __name__ == "__main__":
    main()
