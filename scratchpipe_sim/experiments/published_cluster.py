"""`validate --published`'s multi-GPU points: published training runs on 8 to 64 GPUs,
priced by the `cluster` design (`cluster_points` of scratchpipe_sim/data/published_points.yaml,
loaded by `config/published_points.py`).

Each point carries the config it is priced with; the run adds the simulation's own settings
(BATCHES batches, FILL_BATCHES of them to fill the pipeline, the cluster design). The
quantity is the run's `samples_per_s` or its embedding time per iteration (every stage's
mean but the MLP's). Pairs measured under one setup differing in one thing (RATIOS) are
checked as ratios too: 8 -> 64 GPUs, dedup off / on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scratchpipe_sim.config.published_points import ClusterPoint

#: batches priced per point (the first FILL_BATCHES fill the pipeline)
BATCHES = 3
FILL_BATCHES = 1
#: (numerator, denominator) ids whose published ratio is checked beside the points
RATIOS = (("E3.7", "E3.6"), ("E3.13b", "E3.13a"))


@dataclass(frozen=True)
class ClusterResult:
    point: ClusterPoint
    predicted: float

    @property
    def factor(self) -> float:
        """predicted / measured, as a time: > 1 means the model is slower than the run."""
        ratio = self.predicted / self.point.measured
        return 1.0 / ratio if self.point.quantity == "samples_per_s" else ratio

    def as_json(self) -> dict[str, Any]:
        p = self.point
        return {"id": p.id, "gpu": p.gpu, "design": "cluster", "quantity": p.quantity,
                "predicted": self.predicted, "measured": p.measured, "factor": self.factor,
                "role": p.role, "status": "ok", "source": p.source}


def config_dict(p: ClusterPoint) -> dict[str, Any]:
    from scratchpipe_sim.config import deep_merge

    return deep_merge(p.config, {
        "name": f"published-{p.id}", "seed": 1, "designs": ["cluster"],
        "model": {"num_batches": BATCHES, "warmup_batches": FILL_BATCHES},
        "cache": {"capacity_rows": 1000}})


def run_point(p: ClusterPoint) -> ClusterResult:
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.timing import simulate

    row = simulate(load_config(config_dict(p)), ["cluster"])[0]
    if p.quantity == "samples_per_s":
        return ClusterResult(p, float(row["samples_per_s"]))
    ns = sum(v for k, v in row.items() if k.startswith("stage_") and k.endswith("_ns")
             and k != "stage_mlp_ns")
    # the GPU idle while the host issues the iteration (timing/host_dispatch.py, inside the
    # mlp stage) is on the benchmark's path: it times the collection's whole iteration
    return ClusterResult(p, (ns + float(row.get("host_wait_ns") or 0.0)) / 1e6)


def run_points(points: Sequence[ClusterPoint],
               log: Callable[[str], None] | None = None) -> list[ClusterResult]:
    out = []
    for p in points:
        if log is not None:
            log(f"{p.id}: cluster on {p.gpu}")
        out.append(run_point(p))
    return out


def format_table(results: Sequence[ClusterResult]) -> str:
    from scratchpipe_sim.experiments.run_tables import table

    if not results:
        return ""
    rows = [[r.point.id, r.point.gpu, r.point.quantity, f"{r.predicted:.4g}",
             f"{r.point.measured:.4g}", f"{r.factor:.2f}", r.point.role] for r in results]
    out = ["", "multi-GPU points (the cluster design):",
           table(rows, ["id", "gpus", "quantity", "predicted", "measured", "factor", "role"]),
           "factor = predicted / measured time (> 1: the model is slower than the run)"]
    by_id = {r.point.id: r for r in results}
    for num, den in RATIOS:
        if num in by_id and den in by_id:
            a, b = by_id[num], by_id[den]
            model, pub = a.predicted / b.predicted, a.point.measured / b.point.measured
            out.append(f"ratio {num} / {den}: model {model:.2f}, published {pub:.2f} "
                       f"(model / published {model / pub:.2f})")
    for role in ("fit", "check"):
        rs = [r for r in results if r.point.role == role]
        if rs:
            typical = math.exp(sum(abs(math.log(r.factor)) for r in rs) / len(rs))
            out.append(f"{role}: {len(rs)} cluster points, typical factor {typical:.2f}x")
    return "\n".join(out)
