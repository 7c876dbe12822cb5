"""The contract of a training-system design, and the `DESIGNS` registry.

A design is a SimPy process over the mini-batches of a `Workload` (per-batch counts from one
cache policy, or none): for every batch it yields stages built from the `Machine`'s
resources and calls `m.batch_done(b)` when batch b finished training. It prices work only
through the Machine's helpers (one place per kind of cost, shared by every design) — one
SimPy event per transfer or stage, never per access.

Adding a design: `scratchpipe_sim/timing/designs/NAME.py` with a `Design` subclass decorated
`@DESIGNS.register("NAME")`, and its module name in `designs/__init__.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.registry import Registry
from scratchpipe_sim.timing.counts import Workload
from scratchpipe_sim.timing.machine import Machine


@dataclass(frozen=True)
class WorkloadKey:
    """Which counts a design needs: `policy` None = no cache (`where` host or device)."""

    policy: str | None
    capacity: int = 0
    params: tuple[tuple[str, Any], ...] = field(default=())
    where: str = "host"
    #: the config key naming the policy (for error messages)
    policy_field: str = field(default="cache.policy", compare=False)


class Design(ABC):
    name: ClassVar[str] = ""
    #: one line for `--help` and docs
    summary: ClassVar[str] = ""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        m = cfg.model
        self.r = m.row_bytes  # bytes read per lookup (weights only)
        self.R = m.moved_row_bytes  # bytes per row moved or updated (weights + state)
        self.pooled = m.pooled_bytes  # pooled vectors of one sample, every table

    @abstractmethod
    def workload_key(self) -> WorkloadKey:
        """The counts this design is priced from."""

    @abstractmethod
    def run(self, m: Machine, w: Workload) -> Generator:
        """SimPy process: train every batch of `w`, calling `m.batch_done(b)` as each ends."""


DESIGNS: Registry[type[Design]] = Registry("design")


def fraction(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


class Columns:
    """Per-batch counts as Python lists (fast scalar access inside SimPy processes), plus
    the on-chip hit fractions the designs pass to the Machine's gathers."""

    def __init__(self, w: Workload):
        for name, arr in w.cols.items():
            setattr(self, name, arr.tolist())
        n = w.num_batches
        zero = [0.0] * n

        def frac(hits: str, whole: str) -> list[float]:
            if hits not in w.cols:
                return zero
            h, t = w.cols[hits], w.cols[whole]
            return [fraction(float(a), float(b)) for a, b in zip(h, t, strict=True)]

        #: lookups / unique rows of each batch that hit in the GPU L2 or CPU LLC
        self.l2 = frac("l2_hits", "accesses")
        self.l2_update = frac("l2_update_hits", "unique")
        self.llc = frac("llc_hits", "accesses")
        self.llc_update = frac("llc_update_hits", "unique")


class InputCopies:
    """Each batch's indices and offsets cross PCIe before the GPU can use them. As in every
    real training pipeline (TorchRec's TrainPipelineSparseDist), batch b+1's copy is issued
    when batch b starts, so it overlaps batch b's work; `wait(b)` is what is left of it."""

    def __init__(self, m: Machine, c: Columns, n: int):
        self.m, self.c, self.n = m, c, n
        self._done: dict[int, simpy.Event | None] = {}

    def start(self, b: int) -> None:
        if b < self.n and b not in self._done:
            c = self.c
            self._done[b] = self.m.index_h2d(b, c.accesses[b], c.samples[b])

    def wait(self, b: int) -> Generator:
        """Yield until batch b's indices are on the GPU (stage `input_wait`), then issue
        batch b+1's copy."""
        self.start(b)
        yield from self.m.stage("input_wait", b, [self._done.pop(b)])
        self.start(b + 1)
