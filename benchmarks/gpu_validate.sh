#!/usr/bin/env bash
# Calibrate this GPU machine and validate the timing model against it (about 7-11 minutes:
# steps 1-4 about 5-8, step 5 about one, capped at 180 s, step 6 capped at 120 s; its own
# time on a GPU is not measured yet). Under a 10-minute limit per command, run step 6 alone.
#
#   benchmarks/gpu_validate.sh            # writes into $OUT (the device tool's folder) or
#                                         # results/gpu_validate/
#   ONLY_PUBLISHED=1 benchmarks/gpu_validate.sh   # step 5 alone (about a minute)
#   PUBLISHED_ARGS="--scale 0.1" ...      # extra arguments of step 5
#   ONLY_SWEEP=1 benchmarks/gpu_validate.sh       # step 6 alone (at most 120 s)
#   SWEEP_ARGS="--iters 50" ...           # extra arguments of step 6
# Needs: an NVIDIA GPU, this package installed with the [cuda] extra (numba-cuda and CUDA
# bindings matching the driver). The device machine has no network: bring the environment.
# This workplace's H200 image already holds numba, numba-cuda, numpy, pandas, pyyaml, tqdm
# and matplotlib but not simpy; so, from the dev machine:
#   python3 -m pip install --target .gpu_deps "simpy>=4.0,<5"      # once (ignored by git)
#   device run: carry [".gpu_deps"], command "bash benchmarks/gpu_validate.sh"
# The script puts the checkout and .gpu_deps on PYTHONPATH, so no install is needed there.
# Steps (each under its own timeout):
#   1. calibrate -> configs/hardware/measured-$NAME.yaml (+ .json raw samples)
#   2. validate benchmarks/gpu_validate.yaml with the measured preset (GPU run), the model
#      told that planning is one thread at the measured ns per id
#   3. the same measured stage times against the stock preset (no GPU rerun)
#   4. a markdown table for docs/validation.md
#   5. the published FBGEMM TBE shapes (T1.2 DEVICE, T1.10 MANAGED with 2 of its 10 tables,
#      which fit this machine's host memory) measured with this project's numba-cuda
#      kernels, next to the model's prediction for the same ids (h200-gen5):
#      published_shapes.json / .md, the table appended to validation_table.md
#   6. the TBE batch sweep (issue 43: is a TBE call's fixed cost GPU time or host time?):
#      forward and backward at batch 256-65,536 (4 tables x 100k rows, D 128), DEVICE and
#      MANAGED, as GPU time (CUDA events behind a blocking kernel) and host wall time, each
#      fitted to intercept + slope x lookups, next to the model's (h200-gen5):
#      tbe_batch_sweep.json / .md, the table appended to validation_table.md
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD:$PWD/.gpu_deps${PYTHONPATH:+:$PYTHONPATH}"
NAME=${NAME:-h200}
DEST=${OUT:-results/gpu_validate}
mkdir -p "$DEST"
log() { echo "[gpu_validate $(date -u +%H:%M:%S)] $*"; }

if ! "$PY" -c "import scratchpipe_sim, numba_cuda" 2>/dev/null; then
    echo "gpu_validate: '$PY' cannot import scratchpipe_sim and numba_cuda;" \
         "install the package with the [cuda] extra first" >&2
    exit 2
fi
unset NUMBA_ENABLE_CUDASIM
"$PY" -c "from scratchpipe_sim.cuda.runtime import gpu_status as g; s = g(); print(s.reason)
raise SystemExit(0 if s.usable else 2)" || { echo "gpu_validate: no usable GPU" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$DEST/gpu.txt"

