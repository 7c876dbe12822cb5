"""Timing of compiled host work: best of N repetitions, and the spread.

The clock: on one thread, the thread's CPU time (`time.thread_time`): time the scheduler
gives to other processes is not counted, which on a shared machine removes most of the
noise (measured here under load 4.5 on 2 cores: a 6 ms gather read 10-14 ms of wall time
and 6.0-6.3 ms of CPU time). With more threads, wall time (`time.perf_counter`): CPU time
would add the threads up. Best-of-N because other processes only ever add time (and cache
misses), so the minimum is the closest estimate of the work itself on a quiet machine; on a shared
one `calibrate --cpu` and `validate --cpu` report the median by default (`summarize`). The
spread ((median - best) / best) says how noisy the run was and is reported beside every
figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numba as nb
import numpy as np


def clock() -> Callable[[], float]:
    """Seconds: the thread's CPU time on one Numba thread, else wall time."""
    return time.thread_time if nb.get_num_threads() == 1 else time.perf_counter


def timed(fn: Callable[[], object]) -> float:
    """Seconds `fn` takes by `clock()`."""
    c = clock()
    t0 = c()
    fn()
    return c() - t0


@dataclass(frozen=True)
class Timing:
    best_s: float
    median_s: float

    @property
    def spread(self) -> float:
        return (self.median_s - self.best_s) / self.best_s if self.best_s > 0 else 0.0

    def value(self, statistic: str) -> float:
        """The median or the best of the repetitions (see `summarize`)."""
        return self.median_s if statistic == "median" else self.best_s

    @classmethod
    def of(cls, times) -> Timing:
        """Best and median of a point's repetitions (seconds)."""
        return cls(float(np.min(times)), float(np.median(times)))


def summarize(times, statistic: str, axis: int = 0):
    """Median or minimum over `axis`. Why the median by default: calibration points last a
    few ms and are repeated 15 times, a validated stage lasts 4-40 ms and is repeated a few
    times, so the best of each catches a quiet moment of a shared host with different odds
    (the calibration's more often: the model came out 20-45% too fast in pairs where it did);
    the median of each is the typical moment, the same estimator on both sides."""
    return np.median(times, axis=axis) if statistic == "median" else np.min(times, axis=axis)


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
        times.append(timed(fn))
    return Timing.of(times)


#: rounds of re-measurement of a curve's out-of-order points before they are called noisy
#: (each round repeats every offending point `reps` times, interleaved)
CURVE_RETRIES = 3


@dataclass(frozen=True)
class SettledCurve:
    """A size/time curve after re-measurement: `noisy` lists the indices whose time still
    does not grow with size (empty when the curve is in order)."""

    seconds: tuple[float, ...]
    noisy: tuple[int, ...]
    rounds: int
    remeasured: int  # points re-measured, summed over the rounds


def not_growing(sizes, seconds) -> list[int]:
    """Indices of both ends of every pair of neighbouring sizes whose larger size did not
    take longer (a busy moment of a shared host slowed the smaller one, or hid the larger
    one's cost)."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    bad: set[int] = set()
    for a, b in zip(order, order[1:], strict=False):
        if sizes[b] > sizes[a] and not seconds[b] > seconds[a]:
            bad |= {a, b}
    return sorted(bad)


def settle_curve(sizes, seconds, once: Callable[[int], float], reps: int, statistic: str,
                 retries: int = CURVE_RETRIES) -> SettledCurve:
    """Re-measure the points of a curve whose time does not grow with size, at most
    `retries` rounds. Why interleaved: each round times the offending points one repetition
    each in turn, `reps` times, so a slow minute of a shared host lands on all of them
    alike instead of on one point's whole block of repetitions. `once(i)`: seconds of one
    repetition of point i (its setup untimed)."""
    out = [float(s) for s in seconds]
    bad = not_growing(sizes, out)
    rounds = remeasured = 0
    while bad and rounds < retries:
        rounds += 1
        remeasured += len(bad)
        for i in bad:  # warm-up: the point's data back in place, untimed
            once(i)
        times: dict[int, list[float]] = {i: [] for i in bad}
        for _ in range(max(1, reps)):
            for i in bad:
                times[i].append(once(i))
        for i in bad:
            out[i] = float(summarize(times[i], statistic))
        bad = not_growing(sizes, out)
    return SettledCurve(tuple(out), tuple(bad), rounds, remeasured)
