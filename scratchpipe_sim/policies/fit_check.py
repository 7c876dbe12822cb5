"""`trace fit --check`: a fitted trace judged by what a cache sees, LRU and static hit
ratios of the source vs a trace generated from the fit.

Here, not in traces/distribution_fit.py, because it replays a policy (static) and traces sits below
policies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.generators import trace_from_spec

if TYPE_CHECKING:
    from scratchpipe_sim.traces.distribution_fit import Fit


def check_fit(trace: Trace, fit: Fit, fractions: Sequence[float] = (0.01, 0.02, 0.05, 0.1, 0.2),
              seed: int = 0) -> dict[str, Any]:
    """LRU and static hit ratios over the whole trace, source vs a trace generated from the
    fit with the source's shape (tables, rows, batch size, batches, bag lengths)."""
    # imported here: the policies registry imports this module on every run
    from scratchpipe_sim.traces.distribution_fit import spec_from_fit  # noqa: PLC0415
    from scratchpipe_sim.traces.stats import lru_miss_ratio_curve  # noqa: PLC0415

    spec = spec_from_fit(fit, trace.num_batches, seed)
    synth = trace_from_spec(spec)
    out: dict[str, Any] = {"capacity_fraction": list(fractions)}
    for name, tr in (("source", trace), ("fitted", synth)):
        caps = [max(1, int(round(f * tr.total_rows))) for f in fractions]
        curve = lru_miss_ratio_curve(tr, caps)
        out[f"{name}_lru_hit"] = [1.0 - curve.miss_ratio(c) for c in caps]
        out[f"{name}_static_hit"] = [run_cache(tr, "static", c).hits / tr.num_accesses
                                     for c in caps]
    out["max_lru_gap"] = max(abs(a - b) for a, b in zip(out["source_lru_hit"],
                                                        out["fitted_lru_hit"], strict=True))
    return out
