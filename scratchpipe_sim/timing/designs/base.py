"""The contract of a training-system design, and the `DESIGNS` registry.

A design is a SimPy process over the mini-batches of a `Workload` (per-batch counts from one
cache policy, or none): for every batch it yields stages built from the `Machine`'s
resources and calls `m.batch_done(b)` when batch b finished training. It prices bytes from
counts only — one SimPy event per transfer or stage, never per access.

Adding a design: `scratchpipe_sim/timing/designs/NAME.py` with a `Design` subclass decorated
`@DESIGNS.register("NAME")`, and its module name in `designs/__init__.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, ClassVar

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
        self.pooled = m.tables.count * m.tables.dim * m.tables.bytes_per_element  # per sample

    @abstractmethod
    def workload_key(self) -> WorkloadKey:
        """The counts this design is priced from."""

    @abstractmethod
    def run(self, m: Machine, w: Workload) -> Generator:
        """SimPy process: train every batch of `w`, calling `m.batch_done(b)` as each ends."""


DESIGNS: Registry[type[Design]] = Registry("design")


class Columns:
    """Per-batch counts as Python lists (fast scalar access inside SimPy processes)."""

    def __init__(self, w: Workload):
        for name, arr in w.cols.items():
            setattr(self, name, arr.tolist())
