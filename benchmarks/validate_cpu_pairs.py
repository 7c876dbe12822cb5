"""Repeated `calibrate --cpu` + `validate --cpu` pairs: the model's error per CPU stage with
its spread between runs, and how much each calibrated constant moved.

    python benchmarks/validate_cpu_pairs.py --pairs 3 --out /tmp/pairs
    python benchmarks/validate_cpu_pairs.py --pairs 3 --taskset 0 --threads 1

"vs drift": each stage's error relative to the drift probe's (validate's host.uniform_gather:
the gather the calibration priced, measured during the validation).

Why: on a shared host one pair is one draw — the neighbours' memory traffic moves a
gather's time by 20-40% between runs minutes apart, on both sides (the calibration's
constants and the validation's measurements). Each pair is a fresh calibration followed
by a validation against it (never fit and check on the same measurement: calibration runs
micro-benchmarks on generated ids, validation the config's trace). The summary gives, per
stage, the median error over the pairs and its range; per constant, its range.
Every file is kept under --out (preset, raw samples, validation JSON, one log per pair).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: constants reported per pair (curves at 256 B rows)
CONSTANTS = ("core_dram_GBps", "core_llc_GBps", "core_window_rows", "llc_MiB",
             "embedding_op_GBps", "aggregate_ns_per_lookup", "aggregate_onchip_ns_per_lookup",
             "aggregate_ns_per_row",
             "plan_ns_per_id", "plan_ns_per_eviction")


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _at_256(value) -> float:
    if isinstance(value, list):
        xs, ys = zip(*value, strict=True)
        return float(np.interp(256.0, xs, ys))
    return float(value)


def run_pair(k: int, args: argparse.Namespace, out: Path) -> dict:
    pin = ["taskset", "-c", args.taskset] if args.taskset is not None else []
    cli = [*pin, sys.executable, "-m", "scratchpipe_sim"]
    preset = out / f"pair{k}.yaml"
    t0, load0 = time.time(), _load()
    with open(out / f"pair{k}.log", "w") as log:
        subprocess.run([*cli, "calibrate", "--cpu", "--threads", args.threads, "--base",
                        args.base, "--statistic", args.statistic, "--out", str(preset)],
                       check=True, stdout=log,
                       stderr=subprocess.STDOUT, cwd=ROOT)
        res = subprocess.run([*cli, "validate", "--cpu", args.config, "--set",
                              f"hardware.preset={preset}", "--reps", str(args.reps),
                              "--statistic", args.statistic, "--json"],
                             check=True, stdout=subprocess.PIPE, stderr=log, text=True,
                             cwd=ROOT)
    # pair{k}.json holds calibrate's raw samples (written beside the preset)
    (out / f"pair{k}.validate.json").write_text(res.stdout)
    stages = {r["stage"]: r for r in json.loads(res.stdout)}
    cpu = yaml.safe_load(preset.read_text())["cpu"]
    return {"stages": stages, "constants": {c: _at_256(cpu[c]) for c in CONSTANTS if c in cpu},
            "wall_s": time.time() - t0, "load": (load0, _load())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--base", default="a100-gen4")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--taskset", default=None, help="CPU list to pin every command to")
    ap.add_argument("--statistic", choices=("median", "best"), default="median",
                    help="passed to both commands (the estimator over repetitions)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = []
    for k in range(args.pairs):
        p = run_pair(k, args, args.out)
        pairs.append(p)
        print(f"pair {k}: {p['wall_s']:.0f} s, load {p['load'][0]:.1f} -> {p['load'][1]:.1f}: "
              + ", ".join(f"{s.split('.')[-1]} {r['error_pct']:+.0f}%"
                          for s, r in p["stages"].items()), flush=True)
    print("\n| stage | error % per pair | median | range | vs drift % per pair | median | "
          "measured ms per batch (min-max) |")
    print("|---|---|---|---|---|---|---|")
    for stage in pairs[0]["stages"]:
        err = [p["stages"][stage]["error_pct"] for p in pairs]
        adj = [p["stages"][stage].get("drift_adjusted_pct") for p in pairs]
        adj_text = ("" if None in adj else
                    f"{' / '.join(f'{e:+.0f}' for e in adj)} | {np.median(adj):+.0f}")
        ms = [p["stages"][stage]["measured_ns"] / 1e6 for p in pairs]
        print(f"| {stage} | {' / '.join(f'{e:+.0f}' for e in err)} | {np.median(err):+.0f} | "
              f"{min(err):+.0f} .. {max(err):+.0f} | {adj_text or ' | '} | "
              f"{min(ms):.2f}-{max(ms):.2f} |")
    print("\n| constant (at 256 B) | per pair | spread (max/min) |")
    print("|---|---|---|")
    for c in CONSTANTS:
        v = [p["constants"][c] for p in pairs if c in p["constants"]]
        if v:
            print(f"| {c} | {' / '.join(f'{x:g}' for x in v)} | "
                  f"{max(v) / min(v) if min(v) > 0 else float('nan'):.2f} |")
    (args.out / "summary.json").write_text(json.dumps(pairs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
