"""Cache replacement policies, one module each, registered by name in `POLICIES`.

Adding a policy: write `scratchpipe_sim/policies/NAME.py` with a `Policy` subclass decorated
`@POLICIES.register("name")`, and add its module to `_MODULES`.
"""

import importlib

from scratchpipe_sim.policies.base import POLICIES, Policy

_MODULES = ("lru", "lfu", "fbgemm", "static", "belady", "scratchpipe",
            "bagpipe")

for _m in _MODULES:
    importlib.import_module(f"scratchpipe_sim.policies.{_m}")

__all__ = ["POLICIES", "Policy"]
