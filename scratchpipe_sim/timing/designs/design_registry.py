"""The `DESIGNS` registry and the lists derived from its classes' metadata.

A design's class says where it shows up (`default`, `order`, `baseline`: see `base.Design`);
the config default, the display order and the baseline are derived here, never listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scratchpipe_sim.config import Config
from scratchpipe_sim.registry import Registry

if TYPE_CHECKING:
    from scratchpipe_sim.timing.designs.base import Design

DESIGNS: Registry[type[Design]] = Registry("design", package="scratchpipe_sim.timing.designs")


def design_order() -> tuple[str, ...]:
    """Every registered design in display order (the class's `order`, then name)."""
    return tuple(sorted(DESIGNS.names(), key=lambda n: (DESIGNS.get(n).order, n)))


def default_designs() -> tuple[str, ...]:
    """The designs a config runs when it does not list them, in display order."""
    return tuple(n for n in design_order() if DESIGNS.get(n).default)


def config_designs(cfg: Config) -> tuple[str, ...]:
    """The designs `cfg` runs: its `designs`, else (null) `default_designs()`. Resolved here,
    not in config, because config sits below the design registry."""
    return tuple(cfg.designs) if cfg.designs is not None else default_designs()


def baseline_design() -> str:
    """The design speedups are measured against (`baseline = True`; hybrid)."""
    names = [n for n in design_order() if DESIGNS.get(n).baseline]
    if len(names) != 1:
        raise RuntimeError(f"expected exactly one baseline design, got {names}")
    return names[0]
