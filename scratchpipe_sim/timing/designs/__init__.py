"""System designs, one module each, registered by name in `DESIGNS`."""

import importlib

from scratchpipe_sim.timing.designs.base import DESIGNS, Design, WorkloadKey

_MODULES = ("hybrid", "gpu_only", "static_cache", "lru_cache", "lru_prefetch", "scratchpipe",
            "multi_gpu", "uvm", "bagpipe")

for _m in _MODULES:
    importlib.import_module(f"scratchpipe_sim.timing.designs.{_m}")

__all__ = ["DESIGNS", "Design", "WorkloadKey"]
