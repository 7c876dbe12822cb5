"""The full config tree: hardware, model (tables, MLPs), trace, cache, designs, seed.

A `Config` is frozen and fully validated; `Config.from_dict(d, source=...)` is the single
entry point (the loader and the sweep both use it). Derived quantities that several designs
need (row bytes with optimizer state, resolved cache capacity, MLP FLOPs) live here so every
design prices the same thing the same way.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from scratchpipe_sim.config.hardware import HardwareConfig, doc
from scratchpipe_sim.config.inputs import InputPipelineConfig
from scratchpipe_sim.config.schema import build, to_plain
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.safety.paths import plain_name

OPTIMIZERS = ("sgd", "adagrad", "rowwise-adagrad", "adam")
#: per table: sum / mean reduce a bag to one vector (TorchRec's EmbeddingBagCollection),
#: none keeps one row per lookup (EmbeddingCollection: sequence embeddings)
POOLING_MODES = ("sum", "mean", "none")
#: model.interaction: DLRM's dot, concatenation, TorchRec's DLRM_DCN cross network
INTERACTIONS = ("dot", "cat", "dcn-v2")
#: model.precision of the dense compute (bf16 / fp16: AMP)
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: model.framework: how the trainer issues its ops (timing/host_dispatch.py)
FRAMEWORKS = ("eager", "eager-per-table", "torchrec", "torchrec-unpipelined", "hugectr",
              "none")
GiB = 1 << 30


def gib(nbytes: float) -> str:
    """Bytes in GiB for a message: two decimals, or three significant digits below 0.01
    GiB (the tables of a 0.0001 GiB GPU are not "0.00 GiB")."""
    v = nbytes / GiB
    return f"{v:.2f}" if v >= 0.01 or v == 0 else f"{v:.3g}"


#: rows per table when neither the config nor a trace file gives them
DEFAULT_ROWS = 1_000_000
DEFAULT_TABLES = 8
PerTable = int | tuple[int, ...]


@dataclass(frozen=True)
class TablesConfig:
    count: int | None = field(default=None, metadata={
        "help": "number of embedding tables (null: the length of a per-table list, the "
                "trace's tables, or 8)", "min": 1})
    rows: PerTable | None = field(default=None, metadata={
        "help": "rows per table: one value for every table or a list, one per table (null: "
                "from the trace file, or 1,000,000)", "min": 1})
    dim: PerTable = field(default=64, metadata={
        "help": "embedding dimension: one value or a list, one per table", "min": 1})
    bytes_per_element: int = field(default=4, metadata={"help": "4 = fp32, 2 = fp16",
                                                        "min": 1})


def tier_rows(rows: int, share: float) -> tuple[int, int]:
    """(rows in DRAM, rows in the CXL tier) of one table of `rows` rows at `model.cxl_share`:
    round(share x rows) in CXL, every other row in DRAM, so the two add up exactly."""
    cxl = min(rows, max(0, round(share * rows)))
    return rows - cxl, cxl


def per_table(value: PerTable | None, n: int, default: int) -> tuple[int, ...]:
    """One value for every table, or the list itself, as a tuple of n per-table values."""
    if value is None:
        return (default,) * n
    return tuple(value) if isinstance(value, tuple) else (value,) * n


@dataclass(frozen=True)
class ModelConfig:
    tables: TablesConfig = field(default_factory=TablesConfig)
    pooling: PerTable = field(default=20, metadata={
        "help": "lookups per sample per table: one value or a list, one per table (a trace "
                "file's own bag lengths win)", "min": 1})
    pooling_mode: str | tuple[str, ...] = field(default="sum", metadata={
        "help": "sum, mean (a bag reduced to one vector per sample and table: TorchRec's "
                "EmbeddingBagCollection) or none (one output row per lookup: its "
                "EmbeddingCollection, sequence embeddings); one value or a list, one per table"})
    batch_size: int = field(default=2048, metadata={"help": "samples per mini-batch", "min": 1})
    index_bytes: int = field(default=8, metadata=doc(
        "bytes", "4 or 8", "DLRM's int64 indices and offsets") | {
        "help": "bytes per index and per offset copied to the GPU (4 = int32, 8 = int64, "
                "DLRM's default)", "min": 4, "max": 8})
    optimizer: str = field(default="sgd", metadata={
        "help": "sgd (no state), adagrad (one fp32 state per element), rowwise-adagrad (one "
                "fp32 per row, FBGEMM's default), adam (two fp32 states per element); where "
                "each design keeps the state: docs/timing.md, design_params.lru-cache.enforce_hbm",
        "choices": OPTIMIZERS})
    bottom_mlp: tuple[int, ...] | None = field(default=None, metadata={
        "help": "bottom MLP layer widths, dense features first; its output is the dense "
                "vector the interaction joins to the embeddings (dot: equal to the "
                "embedding dim); null: [13, 512, 256, the tables' dim]", "min": 1})
    top_mlp: tuple[int, ...] | None = field(default=None, metadata={
        "help": "top MLP layer widths, the interaction's output first (dot: D + F(F+1)/2, "
                "cat and dcn-v2: D + the tables' dims); null: [that width, 512, 256, 1]",
        "min": 1})
    interaction: str = field(default="dot", metadata={
        "help": "how the dense vector meets the embeddings: dot (DLRM's pairwise dot "
                "products, lower triangle), cat (concatenation) or dcn-v2 (concatenation "
                "then dcn_layers low-rank cross layers, TorchRec's DLRM_DCN)",
        "choices": INTERACTIONS})
    dcn_layers: int = field(default=3, metadata={
        "help": "cross layers of interaction dcn-v2 (TorchRec's dlrm_main --dcn_num_layers; "
                "MLPerf DLRM-DCNv2: 3)", "min": 1})
    dcn_rank: int = field(default=512, metadata={
        "help": "low rank r of each dcn-v2 cross layer (x0 * (V(U x) + b) + x; U: N x r; "
                "TorchRec's --dcn_low_rank_dim, MLPerf: 512)", "min": 1})
    precision: str = field(default="fp32", metadata={
        "help": "dense compute precision: fp32 (PyTorch's default: CUDA cores), tf32 (fp32 "
                "tensors on TF32 tensor cores), bf16 or fp16 (AMP: 16-bit GEMMs and "
                "activations, fp32 master weights)", "choices": PRECISIONS})
    cuda_graphs: bool = field(default=False, metadata={
        "help": "the dense work runs as one CUDA graph: one kernel_launch_ns for the graph "
                "and gpu.graph_node_ns per kernel, instead of one launch per kernel (eager)"})
    optimizer_foreach: bool = field(default=True, metadata={
        "help": "the dense optimizer steps every tensor in one multi-tensor (foreach) "
                "kernel per operation (PyTorch >= 2.0's default on CUDA); false: one step "
                "per parameter tensor, as PyTorch <= 1.13's torch.optim ran by default "
                "(foreach=None meant False), each tensor's update several host ops "
                "(timing/host_dispatch.py STEP_OPS)"})
    framework: str = field(default="none", metadata={
        "help": "how the trainer's CPU thread issues each iteration's ops "
                "(timing/host_dispatch.py; default none: the study's designs compare the "
                "memory system alone): eager (eager PyTorch dense part, fused embedding "
                "kernels, foreach optimizer: a ScratchPipe-style trainer as built), "
                "eager-per-table (an nn.EmbeddingBag per table, per-tensor optimizer: "
                "dlrm_s_pytorch), torchrec (eager plus TorchRec's per-feature KJT handling "
                "and its splits sync, pipelined by TrainPipelineSparseDist), "
                "torchrec-unpipelined (the same called in-line: the sync waits for the "
                "previous iteration), hugectr (graph-launched C++: no host issue cost) or "
                "none (the host never on the path: the memory system alone)",
        "choices": FRAMEWORKS})
    num_batches: int | str = field(default=100, metadata={
        "help": "mini-batches timed (after the cache warm-up); 'all': every batch of the "
                "trace file", "min": 1})
    warmup_batches: int = field(default=10, metadata={
        "help": "timed batches excluded from the statistics (pipeline fill)", "min": 0})
    cxl_share: float = field(default=0.0, metadata=doc(
        "fraction of every table's rows", "0-1", "the placement rule (docs/timing.md, CXL "
        "memory tier); 0: no tier") | {
        "help": "share of every table's rows placed in the CXL tier (hardware.cxl), the rest "
                "in DRAM: rows interleaved page by page across the two (Linux weighted "
                "interleave), so every gather of host rows finds this share of them there "
                "whatever the trace; round(share x rows) rows of each table (`tier_rows`). "
                "0: no tier", "min": 0, "max": 1})

    # -- per-table sizes ---------------------------------------------------------------------
    @property
    def table_count(self) -> int:
        for v in (self.tables.rows, self.tables.dim, self.pooling):
            if isinstance(v, tuple):
                return len(v)
        return self.tables.count if self.tables.count is not None else DEFAULT_TABLES

    @property
    def rows_per_table(self) -> tuple[int, ...]:
        return per_table(self.tables.rows, self.table_count, DEFAULT_ROWS)

    @property
    def dims(self) -> tuple[int, ...]:
        return per_table(self.tables.dim, self.table_count, 64)

    @property
    def poolings(self) -> tuple[int, ...]:
        return per_table(self.pooling, self.table_count, 20)

    @property
    def pooling_modes(self) -> tuple[str, ...]:
        v = self.pooling_mode
        return tuple(v) if isinstance(v, tuple) else (v,) * self.table_count

    @property
    def output_rows_per_table(self) -> tuple[int, ...]:
        """Embedding output rows of one sample, per table: 1 pooled vector, or (unpooled)
        one per lookup at the table's pooling factor (a trace file's own bag lengths are
        priced at the config's factor)."""
        return tuple(p if mode == "none" else 1
                     for p, mode in zip(self.poolings, self.pooling_modes, strict=True))

    def _state(self, dim: int) -> int:
        """Optimizer state bytes per row (FBGEMM's split_optimizer_states: momentum1 of D
        fp32 for adagrad, of one fp32 for rowwise-adagrad; momentum1 + momentum2 for adam)."""
        return {"sgd": 0, "adagrad": 4 * dim, "rowwise-adagrad": 4,
                "adam": 8 * dim}[self.optimizer]

    @property
    def row_bytes_per_table(self) -> tuple[int, ...]:
        """Bytes a lookup reads, per table (weights only)."""
        return tuple(d * self.tables.bytes_per_element for d in self.dims)

    @property
    def moved_row_bytes_per_table(self) -> tuple[int, ...]:
        """Bytes of a row that moves or is updated, per table (weights + optimizer state)."""
        return tuple(r + self._state(d) for r, d in zip(self.row_bytes_per_table, self.dims,
                                                        strict=True))

    def _mean(self, per_table: tuple[int, ...]) -> float:
        if len(set(per_table)) == 1:
            return per_table[0]
        rows = self.rows_per_table
        return sum(a * b for a, b in zip(per_table, rows, strict=True)) / sum(rows)

    @property
    def heterogeneous(self) -> bool:
        """Tables of different row sizes: bytes are then priced per table."""
        return len(set(self.row_bytes_per_table)) > 1

    @property
    def row_bytes(self) -> float:
        """Bytes per lookup: exact with one dim for all tables, else the mean over rows."""
        return self._mean(self.row_bytes_per_table)

    @property
    def moved_row_bytes(self) -> float:
        return self._mean(self.moved_row_bytes_per_table)

    @property
    def state_bytes(self) -> float:
        return self.moved_row_bytes - self.row_bytes

    @property
    def sample_output_bytes(self) -> int:
        """Embedding outputs of one sample: a pooled vector per table, or one row per lookup
        of an unpooled table (what the forward writes, the backward's gradients read, and
        hybrid and multi-gpu send)."""
        return sum(r * n for r, n in zip(self.row_bytes_per_table, self.output_rows_per_table,
                                         strict=True))

    @property
    def interaction_width(self) -> int:
        """Features the interaction hands the top MLP: dot D + F(F+1)/2 (the dense vector
        and the lower triangle of the (F+1)x(F+1) dot products, F tables); cat and dcn-v2
        the dense vector and every table's vector concatenated, D + sum of dims."""
        d = self.bottom_layers[-1]
        f = self.table_count
        if self.interaction == "dot":
            return d + f * (f + 1) // 2
        return d + sum(self.dims)

    @property
    def bottom_layers(self) -> tuple[int, ...]:
        """bottom_mlp, or its default [13, 512, 256, dim of the first table]."""
        return self.bottom_mlp if self.bottom_mlp is not None else (13, 512, 256, self.dims[0])

    @property
    def top_layers(self) -> tuple[int, ...]:
        """top_mlp, or its default [the interaction's width, 512, 256, 1]."""
        return (self.top_mlp if self.top_mlp is not None
                else (self.interaction_width, 512, 256, 1))


