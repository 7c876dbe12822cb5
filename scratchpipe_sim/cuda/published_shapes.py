"""The published FBGEMM TBE shapes measured with this project's own numba-cuda kernels:
`python -m scratchpipe_sim.cuda.published_shapes`, its rows and its report.

Why: the GPU timing model is checked against NVIDIA's recsys-examples runs of FBGEMM TBE on
H100 (issue 24; T1.2 = `DEVICE`, T1.10 = `MANAGED`). When a GPU is lent, this measures the
same shapes on it (10 tables, D 128 fp32, one id per sample, 104,857 samples per table,
Zipf 1.05 ids; forward and fused EXACT_SGD backward timed apart with CUDA events, mean of
`iters` iterations after warm-up), so the published table gains a row measured here, next
to the model's prediction for the very same ids (the ids come from the model's own trace).

The jobs, one module each: `tbe_shapes` (the shapes, read from the published points, and
the prediction), `tbe_kernels` (forward and backward kernels), `tbe_backward_plan` (the
host sort), `tbe_tables` (DEVICE and MANAGED tables), `tbe_measure` (the timed loop).

Importing this module does not import numba.cuda (the CLI must answer "no GPU" first, and a
test must be able to switch to the simulator); the kernels are built on first use.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from scratchpipe_sim.cuda.runtime import gpu_status
from scratchpipe_sim.cuda.tbe_backward_plan import CHUNK_ROWS
from scratchpipe_sim.cuda.tbe_measure import PhaseTimes, measure
from scratchpipe_sim.cuda.tbe_shapes import (
    PLACEMENT_POINTS,
    SEED,
    RunShape,
    check_host_memory,
    predict,
    published,
)
from scratchpipe_sim.cuda.tbe_tables import release_gpu_memory


def _mean(xs: list[float]) -> float | None:
    return float(np.mean(xs)) if xs else None

def result_rows(shape: RunShape, times: PhaseTimes | None, predicted: dict[str, float],
                preset: str, error: str | None = None) -> list[dict[str, Any]]:
    """One JSON row per phase (the layout of the published points, plus the prediction)."""
    b = shape.base
    rows = []
    for phase, stage in zip(("forward", "backward"), b.stages, strict=True):
        m = None if times is None else _mean(getattr(times, f"{phase}_ms"))
        p = predicted.get(phase)
        rows.append({
            "point": b.point, "placement": b.placement, "phase": phase,
            "tables": shape.tables, "rows_per_table": shape.rows_per_table,
            "samples_per_table": shape.samples_per_table, "lookups": shape.lookups,
            "dim": b.dim, "scale": shape.scale, "published_shape": shape.is_published,
            "distinct_ids_per_iter": None if times is None else _mean(times.distinct_ids),
            "measured_ms": m, "iters": 0 if times is None else len(times.forward_ms),
            "predicted_ms": p, "model": f"{b.design} stage_{stage}",
            "preset": preset,
            "predicted_over_measured": p / m if m and p is not None else None,
            "published_ms": getattr(b, f"{phase}_ms"), "published_gpu": "H100 80GB HBM3",
            "host_sort_ms": None if times is None or phase == "forward"
            else _mean(times.host_sort_ms),
            "index_h2d_ms": None if times is None or phase == "forward"
            else _mean(times.index_h2d_ms),
            "placed": None if times is None else times.placed,
            **({"error": error} if error else {}),
        })
    return rows

def _f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)

def markdown(rows: list[dict[str, Any]], device: str) -> str:
    """The measured rows as a markdown table (published figure only where the shape is it)."""
    out = [f"Published TBE shapes measured on {device} with scratchpipe_sim's numba-cuda "
           "kernels (mean over iterations after warm-up; sort on the host, not in backward)",
           "",
           "| point | placement | phase | tables x rows | lookups | distinct ids/iter | "
           "measured (ms) | predicted (ms) | model | pred/meas | published H100 (ms) | "
           "host sort (ms) | index H2D (ms) |",
           "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        pub = _f(r["published_ms"]) if r["published_shape"] else "-"
        out.append("| " + " | ".join([
            r["point"] if r["published_shape"] else f"{r['point']}-like",
            r["placement"], r["phase"], f"{r['tables']} x {r['rows_per_table']:,}",
            f"{r['lookups']:,}", _f(r["distinct_ids_per_iter"], ",.0f"),
            _f(r["measured_ms"]), _f(r["predicted_ms"]), f"{r['model']} ({r['preset']})",
            _f(r["predicted_over_measured"], ".2f"), pub, _f(r["host_sort_ms"]),
            _f(r["index_h2d_ms"])]) + " |")
    shown = {r["point"]: r for r in rows if not r["published_shape"]}
    for point, r in shown.items():
        b = published()[r["placement"]]
        out.append(f"\n{point}-like: not the published shape ({b.tables} x "
                   f"{b.rows_per_table:,} rows, {b.tables * b.samples_per_table:,} lookups: "
                   f"forward {b.forward_ms:.3f} ms, backward {b.backward_ms:.3f} ms on H100)")
    for b in (published()[p] for p in dict.fromkeys(r["placement"] for r in rows)):
        out.append(f"\n{b.point} published distinct ids per iteration: "
                   f"{b.distinct_ids_per_iter:,.0f} (10 tables, full size)")
    return "\n".join(out)

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m scratchpipe_sim.cuda.published_shapes",
        description="Measure the published FBGEMM TBE shapes (T1.2 DEVICE, T1.10 MANAGED: "
                    "D 128 fp32, 1 id per sample, Zipf 1.05, EXACT_SGD) with this project's "
                    "numba-cuda kernels on this GPU, next to the model's prediction for the "
                    "same ids. Needs a CUDA GPU.")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="folder for published_shapes.json and published_shapes.md")
    p.add_argument("--scale", type=float, default=1.0, metavar="F",
                   help="rows per table and samples per table x F, 0 < F <= 1 (default 1)")
    p.add_argument("--iters", type=int, default=100, metavar="N",
                   help="timed iterations per placement (default 100, as published)")
    p.add_argument("--warmup-iters", type=int, default=10, metavar="N")
    p.add_argument("--id-batches", type=int, default=4, metavar="K",
                   help="distinct id batches cycled through (the model's trace batches)")
    p.add_argument("--device-tables", type=int, default=10, metavar="T")
    p.add_argument("--managed-tables", type=int, default=2, metavar="T",
                   help="MANAGED tables (default 2: 10 at full size are 137 GB of host "
                        "memory; each table's ids are drawn apart, as published)")
    p.add_argument("--placements", nargs="+", choices=list(PLACEMENT_POINTS),
                   default=list(PLACEMENT_POINTS))
    p.add_argument("--managed-alloc", choices=("managed", "mapped"), default="managed",
                   help="managed: cudaMallocManaged advised host-resident (FBGEMM); mapped: "
                        "mapped pinned host memory (default managed)")
    p.add_argument("--preset", default="h200-gen5", help="hardware preset of the prediction")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args(argv)
    if not 0 < a.scale <= 1:
        p.error(f"expected 0 < --scale <= 1, got {a.scale}")
    for k in ("iters", "id_batches", "device_tables", "managed_tables"):
        if getattr(a, k) < 1:
            p.error(f"expected --{k.replace('_', '-')} >= 1, got {getattr(a, k)}")
    if a.warmup_iters < 0:
        p.error(f"expected --warmup-iters >= 0, got {a.warmup_iters}")
    return a

def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    st = gpu_status()
    if not st.usable:
        print(f"published_shapes: no usable GPU ({st.reason}); nothing measured",
              file=sys.stderr)
        return 2
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[published_shapes {time.perf_counter() - t_start:6.1f} s] {msg}",
              file=sys.stderr, flush=True)

    a.out.mkdir(parents=True, exist_ok=True)
    meta = {"device": st.reason, "scale": a.scale, "iters": a.iters,
            "warmup_iters": a.warmup_iters, "id_batches": a.id_batches, "seed": a.seed,
            "lr": a.lr, "preset": a.preset, "chunk_rows": CHUNK_ROWS,
            "sort": "host numpy argsort (stable) per batch, outside the timed backward: "
                    "numba-cuda offers no device radix sort; its cost is host_sort_ms",
            "timing": "CUDA events around each phase, every iteration; mean after warm-up"}
    rows: list[dict[str, Any]] = []
    for placement in a.placements:
        tables = a.device_tables if placement == "DEVICE" else a.managed_tables
        shape = RunShape(published()[placement], tables, a.scale)
        times, predicted, error = None, {}, None
        try:
            log(f"{placement}: model trace and prediction ({tables} x "
                f"{shape.rows_per_table:,} rows, {shape.lookups:,} lookups)")
            batches, predicted = predict(shape, a.id_batches, a.preset, a.seed)
            if placement == "MANAGED":
                check_host_memory(shape)
            times = measure(shape, batches, a.iters, a.warmup_iters, a.lr, a.managed_alloc,
                            log=log)
            log(f"{placement}: forward {_f(_mean(times.forward_ms))} ms, backward "
                f"{_f(_mean(times.backward_ms))} ms")
        except Exception as e:  # noqa: BLE001  (keep the other placement's measurement)
            error = f"{type(e).__name__}: {e}"
            log(f"{placement}: failed: {error}")
        rows += result_rows(shape, times, predicted, a.preset, error)
        release_gpu_memory()
        (a.out / "published_shapes.json").write_text(
            json.dumps({**meta, "published": {k: asdict(v) for k, v in published().items()},
                        "rows": rows}, indent=1), encoding="utf-8")
    md = markdown(rows, st.reason)
    (a.out / "published_shapes.md").write_text(md + "\n", encoding="utf-8")
    print(md)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
