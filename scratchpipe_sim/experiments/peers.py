"""`compare-peers`: TorchRec's planner estimator beside this simulator (issue 25).

TorchRec's planner prices every sharding option with its own performance model
(`torchrec.distributed.planner.shard_estimators`): `EmbeddingPerfEstimator` (forward and
backward compute per shard, ms) and `EmbeddingStorageEstimator` (HBM / DDR bytes). Here the
config's tables go through a single-rank, TABLE_WISE `EmbeddingEnumerator` on a `Topology`
built from the config's hardware preset, once per compute kernel, and each kernel is put
beside the design that runs the same FBGEMM placement:

* `fused` (DEVICE) -> `gpu-only`: forward `gpu_gather`, backward `gpu_update`.
* `fused_uvm` (MANAGED) -> `uvm`: `forward` / `backward`.
* `fused_uvm_caching` (MANAGED_CACHING, at the config's cache load factor) -> `lru-cache`:
  `fetch` + `forward` / `backward`.

Only the TBE compute is compared: TorchRec's comms terms (input dist, output dist) are left
out, and the simulator's MLP and input stages too (each design's `phase_stages`). Both sides are
per batch, ms, summed over the tables (one rank runs them all).

Preset -> Topology (TorchRec's bandwidths are bytes per ms): `hbm_cap` =
`gpu.hbm_capacity_GiB`, `hbm_mem_bw` = `gpu.hbm_GBps`, `ddr_mem_bw` = `cpu.dram_GBps`,
`hbm_to_ddr_mem_bw` = `pcie.h2d_GBps` (the link UVM reads cross). TorchRec needs
torch, fbgemm-gpu-cpu and torchrec 1.8.0 (the `peers` extra, then torchrec --no-deps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scratchpipe_sim.errors import UserError

if TYPE_CHECKING:
    from scratchpipe_sim.config import Config

#: TorchRec compute kernel -> (simulator design, FBGEMM placement)
KERNEL_DESIGNS: dict[str, str] = {
    "fused": "gpu-only", "fused_uvm": "uvm", "fused_uvm_caching": "lru-cache"}
PHASES = ("forward", "backward")
#: what to install when the import fails
INSTALL_HINT = ("pip install -e '.[peers]' && pip install --no-deps torchrec==1.8.0 (needs "
                "the CPU torch 2.13 wheel)")
_BYTES_PER_MS_PER_GBPS = 1e9 / 1e3
_GIB = 1024 ** 3
#: DDR capacity given to the topology: large, so that no option is pruned for host memory
#: (the presets carry no host capacity)
DDR_CAP_BYTES = 4 * 1024 * _GIB


@dataclass(frozen=True)
class PeerRow:
    """One kernel, one phase: TorchRec's estimate beside the simulator's."""

    design: str
    kernel: str
    phase: str
    torchrec_ms: float
    simulated_ms: float
    hbm_bytes: int
    ddr_bytes: int
    measured_ms: float | None = None
    #: TorchRec's cache load factor (fused_uvm_caching; 0 otherwise)
    load_factor: float = 0.0

    @property
    def ratio(self) -> float:
        """simulated / torchrec (> 1: the simulator is slower)."""
        return self.simulated_ms / self.torchrec_ms if self.torchrec_ms > 0 else math.inf

    @property
    def closer(self) -> str | None:
        """Which side is closer to the measurement (in |log ratio|), when there is one."""
        if self.measured_ms is None:
            return None
        sim = abs(math.log(self.simulated_ms / self.measured_ms))
        trc = abs(math.log(self.torchrec_ms / self.measured_ms))
        return "simulator" if sim <= trc else "torchrec"

    def as_json(self) -> dict[str, Any]:
        return {"design": self.design, "kernel": self.kernel, "phase": self.phase,
                "torchrec_ms": self.torchrec_ms, "simulated_ms": self.simulated_ms,
                "ratio": self.ratio, "torchrec_hbm_bytes": self.hbm_bytes,
                "torchrec_ddr_bytes": self.ddr_bytes, "torchrec_load_factor": self.load_factor,
                "measured_ms": self.measured_ms, "closer": self.closer}


def import_torchrec(command: str = "compare-peers") -> Any:
    """The planner modules, or a UserError naming the missing package (exit 2)."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise UserError(f"{command} needs torch ({e.name or 'torch'} not importable); "
                        f"install: {INSTALL_HINT}", field="torch") from None
    try:
        import fbgemm_gpu  # noqa: F401
    except ImportError:
        raise UserError(f"{command} needs fbgemm-gpu-cpu (fbgemm_gpu not importable); "
                        f"install: {INSTALL_HINT}", field="fbgemm_gpu") from None
    try:
        import torchrec.distributed.planner.shard_estimators as est
    except ImportError:
        raise UserError(f"{command} needs torchrec==1.8.0 (torchrec not importable); "
                        f"install: {INSTALL_HINT}", field="torchrec") from None
    return est