@dataclass(frozen=True)
class TraceConfig:
    path: str | None = field(default=None, metadata={
        "help": "trace file (.sptrace, .npy, text); null: generate"})
    format: str | None = field(default=None, metadata={"help": "reader format (null: guess)"})
    distribution: str = field(default="zipf", metadata={"help": "generator distribution"})
    alpha: float | None = field(default=1.05, metadata={"help": "zipf exponent", "gt": 0})
    reuse: float = field(default=0.0, metadata={
        "help": "fraction of each batch copied from the previous one", "min": 0, "max": 1})
    seed: int | None = field(default=None, metadata={"help": "null: the top-level seed",
                                                      "min": 0})
    params: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "extra generator parameters (e.g. hot_fraction)"})
    sample_rate: float = field(default=1.0, metadata={
        "help": "spatial sampling rate R (SHARDS): simulate the rows a hash keeps, caches "
                "of R x their rows, counts scaled by 1/R; 1 = the exact run "
                "(docs/sampling.md)", "gt": 0, "max": 1})
    sample_salts: int = field(default=3, metadata={
        "help": "hash salts a sampled run averages; the spread across them is reported "
                "beside each figure (`*_spread`)", "min": 1, "max": 64})


#: the cache keys a design's or a policy's own parameters replaced (issue 23): each is now
#: set where it is used, and an old key is an error naming its new place, never an alias
_SP = "design_params.scratchpipe"
MOVED_CACHE_KEYS = {
    **{k: f"set {_SP}.{k}" for k in ("lookahead", "on_overflow", "queue_depth",
                                     "pipeline", "planner", "collect", "refetch")},
    **{k: f"set {_SP}.{k} (and design_params.bagpipe.{k})"
       for k in ("plan_ns_per_id", "plan_ns_per_eviction", "plan_threads")},
    "bagpipe_lookahead": "set design_params.bagpipe.lookahead",
    "bagpipe_ttl_batches": "set design_params.bagpipe.ttl_batches",
    "static_policy": "set design_params.static-cache.policy",
    "static_profile": "set design_params.static-cache.profile",
    **{k: f"set design_params.lru-cache.{k} (and design_params.lru-prefetch.{k})"
       for k in ("enforce_hbm", "record_miss_counter")},
    "ways": "set cache.params.ways (the fbgemm-* policies' own parameter)",
}


