"""System designs, one module each, registered by name in `DESIGNS`.

The registry imports every non-underscore module of this package on first use: adding a
design is adding its file (see `base.py`; the registry is `design_registry.py`)."""

from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_parameters import (
    check_params,
    design_params,
    param_sections,
    policy_params,
    with_default_designs,
)
from scratchpipe_sim.timing.designs.design_registry import (
    DESIGNS,
    baseline_design,
    config_designs,
    default_designs,
    design_order,
)

__all__ = ["DESIGNS", "Design", "WorkloadKey", "baseline_design", "check_params",
           "config_designs", "default_designs", "design_order", "design_params",
           "param_sections", "policy_params", "with_default_designs"]
