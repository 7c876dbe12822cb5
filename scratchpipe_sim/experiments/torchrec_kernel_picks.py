"""Which compute kernel each planner picks on the published H100 configurations, against
the one measured fastest (`torchrec-plan --published`, issue 45).

The published T1.x points (`scratchpipe_sim/data/published_points.yaml`) measure one table
configuration (tables, rows, dim, batch, ids, optimizer) under one or more FBGEMM
placements: DEVICE = `fused`, MANAGED = `fused_uvm`, MANAGED_CACHING = `fused_uvm_caching`.
For each configuration the measured time of a kernel is its fastest point's forward +
backward (a caching kernel measured at two cache sizes keeps the faster one, and its cache
size), and the measured-fastest kernel is the one with the least. Both planners
(`torchrec_planner.plan_both`: TorchRec's estimator without statistics, the simulator's
with the trace's) then plan the configuration on one GPU of its preset twice: choosing among
the kernels that were measured (the comparison the measurements can judge), and among
TorchRec's default kernels (what a user would get). The goal: the simulator-backed planner
picks the measured-fastest kernel wherever TorchRec's picks another, and never a plan the
simulator prices slower than TorchRec's choice.

The statistics come from the configuration's own generator (the harness's pow-law ids),
`batches` batches of it (the first half warms the cache, the rest is counted), not the
harness's 100: a replay of FBGEMM's cache per load factor per table of 100 batches of 1M
ids is minutes; and at the load factors of `LOAD_FACTORS` only (a replay at 0.75 of the
T1.3-T1.10 tables holds 20M rows each). The caching load factor the planners are given
is the measured point's: its cfr x the distinct rows of the statistics' trace / the rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scratchpipe_sim.config.published_points import PublishedPoint

#: FBGEMM placement -> TorchRec compute kernel
PLACEMENT_KERNELS = {"DEVICE": "fused", "MANAGED": "fused_uvm",
                     "MANAGED_CACHING": "fused_uvm_caching"}
#: the published points this compares: FBGEMM's H100 benchmark (T1.1-T1.10)
POINT_PREFIX = "T1."
#: batches of the statistics' trace (half warm-up, half counted)
DEFAULT_BATCHES = 10
#: the load factors replayed (the planners' choices here are at or below 0.1; above 0.2 the
#: curve is interpolated to 0 at 1): a replay at 0.75 of a 26.8M-row table holds 20M rows
LOAD_FACTORS = (0.01, 0.02, 0.05, 0.1, 0.2)
#: plans whose simulated times differ by less than this are a tie
TIE_REL = 1e-6
SCOPES = ("measured", "any")


@dataclass(frozen=True)
class KernelPick:
    """One published configuration: what was measured and what each planner picks."""

    ids: tuple[str, ...]
    optimizer: str
    tables: int
    rows_per_table: int
    #: kernel -> measured forward + backward, ms (its fastest point)
    measured_ms: dict[str, float]
    #: the caching kernel's load factor given to the planners (None: caching not measured)
    load_factor: float | None
    #: scope ("measured": among the measured kernels, "any": TorchRec's default list) ->
    #: planner ("torchrec", "simulator") -> the kernels its plan uses (sorted, "+"-joined)
    picks: dict[str, dict[str, str]]
    #: scope -> planner -> estimator -> the plan's iteration ms
    iter_ms: dict[str, dict[str, dict[str, float]]]

    @property
    def fastest(self) -> str:
        return min(self.measured_ms, key=self.measured_ms.__getitem__)

    def sim_not_slower(self, scope: str) -> bool:
        """The simulator-backed plan is not slower, by the simulator, than TorchRec's."""
        ms = self.iter_ms.get(scope)
        if not ms:
            return True
        sim, tr = ms["simulator"]["simulator"], ms["torchrec"]["simulator"]
        return sim <= tr * (1 + TIE_REL)

    def as_json(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "optimizer": self.optimizer, "tables": self.tables,
                "rows_per_table": self.rows_per_table, "measured_ms": self.measured_ms,
                "measured_fastest": self.fastest, "load_factor": self.load_factor,
                "picks": self.picks, "iter_ms": self.iter_ms,
                "simulator_not_slower": {s: self.sim_not_slower(s) for s in self.picks}}