@dataclass(frozen=True)
class CacheConfig:
    """The cache every cached design sizes alike; a design's or a policy's own knobs live
    with its code (`design_params`, `cache.params`), checked by the layer that knows it."""

    RENAMED_KEYS = MOVED_CACHE_KEYS

    policy: str = field(default="lru", metadata={
        "help": "policy of lru-cache / lru-prefetch: lru, lfu, fbgemm-lru, fbgemm-lfu, or any "
                "registered policy"})
    params: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "the policy's own parameters (e.g. ways: 16 for fbgemm-*), checked against "
                "its Params dataclass (scratchpipe_sim/policies/NAME.py); unset ones take "
                "its defaults"})
    capacity_rows: int | None = field(default=None, metadata={
        "help": "cache rows (all tables); null: load_factor x rows", "min": 1})
    load_factor: float | None = field(default=0.2, metadata={
        "help": "FBGEMM cache_load_factor: capacity = ceil(load_factor x rows)", "gt": 0,
        "max": 1})
    warmup_batches: int | str = field(default="auto", metadata={
        "help": "batches replayed through each cache policy before the timed batches "
                "(policy only, no timing): the cache warm-up; auto = on a generated trace, "
                "until first touches the cache has room for are below 1% of the measured "
                "lookups (docs/timing.md); on a recorded one, model.num_batches at most"})


