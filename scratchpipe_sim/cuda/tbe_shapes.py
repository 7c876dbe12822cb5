"""The published FBGEMM TBE shapes (issue 24: T1.2 = `DEVICE`, T1.10 = `MANAGED`) as read
from the published points (`config/published_points.py`), the shape actually run (fewer
tables, scaled sizes), its host-memory check and the model's prediction for the very same
ids (the ids come from the model's own trace)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from scratchpipe_sim.config import published_points
from scratchpipe_sim.config.published_points import PublishedPoint
from scratchpipe_sim.safety import memory_guard

#: the recsys-examples harness seeds its pow-law generator with 42
SEED = 42
#: the share of available host memory a MANAGED table may take
HOST_SHARE = 0.8
#: the published point each placement measures (`scratchpipe_sim/data/published_points.yaml`)
PLACEMENT_POINTS = {"DEVICE": "T1.2", "MANAGED": "T1.10"}


@dataclass(frozen=True)
class PublishedShape:
    """One published point's shape and figures, as the data file gives them."""

    point: str
    placement: str  # DEVICE | MANAGED
    tables: int
    rows_per_table: int
    samples_per_table: int
    dim: int
    alpha: float
    forward_ms: float
    backward_ms: float
    distinct_ids_per_iter: float  # as published: tells whether our Zipf ids match theirs
    design: str  # the model's design for this placement
    stages: tuple[str, str]  # the model's (forward, backward) stages

    @classmethod
    def of(cls, p: PublishedPoint) -> PublishedShape:
        """A loaded point's shape; the stages are its design's one stage per phase."""
        from scratchpipe_sim.timing.stage_columns import phase_stages  # noqa: PLC0415

        stages = phase_stages(p.design)
        one = tuple(s for ph in ("forward", "backward") for s in stages[ph])
        if len(one) != 2:
            raise ValueError(f"design '{p.design}' sums {dict(stages)} into its phases; the "
                             "published shapes compare one stage per phase")
        m, fwd, bwd = p.model, p.measured_ms.forward, p.measured_ms.backward
        if fwd is None or bwd is None or p.trace.distinct_ids_per_iter is None:
            raise ValueError(f"point {p.id} lacks a measured phase or its distinct ids")
        return cls(p.id, p.placement, m.tables, m.rows_per_table, m.batch_size, m.dim,
                   p.trace.alpha, fwd, bwd, p.trace.distinct_ids_per_iter, p.design,
                   (one[0], one[1]))

@cache
def published() -> dict[str, PublishedShape]:
    """Placement -> the shape of its published point, read from the shipped data file."""
    return {placement: PublishedShape.of(published_points.point(pid))
            for placement, pid in PLACEMENT_POINTS.items()}

@dataclass(frozen=True)
class RunShape:
    """The shape actually run: a published shape with fewer tables and/or scaled sizes."""

    base: PublishedShape
    tables: int
    scale: float

    @property
    def rows_per_table(self) -> int:
        return max(1, round(self.base.rows_per_table * self.scale))

    @property
    def samples_per_table(self) -> int:
        return max(1, round(self.base.samples_per_table * self.scale))

    @property
    def lookups(self) -> int:
        return self.tables * self.samples_per_table

    @property
    def table_bytes(self) -> int:
        return self.tables * self.rows_per_table * self.base.dim * 4

    @property
    def is_published(self) -> bool:
        return self.tables == self.base.tables and self.scale == 1.0

def check_host_memory(shape: RunShape) -> None:
    """A MANAGED table must fit in HOST_SHARE of the memory available (the memory guard's:
    $SCRATCHPIPE_MEMORY_BYTES caps it), leaving the rest for the process and the trace."""
    memory_guard.check(math.ceil(shape.table_bytes / HOST_SHARE),
                       f"the MANAGED table ({memory_guard.human(shape.table_bytes)}, at most "
                       f"{HOST_SHARE:.0%} of the memory available)",
                       "lower --managed-tables or --scale", field="--managed-tables")

def model_config(shape: RunShape, batches: int, preset: str, seed: int = SEED,
                 pooling: int = 1) -> dict:
    """The `run` config of this shape: same tables, ids (Zipf, seed) and batches as measured
    (`pooling` ids per sample and table: 1 for the published shapes, the batch sweep's
    `--pooling` otherwise)."""
    b = shape.base
    return {
        "name": f"published-{b.point}-{b.placement.lower()}", "seed": seed,
        "hardware": {"preset": preset},
        "model": {"tables": {"count": shape.tables, "rows": shape.rows_per_table,
                             "dim": b.dim, "bytes_per_element": 4},
                  "pooling": pooling, "batch_size": shape.samples_per_table, "optimizer": "sgd",
                  "bottom_mlp": [1, 1], "interaction": "cat", "num_batches": batches,
                  "warmup_batches": 0},
        "trace": {"distribution": "zipf", "alpha": b.alpha},
        "cache": {"warmup_batches": 0},
        "designs": [b.design],
    }

def predict(shape: RunShape, batches: int, preset: str, seed: int = SEED, pooling: int = 1
            ) -> tuple[list[np.ndarray], dict[str, float]]:
    """The model's trace (its batches as linear ids) and its forward/backward stage means."""
    from scratchpipe_sim.config import load_config  # noqa: PLC0415  (keeps --help light)
    from scratchpipe_sim.timing import build_trace, simulate  # noqa: PLC0415

    cfg = load_config(model_config(shape, batches, preset, seed, pooling))
    trace = build_trace(cfg, cache=False)
    ids = [trace.linear_batch(k)[0] for k in range(trace.num_batches)]
    from scratchpipe_sim.timing.stage_columns import stage_ns  # noqa: PLC0415

    row = simulate(cfg, trace=trace, replay_cache=False)[0]
    fwd, bwd = shape.base.stages
    return ids, {"forward": stage_ns(row, fwd) / 1e6, "backward": stage_ns(row, bwd) / 1e6}