def topology_args(cfg: Config) -> dict[str, float]:
    """TorchRec `Topology` keyword arguments for the config's hardware (bytes, bytes/ms)."""
    hw = cfg.hardware
    fields = {"gpu.hbm_capacity_GiB": hw.gpu.hbm_capacity_GiB, "gpu.hbm_GBps": hw.gpu.hbm_GBps,
              "cpu.dram_GBps": hw.cpu.dram_GBps, "pcie.h2d_GBps": hw.pcie.h2d_GBps}
    for name, v in fields.items():
        if v is None or not math.isfinite(float(v)) or float(v) <= 0:
            raise UserError(f"cannot map to a TorchRec Topology: expected a positive number, "
                            f"got {v!r}", source=hw.name or None, field=f"hardware.{name}")
    return {"hbm_cap": int(hw.gpu.hbm_capacity_GiB * _GIB),
            "ddr_cap": DDR_CAP_BYTES,
            "hbm_mem_bw": hw.gpu.hbm_GBps * _BYTES_PER_MS_PER_GBPS,
            "ddr_mem_bw": hw.cpu.dram_GBps * _BYTES_PER_MS_PER_GBPS,
            "hbm_to_ddr_mem_bw": hw.pcie.h2d_GBps * _BYTES_PER_MS_PER_GBPS}


def _optimizer_class(name: str) -> Any:
    """The optimizer class TorchRec's storage estimator keys its state multiplier on."""
    import torch
    import torchrec.optim as trec_optim

    return {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad,
            "rowwise-adagrad": trec_optim.RowWiseAdagrad}[name]


def embedding_module(cfg: Config) -> tuple[Any, list[str]]:
    """The config's tables as a TorchRec EmbeddingBagCollection on the meta device (no
    memory), its optimizer applied in backward, and the table names t0, t1, ..."""
    import torch
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    m = cfg.model
    dtype = {4: DataType.FP32, 2: DataType.FP16, 1: DataType.INT8}.get(
        m.tables.bytes_per_element)
    if dtype is None:
        raise UserError(f"TorchRec has no {m.tables.bytes_per_element}-byte float type; "
                        "expected 4, 2 or 1", field="model.tables.bytes_per_element")
    names = [f"t{i}" for i in range(m.table_count)]
    tables = [EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r,
                                 feature_names=[f"f{i}"], data_type=dtype)
              for i, (n, d, r) in enumerate(zip(names, m.dims, m.rows_per_table,
                                                strict=True))]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    apply_optimizer_in_backward(_optimizer_class(m.optimizer), ebc.parameters(), {"lr": 0.1})
    return ebc, names


def torchrec_estimates(cfg: Config, load_factor: float | None = None,
                       ) -> dict[str, dict[str, float]]:
    """Per kernel: forward_ms, backward_ms (summed over tables), hbm_bytes, ddr_bytes, from
    a single-rank TABLE_WISE enumeration on the CPU (tables on the meta device)."""
    import_torchrec()
    import logging

    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.shard_estimators import (
        EmbeddingPerfEstimator,
        EmbeddingStorageEstimator,
    )
    from torchrec.distributed.planner.types import ParameterConstraints, Topology
    from torchrec.distributed.types import CacheParams, ShardingType

    logging.getLogger("torchrec.distributed.planner.types").setLevel(logging.ERROR)
    m = cfg.model
    ebc, names = embedding_module(cfg)
    clf = cfg.cache.load_factor if load_factor is None else load_factor
    if clf is None:  # capacity_rows given: the same fraction of rows
        clf = cfg.capacity_rows() / cfg.total_rows
    topo = Topology(world_size=1, compute_device="cuda", **topology_args(cfg))
    out: dict[str, dict[str, float]] = {}
    for kernel in KERNEL_DESIGNS:
        cache = CacheParams(load_factor=clf) if kernel == "fused_uvm_caching" else None
        cons = {n: ParameterConstraints(sharding_types=[ShardingType.TABLE_WISE.value],
                                        compute_kernels=[kernel],
                                        pooling_factors=[float(p)], cache_params=cache)
                for n, p in zip(names, m.poolings, strict=True)}
        estimators = [EmbeddingPerfEstimator(topo, constraints=cons),
                      EmbeddingStorageEstimator(topo, constraints=cons)]
        options = EmbeddingEnumerator(topo, batch_size=m.batch_size, constraints=cons,
                                      estimator=estimators).enumerate(
            ebc, [EmbeddingBagCollectionSharder()])
        if len(options) != len(names):
            raise UserError(f"TorchRec's enumerator kept {len(options)} of {len(names)} "
                            f"tables for {kernel} (a table larger than the topology's "
                            "memory?)", field="model.tables")
        shards = [s for o in options for s in o.shards]
        out[kernel] = {"forward_ms": sum(s.perf.fwd_compute for s in shards),
                       "backward_ms": sum(s.perf.bwd_compute for s in shards),
                       "hbm_bytes": sum(s.storage.hbm for s in shards),
                       "ddr_bytes": sum(s.storage.ddr for s in shards),
                       "load_factor": clf if cache is not None else 0.0}
    return out


