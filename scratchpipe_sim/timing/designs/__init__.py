"""System designs, one module each, registered by name in `DESIGNS`.

The registry imports every non-underscore module of this package on first use: adding a
design is adding its file (see `base.py`)."""

from scratchpipe_sim.timing.designs.base import (
    DESIGNS,
    Design,
    WorkloadKey,
    baseline_design,
    check_params,
    config_designs,
    default_designs,
    design_order,
    design_params,
    param_sections,
    policy_params,
    with_default_designs,
)

__all__ = ["DESIGNS", "Design", "WorkloadKey", "baseline_design", "check_params",
           "config_designs", "default_designs", "design_order", "design_params",
           "param_sections", "policy_params", "with_default_designs"]
