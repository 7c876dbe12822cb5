"""`torchrec-plan`: TorchRec's `EmbeddingShardingPlanner` run twice on a config (issue 45).

Once as TorchRec ships it (its `EmbeddingPerfEstimator` and storage estimator, no cache
statistics: the prefetch of a cached table is priced at zero), once with the simulator's
`SimulatorEstimator` and the trace's `CacheStatistics` (`torchrec_stats`). Both run on the
same tables (meta device, the config's optimizer fused), the same `Topology`
(`peers.topology_args`, `world_size` ranks, `local_world_size` = min(world size,
interconnect.gpus_per_node)), the same per-rank batch (the trace's batch / world size: a
trace's batch is one global training step) and pooling (the trace's lookups per sample),
the same cache load factor constraint (`cache.load_factor`, which
`EmbeddingOffloadScaleupProposer`, in both planners' proposers, may scale where statistics
exist), and TorchRec's default proposers, partitioner and perf model (the slowest rank's
sum of Perf.total).

Each best plan is then priced by both estimators (`PlanSide`), so every plan has a
predicted iteration time by TorchRec and by the simulator.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments import peers
from scratchpipe_sim.experiments.torchrec_stats import ALGORITHMS, TableCurve, TraceCacheStats
from scratchpipe_sim.safety.limits import WORLD_SIZE

if TYPE_CHECKING:
    from scratchpipe_sim.config import Config

TERMS = ("fwd_compute", "bwd_compute", "prefetch_compute", "fwd_comms", "bwd_comms",
         "input_dist_comms")


@dataclass(frozen=True)
class TableChoice:
    table: str
    sharding_type: str
    compute_kernel: str
    load_factor: float | None
    ranks: tuple[int, ...]
    #: estimator ("torchrec" / "simulator") -> Perf term -> ms, summed over the shards
    terms: dict[str, dict[str, float]]

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "sharding_type": self.sharding_type,
                "compute_kernel": self.compute_kernel, "load_factor": self.load_factor,
                "ranks": list(self.ranks), "terms_ms": self.terms}


@dataclass(frozen=True)
class PlanSide:
    """One planner's best plan, priced by both estimators."""

    planner: str
    tables: tuple[TableChoice, ...]
    #: estimator -> the slowest rank's summed Perf.total (TorchRec's NoopPerfModel), ms
    iter_ms: dict[str, float]
    hbm_bytes: int
    ddr_bytes: int
    #: why this side holds another planner's plan (None: its own best plan)
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"planner": self.planner, "iter_ms": self.iter_ms, "hbm_bytes": self.hbm_bytes,
                "ddr_bytes": self.ddr_bytes, "tables": [t.as_json() for t in self.tables],
                "note": self.note}


def simulator_choice(torchrec: PlanSide, simulator: PlanSide) -> PlanSide:
    """The simulator-backed planner's answer: its own best plan, unless the simulator prices
    TorchRec's plan faster — TorchRec's partitioner is a greedy heuristic, so the plan it
    returns for the simulator's estimates can balance the ranks worse than the plan it
    returned for its own; the simulator-backed planner weighs both and keeps the faster by
    its own price, so it never answers with a plan it prices slower than TorchRec's."""
    own, other = simulator.iter_ms["simulator"], torchrec.iter_ms["simulator"]
    if own <= other:
        return simulator
    return dataclasses.replace(
        torchrec, planner=simulator.planner,
        note=f"TorchRec's plan kept: the simulator prices it at {other:.4g} ms, its own best "
             f"plan at {own:.4g} ms")


def local_world(cfg: Config, world_size: int) -> int:
    """Ranks per host; a world size the topology cannot hold is one line (exit 2)."""
    per_node = int(cfg.hardware.interconnect.gpus_per_node)
    if world_size < 1 or (world_size > per_node and world_size % per_node):
        raise UserError(f"a world size of {world_size} GPUs: expected 1 to {per_node} or a "
                        f"multiple of hardware.interconnect.gpus_per_node = {per_node} "
                        "(whole hosts)", field="--world-size")
    if world_size > WORLD_SIZE.value():
        # TorchRec's planner grows faster than linearly in the ranks: bounded before it runs
        raise UserError(f"a world size of {world_size:,} GPUs: expected at most "
                        f"{WORLD_SIZE.value():,} ({WORLD_SIZE.advice()})", field="--world-size")
    return min(world_size, per_node)