@dataclass(frozen=True)
class Config:
    #: top-level sections a design's own parameters replaced: refused, naming the new key
    RENAMED_KEYS: ClassVar[dict[str, str]] = {
        "multi_gpu": "set design_params.multi-gpu (its gpus and sharding)"}

    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    input_pipeline: InputPipelineConfig = field(default_factory=InputPipelineConfig)
    designs: tuple[str, ...] | None = field(default=None, metadata={
        "help": "designs to run (names in scratchpipe_sim.timing.DESIGNS; null: every "
                "design whose class sets `default = True`, resolved by the timing layer)"})
    design_params: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "help": "each design's own parameters, by design name (e.g. scratchpipe: {lookahead: "
                "3}), checked against the design's Params dataclass (scratchpipe_sim/timing/"
                "designs/NAME.py) by the timing layer; unset ones take its defaults"})
    seed: int = field(default=0, metadata={"help": "seed of every random choice", "min": 0})
    name: str = field(default="", metadata={"help": "label for results"})
    _source: str | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def from_dict(d: dict[str, Any], source: str | None = None) -> Config:
        """Validate a plain (preset-expanded) dict; errors name `source` and the dotted key."""
        cfg: Config = build(Config, d, source)
        object.__setattr__(cfg, "_source", source)
        cfg.check()
        return cfg

    @property
    def source(self) -> str | None:
        return self._source

    @property
    def total_rows(self) -> int:
        return sum(self.model.rows_per_table)

    @property
    def cxl_rows_per_table(self) -> tuple[int, ...]:
        """Rows of each table in the CXL tier (`tier_rows`; 0 without a share)."""
        return tuple(tier_rows(n, self.model.cxl_share)[1] for n in self.model.rows_per_table)

    @property
    def cxl_fraction(self) -> float:
        """The share of host rows in the CXL tier, over all tables: the fraction of every
        gather of host rows the timing model prices on the tier (0: none)."""
        if self.model.cxl_share <= 0:
            return 0.0
        return sum(self.cxl_rows_per_table) / self.total_rows

    def capacity_rows(self) -> int:
        """Cache capacity in rows: `capacity_rows`, else ceil(load_factor x total rows).

        Capped at the total rows: a bigger cache cannot hold more (and the HBM check below
        still sees the requested size).
        """
        c = self.cache
        if c.capacity_rows is not None:
            return min(c.capacity_rows, self.total_rows)
        if c.load_factor is None:
            raise UserError("set cache.capacity_rows or cache.load_factor", source=self.source,
                            field="cache.capacity_rows")
        return max(1, math.ceil(c.load_factor * self.total_rows))

    def check(self) -> None:
        src = self.source
        if self.name:
            plain_name(self.name, src, "name", "config name")
        self.hardware.check(src)
        m = self.model
        self._check_tables()
        if m.index_bytes not in (4, 8):
            raise UserError(f"expected 4 (int32) or 8 (int64), got {m.index_bytes}",
                            source=src, field="model.index_bytes")
        if m.num_batches == "all" and self.trace.path is None:
            raise UserError("'all' needs a trace file (trace.path); expected a number of "
                            "batches for a generated trace", source=src,
                            field="model.num_batches")
        if isinstance(m.num_batches, str) and m.num_batches != "all":
            raise UserError(f"expected a whole number of batches or 'all', got "
                            f"{m.num_batches!r}", source=src, field="model.num_batches")
        if isinstance(m.num_batches, int) and m.warmup_batches >= m.num_batches:
            raise UserError(f"expected warmup_batches < num_batches ({m.num_batches}), got "
                            f"{m.warmup_batches}", source=src, field="model.warmup_batches")
        self._check_dense()
        if self.designs is not None and not self.designs:
            raise UserError("expected at least one design", source=src, field="designs")
        wb = self.cache.warmup_batches
        if isinstance(wb, str) and wb != "auto" or isinstance(wb, int) and wb < 0:
            raise UserError(f"expected a whole number of batches >= 0 or 'auto', got {wb!r}",
                            source=src, field="cache.warmup_batches")
        if not (self.trace.path is not None and m.tables.rows is None):
            self._check_cache_fits()  # else sizes come from the trace: checked once known
            self._check_cxl_fits()
        self._check_cxl()
        self.hardware.check_l2(src)

    def _check_cache_fits(self) -> None:
        src, m = self.source, self.model
        cap = self.cache.capacity_rows or self.capacity_rows()
        cache_bytes = cap * m.moved_row_bytes
        hbm = self.hardware.gpu.hbm_capacity_GiB * GiB
        if cache_bytes > hbm:
            key = ("cache.capacity_rows" if self.cache.capacity_rows is not None
                   else "cache.load_factor")
            raise UserError(f"the cache needs {gib(cache_bytes)} GiB ({cap} rows x "
                            f"{m.moved_row_bytes:g} B) but hardware.gpu.hbm_capacity_GiB is "
                            f"{self.hardware.gpu.hbm_capacity_GiB}: expected a cache that fits "
                            "in HBM", source=src, field=key)

    def _check_cxl(self) -> None:
        """A share of rows in the CXL tier needs the tier's bandwidth and latency."""
        if self.model.cxl_share <= 0:
            return
        cxl = self.hardware.cxl
        for key in ("bandwidth_GBps", "load_latency_ns"):
            if getattr(cxl, key) is None:
                raise UserError(f"model.cxl_share = {self.model.cxl_share:g} places rows in a "
                                "CXL tier, which needs this key: expected a number (e.g. "
                                "hardware.preset: h100-gen5-cxl) or model.cxl_share: 0",
                                source=self.source, field=f"hardware.cxl.{key}")

    def _check_cxl_fits(self) -> None:
        """The rows placed in the CXL tier (weights + optimizer state) fit its capacity."""
        cap = self.hardware.cxl.capacity_GiB
        if self.model.cxl_share <= 0 or cap is None:
            return
        placed = sum(n * b for n, b in zip(self.cxl_rows_per_table,
                                           self.model.moved_row_bytes_per_table, strict=True))
        if placed > cap * GiB:
            raise UserError(f"the CXL tier holds {placed / GiB:.2f} GiB of rows but "
                            f"hardware.cxl.capacity_GiB is {cap:g}: expected a smaller share",
                            source=self.source, field="model.cxl_share")

    def _check_dense(self) -> None:
        """MLP widths agree with the interaction: dot needs every table's dim equal to the
        bottom MLP's output (one (F+1) x D matrix), the top MLP's input is what the
        interaction produces (`ModelConfig.interaction_width`)."""
        m, src = self.model, self.source
        for key, layers in (("model.bottom_mlp", m.bottom_layers),
                            ("model.top_mlp", m.top_layers)):
            if len(layers) < 2:
                raise UserError("an MLP needs at least an input and an output width",
                                source=src, field=key)
        d = m.bottom_layers[-1]
        if m.interaction == "dot" and set(m.dims) != {d}:
            dims = sorted(set(m.dims))
            raise UserError(f"interaction dot joins the bottom MLP's output to every "
                            f"table's vector: expected its last width = the embedding dim "
                            f"{dims[0] if len(dims) == 1 else dims}, got {d} (or "
                            "model.interaction: cat / dcn-v2)", source=src,
                            field="model.bottom_mlp" if len(dims) == 1
                            else "model.interaction")
        gpu = self.hardware.gpu
        if (m.precision in ("bf16", "fp16") and gpu.tflops is None
                and getattr(gpu, f"peak_tflops_{m.precision}") is None):
            raise UserError(f"this GPU has no {m.precision} tensor cores "
                            f"(hardware.gpu.peak_tflops_{m.precision} is null): expected "
                            "another precision", source=src, field="model.precision")
        width = m.interaction_width
        if m.top_layers[0] != width:
            f = m.table_count
            how = (f"D + F(F+1)/2 = {d} + {f * (f + 1) // 2}" if m.interaction == "dot"
                   else f"D + the tables' dims = {d} + {sum(m.dims)}")
            raise UserError(f"expected the top MLP's first width = what interaction "
                            f"{m.interaction} produces, {how} = {width}; got "
                            f"{m.top_layers[0]}", source=src, field="model.top_mlp[0]")

    def _check_tables(self) -> None:
        """Per-table lists agree with each other and with tables.count."""
        m, src = self.model, self.source
        n = m.table_count
        for key, v in (("model.tables.count", m.tables.count), ("model.tables.rows",
                       m.tables.rows), ("model.tables.dim", m.tables.dim),
                       ("model.pooling", m.pooling), ("model.pooling_mode", m.pooling_mode)):
            size = v if key.endswith("count") else (len(v) if isinstance(v, tuple) else None)
            if size is not None and size != n:
                raise UserError(f"{size} tables here but {n} elsewhere in model (a per-table "
                                "list, or model.tables.count): expected one length",
                                source=src, field=key)
            if isinstance(v, tuple) and not v:
                raise UserError("expected at least one table", source=src, field=key)
        for i, mode in enumerate(m.pooling_modes):
            if mode not in POOLING_MODES:
                where = ("model.pooling_mode" if isinstance(m.pooling_mode, str)
                         else f"model.pooling_mode[{i}]")
                raise UserError(f"unknown value {mode!r}{closest(str(mode), POOLING_MODES)}; "
                                f"expected one of: {', '.join(POOLING_MODES)}", source=src,
                                field=where)

    def with_model(self, **changes: Any) -> Config:
        """This config with model fields replaced (sizes learnt from a trace), re-checked."""
        cfg = dataclasses.replace(self, model=dataclasses.replace(self.model, **changes))
        object.__setattr__(cfg, "_source", self.source)
        cfg.check()
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The plain resolved dict of a config (what `config show` prints and results keep)."""
    return cfg.to_dict()
