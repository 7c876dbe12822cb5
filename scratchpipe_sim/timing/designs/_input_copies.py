"""`InputCopies`: each batch's indices and offsets copied to the GPU one batch ahead (the
designs whose GPU reads the indices share it)."""

from __future__ import annotations

from collections.abc import Generator

import simpy

from scratchpipe_sim.timing.designs.design_inputs import Columns
from scratchpipe_sim.timing.machine import Machine


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
