"""A simulator-backed `ShardEstimator` for TorchRec's planner (issue 45).

TorchRec ranks plans by each sharding option's per-shard `Perf` (forward / backward compute
and comms, prefetch). `SimulatorEstimator` (the `estimator=` of `EmbeddingEnumerator`, beside
TorchRec's storage estimator) fills every option the enumerator proposes:

* the compute terms from this model's per-phase pricing: the shard becomes a one-table
  config (its rows and dim, the config's element size, optimizer and hardware), its
  per-batch counts come from the trace's statistics (`torchrec_stats`: lookups and distinct
  ids per batch; at the option's cache load factor the rows filled, written back and left
  unplaced), and the design that runs the same FBGEMM placement (`peers.KERNEL_DESIGNS`;
  `dense`, data-parallel, as `gpu-only`) is run on one such batch through the Machine's
  helpers (`timing.run_design`): forward = gpu_gather / forward, backward = gpu_update /
  backward, prefetch = lru-cache's fetch (FBGEMM's cache prefetch);
* the comms terms (input / output dist, all-reduce) are TorchRec's own: the simulator's
  single-GPU designs do not model them, so both planners see the same comms;
* a shard's lookups: the global batch's for table- and column-wise shards, the shard's share
  of the rows for row-wise ones (rows / table rows of the lookups and distinct ids), one
  rank's share of the samples for data-parallel;
* storage: TorchRec's, except that a `fused_uvm_caching` shard's HBM drops the optimizer
  state of its cached rows: FBGEMM allocates a managed-caching table's state cacheable=False,
  so it stays in UVM (unless `design_params.lru-cache.enforce_hbm`; `_cache_stages`).

On-chip (L2 / LLC) hits are not in the statistics: every lookup is priced from HBM or host
memory, as a simulator run with `hardware.gpu.l2_MiB: 0` and `cpu.llc_MiB: 0` does.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from scratchpipe_sim.experiments.peers import KERNEL_DESIGNS
from scratchpipe_sim.experiments.torchrec_stats import TableCurve

if TYPE_CHECKING:
    from scratchpipe_sim.config import Config

#: TorchRec compute kernel -> the design priced for it (dense: data parallel, in HBM)
PRICED_KERNELS: dict[str, str] = {**KERNEL_DESIGNS, "dense": "gpu-only"}
#: design -> TorchRec Perf term -> the design's stages summed into it
PERF_STAGES: dict[str, dict[str, tuple[str, ...]]] = {
    "gpu-only": {"fwd_compute": ("gpu_gather",), "bwd_compute": ("gpu_update",),
                 "prefetch_compute": ()},
    "uvm": {"fwd_compute": ("forward",), "bwd_compute": ("backward",),
            "prefetch_compute": ()},
    "lru-cache": {"fwd_compute": ("forward",), "bwd_compute": ("backward",),
                  "prefetch_compute": ("fetch",)},
}
ROW_SPLIT = ("row_wise", "table_row_wise", "grid_shard")


@dataclasses.dataclass(frozen=True)
class ShardCounts:
    """One shard's expected per-batch counts (floats: expectations)."""

    rows: int
    dim: int
    samples: float
    accesses: float
    unique: float
    load_factor: float = 0.0
    fills: float = 0.0
    writebacks: float = 0.0
    unplaced: float = 0.0
    unique_unplaced: float = 0.0


def shard_counts(curve: TableCurve, kernel: str, sharding_type: str, rows: int, dim: int,
                 samples: float, world_size: int, clf: float | None) -> ShardCounts:
    """The counts one shard sees per global batch (module doc: which share of the table's)."""
    share = 1.0
    if sharding_type in ROW_SPLIT:
        share = rows / curve.rows if curve.rows else 1.0
    elif sharding_type == "data_parallel":
        share = 1.0 / world_size
        samples = samples / world_size
    A, U = curve.accesses_per_batch * share, curve.expected_lookups * share
    if kernel != "fused_uvm_caching":
        return ShardCounts(rows, dim, samples, A, U)
    x = 0.0 if clf is None else float(clf)
    return ShardCounts(rows, dim, samples, A, U, x, curve.fill_rate(x) * U,
                       curve.writeback_rate(x) * U, curve.unplaced_access_rate(x) * A,
                       curve.unplaced_unique_rate(x) * U)


def shard_config(cfg: Config, counts: ShardCounts, design: str) -> Config:
    """The config of one shard alone: one table of its rows and dim, its batch."""
    from scratchpipe_sim.config import Config as _Config

    d = cfg.to_dict()
    m = d["model"]
    m["tables"] = {"count": 1, "rows": int(counts.rows), "dim": int(counts.dim),
                   "bytes_per_element": cfg.model.tables.bytes_per_element}
    samples = max(1, int(round(counts.samples)))
    m["batch_size"] = samples
    m["pooling"] = max(1, int(round(counts.accesses / samples)))
    m["pooling_mode"] = "sum"
    m["cxl_share"] = 0.0
    d["designs"] = [design]
    cache = d["cache"]
    cache["capacity_rows"] = max(1, int(round(counts.load_factor * counts.rows)))
    cache["load_factor"] = None
    if not str(cache.get("policy", "")).startswith("fbgemm-"):
        cache["policy"], cache["params"] = "fbgemm-lru", {}
    return _Config.from_dict(d, source=cfg.source)