def _load_factor(cfg: Config) -> float:
    clf = cfg.cache.load_factor
    if clf is None:
        clf = cfg.capacity_rows() / cfg.total_rows
    return float(min(max(clf, 1e-6), 1.0))


class _Planner:
    """One planner and its enumerator (kept: it re-prices the other planner's plan)."""

    def __init__(self, name: str, cfg: Config, topo: Any, batch: int, samples: int,
                 curves: Mapping[str, TableCurve], with_sim: bool,
                 kernels: Sequence[str] | None = None, algorithm: str = "lru") -> None:
        from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
        from torchrec.distributed.planner.planners import EmbeddingShardingPlanner
        from torchrec.distributed.planner.proposers import (
            EmbeddingOffloadScaleupProposer,
            GreedyProposer,
            GridSearchProposer,
            UniformProposer,
        )
        from torchrec.distributed.planner.shard_estimators import (
            EmbeddingPerfEstimator,
            EmbeddingStorageEstimator,
        )
        from torchrec.distributed.planner.types import ParameterConstraints
        from torchrec.distributed.types import CacheAlgorithm, CacheParams

        from scratchpipe_sim.experiments.torchrec_estimator import simulator_estimator
        from scratchpipe_sim.experiments.torchrec_stats import cache_statistics

        self.name = name
        clf = _load_factor(cfg)
        cons = {}
        for n, c in curves.items():
            stats = cache_statistics(c) if with_sim else None
            cons[n] = ParameterConstraints(
                pooling_factors=[c.accesses_per_batch / samples],
                compute_kernels=list(kernels) if kernels else None,
                cache_params=CacheParams(algorithm=CacheAlgorithm[algorithm.upper()],
                                         load_factor=clf, stats=stats))
        storage = EmbeddingStorageEstimator(topo, constraints=cons)
        if with_sim:
            self.perf = simulator_estimator(topo, cons, cfg, curves, samples)
        else:
            self.perf = EmbeddingPerfEstimator(topo, constraints=cons)
        self.enumerator = EmbeddingEnumerator(topo, batch_size=batch, constraints=cons,
                                              estimator=[storage, self.perf])
        self.planner = EmbeddingShardingPlanner(
            topology=topo, batch_size=batch, enumerator=self.enumerator, constraints=cons,
            proposer=[GridSearchProposer(), GreedyProposer(), GreedyProposer(use_depth=False),
                      UniformProposer(), EmbeddingOffloadScaleupProposer()],
            debug=False)


def _rate(plan: list[Any], world: int) -> float:
    per = [0.0] * world
    for so in plan:
        for s in so.shards:
            per[s.rank] += s.perf.total
    return max(per)


def _choices(plan: list[Any], priced: dict[str, list[Any]]) -> tuple[TableChoice, ...]:
    out = []
    for i, so in enumerate(plan):
        terms = {est: {t: sum(getattr(s.perf, t) for s in p[i].shards) for t in TERMS}
                 for est, p in priced.items()}
        out.append(TableChoice(so.name, so.sharding_type, so.compute_kernel,
                               so.cache_load_factor
                               if so.compute_kernel == "fused_uvm_caching" else None,
                               tuple(sorted({int(s.rank) for s in so.shards})), terms))
    return tuple(sorted(out, key=lambda c: int(c.table[1:])))