def groups(points: Sequence[PublishedPoint]) -> list[list[PublishedPoint]]:
    """The T1.x points that run, grouped by configuration (model, ids, optimizer), in the
    file's order."""
    out: dict[Any, list[PublishedPoint]] = {}
    for p in points:
        if (p.id.startswith(POINT_PREFIX) and p.skip_reason is None and p.preset
                and p.placement in PLACEMENT_KERNELS and p.optimizer):
            out.setdefault((p.model, p.trace, p.optimizer), []).append(p)
    return list(out.values())


def measured(group: Sequence[PublishedPoint]) -> tuple[dict[str, float],
                                                        PublishedPoint | None]:
    """kernel -> its fastest point's forward + backward (ms); the fastest caching point."""
    best: dict[str, tuple[float, PublishedPoint]] = {}
    for p in group:
        total = sum(ms for _, ms in p.measured_ms.items())
        k = PLACEMENT_KERNELS[p.placement]
        if k not in best or total < best[k][0]:
            best[k] = (total, p)
    caching = best.get("fused_uvm_caching")
    return {k: v[0] for k, v in best.items()}, caching[1] if caching else None


def _kernels(plan: Any) -> str:
    return "+".join(sorted({t.compute_kernel for t in plan.tables}))


def pick(group: Sequence[PublishedPoint], batches: int = DEFAULT_BATCHES) -> KernelPick:
    """Plan one configuration with both planners (module doc)."""
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.experiments.published import config_dict, distinct_rows
    from scratchpipe_sim.experiments.torchrec_planner import plan_both
    from scratchpipe_sim.experiments.torchrec_stats import trace_stats
    from scratchpipe_sim.timing import build_trace

    times, caching = measured(group)
    rep = group[0]
    cfg = load_config(config_dict(rep, num_batches=batches, warmup_batches=0))
    trace = build_trace(cfg, cache=False)  # a published run's ids: large, not kept
    clf = None
    if caching is not None:
        capacity = max(1, math.ceil(distinct_rows(trace) * float(caching.cache.cfr or 0.0)))
        cfg = load_config(config_dict(caching, num_batches=batches, warmup_batches=0,
                                      capacity_rows=capacity))
        clf = capacity / cfg.total_rows
    stats = trace_stats(trace, load_factors=LOAD_FACTORS)
    del trace
    picks: dict[str, dict[str, str]] = {}
    iter_ms: dict[str, dict[str, dict[str, float]]] = {}
    for scope in SCOPES:
        kernels = sorted(times) if scope == "measured" else None
        if kernels is not None and len(kernels) == 1:
            picks[scope] = {"torchrec": kernels[0], "simulator": kernels[0]}
            continue  # one kernel measured: nothing to choose
        a, b = plan_both(cfg, stats, 1, kernels)
        picks[scope] = {"torchrec": _kernels(a), "simulator": _kernels(b)}
        iter_ms[scope] = {"torchrec": a.iter_ms, "simulator": b.iter_ms}
    return KernelPick(tuple(p.id for p in group), rep.optimizer or "-", rep.model.tables,
                      rep.model.rows_per_table, times, clf, picks, iter_ms)


def picks(points: Sequence[PublishedPoint], batches: int = DEFAULT_BATCHES,
          log: Callable[[str], None] | None = None) -> list[KernelPick]:
    out = []
    for g in groups(points):
        if log is not None:
            log(f"{', '.join(p.id for p in g)}: planning")
        out.append(pick(g, batches))
    return out


def format_picks(rows: Sequence[KernelPick]) -> str:
    from scratchpipe_sim.experiments.run_tables import table

    def ms(r: KernelPick, scope: str, planner: str) -> str:
        m = r.iter_ms.get(scope, {}).get(planner)
        return "-" if m is None else f"{m['simulator']:.3g}"

    body = []
    for r in rows:
        for scope in SCOPES:
            body.append([
                ",".join(r.ids) if scope == SCOPES[0] else "", r.optimizer if scope ==
                SCOPES[0] else "", scope,
                " ".join(f"{k} {v:.2f}" for k, v in sorted(r.measured_ms.items()))
                if scope == SCOPES[0] else "", r.fastest if scope == SCOPES[0] else "",
                r.picks[scope]["torchrec"], r.picks[scope]["simulator"],
                ms(r, scope, "torchrec"), ms(r, scope, "simulator"),
                "yes" if r.sim_not_slower(scope) else "NO"])
    return table(body, ["points", "opt", "choice among", "measured ms (fwd+bwd)",
                        "measured fastest", "TorchRec picks", "simulator picks",
                        "TorchRec's plan, sim ms", "simulator's plan, sim ms",
                        "sim plan not slower"])