def price_shard(cfg: Config, counts: ShardCounts, design: str) -> dict[str, float]:
    """The design's stages (ns) for one batch of `counts` on the shard's config."""
    from scratchpipe_sim.timing.counts import Workload
    from scratchpipe_sim.timing.designs.design_registry import DESIGNS
    from scratchpipe_sim.timing.runner import run_design

    scfg = shard_config(cfg, counts, design)
    cols = {"accesses": counts.accesses, "unique": counts.unique, "samples": counts.samples,
            "hits": max(counts.accesses - counts.unplaced, 0.0),
            "misses": counts.fills + counts.unique_unplaced, "fills": counts.fills,
            "evictions": counts.writebacks, "writebacks": counts.writebacks,
            "unplaced": counts.unplaced, "unique_unplaced": counts.unique_unplaced}
    w = Workload(scfg.cache.policy if design == "lru-cache" else "none",
                 scfg.capacity_rows(), {k: np.array([float(v)]) for k, v in cols.items()}, {})
    m = run_design(scfg, DESIGNS.get(design)(scfg), w)
    return {name: float(m.stage_ns[name][0]) for name in m.stage_order}


def perf_terms(stages_ns: Mapping[str, float], design: str) -> dict[str, float]:
    """A design's stages (ns) as TorchRec's Perf compute terms (ms)."""
    return {term: sum(stages_ns.get(s, 0.0) for s in ss) / 1e6
            for term, ss in PERF_STAGES[design].items()}


def state_share(cfg: Config) -> float:
    """Optimizer state bytes per weight byte (Adam 2, SGD 0)."""
    m = cfg.model
    return m.state_bytes / m.row_bytes if m.row_bytes else 0.0


@functools.cache
def _estimator_class() -> type:
    """The ShardEstimator subclass (TorchRec imported here, on first use)."""
    from torchrec.distributed.planner.shard_estimators import EmbeddingPerfEstimator
    from torchrec.distributed.planner.types import ShardEstimator, Storage

    class SimulatorEstimator(ShardEstimator):
        """Per-shard compute from the simulator's designs, comms from TorchRec (module doc).

        `curves`: table name -> its statistics; `cfg`: the config whose hardware, element
        size and optimizer price every shard. `unpriced` collects the (table, kernel) pairs
        left at TorchRec's figures (a kernel no design runs); `priced` counts the shards."""

        def __init__(self, topology: Any, constraints: Any = None, *, cfg: Config,
                     curves: Mapping[str, TableCurve], samples: float) -> None:
            self._topology = topology
            self._constraints = constraints
            self._cfg = cfg
            self._curves = dict(curves)
            self._samples = float(samples)
            self._torchrec = EmbeddingPerfEstimator(topology, constraints=constraints)
            self._memo: dict[tuple[ShardCounts, str], dict[str, float]] = {}
            self._share = state_share(cfg)
            lru = cfg.design_params.get("lru-cache", {}) or {}
            self._state_in_hbm = bool(lru.get("enforce_hbm", False))
            self.unpriced: set[tuple[str, str]] = set()
            self.priced = 0

        def terms(self, counts: ShardCounts, design: str) -> dict[str, float]:
            key = (counts, design)
            if key not in self._memo:
                self._memo[key] = perf_terms(price_shard(self._cfg, counts, design), design)
            return self._memo[key]

        def estimate(self, sharding_options: list[Any], sharder_data_map: Any = None) -> None:
            self._torchrec.estimate(sharding_options, sharder_data_map)  # comms, and a
            # fallback for a kernel no design runs
            ws = self._topology.world_size
            for so in sharding_options:
                design = PRICED_KERNELS.get(so.compute_kernel)
                curve = self._curves.get(so.name)
                if design is None or curve is None:
                    self.unpriced.add((so.name, so.compute_kernel))
                    continue
                clf = so.cache_load_factor
                for shard in so.shards:
                    rows, dim = int(shard.size[0]), int(shard.size[1])
                    counts = shard_counts(curve, so.compute_kernel, so.sharding_type, rows,
                                          dim, self._samples, ws, clf)
                    t = self.terms(counts, design)
                    shard.perf = dataclasses.replace(shard.perf, **t)
                    self.priced += 1
                    if (so.compute_kernel == "fused_uvm_caching" and not self._state_in_hbm
                            and shard.storage is not None and clf):
                        cached = round(rows * dim * so.tensor.element_size() * clf)
                        drop = math.ceil(cached * self._share)
                        shard.storage = Storage(hbm=max(shard.storage.hbm - drop, 0),
                                                ddr=shard.storage.ddr, ssd=shard.storage.ssd)

    return SimulatorEstimator


def simulator_estimator(topology: Any, constraints: Any, cfg: Config,
                        curves: Mapping[str, TableCurve], samples: float) -> Any:
    """A `SimulatorEstimator` (needs TorchRec): put it after TorchRec's storage estimator
    in the enumerator's `estimator=` list, so its storage change applies."""
    return _estimator_class()(topology, constraints, cfg=cfg, curves=curves, samples=samples)
