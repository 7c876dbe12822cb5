"""Cache replacement policies, one module each, registered by name in `POLICIES`.

Adding a policy is one file: `scratchpipe_sim/policies/NAME.py` with a `Policy` subclass
decorated `@POLICIES.register("name")` (which also sets its `name`). The registry imports
every non-underscore module of this package on first use.
"""

from scratchpipe_sim.policies.base import POLICIES, Policy

__all__ = ["POLICIES", "Policy"]
