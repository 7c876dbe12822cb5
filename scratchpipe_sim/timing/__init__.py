"""Timing layer: SimPy resources, one module per training-system design, the runner.

    simulate(cfg, designs=None, timeline_dir=None, trace=None) -> list[dict]
    DESIGNS  registry of system designs
"""

from scratchpipe_sim.timing.designs import DESIGNS, Design
from scratchpipe_sim.timing.runner import simulate
from scratchpipe_sim.timing.trace_setup import build_trace

__all__ = ["DESIGNS", "Design", "build_trace", "simulate"]
