"""Cache replacement policies, one module each, registered by name in `POLICIES`.

Adding a policy: write `scratchpipe_sim/policies/NAME.py` with a `Policy` subclass decorated
`@POLICIES.register("name")`, and add its module to `_MODULES`.
"""

import importlib

from scratchpipe_sim.policies.base import POLICIES, Policy

_MODULES = ("lru", "lfu", "fbgemm", "static", "belady", "scratchpipe")

for _m in _MODULES:
    try:
        importlib.import_module(f"scratchpipe_sim.policies.{_m}")
    except ModuleNotFoundError as _e:  # a policy not written yet
        if _e.name != f"scratchpipe_sim.policies.{_m}":
            raise

__all__ = ["POLICIES", "Policy"]