def simulated_phases(cfg: Config) -> dict[str, dict[str, float]]:
    """Per design: the TBE phases, ms per batch (the sums of its declared `phase_stages`)."""
    from scratchpipe_sim.timing import simulate
    from scratchpipe_sim.timing.stage_columns import phases_ms

    rows = simulate(cfg, list(KERNEL_DESIGNS.values()))
    return {row["design"]: phases_ms(row) for row in rows}


def compare(cfg: Config, simulated: dict[str, dict[str, float]] | None = None,
            measured: dict[str, dict[str, float]] | None = None,
            load_factor: float | None = None) -> list[PeerRow]:
    """Both sides for every kernel and phase; `measured`: design -> phase -> ms."""
    trc = torchrec_estimates(cfg, load_factor)
    sim = simulated_phases(cfg) if simulated is None else simulated
    rows = []
    for kernel, design in KERNEL_DESIGNS.items():
        if design not in sim:
            continue
        for phase in PHASES:
            meas = (measured or {}).get(design, {}).get(phase)
            rows.append(PeerRow(design, kernel, phase, trc[kernel][f"{phase}_ms"],
                                sim[design][phase], int(trc[kernel]["hbm_bytes"]),
                                int(trc[kernel]["ddr_bytes"]), meas,
                                trc[kernel]["load_factor"]))
    return rows


def compare_published(point_id: str, data: Any = None) -> list[PeerRow]:
    """A published point: its design simulated as `validate --published` does (the
    caching points' cache = distinct ids over the run x cfr, as TorchRec's load factor
    too), TorchRec on the same config, and the measurement."""
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.config.published_points import DATA_FILE, load_points
    from scratchpipe_sim.experiments import published as pub

    points = pub.select(load_points(data or DATA_FILE), [point_id])
    p = points[0]
    if p.skip_reason is not None:
        raise UserError(f"point {p.id} is skipped: {p.skip_reason}", field="--published")
    run_cache: dict[Any, Any] = {}
    results = pub.run_point(p, run_cache)
    if any(r.predicted_ms is None for r in results):
        raise UserError(f"point {p.id} cannot be simulated: {results[0].skipped}",
                        field="--published")
    cfg = load_config(pub.config_dict(p, num_batches=pub.TIMED_BATCHES,
                                      warmup_batches=pub.FILL_BATCHES))
    clf = None
    if p.design == "lru-cache":
        _trace, distinct = next(iter(run_cache.values()))
        clf = math.ceil(distinct * float(p.cache.cfr or 0.0)) / cfg.total_rows
    sim = {p.design: {r.phase: float(r.predicted_ms) for r in results}}
    meas = {p.design: {r.phase: r.measured_ms for r in results}}
    return compare(cfg, simulated=sim, measured=meas, load_factor=clf)


def format_table(rows: Sequence[PeerRow]) -> str:
    from scratchpipe_sim.experiments.run_tables import table

    has_meas = any(r.measured_ms is not None for r in rows)
    head = ["kernel", "design", "phase", "torchrec_ms", "simulated_ms", "sim/trc",
            "hbm_GB", "ddr_GB", "clf"] + (["measured_ms", "closer"] if has_meas else [])
    body = []
    for r in rows:
        line = [r.kernel, r.design, r.phase, f"{r.torchrec_ms:.4g}", f"{r.simulated_ms:.4g}",
                f"{r.ratio:.2f}", f"{r.hbm_bytes / 1e9:.3f}", f"{r.ddr_bytes / 1e9:.3f}",
                "-" if not r.load_factor else f"{r.load_factor:.4f}"]
        if has_meas:
            line += ["-" if r.measured_ms is None else f"{r.measured_ms:.4g}",
                     r.closer or "-"]
        body.append(line)
    return table(body, head)


def torchrec_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchrec")
    except PackageNotFoundError:
        return "(unknown version)"
