"""`validate`'s workload: a config turned into the reference pipeline's inputs, and back.

Mapping (documented in docs/cuda.md): the model's lookahead window W (batches pinned from
plan to train) becomes the pipeline's lookahead L = W - 1, whose pinned set is batches
k-L .. k, i.e. W batches; the MLPs become 3 GEMMs per layer of the same FLOPs; tables
are fp32 (the reference kernels have no fp16 path).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scratchpipe_sim.config import Config
from scratchpipe_sim.cuda.stage_errors import measured_stages
from scratchpipe_sim.cuda.training import TrainSpec
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.designs.design_parameters import design_params


@dataclass(frozen=True)
class Workload:
    spec: TrainSpec
    capacity_rows: int
    lookahead: int
    mlp: tuple[tuple[int, int, int], ...]


def workload_of(cfg: Config) -> Workload:
    """The pipeline's inputs for a config (errors name the config key that cannot map)."""
    m = cfg.model
    if m.tables.bytes_per_element != 4:
        raise UserError(f"the reference kernels are fp32: expected bytes_per_element 4, got "
                        f"{m.tables.bytes_per_element}", source=cfg.source,
                        field="model.tables.bytes_per_element")
    W = design_params(cfg, "scratchpipe").lookahead
    if W < 2:
        raise UserError(f"the reference pipeline needs a lookahead >= 2 (plan one batch "
                        f"ahead of train), got {W}", source=cfg.source,
                        field="design_params.scratchpipe.lookahead")
    B = m.batch_size
    mlp = tuple((B, a, b) for layers in (m.bottom_layers, m.top_layers)
                for a, b in zip(layers, layers[1:], strict=False))
    spec = TrainSpec(dim=m.tables.dim, optimizer=m.optimizer, seed=cfg.seed)
    return Workload(spec, cfg.capacity_rows(), W - 1, mlp)


def save_measured(path: Path, measured: dict[str, float], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"measured_ns": measured, "meta": meta}, indent=1),
                    encoding="utf-8")


def load_measured(path: Path) -> tuple[dict[str, float], dict[str, Any]]:
    """Stage means saved by an earlier GPU run (to recompute the table without a GPU)."""
    from scratchpipe_sim.safety.paths import input_file  # noqa: PLC0415

    try:
        d = json.loads(input_file(path, "JSON file").read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON: {e.msg} at line {e.lineno}", source=str(path)
                        ) from None
    if not isinstance(d, dict) or not isinstance(d.get("measured_ns"), dict):
        raise UserError("expected an object with a 'measured_ns' mapping", source=str(path),
                        field="measured_ns")
    out = {}
    for k, v in d["measured_ns"].items():
        if not isinstance(v, (int, float)) or v < 0:
            raise UserError(f"expected a non-negative number of ns, got {v!r}",
                            source=str(path), field=f"measured_ns.{k}")
        out[str(k)] = float(v)
    return out, dict(d.get("meta") or {})


def measure_on_gpu(cfg: Config, trace: Any) -> dict[str, float]:
    """Run the reference pipeline on the GPU and return per-stage means in ns."""
    from scratchpipe_sim.cuda.pipeline import PipelineOptions, train_on_gpu  # noqa: PLC0415

    w = workload_of(cfg)
    res = train_on_gpu(trace, w.spec, PipelineOptions(capacity_rows=w.capacity_rows,
                                                      lookahead=w.lookahead, mlp=w.mlp))
    return measured_stages(res.stage_s, res.iteration_s, cfg.model.warmup_batches)
