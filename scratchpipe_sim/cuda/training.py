"""The training step both paths run: the GPU pipeline and its numpy reference.

Why a synthetic loss: the reference path checks data movement, not model quality. A loss of
0.5*||pooled - target||^2 with a seeded target per mini-batch makes every gradient depend on
the current row values, so any stale or misplaced row changes the trained table — which is
exactly what the hazard tests need to see.

Rows are stored as float32 `[dim embedding columns | state columns]`:
sgd 0 state columns, rowwise-adagrad 1 (FBGEMM's EXACT_ROWWISE_ADAGRAD), adagrad `dim`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.csr_trace import Trace

OPTIMIZERS = ("sgd", "adagrad", "rowwise-adagrad")


@dataclass(frozen=True)
class TrainSpec:
    """What one training run does; the same spec drives the GPU path and the reference."""

    dim: int = 4
    optimizer: str = "sgd"
    lr: float = 0.05
    eps: float = 1e-6
    init_scale: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"unknown optimizer '{self.optimizer}': expected one of "
                            f"{', '.join(OPTIMIZERS)}", field="model.optimizer")
        if self.dim < 1:
            raise UserError(f"expected dim >= 1, got {self.dim}", field="model.tables.dim")

    @property
    def state_cols(self) -> int:
        return {"sgd": 0, "rowwise-adagrad": 1, "adagrad": self.dim}[self.optimizer]

    @property
    def width(self) -> int:
        return self.dim + self.state_cols


def initial_table(total_rows: int, spec: TrainSpec) -> np.ndarray:
    """Seeded float32 rows with zero optimizer state."""
    rng = np.random.default_rng(np.random.SeedSequence([spec.seed, 1]))
    table = np.zeros((total_rows, spec.width), np.float32)
    table[:, :spec.dim] = rng.standard_normal((total_rows, spec.dim), dtype=np.float32)
    table[:, :spec.dim] *= np.float32(spec.init_scale)
    return table


#: splitmix64 constants (shared with kernels.make_target, which computes the same values)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)


def target_key(seed: int, k: int) -> np.uint64:
    """Per-batch key of the target hash (seed and batch index mixed, wrapping uint64)."""
    with np.errstate(over="ignore"):
        return np.uint64((int(seed) * 0x100000001B3 + int(k) * 0x9E3779B1 + 1) % (1 << 64))


def batch_target(k: int, bags: int, spec: TrainSpec) -> np.ndarray:
    """The seeded target of mini-batch k: uniform in [-1, 1), a hash of (seed, k, element).

    A counter-based hash rather than a Generator so the GPU can make the same numbers itself
    (kernels.make_target) instead of copying a target over PCIe every batch.
    """
    key = target_key(spec.seed, k)
    with np.errstate(over="ignore"):
        z = np.arange(bags * spec.dim, dtype=np.uint64) + key + GOLDEN
        z = (z ^ (z >> np.uint64(30))) * MIX1
        z = (z ^ (z >> np.uint64(27))) * MIX2
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -23) - np.float32(1.0)
    return u.reshape(bags, spec.dim)


@dataclass(frozen=True)
class BatchIds:
    """One mini-batch as linearized ids over its bags (all tables), rebased offsets."""

    ids: np.ndarray  # int64, linearized
    offsets: np.ndarray  # int64, bags + 1

    @property
    def bags(self) -> int:
        return len(self.offsets) - 1


def trace_batches(trace: Trace) -> list[BatchIds]:
    """Every mini-batch of the trace with linearized ids (tiny traces: the reference path)."""
    return [BatchIds(*trace.linear_batch(k)) for k in range(trace.num_batches)]


def reference_step(table: np.ndarray, batch: BatchIds, target: np.ndarray,
                   spec: TrainSpec) -> None:
    """One training step in numpy, in place: forward, loss gradient, backward, update."""
    dim = spec.dim
    bag_of = np.repeat(np.arange(batch.bags), np.diff(batch.offsets))
    pooled = np.zeros((batch.bags, dim), np.float32)
    np.add.at(pooled, bag_of, table[batch.ids, :dim])
    grad = pooled - target
    uniq, inv = np.unique(batch.ids, return_inverse=True)
    ugrad = np.zeros((len(uniq), dim), np.float32)
    np.add.at(ugrad, inv, grad[bag_of])
    if spec.optimizer == "sgd":
        table[uniq, :dim] -= np.float32(spec.lr) * ugrad
    elif spec.optimizer == "rowwise-adagrad":
        state = table[uniq, dim] + np.mean(ugrad * ugrad, axis=1, dtype=np.float32)
        table[uniq, dim] = state
        scale = np.float32(spec.lr) / (np.sqrt(state) + np.float32(spec.eps))
        table[uniq, :dim] -= scale[:, None] * ugrad
    else:  # adagrad: one state per element
        state = table[uniq, dim:] + ugrad * ugrad
        table[uniq, dim:] = state
        table[uniq, :dim] -= np.float32(spec.lr) * ugrad / (np.sqrt(state) + np.float32(spec.eps))


def reference_train(trace: Trace, spec: TrainSpec) -> np.ndarray:
    """The trained table after every batch of `trace`, in order, all rows in one array."""
    table = initial_table(trace.total_rows, spec)
    for k, batch in enumerate(trace_batches(trace)):
        reference_step(table, batch, batch_target(k, batch.bags, spec), spec)
    return table
