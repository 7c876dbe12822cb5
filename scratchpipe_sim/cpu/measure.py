"""Wall-clock timing of compiled host work: best of N repetitions, and the spread.

Best-of-N because the machine is shared: other processes only ever add time, so the
minimum is the closest estimate of the work itself; the spread ((median - best) / best)
says how noisy the run was and is reported beside every figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    best_s: float
    median_s: float

    @property
    def spread(self) -> float:
        return (self.median_s - self.best_s) / self.best_s if self.best_s > 0 else 0.0


def best_of(fn: Callable[[], object], reps: int, setup: Callable[[], object] | None = None,
            warmup: bool = True) -> Timing:
    """Time `fn` `reps` times (after one untimed warm-up call that also compiles it);
    `setup` runs untimed before each call (e.g. to reset state the call consumes)."""
    if warmup:
        if setup is not None:
            setup()
        fn()
    times = []
    for _ in range(max(1, reps)):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return Timing(float(np.min(times)), float(np.median(times)))
