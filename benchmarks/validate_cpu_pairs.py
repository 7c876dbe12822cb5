"""Repeated `calibrate --cpu` + `validate --cpu` pairs: the model's error per CPU stage with
its spread between runs, and how much each calibrated constant moved.

    python benchmarks/validate_cpu_pairs.py --pairs 3 --out /tmp/pairs
    python benchmarks/validate_cpu_pairs.py --pairs 3 --taskset 0 --threads 1

With `--against fbgemm` each pair is `calibrate --cpu --kernel fbgemm` followed by
`validate --cpu CONFIG --against fbgemm` on issue 43's three shapes (CASES: the
quickstart, a small-table config, dim 128 at pooling 1) for every `--optimizers`, and the
summary is one row per (case, optimizer, stage): predicted / measured per pair.

    python benchmarks/validate_cpu_pairs.py --against fbgemm --pairs 2 --statistic best \
        --reps 7 --out /tmp/fb

"vs drift": each stage's error relative to the drift probe's (validate's host.uniform_gather:
the gather the calibration priced, measured during the validation; it mixes the host's
drift with the model's own error on uniform gathers).

With `--against fbgemm` the host's speed is also measured against itself: the host
reference (scratchpipe_sim/cpu/host_reference.py) timed beside calibrate's points and beside
validate's passes. The summary prints the raw ratios, the host-adjusted ones (predicted x
t_ref now / t_ref at calibration / measured), the reference per pair beside the
calibration points' common-mode change (each pair's points over pair 0's, median per
optimizer), and how many rounds have all stages within 20%, raw and adjusted.

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


#: --against fbgemm: issue 43's configs, as --set overrides of configs/quickstart.yaml
#: (d128p1's dense layers sized for dim 128: the interaction dot needs the bottom MLP's
#: last width = dim and the top MLP's first = D + F(F+1)/2)
CASES: dict[str, tuple[str, ...]] = {
    "quickstart": (),
    "small": ("model.tables.rows=250000", "model.batch_size=1024", "model.pooling=10"),
    "d128p1": ("model.tables.rows=250000", "model.tables.dim=128", "model.pooling=1",
               "model.batch_size=4096", "model.bottom_mlp=[13,512,256,128]",
               "model.top_mlp=[164,512,256,1]"),
}


def run_fbgemm_pair(k: int, args: argparse.Namespace, out: Path) -> dict:
    """calibrate --cpu --kernel fbgemm, then validate --against fbgemm per case and
    optimizer: {(case, optimizer): [stage rows]}."""
    pin = ["taskset", "-c", args.taskset] if args.taskset is not None else []
    cli = [*pin, sys.executable, "-m", "scratchpipe_sim"]
    preset = out / f"pair{k}.yaml"
    t0, load0 = time.time(), _load()
    res: dict = {}
    with open(out / f"pair{k}.log", "w") as log:
        subprocess.run([*cli, "calibrate", "--cpu", "--threads", args.threads, "--base",
                        args.base, "--kernel", "fbgemm", "--quick", "--statistic",
                        args.statistic, "--out", str(preset)],
                       check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        for case, sets in CASES.items():
            for opt in args.optimizers.split(","):
                over = [x for s in (*sets, f"hardware.preset={preset}",
                                    f"model.optimizer={opt}") for x in ("--set", s)]
                r = subprocess.run([*cli, "validate", "--cpu", args.config, *over,
                                    "--against", "fbgemm", "--reps", str(args.reps),
                                    "--statistic", args.statistic, "--json"],
                                   check=True, stdout=subprocess.PIPE, stderr=log,
                                   text=True, cwd=ROOT)
                (out / f"pair{k}.{case}.{opt}.json").write_text(r.stdout)
                res[f"{case} {opt}"] = json.loads(r.stdout)
                print(f"pair {k} {case} {opt}: " + ", ".join(
                    f"{x['stage']} " + ("-" if x["ratio"] is None else f"{x['ratio']:.2f}")
                    for x in res[f"{case} {opt}"]), flush=True)
    print(f"pair {k}: {time.strftime('%H:%M:%S', time.gmtime(t0))}-"
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {load0:.1f} -> "
          f"{_load():.1f}", flush=True)
    return {"cases": res, "wall_s": time.time() - t0, "load": (load0, _load()),
            "start_utc": time.strftime("%H:%M:%S", time.gmtime(t0))}


#: the stages the goal counts (per case): 3 configs x 3 optimizers x 2 = 18
GOAL_STAGES = ("cpu_gather", "cpu_update")
#: within the goal's band: predicted / measured in [1 - BAND, 1 + BAND]
BAND = 0.20
REFERENCE_STAGE = "host.reference"


def _within(x: float | None) -> bool:
    return x is not None and abs(x - 1.0) <= BAND


def _bold(x: float | None) -> str:
    if x is None:
        return "-"
    return f"**{x:.2f}**" if _within(x) else f"{x:.2f}"


def _stage_rows(rows: list[dict]) -> dict[str, dict]:
    return {r["stage"]: r for r in rows}


def fbgemm_summary(pairs: list[dict]) -> None:
    """Raw table, host-adjusted table, the reference per pair and the rounds counted."""
    keys = list(pairs[0]["cases"])
    stages = [r["stage"] for r in pairs[0]["cases"][keys[0]] if r["stage"] != REFERENCE_STAGE]
    print("\n| config, optimizer | stage | predicted / measured ms (ratio) per pair | "
          "spread % | faults per call |")
    print("|---|---|---|---|---|")
    for key in keys:
        for stage in stages:
            per = [_stage_rows(p["cases"][key])[stage] for p in pairs]
            print(f"| {key} | {stage} | "
                  + " ; ".join(f"{x['predicted_ms']:.2f} / {x['measured_ms']:.2f} "
                               f"({_bold(x['ratio'])})" for x in per)
                  + " | " + " / ".join(f"{x['spread_pct']:.0f}" for x in per)
                  + " | " + " / ".join(f"{x.get('faults_per_call', 0):.0f}" for x in per)
                  + " |")
    print("\nHost-adjusted (predicted x t_ref now / t_ref at calibration / measured; raw in "
          "brackets; host = the reference's now / calibration):\n")
    print("| config, optimizer | " + " | ".join(f"{s} per pair" for s in stages)
          + " | host ratio per pair |")
    print("|---|" + "---|" * (len(stages) + 1))
    for key in keys:
        rows = [_stage_rows(p["cases"][key]) for p in pairs]
        cells = [" / ".join(f"{_bold(r[s].get('host_adjusted'))} ({r[s]['ratio']:.2f})"
                            for r in rows) for s in stages]
        host = " / ".join("-" if r.get(REFERENCE_STAGE, {}).get("ratio") is None
                          else f"{r[REFERENCE_STAGE]['ratio']:.2f}" for r in rows)
        print(f"| {key} | " + " | ".join(cells) + f" | {host} |")
    for what, field in (("raw", "ratio"), ("host-adjusted", "host_adjusted")):
        ok = []
        for k, p in enumerate(pairs):
            vals = [_stage_rows(p["cases"][key])[s].get(field) for key in keys
                    for s in GOAL_STAGES]
            inside = sum(_within(v) for v in vals)
            ok.append(inside == len(vals))
            print(f"pair {k} {what}: {inside} of {len(vals)} stages within {BAND:.0%}")
        print(f"rounds with every stage within {BAND:.0%}, {what}: {sum(ok)} of {len(ok)}")


def reference_tracking(pairs: list[dict], out: Path) -> None:
    """The reference at each calibration beside the calibration points' common-mode change:
    each pair's update points over pair 0's (backward and forward seconds, median over an
    optimizer's points), from the raw JSON calibrate wrote (pairK.json)."""
    raw = []
    for k in range(len(pairs)):
        f = out / f"pair{k}.json"
        raw.append(json.loads(f.read_text()) if f.exists() else {})
    if not all(r.get("host_reference") for r in raw):
        print("\n(no host reference in the calibrations' raw JSON)")
        return

    def ref_ms(r: dict, block: str | None = None) -> float:
        h = r["host_reference"]
        t = np.add(h["forward_s"], h["backward_s"])
        if block is not None:
            t = t[[b == block for b in h["blocks"]]]
        return float(np.min(t) if h["statistic"] == "best" else np.median(t)) * 1e3

    opts = list(dict.fromkeys(u[0] for u in raw[0]["update"]))
    print("\n| pair | t_ref at calibration ms (over pair 0) | per optimizer block: t_ref "
          "over pair 0; points' backward / forward median over pair 0 |")
    print("|---|---|---|")
    base = raw[0]
    for k, r in enumerate(raw):
        cells = []
        for opt in opts:
            a = [u for u in base["update"] if u[0] == opt]
            b = [u for u in r["update"] if u[0] == opt]
            bwd = np.median([y[8] / x[8] for x, y in zip(a, b, strict=True)])
            fwd = np.median([y[9] / x[9] for x, y in zip(a, b, strict=True)])
            cells.append(f"{opt}: {ref_ms(r, opt) / ref_ms(base, opt):.2f}; "
                         f"{bwd:.2f} / {fwd:.2f}")
        print(f"| {k} | {ref_ms(r):.3f} ({ref_ms(r) / ref_ms(base):.2f}) | "
              + " ; ".join(cells) + " |")


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
    ap.add_argument("--against", choices=("fbgemm",), default=None,
                    help="pairs of calibrate --kernel fbgemm + validate --against fbgemm "
                         "on CASES")
    ap.add_argument("--optimizers", default="sgd,rowwise-adagrad,adagrad",
                    help="--against fbgemm: comma-separated optimizers")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.against == "fbgemm":
        fb = [run_fbgemm_pair(k, args, args.out) for k in range(args.pairs)]
        fbgemm_summary(fb)
        reference_tracking(fb, args.out)
        (args.out / "summary.json").write_text(json.dumps(fb, indent=1))
        return 0
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