def plan_both(cfg: Config, stats: TraceCacheStats, world_size: int = 1,
              kernels: Sequence[str] | None = None) -> tuple[PlanSide, PlanSide]:
    """TorchRec's plan and the simulator-backed plan, each priced by both estimators
    (`kernels`: the compute kernels both may choose; None: TorchRec's default list). The
    cache algorithm TorchRec is told is the statistics' (FBGEMM LRU or LFU)."""
    peers.import_torchrec("torchrec-plan")
    import logging

    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import PlannerError, Topology

    for name in ("torchrec.distributed.planner", "torchrec"):
        logging.getLogger(name).setLevel(logging.ERROR)
    local = local_world(cfg, world_size)
    ebc, names = peers.embedding_module(cfg)
    curves = {n: c for n, c in zip(names, stats.tables, strict=True)}
    batch = max(1, stats.batch_size // world_size)
    topo = Topology(world_size=world_size, local_world_size=local, compute_device="cuda",
                    **peers.topology_args(cfg))
    with warnings.catch_warnings():  # TorchRec's deprecation notices, not ours
        warnings.simplefilter("ignore")
        algorithm = next(a for a, pol in ALGORITHMS.items() if pol == stats.policy)
        planners = [_Planner(name, cfg, topo, batch, stats.batch_size, curves, sim, kernels,
                             algorithm)
                    for name, sim in (("torchrec", False), ("simulator", True))]
    sharders = [EmbeddingBagCollectionSharder()]
    for p in planners:
        try:
            with warnings.catch_warnings():  # TorchRec's deprecation notices, not ours
                warnings.simplefilter("ignore")
                p.planner.plan(ebc, sharders)
        except PlannerError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"TorchRec's planner ({p.name}) found no plan on {world_size} "
                            f"GPU(s): {first}", field="--world-size") from None
    sides = []
    for p in planners:
        best = p.planner._best_plan
        priced = {}
        for q in planners:
            copy_ = copy.deepcopy(best)
            q.enumerator.populate_estimates(copy_)
            priced[q.name] = copy_
        own = priced[p.name]
        hbm = sum(s.storage.hbm for so in own for s in so.shards)
        ddr = sum(s.storage.ddr for so in own for s in so.shards)
        sides.append(PlanSide(p.name, _choices(best, priced),
                              {q: _rate(pl, world_size) for q, pl in priced.items()},
                              int(hbm), int(ddr)))
    return sides[0], simulator_choice(sides[0], sides[1])


def differences(a: PlanSide, b: PlanSide) -> list[str]:
    """Per table the plans place differently: which Perf term the two estimators disagree
    on most over the two choices (simulator minus TorchRec, ms)."""
    lines = []
    for x, y in zip(a.tables, b.tables, strict=True):
        if (x.sharding_type, x.compute_kernel, x.load_factor, x.ranks) == (
                y.sharding_type, y.compute_kernel, y.load_factor, y.ranks):
            continue
        if (x.sharding_type, x.compute_kernel, x.load_factor) == (
                y.sharding_type, y.compute_kernel, y.load_factor):
            was, now = (",".join(map(str, r)) for r in (x.ranks, y.ranks))
            lines.append(f"{x.table}: the same option on other ranks ({was} -> {now}): the "
                         "partitioner's balance of the ranks, no Perf term")
            continue
        gap = {t: (y.terms["simulator"][t] - x.terms["simulator"][t])
               - (y.terms["torchrec"][t] - x.terms["torchrec"][t]) for t in TERMS}
        term = max(gap, key=lambda t: abs(gap[t]))
        lines.append(
            f"{x.table}: {x.compute_kernel}/{x.sharding_type} -> {y.compute_kernel}/"
            f"{y.sharding_type}: {term} decides it (TorchRec prices the change at "
            f"{y.terms['torchrec'][term] - x.terms['torchrec'][term]:+.4g} ms, the simulator "
            f"at {y.terms['simulator'][term] - x.terms['simulator'][term]:+.4g} ms)")
    return lines


def format_plans(a: PlanSide, b: PlanSide) -> str:
    from scratchpipe_sim.experiments.run_tables import table

    def cell(c: TableChoice) -> str:
        lf = "" if c.load_factor is None else f" clf {c.load_factor:.3g}"
        return f"{c.compute_kernel} {c.sharding_type}{lf} r{','.join(map(str, c.ranks))}"

    body = [[x.table, cell(x), cell(y)] for x, y in zip(a.tables, b.tables, strict=True)]
    for key, label in (("torchrec", "iter ms by TorchRec"),
                       ("simulator", "iter ms by simulator")):
        body.append([label, f"{a.iter_ms[key]:.4g}", f"{b.iter_ms[key]:.4g}"])
    body.append(["HBM GB", f"{a.hbm_bytes / 1e9:.3f}", f"{b.hbm_bytes / 1e9:.3f}"])
    body.append(["DDR GB", f"{a.ddr_bytes / 1e9:.3f}", f"{b.ddr_bytes / 1e9:.3f}"])
    out = table(body, ["table", "TorchRec's plan", "simulator-backed plan"])
    return out + "".join(f"\n{side.planner}: {side.note}" for side in (a, b) if side.note)