step() {  # step LABEL MODULE SECONDS [ARGS...]: one `python -m` step, its table appended
    local label=$1 mod=$2 secs=$3
    shift 3
    log "$label (timeout $secs s)"
    timeout "$secs" "$PY" -m "scratchpipe_sim.cuda.$mod" --out "$DEST" "$@" \
        2>"$DEST/$mod.log" > "$DEST/$mod.txt"
    local rc=$?
    tail -n 3 "$DEST/$mod.log" >&2
    [ $rc -eq 0 ] || echo "gpu_validate: $label exit $rc (see $DEST/$mod.log)" >&2
    if [ -s "$DEST/$mod.md" ]; then
        { echo; cat "$DEST/$mod.md"; } | tee -a "$DEST/validation_table.md"
    fi
    return $rc
}
# shellcheck disable=SC2086  # PUBLISHED_ARGS and SWEEP_ARGS are lists of words
published_shapes() { step "published shapes" published_shapes 180 ${PUBLISHED_ARGS:-}; }
# shellcheck disable=SC2086
batch_sweep() { step "TBE batch sweep" tbe_batch_sweep 120 ${SWEEP_ARGS:-}; }
if [ -n "${ONLY_PUBLISHED:-}" ]; then
    published_shapes
    rc=$?
    log "done: $DEST"
    exit $rc
fi
if [ -n "${ONLY_SWEEP:-}" ]; then
    batch_sweep
    rc=$?
    log "done: $DEST"
    exit $rc
fi

PRESET=configs/hardware/measured-$NAME.yaml
log "calibrate"
timeout 300 "$PY" -m scratchpipe_sim calibrate --base h200-gen5 --name "measured-$NAME" \
    --out "$PRESET" 2>&1 | tee "$DEST/calibrate.txt"
[ -f "$PRESET" ] || { echo "gpu_validate: calibrate wrote no preset" >&2; exit 1; }
cp "$PRESET" "${PRESET%.yaml}.json" "$DEST/" 2>/dev/null

# the reference planner is one host thread: tell the model so, at its measured cost
PLAN_NS=$("$PY" -c "import json,sys; v=json.load(open(sys.argv[1])).get('plan_ns_per_id')
print(round(v, 2) if v else 20.0)" "${PRESET%.yaml}.json")
log "validate (measured preset, planner ${PLAN_NS} ns/id on 1 thread)"
timeout 300 "$PY" -m scratchpipe_sim validate benchmarks/gpu_validate.yaml \
    --set "hardware.preset=measured-$NAME" --set cache.plan_threads=1 \
    --set "cache.plan_ns_per_id=$PLAN_NS" --out "$DEST/validate-measured.csv" 2>&1 \
    | tee "$DEST/validate-measured.txt"
[ -f "$DEST/validate-measured.json" ] || { echo "gpu_validate: no measurement" >&2; exit 1; }

log "validate (stock preset, same measurement)"
"$PY" -m scratchpipe_sim validate benchmarks/gpu_validate.yaml \
    --set cache.plan_threads=1 --set "cache.plan_ns_per_id=$PLAN_NS" \
    --measured "$DEST/validate-measured.json" --out "$DEST/validate-stock.csv" 2>&1 \
    | tee "$DEST/validate-stock.txt"

"$PY" - "$DEST" <<'PYEOF' | tee "$DEST/validation_table.md"
import csv, sys
from pathlib import Path
d = Path(sys.argv[1])
print("| stage | measured (us) | predicted, measured preset (us) | error | "
      "predicted, stock h200-gen5 (us) | error |")
print("|---|---:|---:|---:|---:|---:|")
rows = {}
for tag in ("measured", "stock"):
    p = d / f"validate-{tag}.csv"
    if p.exists():
        for r in csv.DictReader(open(p)):
            rows.setdefault(r["stage"], {})[tag] = r
for stage, r in rows.items():
    m = r.get("measured") or r.get("stock")
    cells = [stage, f"{float(m['measured_ns']) / 1e3:.1f}"]
    for tag in ("measured", "stock"):
        x = r.get(tag)
        cells += ([f"{float(x['predicted_ns']) / 1e3:.1f}", f"{float(x['error_pct']):+.1f}%"]
                  if x else ["-", "-"])
    print("| " + " | ".join(cells) + " |")
PYEOF
published_shapes
batch_sweep
log "done: $DEST"
