"""`cluster`: the tables sharded over every GPU of a multi-node cluster (TorchRec / HugeCTR
model-parallel embeddings, data-parallel dense part), the exchange over NVLink and the network.

The cluster is `hardware.cluster.nodes` x `hardware.interconnect.gpus_per_node` = n ranks.
Tables are placed (`design_params.cluster.sharding`: table-wise, row-wise or auto by
`timing/placement.py` as `multi-gpu`'s; hybrid, HugeCTR's: small tables data-parallel, the
others row-wise over one node; column-wise, TorchRec's CW: each table's dim cut into c
slices of `column_shard_dim`'s block on c consecutive ranks, or per table by `columns`; or
`placement`: table -> the ranks of its shard group it lives on, with `columns` c x j ranks:
TorchRec's grid, or each slice's own rank, repeats allowed: its column_wise(ranks=[...]))
inside shard groups of L = `shard_group` ranks (null: L = n); with L < n the groups are
replicas (2D sparse parallelism) whose embedding weights and optimizer state are
all-reduced every `sync_every_batches` batches. Each rank's lookups come from the global
trace by its shards (`timing/rank_streams.py`: one trace in, per-rank streams out; a column
slice is a table of its own, as TorchRec's CW is its TW of the slices, so every lookup of a
table reaches each of its slices' ranks, priced at the slice's row bytes); with
`trace_scope: shard-group` the trace is one group's batch and the statistically identical
groups are priced once.

The simulated rank is the critical one: per batch each quantity is the largest rank's (every
collective waits for the slowest rank). Pricing one rank is exact when one rank is the
largest on every quantity of every batch — row-wise sharding of evenly spread rows, or ranks
with statistically identical shards — and an upper bound otherwise (the max of each quantity
may come from different ranks). Per batch, as `multi-gpu`:

    input_wait   its B/n samples loaded on its share of the node's cores and copied with
                 their ids over its PCIe link (its own input pipeline)
    input_dist   what is left of the ids all-to-all to the shards' owners (ids deduplicated
                 per destination with `dedup`), issued `pipeline` batches ahead
    rank_fetch   (rank_cache) its cache's misses from host DRAM: on demand, or batch i+1's
                 during batch i (lru-prefetch, scratchpipe)
    emb_forward  gpu_forward(its lookups) from its HBM; with unpooled tables, after it
                 TorchRec's copies of the rows (`sequence_copies`, and before it dedup's
                 sort of the rank's ids)
    output_dist  the output all-to-all inside the shard group (`output_bytes`, closed form;
                 unpooled rows: the busiest rank's, counted, `unpooled_exchange`)
    mlp          mlp(B/n)
    grad_dist    the same all-to-all reversed
    emb_backward (unpooled: the gradients' copies, then) gpu_backward(its lookups, its
                 unique rows) || the dense ring all-reduce over
                 all n ranks (with the data-parallel tables' gradients) || (2D, every
                 sync_every_batches-th batch) the all-reduce of its shard's rows with their
                 state over the n / L replicas

Collectives go through `Machine.cluster_collective` (`timing/collectives.py`: NVLink inside
a node, each GPU's share of the NICs across nodes). The schedule across batches
(`pipeline`: none, sparse-dist — TorchRec's TrainPipelineSparseDist, the default —, nestpipe
with `microbatches`), the rank's input pipeline and the node's host DRAM and cores shared by
its G ranks, and a PCIe switch's uplink shared by the GPUs behind it (DGX A100), are
`timing/cluster_pipeline.py`'s. A rank's HBM holds its shards (or its cache) and the
batches in flight (`batch_bytes`: ids, routed ids, outputs and their gradients,
activations, as many batches as `pipeline` keeps): placement, the cache's capacity and
`max_model_GiB` get what is left. Not modelled (yet): NestPipe's dual-buffer
synchronization and key-centric clustering, NCCL's ordering of two batches' collectives on
one communicator (processor sharing instead), SHARP in-network reductions, the L2 hits of
each rank's own stream (the lookups are priced with no L2 hits), a node's ranks out of
phase on the host (docs/timing.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.config.hardware import doc
from scratchpipe_sim.config.model import gib
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.replay_cache import (
    POLICY_SOURCES,
    NotCached,
    cached_columns,
    lookup_only,
    policy_columns,
    policy_key,
)
from scratchpipe_sim.policies.scratchpipe import PinnedOverflow
from scratchpipe_sim.timing.cluster_pipeline import (
    ROUTE_AHEAD,
    BatchBytes,
    RankInputs,
    check_pipeline,
    fwp,
    share_node_host,
    share_pcie_switch,
)
from scratchpipe_sim.timing.collectives import Group
from scratchpipe_sim.timing.counts import Where
from scratchpipe_sim.timing.dense_compute import saved_activation_bytes
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_parameters import (
    params_tuple,
    policy_params,
)
from scratchpipe_sim.timing.designs.design_registry import DESIGNS
from scratchpipe_sim.timing.designs.multi_gpu import mlp_param_bytes
from scratchpipe_sim.timing.machine import Collective
from scratchpipe_sim.timing.placement import (
    CW_ALIGN,
    GiB,
    column_block,
    column_shard_bytes,
    shard,
    table_bytes,
)
from scratchpipe_sim.timing.rank_streams import (
    RankCounts,
    RankPlan,
    rank_counts,
    rank_stream,
    split_columns,
    table_trace,
)
from scratchpipe_sim.timing.sequence_copies import MODES, SequenceCopies, sequence_copies
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.forked import can_fork, fork_map, usable_cores

A2A, AR = Collective.ALL_TO_ALL, Collective.ALL_REDUCE
#: batches a per-rank scratchpipe cache pins (the one training, the one being fetched)
RANK_LOOKAHEAD = 2
#: the most micro-batches a batch is split into (`microbatches`)
MAX_MICROBATCHES = 1024
#: the config key of this design's parameters (errors name it)
PARAMS_KEY = "design_params.cluster"


@dataclass(frozen=True)
class ClusterParams:
    sharding: str = field(default="auto", metadata=doc(
        "mode", "table-wise, row-wise, auto, hybrid, column-wise",
        "TorchRec's sharding types (torchrec/distributed/types.py ShardingType) and "
        "HugeCTR's hybrid; auto: multi-gpu's") | {
        "help": "table-wise (whole tables per rank), row-wise (every table split over the "
                "shard group), auto (table-wise, row-wise for a table larger than one GPU), "
                "hybrid (HugeCTR's: small tables data-parallel, see dp_max_MiB) or "
                "column-wise (TorchRec's CW: each table's dim cut into slices of "
                "column_shard_dim's block, one slice per rank of a run of consecutive ranks, "
                "every row on every slice; a table of one block stays table-wise)",
        "choices": ("table-wise", "row-wise", "auto", "hybrid", "column-wise")})
    column_shard_dim: int = field(default=128, metadata=doc(
        "columns", "4 - the tables' dim (a multiple of 4)",
        "TorchRec's MIN_CW_DIM = 128 (torchrec/distributed/planner/constants.py), its "
        "planner's col_wise_shard_dim default") | {
        "help": "the narrowest column shard, columns: with sharding column-wise a table's "
                "slice is TorchRec's block, the smallest divisor of its dim that is at least "
                "this and a multiple of 4, else the whole dim (torchrec/distributed/"
                "sharding_plan.py _find_base_dim, _calculate_cw_shard_sizes_and_offsets); "
                "`columns` slices may not be narrower. 128: TorchRec's MIN_CW_DIM "
                "(planner/constants.py), its planner's col_wise_shard_dim default",
        "min": 4})
    columns: dict[str, int] | None = field(default=None, metadata=doc(
        "column shards per table",
        "1 - the shard group's ranks (more where placement reuses ranks), dividing the dim",
        "the config (TorchRec's column_wise(ranks) in torchrec/distributed/"
        "sharding_plan.py); null: none") | {
        "help": "table index -> its column shards k (TorchRec's column_wise(ranks)): the dim "
                "cut into k equal slices of dim / k columns (a multiple of 4, at least "
                "column_shard_dim), each on its own rank with every row of its slice and "
                "every lookup of the table; with `placement` naming the table, its k x j "
                "consecutive ranks (j > 1: each slice row-wise over j ranks, TorchRec's grid "
                "shard) or slice i on the i-th j ranks it lists (a rank may hold several), "
                "else k consecutive ranks with the least load that have room (a run "
                "inside one node: TorchRec's table-wise-column-wise). "
                "Optimizer state: element-wise splits, rowwise-adagrad's per-row fp32 is kept "
                "on every slice (null: none)"})
    dp_max_MiB: float = field(default=64.0, metadata={
        "help": "with sharding hybrid (HugeCTR's placement): tables whose footprint is at "
                "most this are data-parallel (replicated on every rank, their gradients in "
                "the dense all-reduce); the rest row-wise over one node's GPUs (over the "
                "shard group when it is one node). 64: an assumption that fits MLPerf E3.6 "
                "at 659 TFLOP/s; a HugeCTR DLRM sample makes tables of <= 6,000 rows "
                "data-parallel (~4.5 MiB here), docs/validation.md", "min": 0.0})
    trace_scope: str = field(default="global", metadata={
        "help": "global: the trace's mini-batch is the global batch; shard-group: it is one "
                "shard group's batch, the n / L groups are statistically identical replicas "
                "priced once (global batch = model.batch_size x n / L)",
        "choices": ("global", "shard-group")})
    placement: dict[str, tuple[int, ...]] | None = field(default=None, metadata={
        "help": "table index -> the ranks of its shard group holding it (one rank: "
                "table-wise; a run of consecutive ranks: row-wise over them, or its `columns` "
                "slices on them; for a column-split table of k slices, k x j ranks: slice i "
                "on the i-th j listed, a consecutive run each, any ranks, a rank may hold "
                "several slices, as TorchRec's column_wise(ranks=[...])); tables not named "
                "are placed by `sharding` (null: all by `sharding`)"})
    shard_group: int | None = field(default=None, metadata={
        "help": "ranks a copy of the tables is sharded over (2D sparse parallelism: the "
                "groups are replicas); must divide the ranks (null: every rank)", "min": 1})
    sync_every_batches: int = field(default=1, metadata={
        "help": "with shard_group below the ranks: batches between all-reduces of the "
                "replicas' embedding rows and optimizer state", "min": 1})
    rank_cache: str = field(default="none", metadata={
        "help": "none: every shard in HBM; else each rank's shards in host DRAM (its node's "
                "hardware.dram_capacity_GiB / gpus_per_node) behind a per-rank HBM cache of "
                "cache.capacity_rows rows (or cache.load_factor x its shard's rows), replayed "
                "on the rank's own stream: lru-cache (on demand), lru-prefetch (batch i+1 "
                "fetched during batch i's exchange, MLP and backward), scratchpipe (batch i+1 "
                "fetched during all of batch i, its `scratchpipe` policy)",
        "choices": ("none", "lru-cache", "lru-prefetch", "scratchpipe")})
    cached_ranks: int = field(default=1, metadata={
        "help": "with rank_cache: ranks whose caches are replayed (the most loaded first, "
                "spread over the cores), the largest count of each batch priced", "min": 1})
    dedup: bool = field(default=False, metadata={
        "help": "deduplicate the ids each rank sends before the ids all-to-all (TorchRec / "
                "dynamicemb input dist): fewer ids sent and looked up"})
    sequence_copies: str = field(default="torchrec", metadata=doc(
        "mode", "torchrec, none",
        "TorchRec v1.1 (2025-04): github.com/pytorch/torchrec torchrec/distributed/"
        "comm_ops.py All2All_Seq_Req (permute_2D_sparse_data, GRADIENT_DIVISION), "
        "dist_data.py SequenceEmbeddingsAwaitable (unbucketize index_select), "
        "modules/utils.py construct_jagged_tensors (dedup's reverse-index index_select)") | {
        "help": "the copies TorchRec makes of an unpooled (sequence) table's rows around "
                "its output and gradient all-to-alls, priced on the rank's HBM at "
                "stream_efficiency (timing/sequence_copies.py): torchrec (the permutes "
                "before and after the all-to-all, the unbucketize and, with dedup, the "
                "reverse-index expand and their backward index_add_s, the split's cat, the "
                "gradient division; with dedup the sort of the rank's ids) or none (the "
                "all-to-all's buffers used as they are). Pooled tables: none either way",
        "choices": MODES})
    unpooled_exchange: str = field(default="counted", metadata=doc(
        "mode", "counted, even",
        "the per-rank counts (timing/rank_streams.py): row-wise blocks of ceil(rows / k) "
        "rows, TorchRec's RW bucketize (torchrec/distributed/sharding/rw_sharding.py)") | {
        "help": "the unpooled rows each rank sends and receives in the output and gradient "
                "all-to-alls: counted (the busiest rank's, from the per-rank counts: a "
                "row-wise table of few rows keeps them on its first ranks, which serve "
                "every duplicate of them without dedup) or even (output_bytes' closed form, "
                "the rows spread evenly over the span's ranks). Pooled tables: the closed "
                "form either way",
        "choices": ("counted", "even")})
    pipeline: str = field(default="sparse-dist", metadata={
        "help": "the schedule across batches (timing/cluster_pipeline.py): none (TorchRec's "
                "TrainPipelineBase: batch i's ids all-to-all in line), sparse-dist "
                "(TorchRec's TrainPipelineSparseDist: batch i+1's ids all-to-all during "
                "batch i, on the same NICs) or nestpipe (NestPipe, arXiv 2604.06956: key "
                "routing two batches ahead, the output and gradient all-to-alls in "
                "`microbatches` chunks overlapping the dense work)",
        "choices": ("none", "sparse-dist", "nestpipe")})
    microbatches: int = field(default=1, metadata=doc(
        "micro-batches per batch", "1-16",
        "NestPipe's Frozen-Window Pipelining (arXiv 2604.06956); 1: no split") | {
        "help": "with pipeline nestpipe: chunks the output and gradient all-to-alls of a "
                "batch are split into, each overlapping the previous chunk's dense forward "
                "and backward; must divide a rank's batch", "min": 1,
        # each chunk is simulated (65,536 of them priced 3 batches in 31 s): 1024 is far
        # beyond NestPipe's few and a fraction of a second a batch
        "max": MAX_MICROBATCHES})


class Unfit(UserError):
    """The shards do not fit the memory that holds them (HBM, or host DRAM with a rank
    cache): `Cluster` adds which memory and how much of it to the line."""


def cluster_ranks(cfg: Config) -> int:
    return cfg.hardware.cluster.nodes * cfg.hardware.interconnect.gpus_per_node


def group_size(cfg: Config, p: ClusterParams) -> int:
    """L, checked: it divides the ranks."""
    n = cluster_ranks(cfg)
    L = n if p.shard_group is None else p.shard_group
    if L > n or n % L:
        raise UserError(f"a shard group of {L} ranks does not divide the cluster's {n} ranks "
                        f"(hardware.cluster.nodes x gpus_per_node): expected a divisor of {n}",
                        source=cfg.source, field=f"{PARAMS_KEY}.shard_group")
    return L


def scalar_checks(cfg: Config, p: ClusterParams) -> tuple[int, int]:
    """The cluster's checks that need no table size (one-line errors naming the key): the
    shard group divides the ranks, a node's GPUs fill its PCIe switches, each rank's local
    batch is whole and `microbatches` divide it. Returns (L, the ranks the trace's batch
    covers: every rank, or one shard group with `trace_scope: shard-group`)."""
    L = group_size(cfg, p)
    G = cfg.hardware.interconnect.gpus_per_node
    per_switch = cfg.hardware.pcie.gpus_per_switch
    if G % per_switch:  # the ranks of a node fill its switches (`share_pcie_switch`)
        raise UserError(f"{per_switch} GPUs per PCIe switch do not divide "
                        f"interconnect.gpus_per_node = {G}: expected a divisor of {G}",
                        source=cfg.source, field="hardware.pcie.gpus_per_switch")
    traced = cluster_ranks(cfg) if p.trace_scope == "global" else L
    B = cfg.model.batch_size
    if B % traced:  # a rank's local batch is whole (TorchRec, HugeCTR)
        scope = "the cluster's" if p.trace_scope == "global" else "a shard group's"
        raise UserError(f"a batch of {B:,} samples over {scope} {traced} ranks is "
                        f"{B / traced:g} a rank: expected a multiple of "
                        f"{traced} (each rank's local batch whole, as TorchRec's "
                        "and HugeCTR's global batch is)", source=cfg.source,
                        field="model.batch_size")
    check_pipeline(cfg, p, B / traced, PARAMS_KEY)
    return L, traced


@dataclass(frozen=True)
class Layout:
    """Each table's span inside a shard group of `group` ranks: its first local rank
    (`start[t]`) and its width (`span[t]`: 1 table-wise, k row-wise over k ranks, 0
    data-parallel on every rank), and the HBM each local rank holds. `cols[t]` (empty: all
    1): c column slices, each row-wise over span / c consecutive ranks of the span (c = span:
    column-wise; 1 < c < span: TorchRec's grid), or from the ranks `at[t]` names (then
    `start[t]` is the lowest and `span[t]` counts a rank once per slice part it holds).
    `sizes[t]` is all of t's shards' HBM."""

    group: int
    start: tuple[int, ...]
    span: tuple[int, ...]
    used_bytes: tuple[float, ...]
    cols: tuple[int, ...] = ()
    #: per table the first local rank of each column slice (`RankPlan.at`; empty: slice i
    #: on the span's i-th run)
    at: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, L: int, start: list[int], span: list[int], sizes: list[float],
           cols: list[int] | None = None, at: dict[int, tuple[int, ...]] | None = None
           ) -> Layout:
        """`at`: the tables whose slices sit on named ranks (the rest: consecutive runs);
        kept only where it differs from the runs."""
        split = cols is not None and any(c > 1 for c in cols)
        c_t = list(cols) if split else [1] * len(start)
        runs = [tuple(s0 + i * (k // c) for i in range(c))
                for s0, k, c in zip(start, span, c_t, strict=True)]
        firsts = [tuple((at or {}).get(t, r)) for t, r in enumerate(runs)]
        used = [0.0] * L
        for t, k in enumerate(span):
            for g in span_ranks(L, k, c_t[t], firsts[t]):
                used[g] += sizes[t] / max(k, 1)
        return cls(L, tuple(start), tuple(span), tuple(used), tuple(cols) if split else (),
                   tuple(firsts) if firsts != runs else ())

    def columns(self, t: int) -> int:
        """Column slices of table t (1: not column-split)."""
        return self.cols[t] if self.cols else 1

    def slice_starts(self, t: int) -> tuple[int, ...]:
        """The first local rank of each of table t's slices (one slice if not split)."""
        if self.at:
            return self.at[t]
        c = self.columns(t)
        return tuple(self.start[t] + i * (self.span[t] // c) for i in range(c))

    def holds(self) -> np.ndarray:
        """[local rank, table]: the parts of model-parallel t a rank holds (a slice's 1/j
        of its rows each; 2 where two slices of a table share the rank; 0 for a
        data-parallel table, which takes no part in the exchange)."""
        out = np.zeros((self.group, len(self.span)))
        for t, k in enumerate(self.span):
            if k == 0:
                continue
            for g in span_ranks(self.group, k, self.columns(t), self.slice_starts(t)):
                out[g, t] += 1
        return out


def span_ranks(L: int, span: int, c: int, firsts: tuple[int, ...]) -> list[int]:
    """The local ranks holding part of a table of `span` ranks in c slices whose first
    ranks are `firsts`, with repeats (every rank once for a data-parallel table)."""
    if span == 0:
        return list(range(L))
    j = span // c
    return [g for a in firsts for g in range(a, a + j)]


def table_index(key: str, T: int, source: str | None, where: str) -> int:
    """A `placement` / `columns` key as its table index: ASCII digits in their plain
    spelling ("3", not "03", "+3" or a superscript digit, which str.isdigit accepts and
    int() refuses), below T; a one-line error naming `where` otherwise."""
    if not (key.isascii() and key.isdigit() and str(int(key)) == key) or int(key) >= T:
        raise UserError(f"no table {key!r}: expected a table index 0-{T - 1}", source=source,
                        field=where)
    return int(key)


def cluster_layout(cfg: Config, p: ClusterParams, L: int, reserved_bytes: float = 0.0
                   ) -> Layout:
    """The tables placed on a shard group of L ranks: `placement`'s tables where it names
    them, the rest by `sharding` (one-line errors naming the key that cannot be met).
    With every shard in HBM, `reserved_bytes` of each GPU's HBM are not the tables' (the
    batches in flight, `Cluster.batch_bytes`)."""
    src = cfg.source
    hw = cfg.hardware
    if p.rank_cache != "none":  # shards live in host DRAM: a GPU's share of its node's
        per_gpu = hw.dram_capacity_GiB / hw.interconnect.gpus_per_node
        cfg = dataclasses.replace(cfg, hardware=dataclasses.replace(
            hw, gpu=dataclasses.replace(hw.gpu, hbm_capacity_GiB=per_gpu)))
    elif reserved_bytes > 0:
        free = hw.gpu.hbm_capacity_GiB - reserved_bytes / GiB
        if free <= 0:
            raise UserError(f"the batches in flight (pipeline {p.pipeline}) hold "
                            f"{gib(reserved_bytes)} GiB of each GPU's "
                            f"{hw.gpu.hbm_capacity_GiB:g} GiB of HBM before any table: "
                            "expected a smaller batch per GPU", source=src,
                            field="model.batch_size")
        cfg = dataclasses.replace(cfg, hardware=dataclasses.replace(
            hw, gpu=dataclasses.replace(hw.gpu, hbm_capacity_GiB=free)))
    T = cfg.model.table_count
    cols = column_counts(cfg, p, L)
    sizes = [s if k == 1 else k * column_shard_bytes(cfg, t, k)
             for t, (s, k) in enumerate(zip(table_bytes(cfg), cols, strict=True))]
    hbm = cfg.hardware.gpu.hbm_capacity_GiB * GiB
    fixed: dict[int, tuple[int, ...]] = {}
    at: dict[int, tuple[int, ...]] = {}  # column tables' slices on named ranks
    for key, ranks in (p.placement or {}).items():
        where = f"{PARAMS_KEY}.placement.{key}"
        t = table_index(key, T, src, where)
        k = cols[t]
        if not ranks:
            raise UserError("no ranks: expected the ranks holding the table", source=src,
                            field=where)
        if k == 1 and len(set(ranks)) != len(ranks):  # column slices may share a rank
            raise UserError(f"expected distinct ranks, got {list(ranks)}", source=src,
                            field=where)
        bad = [r for r in ranks if not 0 <= r < L]
        if bad:
            raise UserError(f"rank {bad[0]} is beyond the shard group's {L} ranks: expected "
                            f"ranks 0-{L - 1}", source=src, field=where)
        run = sorted(ranks) == list(range(min(ranks), min(ranks) + len(ranks)))
        if k == 1 and not run:
            raise UserError(f"ranks {list(ranks)}: expected one rank (table-wise) or a run "
                            "of consecutive ranks (row-wise over them)", source=src,
                            field=where)
        if len(ranks) % k:
            raise UserError(f"{len(ranks)} ranks for table {key}'s {k} column shards: "
                            f"expected a multiple of {k} ranks ({k} x j: each slice row-wise "
                            "over j)", source=src, field=where)
        if run:  # distinct and consecutive: the slices on its runs in order
            fixed[t] = tuple(sorted(ranks))
            continue
        # TorchRec's column_wise(ranks=[...]): slice i on the i-th j ranks listed, any
        # ranks, a rank may hold several slices; each slice's j ranks a consecutive run
        j = len(ranks) // k
        parts = [tuple(ranks[i * j:(i + 1) * j]) for i in range(k)]
        for i, part in enumerate(parts):
            if list(part) != list(range(part[0], part[0] + j)):
                raise UserError(f"slice {i} of table {key} on ranks {list(part)}: expected "
                                f"{j} consecutive ascending ranks (a slice row-wise over a "
                                "run), or one rank per slice", source=src, field=where)
        fixed[t] = tuple(ranks)
        at[t] = tuple(part[0] for part in parts)
    split = any(k > 1 for k in cols)
    if p.sharding == "hybrid":
        layout = hybrid_layout(cfg, p, L, sizes, hbm)
        start, span = list(layout.start), list(layout.span)
    elif p.sharding == "column-wise":
        start, span = [0] * T, [1] * T
        for t, ranks in fixed.items():
            start[t], span[t] = min(ranks), len(ranks)
        held = [s if t in fixed else 0.0 for t, s in enumerate(sizes)]
        place_runs(cfg, p, L, [t for t in range(T) if t not in fixed], cols, sizes, hbm,
                   start, span, list(Layout.of(L, start, span, held, cols, at).used_bytes),
                   at)
    else:
        where_nodes = ("hardware.cluster.nodes" if p.shard_group is None
                       else f"{PARAMS_KEY}.shard_group")
        try:
            base = shard(cfg, L, p.sharding, PARAMS_KEY)
        except UserError as e:
            field_ = where_nodes if e.field == f"{PARAMS_KEY}.gpus" else e.field
            raise Unfit(e.message.replace("more GPUs", "more ranks"), source=src,
                        field=field_) from None
        start = [0 if base.row_wise[t] else
                 max(range(L), key=lambda g, t=t: base.frac[g][t]) for t in range(T)]
        span = [L if base.row_wise[t] else 1 for t in range(T)]
        if not fixed and not split:
            return Layout.of(L, start, span, sizes)
    for t, ranks in fixed.items():
        start[t], span[t] = min(ranks), len(ranks)
    if split and p.sharding != "column-wise":  # `columns` tables moved to runs of k ranks
        moved = [t for t in range(T) if cols[t] > 1 and t not in fixed]
        rest = [s if t not in moved else 0.0 for t, s in enumerate(sizes)]
        used = list(Layout.of(L, start, span, rest, cols, at).used_bytes)
        place_runs(cfg, p, L, moved, cols, sizes, hbm, start, span, used, at)
    layout = Layout.of(L, start, span, sizes, cols, at)
    for g, used in enumerate(layout.used_bytes):
        if used > hbm:
            field_ = (f"{PARAMS_KEY}.placement" if fixed else
                      f"{PARAMS_KEY}.columns" if p.columns else
                      f"{PARAMS_KEY}.column_shard_dim" if p.sharding == "column-wise" else
                      f"{PARAMS_KEY}.dp_max_MiB")
            raise Unfit(f"rank {g} holds {gib(used)} GiB of tables but a GPU holds "
                        f"{hbm / GiB:g} GiB: expected a placement that fits",
                        source=src, field=field_)
    return layout


def column_counts(cfg: Config, p: ClusterParams, L: int) -> list[int]:
    """Column slices per table: `columns`' k where it names the table, else (sharding
    column-wise) dim / TorchRec's block of column_shard_dim, else 1; checked against the
    dim (equal slices, a multiple of 4 wide, at least column_shard_dim) and the L ranks
    (more slices than ranks only where `placement` names the ranks, some holding several)."""
    m, src = cfg.model, cfg.source
    T = m.table_count
    cols = [1] * T
    if p.sharding == "column-wise":
        for t, d in enumerate(m.dims):
            if str(t) in (p.columns or {}):
                continue  # its own k below
            cols[t] = d // column_block(d, p.column_shard_dim)
            if cols[t] > L and str(t) not in (p.placement or {}):
                raise UserError(
                    f"table {t}'s dim {d} in blocks of {d // cols[t]} columns makes {cols[t]} "
                    f"column shards but a shard group has {L} ranks: expected "
                    f"column_shard_dim of at least {math.ceil(d / L)}", source=src,
                    field=f"{PARAMS_KEY}.column_shard_dim")
    for key, k in (p.columns or {}).items():
        where = f"{PARAMS_KEY}.columns.{key}"
        t = table_index(key, T, src, where)
        d = m.dims[t]
        if k < 1 or d % k:
            raise UserError(f"{k} column shards of table {t}'s dim {d}: expected a divisor of "
                            f"{d} (TorchRec's column_wise cuts equal slices)", source=src,
                            field=where)
        w = d // k
        if k > 1 and (w % CW_ALIGN or w < p.column_shard_dim):
            raise UserError(f"{k} column shards of table {t}'s dim {d} are {w} columns wide: "
                            f"expected a multiple of {CW_ALIGN} of at least column_shard_dim "
                            f"= {p.column_shard_dim} (TorchRec's _find_base_dim; lower "
                            "column_shard_dim for narrower slices)", source=src, field=where)
        if k > L and key not in (p.placement or {}):  # placement may reuse ranks
            raise UserError(f"{k} column shards of table {t} but a shard group has {L} ranks: "
                            f"expected at most {L} (one slice per rank, or `placement` "
                            "naming ranks that hold several)", source=src, field=where)
        cols[t] = k
    return cols


def place_runs(cfg: Config, p: ClusterParams, L: int, tables: list[int], cols: list[int],
               sizes: list[float], hbm: float, start: list[int], span: list[int],
               used: list[float], at: dict[int, tuple[int, ...]] | None = None) -> None:
    """Each of `tables` on a run of cols[t] consecutive ranks (one slice each; 1: the
    table whole), largest slice first, on the run whose busiest rank has the least lookup
    load and room (as `placement.shard`'s table-wise; the other tables, already placed —
    `at`'s slices on their named ranks —, count toward the load); start / span / used
    updated."""
    m = cfg.model
    load = [0.0] * L
    weight = [q * r for q, r in zip(m.poolings, m.row_bytes_per_table, strict=True)]
    for t in set(range(len(sizes))) - set(tables):
        c = cols[t] if span[t] else 1
        firsts = (at or {}).get(t, tuple(start[t] + i * (span[t] // c) for i in range(c)))
        for g in span_ranks(L, span[t], c, firsts):
            load[g] += weight[t] / max(span[t], 1)
    for t in sorted(tables, key=lambda t: (-sizes[t] / cols[t], t)):
        k, piece = cols[t], sizes[t] / cols[t]
        fits = [s for s in range(L - k + 1) if max(used[s:s + k]) + piece <= hbm]
        if not fits:
            alone = piece > hbm
            field_ = (f"{PARAMS_KEY}.columns.{t}" if str(t) in (p.columns or {}) else
                      f"{PARAMS_KEY}.column_shard_dim" if alone else
                      "hardware.cluster.nodes" if p.shard_group is None else
                      f"{PARAMS_KEY}.shard_group")
            raise Unfit(f"table {t}'s {k} shard(s) of {gib(piece)} GiB fit on no run "
                        f"of {k} of the shard group's {L} ranks of {hbm / GiB:g} GiB: "
                        f"expected {'narrower slices' if alone else 'more ranks'}",
                        source=cfg.source, field=field_)
        s0 = min(fits, key=lambda s: (max(load[s:s + k]), max(used[s:s + k]), s))
        start[t], span[t] = s0, k
        for g in range(s0, s0 + k):
            used[g] += piece
            load[g] += weight[t] / k


def hybrid_layout(cfg: Config, p: ClusterParams, L: int, sizes: list[float],
                  hbm: float) -> Layout:
    """HugeCTR's split: tables of at most dp_max_MiB data-parallel; each other table
    row-wise over one node's G GPUs (`hier_auto`: a node's tables sharded over its GPUs;
    the node with the least lookup load that has room, hottest tables first; the whole
    group when the group is one node or no node has room)."""
    m = cfg.model
    G = min(cfg.hardware.interconnect.gpus_per_node, L)
    T = len(sizes)
    small = [s <= p.dp_max_MiB * (1 << 20) for s in sizes]
    start = [0] * T
    span = [0 if small[t] else L for t in range(T)]
    if L > G:
        nodes = L // G
        dp = sum(s for s, sm in zip(sizes, small, strict=True) if sm)
        used = [dp] * nodes  # per GPU of each node
        load = [0.0] * nodes
        weight = [q * r for q, r in zip(m.poolings, m.row_bytes_per_table, strict=True)]
        for t in sorted((t for t in range(T) if not small[t]), key=lambda t: -weight[t]):
            fits = [k for k in range(nodes) if used[k] + sizes[t] / G <= hbm]
            if not fits:
                continue  # row-wise over the group
            k = min(fits, key=lambda k: (load[k], used[k], k))
            start[t], span[t] = k * G, G
            used[k] += sizes[t] / G
            load[k] += weight[t]
    return Layout.of(L, start, span, sizes)


@DESIGNS.register("cluster")
class Cluster(Design):
    order = 65
    summary = ("tables sharded over a multi-node cluster's GPUs, all-to-all over NVLink and "
               "the network (hardware.cluster)")
    Params = ClusterParams

    @classmethod
    def gpus_of(cls, cfg: Config) -> int:
        return cluster_ranks(cfg)

    @classmethod
    def check_config(cls, cfg: Config) -> None:
        """Every check of its construction, which reads the config alone (the ranks, the
        PCIe switches, the batch per rank, the pipeline, the placement and column slices,
        the HBM the shards and the batches in flight take): run whole where the config
        gives every table's size (a generated trace); with a trace file, whose tables may
        size the model, the checks that need no table (`scalar_checks`), the rest when the
        trace is read (`Design.check_placing`)."""
        cls.check_placing(cfg, scalar_checks)

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        p: ClusterParams = self.params
        self.ranks = cluster_ranks(cfg)
        self.G = cfg.hardware.interconnect.gpus_per_node
        #: the trace's batch covers every rank, or one shard group (priced once)
        self.L, self.traced = scalar_checks(cfg, p)
        n, L, G = self.ranks, self.L, self.G
        # the batches in flight's bytes that do not depend on the placement reserved first
        base = self.batch_bytes().in_flight(p.pipeline)
        try:
            self.layout = cluster_layout(cfg, p, L, base)
        except Unfit as e:  # say what the shards did not fit in (the other errors: as is)
            hw = cfg.hardware
            where = (f"each GPU's HBM less {gib(base)} GiB that the batches in flight "
                     f"hold, pipeline {p.pipeline}" if p.rank_cache == "none" else
                     f"with rank_cache {p.rank_cache} the shards live in host DRAM: "
                     f"hardware.dram_capacity_GiB / interconnect.gpus_per_node = "
                     f"{hw.dram_capacity_GiB / G:g} GiB a rank")
            raise UserError(f"{e.message} ({where})", source=e.source,
                            field=e.field) from None
        self.plan = RankPlan(self.traced, L, self.layout.start, self.layout.span,
                             self.layout.cols, self.layout.at)
        m = cfg.model
        r_t = tuple(float(r) for r in m.row_bytes_per_table)
        rows_out = m.output_rows_per_table
        unpooled = tuple(mode == "none" for mode in m.pooling_modes)
        self.pooled_out = np.array([0.0 if u else r * k for r, k, u in
                                    zip(r_t, rows_out, unpooled, strict=True)])
        self.unpooled_out = np.array([r * k if u else 0.0 for r, k, u in
                                      zip(r_t, rows_out, unpooled, strict=True)])
        #: a sample's unpooled ids and the mean unpooled row bytes of one of its lookups
        #: (every table's): `sequence_copies`' per-sample sizes
        self.unpooled_ids = float(sum(k for k, u in zip(rows_out, unpooled, strict=True)
                                      if u))
        self.unpooled_per_lookup = float(self.unpooled_out.sum()) / max(1, sum(m.poolings))
        nodes = cfg.hardware.cluster.nodes
        self.all_ranks = Group(n, nodes)
        self.shard_group = Group(L, max(1, math.ceil(L / G)))
        self.node = Group(min(G, L), 1)
        replicas = n // L
        self.replicas = Group(replicas, min(nodes, replicas))
        self.shard_bytes = max(self.layout.used_bytes)
        # data-parallel tables' gradients join the dense all-reduce (their weights only)
        self.dp_grad_bytes = sum(rows * r for rows, r, k in
                                 zip(m.rows_per_table, m.row_bytes_per_table,
                                     self.layout.span, strict=True) if k == 0)
        span = np.array(self.layout.span)
        #: [rank, table]: the parts of t each rank holds (2 where two slices share it)
        self.holds = self.layout.holds()
        # a span inside one node of a multi-node group is reduced over NVLink first (TWRW;
        # a column-split table: each slice's j = span / c ranks)
        self.cols = np.array([self.layout.columns(t) for t in range(len(span))])
        j = span // self.cols
        inside = [all(a // G == (a + jt - 1) // G for a in self.layout.slice_starts(t))
                  for t, jt in enumerate(j)]
        self.node_local = (j > 1) & (L > G) & np.array(inside, bool)
        #: a rank's cached row with its state (`rank_fetch`): the tables' mean, or with
        #: column slices the most per row any rank holds (its slices' rows)
        self.rank_R = m.moved_row_bytes
        if self.layout.cols:
            sizes = [(t, column_shard_bytes(cfg, t, c) / m.rows_per_table[t],
                      math.ceil(m.rows_per_table[t] / max(jt, 1)))
                     for t, (c, jt) in enumerate(zip(self.cols, j, strict=True))]
            h = self.holds
            self.rank_R = max(sum(h[g, t] * Rt * rows for t, Rt, rows in sizes)
                              / max(1, sum(h[g, t] * rows for t, _, rows in sizes))
                              for g in range(L))
        #: per local rank, the HBM its batches in flight hold (`batch_bytes`)
        self.in_flight = self.batch_bytes(per_rank=True).in_flight(p.pipeline)
        self._check_hbm()

    def batch_bytes(self, per_rank: bool = False) -> BatchBytes:
        """What one batch holds in a rank's HBM (`cluster_pipeline.BatchBytes`), for a rank
        of B = model.batch_size / (the ranks the trace covers) samples in a shard group of
        L B: its ids and offsets (B x the ids a sample has, B x T + 1 offsets, index_bytes
        each, as `Machine.id_bytes`); the outputs it receives, B x the sum of each table's
        output bytes (a pooled vector, or a row a lookup unpooled); its activations. With
        `per_rank` (the layout made) also, per local rank as arrays, the ids routed to its
        shards, L B x pooling / k for a table split over k ranks a slice (TorchRec's
        KJTAllToAll output, with its offsets) and its lookups' outputs before the output
        all-to-all, L B x a slice's vector of each pooled table it holds (a row-wise
        partial) and L B x pooling / k rows of each unpooled one; without it they are 0 (the
        bytes placement cannot change). Ids not deduplicated: the bound `dedup` lowers."""
        m = self.cfg.model
        ib = m.index_bytes
        B = m.batch_size / self.traced
        pools = np.array(m.poolings, float)
        r_t = np.array(m.row_bytes_per_table, float)
        rows_out = np.array(m.output_rows_per_table, float)
        ids = (B * pools.sum() + B * m.table_count + 1) * ib
        outputs = B * float((r_t * rows_out).sum())
        act = saved_activation_bytes(m, B)
        if not per_rank:
            return BatchBytes(ids, 0.0, outputs, 0.0, act)
        b_group = B * self.L
        c = self.cols.astype(float)
        k = np.maximum(np.array(self.layout.span, float) / c, 1.0)  # ranks of one slice
        held = self.holds.astype(float)  # [rank, table]
        routed = (held * b_group * (pools / k + 1.0) * ib).sum(axis=1)
        unpooled = rows_out > 1
        per_table = np.where(unpooled, b_group * pools * r_t / (c * k), b_group * r_t / c)
        sent = (held * per_table).sum(axis=1)
        return BatchBytes(ids, routed, outputs, sent, act)

    def _check_hbm(self) -> None:
        """Each rank's HBM holds its shards (or its cache) and its batches in flight: one
        line naming the key when it does not (the shards' fit before the placement-
        dependent bytes was `cluster_layout`'s)."""
        p: ClusterParams = self.params
        cfg = self.cfg
        hbm = cfg.hardware.gpu.hbm_capacity_GiB * GiB
        worst = int(np.argmax(self.in_flight))
        if p.rank_cache == "none":
            total = np.array(self.layout.used_bytes) + self.in_flight
            g = int(np.argmax(total))
            if total[g] > hbm:
                raise UserError(
                    f"rank {g} holds {gib(self.layout.used_bytes[g])} GiB of tables and "
                    f"{gib(self.in_flight[g])} GiB of batches in flight (pipeline "
                    f"{p.pipeline}), more than a GPU's {hbm / GiB:g} GiB: expected a smaller "
                    "batch per GPU, fewer batches in flight or more ranks",
                    source=cfg.source, field="model.batch_size")
            return
        room = hbm - self.in_flight[worst]
        if room < self.rank_R:
            raise UserError(f"the batches in flight (pipeline {p.pipeline}) hold "
                            f"{gib(self.in_flight[worst])} GiB of a GPU's "
                            f"{hbm / GiB:g} GiB: no room for rank {worst}'s cache; expected "
                            "a smaller batch per GPU", source=cfg.source,
                            field="model.batch_size")
        cap = cfg.cache.capacity_rows
        if cap is not None:
            g = int(np.argmax(cap * self.rank_R + self.in_flight))
            need = cap * self.rank_R + self.in_flight[g]
            if need > hbm:
                raise UserError(
                    f"rank {g}'s cache of {cap} rows x {self.rank_R:g} B "
                    f"({gib(cap * self.rank_R)} GiB) and its batches in flight "
                    f"({gib(self.in_flight[g])} GiB, pipeline {p.pipeline}) need more "
                    f"than a GPU's {hbm / GiB:g} GiB: expected at most "
                    f"{int((hbm - self.in_flight[g]) // self.rank_R)} rows",
                    source=cfg.source, field="cache.capacity_rows")

    def sharding_types(self) -> frozenset[str]:
        """TorchRec's sharding types of the layout (each a group whose dists the trainer
        issues, `host_dispatch`): data-parallel (span 0), table-wise (one rank),
        column-wise (column slices), row-wise (over the whole group) and table-row-wise
        (over part of it)."""
        L = self.layout.group
        types = set()
        for t, k in enumerate(self.layout.span):
            c = self.layout.columns(t)
            types.add("data-parallel" if k == 0 else "column-wise" if c > 1
                      else "table-wise" if k == 1 else "row-wise" if k == L
                      else "table-row-wise")
        return frozenset(types)

    def workload_key(self) -> WorkloadKey:
        # each rank's lookups are priced with no L2 hits (see the module doc): no L2 walk
        return WorkloadKey(None, where=Where.DEVICE, onchip=False)

    def trace_columns(self, trace: Trace, replay_cache: bool = True) -> dict[str, np.ndarray]:
        """The largest rank's counts per batch (`timing/rank_streams.py`), through the
        on-disk replay cache keyed by the trace, the plan and the column slices' row sizes
        (a warm run reads them: a pass over the trace per run otherwise), with each rank's
        lookups over the trace (they order the ranks whose caches are replayed); with
        per-rank caches, each replayed rank's counts too (`rank_cache_columns`)."""
        plan, dedup = self.plan, self.params.dedup

        def compute() -> tuple[dict[str, np.ndarray], dict[str, int]]:
            counts = rank_counts(trace, plan, dedup)
            cols = _max_columns(counts)
            if self.layout.cols:
                cols.update(self.slice_bytes(trace, counts))
            if self.params.unpooled_exchange == "counted":
                cols.update(self.unpooled_exchange(trace, counts))
            cols[_RANK_TOTALS] = counts.lookups.sum(axis=0)
            return _as_int64(cols), {}

        # every field of the plan (one added later joins the key by itself)
        key = {"kind": "cluster-rank-counts", "trace": trace.fingerprint(),
               "plan": dataclasses.asdict(plan), "dedup": bool(dedup),
               "slice_sizes": [list(x) for x in self.slice_sizes()],
               "unpooled_bytes": (self.unpooled_row_bytes()
                                  if self.params.unpooled_exchange == "counted" else [])
               } if replay_cache else {}
        cols = _from_int64(cached_columns(key, compute, replay_cache,
                                          sources=_RANK_SOURCES)[0])
        totals = cols.pop(_RANK_TOTALS)
        if self.params.rank_cache != "none":
            cols.update(self.rank_cache_columns(trace, totals, replay_cache))
        return cols

    def slice_sizes(self) -> list[tuple[float, float]]:
        """Per slice of the plan (none without column slices): (bytes a lookup reads, bytes
        a unique row moves with its state)."""
        if not self.layout.cols:
            return []
        m = self.cfg.model
        out = []
        for t, _, _ in self.plan.slices():
            c = self.layout.columns(t)
            out.append((m.row_bytes_per_table[t] / c,
                        column_shard_bytes(self.cfg, t, c) / m.rows_per_table[t]))
        return out

    def slice_bytes(self, trace: Trace, counts) -> dict[str, np.ndarray]:
        """With column slices: per batch `lookup_bytes` / `unique_bytes` such that the
        critical rank's lookups (and unique rows) are priced at the bytes of what it
        holds, a slice's rows being dim / c wide: the largest rank's bytes over the
        largest rank's count, times the batch's accesses (unique rows), which
        `Columns.of` divides back out. The counts of each row size come from a pass of
        `rank_counts` over the slices of that size (counts add over tables)."""
        look = np.zeros(counts.lookups.shape)
        uniq = np.zeros(counts.unique.shape)
        for (r, R), part in self.counts_by_key(trace, counts, self.slice_sizes()):
            look += r * part.lookups
            uniq += R * part.unique
        accesses = np.diff(trace.batch_access_ptr()).astype(float)
        distinct = np.array([len(np.unique(trace.linear_batch(b)[0]))
                             for b in range(trace.num_batches)], float)
        n_look = np.maximum(counts.lookups.max(axis=1), 1)
        n_uniq = np.maximum(counts.unique.max(axis=1), 1)
        return {"lookup_bytes": accesses * look.max(axis=1) / n_look,
                "unique_bytes": distinct * uniq.max(axis=1) / n_uniq}

    def counts_by_key(self, trace: Trace, counts: RankCounts, keys: list
                      ) -> list[tuple[object, RankCounts]]:
        """Per distinct key of the plan's slices (`keys[i]` for slice i; None leaves it
        out), the per-rank counts over the slices of that key: `counts` themselves when one
        key covers every slice, else a pass of `rank_counts` over those slices (the trace
        split into its column slices once)."""
        groups: dict[object, list[int]] = {}
        for i, key in enumerate(keys):
            if key is not None:
                groups.setdefault(key, []).append(i)
        if len(groups) == 1 and len(next(iter(groups.values()))) == len(keys):
            return [(next(iter(groups)), counts)]
        sliced, plan = split_columns(trace, self.plan)
        return [(key, rank_counts(table_trace(sliced, idx), RankPlan(
            plan.ranks, plan.group, tuple(plan.start[i] for i in idx),
            tuple(plan.span[i] for i in idx)), self.params.dedup))
                for key, idx in groups.items()]

    def unpooled_row_bytes(self) -> list[float]:
        """Per table of the plan's slices (`RankPlan.slices`: a table, or each of its
        column slices): the bytes of one unpooled output row (its row bytes / c), 0 for a
        pooled table."""
        m = self.cfg.model
        return [float(m.row_bytes_per_table[t]) / self.layout.columns(t)
                if self.unpooled_out[t] > 0 else 0.0 for t, _, _ in self.plan.slices()]

    def unpooled_exchange(self, trace: Trace, counts: RankCounts) -> dict[str, np.ndarray]:
        """Per batch, the unpooled rows' bytes the busiest rank sends in the output
        all-to-all (`rank_unpooled_send`: the rows it looked up for other ranks, its
        `ids_recv`) and receives (`rank_unpooled_recv`: its own ids served elsewhere, its
        `ids_send`), from the per-rank counts (deduplicated with dedup), at each table's
        unpooled row bytes: a pass of `rank_counts` over the tables of each row size (the
        counts themselves when every table is unpooled and of one size). Why counted, not
        `output_bytes`' even spread: a row-wise table of fewer rows than the batch's ids
        keeps its rows on the first ranks (blocks of ceil(rows / k)), and without dedup
        every duplicate id of them goes there. None without unpooled tables."""
        w = self.unpooled_row_bytes()
        if not any(v > 0 for v in w):
            return {}
        send = np.zeros(counts.ids_recv.shape)
        recv = np.zeros(counts.ids_send.shape)
        for v, part in self.counts_by_key(trace, counts, [v if v > 0 else None for v in w]):
            send += v * part.ids_recv
            recv += v * part.ids_send
        return {"rank_unpooled_send": send.max(axis=1), "rank_unpooled_recv": recv.max(axis=1)}

    def rank_cache_capacity(self, rank: int) -> int:
        """Rows of a rank's HBM cache: cache.capacity_rows, else cache.load_factor x the
        rows of its shard, at most the rows of R bytes its HBM holds beside its batches in
        flight (`in_flight`)."""
        cfg = self.cfg
        if cfg.cache.capacity_rows is not None:
            return int(cfg.cache.capacity_rows)  # checked to fit (`_check_hbm`)
        g = rank % self.L
        rows = sum(int(h) * math.ceil(r / max(k // c, 1)) for r, k, c, h in
                   zip(cfg.model.rows_per_table, self.layout.span, self.cols, self.holds[g],
                       strict=True))
        # the rows its HBM holds beside its batches in flight: no more
        room = int((cfg.hardware.gpu.hbm_capacity_GiB * GiB - self.in_flight[g])
                   // self.rank_R)
        return max(1, min(math.ceil((cfg.cache.load_factor or 1.0) * rows), room))

    def rank_policy(self) -> tuple[str, dict]:
        """The policy each rank's cache replays and its parameters."""
        if self.params.rank_cache == "scratchpipe":
            # batch i trains while i+1 is fetched: two batches pinned
            return "scratchpipe", {"lookahead": RANK_LOOKAHEAD}
        return self.cfg.cache.policy, dict(params_tuple(policy_params(self.cfg)))

    def rank_replay_key(self, trace: Trace, rank: int) -> dict:
        """What one rank's replay depends on: its stream (the trace's fingerprint, every
        field of the plan, dedup, the rank) and its policy, capacity and parameters
        (`policy_key`'s, defaults filled in). Not the slices' row bytes: a replay counts
        rows, which `rank_R` prices later."""
        name, params = self.rank_policy()
        return {**policy_key(trace, name, self.rank_cache_capacity(rank), params),
                "kind": "cluster-rank-replay", "plan": dataclasses.asdict(self.plan),
                "dedup": bool(self.params.dedup), "rank": int(rank)}

    def rank_cache_columns(self, trace: Trace, totals: np.ndarray,
                           replay_cache: bool = True) -> dict[str, np.ndarray]:
        """Each cached rank's policy replayed on its own stream (`rank_stream`), the
        `cached_ranks` ranks of the most lookups (`totals`, per rank); per batch the
        largest count. Each replay goes through the on-disk replay cache
        (`rank_replay_key`): the cached ones are read here, the others forked over the
        cores, then stored here."""
        p: ClusterParams = self.params
        ranks = [int(r) for r in np.argsort(-totals, kind="stable")[:p.cached_ranks]]
        keys = {r: self.rank_replay_key(trace, r) for r in ranks} if replay_cache else {}
        per_rank: dict[int, dict[str, np.ndarray]] = {}
        for r in keys:
            try:
                with lookup_only():  # a miss raises: made below, maybe in a worker
                    per_rank[r] = cached_columns(keys[r], dict, sources=_REPLAY_SOURCES)[0]
            except NotCached:
                pass
        todo = [r for r in ranks if r not in per_rank]
        name, params = self.rank_policy()
        state = (trace, self.plan, p.dedup, name, params, self)
        jobs = min(len(todo), usable_cores())
        try:
            if jobs > 1 and can_fork():
                made = fork_map(_replay_rank, state, todo, jobs)
            else:
                made = [_replay_rank(state, r) for r in todo]
        except UserError as e:  # a cache too small for the rank's pinned batches
            # the key that set the capacity; a rank's policy takes no on_overflow, so not
            # the policy's advice to set one
            key = ("cache.capacity_rows" if self.cfg.cache.capacity_rows is not None
                   else "cache.load_factor")
            what = e.shortfall if isinstance(e, PinnedOverflow) else e.message
            raise UserError(f"rank cache {p.rank_cache}: {what}; expected a larger {key}",
                            source=self.cfg.source, field=key) from None
        for r, cols in zip(todo, made, strict=True):
            per_rank[r] = cached_columns(keys.get(r, {}), lambda cols=cols: (cols, {}),
                                         replay_cache, sources=_REPLAY_SOURCES)[0]
        return {f"rc_{k}": np.max([per_rank[r][k] for r in ranks], axis=0)
                for k in ("accesses", "unique", "fills", "writebacks")}

    def run(self, m, w):
        env = m.env
        c = self.columns(w)
        nb = w.num_batches
        n, L = self.ranks, self.L
        per = self.traced  # ranks the trace's batch is spread over
        ib = m.index_bytes
        ar = mlp_param_bytes(self.cfg) + self.dp_grad_bytes
        sync_every = self.params.sync_every_batches
        inputs: dict[int, simpy.Process] = {}
        # TorchRec issues each sharding group's input and output dists (host_dispatch)
        m.set_sharding_types(self.sharding_types())
        # the node's host DRAM and cores shared by its ranks; each rank's own loader and
        # copy of its B / n samples (timing/cluster_pipeline.py)
        share_node_host(m, self.G)
        share_pcie_switch(m)  # DGX A100: two GPUs a switch share its uplink to the CPU
        loader = RankInputs(m, c.samples, c.accesses, self.inputs_carry_ids, 1 / per, self.G)
        ahead = ROUTE_AHEAD[self.params.pipeline]
        M = self.params.microbatches
        dense_memo: dict = {}
        copy_eff = self.cfg.hardware.gpu.stream_efficiency  # sequence_copies' kernels

        def copied_forward(b, look, out_samples, copies: SequenceCopies):
            """The dedup sort, the lookup, then TorchRec's forward copies of its rows."""
            return m.seq(lambda: self.dedup_sort(m, b, copies.dedup_ids),
                         lambda: m.gpu_forward(b, look, out_samples, 0.0, c.r[b]),
                         lambda: m.hbm.stream(copies.forward_bytes, b, "sequence copies",
                                              copy_eff))

        def copied_backward(b, look, uniq, copies: SequenceCopies):
            """The gradients' copies, then FBGEMM's backward."""
            return m.seq(lambda: m.hbm.stream(copies.backward_bytes, b,
                                              "sequence grad copies", copy_eff),
                         lambda: m.gpu_backward(b, look, uniq, 0.0, c.r[b], c.R[b]))

        # this design's own per-batch columns (`trace_columns`): MissingColumn if absent
        ids_send, ids_recv = c.column("rank_ids_send"), c.column("rank_ids_recv")
        ids_recv_total, ids_total = c.column("rank_ids_recv_total"), c.column("rank_ids_total")
        lookups, unique = c.column("rank_lookups"), c.column("rank_unique")
        routed = c.column("rank_routed")
        # the busiest rank's unpooled rows, counted (`unpooled_exchange`)
        unpooled_sent = unpooled_got = None
        if self.unpooled_ids > 0 and self.params.unpooled_exchange == "counted":
            unpooled_sent = c.column("rank_unpooled_send")
            unpooled_got = c.column("rank_unpooled_recv")

        def input_copy(b):
            ev = loader.ready_event(b)
            if ev is not None:
                yield ev
            ev = m.cluster_collective(b, ids_send[b] * ib, ids_recv[b] * ib,
                                      "input_dist", A2A, self.shard_group)
            if ev is not None:
                yield ev

        def start(b):
            if b < nb and b not in inputs:
                inputs[b] = env.process(input_copy(b))

        mode = self.params.rank_cache
        fetches: dict[int, simpy.Process] = {}
        R = self.rank_R  # a row with its optimizer state (a column slice's, if split)

        def fetch(b):
            if mode == "none" or b >= nb or b in fetches:
                return
            rc = {k: c.column(f"rc_{k}")[b] for k in ("accesses", "unique", "fills",
                                                      "writebacks")}
            F, W = rc["fills"], rc["writebacks"]
            if mode == "scratchpipe":  # the host gathers and copies the planned rows
                fetches[b] = m.seq(lambda: m.all_of([
                    m.cpu_gather(F, R, b, "rank collect"), m.pcie.h2d(F * R, b, "rank fill"),
                    m.hbm.gather(F, R, b, "fill write"), m.hbm.gather(W, R, b, "victim read"),
                    m.pcie.d2h(W * R, b, "rank writeback"),
                    m.cpu_gather(W, R, b, "rank write-back")]))
            else:  # FBGEMM's cache: lookup kernels, then fills / write-backs over UVM
                fetches[b] = m.seq(
                    lambda: m.cache_lookup(b, rc["accesses"], rc["unique"], F),
                    lambda: m.all_of([m.uvm_read(b, F, R, "rank fill"),
                                      m.hbm.gather(F, R, b, "fill write"),
                                      m.hbm.gather(W, R, b, "victim read"),
                                      m.uvm_write(b, W, R, "rank writeback")]))

        def exchange_of(b, send, recv, intra, label):
            if intra > 0:  # the node-local spans' reduce-scatter / all-gather over NVLink
                yield m.cluster_collective(b, intra, intra, label + " (node)", A2A,
                                           self.node)
            ev = m.cluster_collective(b, send, recv, label, A2A, self.shard_group)
            if ev is not None:
                yield ev

        exchange = []
        for b in range(nb):
            A, B = c.accesses[b], c.samples[b]
            look, uniq = lookups[b], unique[b]
            start(b)
            # its inputs from the loader and copy, then what is left of its ids all-to-all
            yield from m.stage("input_wait", b, [loader.ready_event(b)])
            yield from m.stage("input_dist", b, [inputs.pop(b)])
            for k in range(1, ahead + 1):  # the ids all-to-alls issued ahead
                start(b + k)
            if mode != "none":
                fetch(b)
                yield from m.stage("rank_fetch", b, [fetches.pop(b)])
                if mode == "scratchpipe":
                    fetch(b + 1)
            out_samples = B * routed[b] / A if A else 0.0
            copies = self.sequence_copies(B / per, look, ids_recv_total[b], ids_total[b])
            yield from m.stage("emb_forward", b, [
                m.gpu_forward(b, look, out_samples, 0.0, c.r[b]) if copies is None
                else copied_forward(b, look, out_samples, copies)])
            if mode == "lru-prefetch":
                fetch(b + 1)
            send, recv, intra = self.output_bytes(
                B * L / per, ids_recv_total[b], ids_total[b],
                None if unpooled_sent is None else (unpooled_sent[b], unpooled_got[b]))
            exchange.append(max(send, recv) + intra)
            if M > 1:  # NestPipe's Frozen-Window Pipelining
                yield from fwp(m, b, M, B / per, exchange_of, (send, recv, intra),
                               dense_memo)
            else:
                yield from m.stage("output_dist", b, [
                    env.process(exchange_of(b, send, recv, intra, "pooled"))])
                yield from m.stage("mlp", b, [m.mlp(b, B / per)])
                yield from m.stage("grad_dist", b, [
                    env.process(exchange_of(b, recv, send, intra, "grads"))])
            parts = [m.gpu_backward(b, look, uniq, 0.0, c.r[b], c.R[b]) if copies is None
                     else copied_backward(b, look, uniq, copies),
                     m.cluster_collective(b, ar, ar, "allreduce", AR, self.all_ranks)]
            if L < n and (b + 1) % sync_every == 0:
                parts.append(m.cluster_collective(b, self.shard_bytes, self.shard_bytes,
                                                  "replica sync", AR, self.replicas))
            yield from m.stage("emb_backward", b, parts)
            m.batch_done(b)
        self._report(m, c, exchange)

    def sequence_copies(self, samples: float, lookups: float, ids: float, all_ids: float
                        ) -> SequenceCopies | None:
        """TorchRec's copies of the unpooled rows around the exchange of a rank of
        `samples` own samples that looked up `lookups` rows (`timing/sequence_copies.py`):
        its looked-up unpooled rows are `lookups` x the mean unpooled bytes of a lookup,
        its own full rows `samples` x a sample's unpooled bytes, scaled by dedup's ratio of
        ids (`ids` / `all_ids`, as `output_bytes`) for what it receives. None with
        `sequence_copies: none` or no unpooled table (nothing priced: as before)."""
        if self.params.sequence_copies == "none" or self.unpooled_ids <= 0:
            return None
        scale = ids / all_ids if all_ids else 1.0
        return sequence_copies(lookups * self.unpooled_per_lookup,
                               samples * float(self.unpooled_out.sum()), scale,
                               samples * self.unpooled_ids, self.params.dedup)

    @staticmethod
    def dedup_sort(m, b: int, ids: float) -> simpy.Event | None:
        """TorchRec's dedup of a rank's `ids` (fbgemm jagged_unique_indices): the ids
        linearized over every table's rows, radix-sorted with their positions (int64 keys
        of log2(rows) + 1 bits, int64 values), then unique, inverse and delinearize passes
        (index_bytes each way per id); nothing without ids."""
        if ids <= 0:
            return None
        ib = m.index_bytes
        bits = int(math.log2(m.total_rows + 1)) + 1
        return m.seq(lambda: m.radix_sort(b, ids, ib, ib, bits, "dedup sort"),
                     lambda: m.hbm.stream(ids * 4 * ib, b, "dedup unique"))

    def output_bytes(self, b_group: float, ids: float, all_ids: float,
                     unpooled: tuple[float, float] | None = None
                     ) -> tuple[float, float, float]:
        """(largest send, largest receive, node-local reduce bytes) of the output all-to-all
        inside a shard group of `b_group` samples. A rank holding part of a table sends
        its partial (pooled) vectors of every sample not its own, b_group x v x (L-1)/L; a
        rank receives b_group / L x v from each rank of the span but itself. A span inside
        one node of a multi-node group is reduced over NVLink first (b_group x v x
        (k-1)/k), then its ranks send b_group x v x (L-1) / (L k) each and a rank receives
        one vector per sample. An unpooled table's rows are looked up by one rank each: a
        rank of a k-rank span sends its 1/k of them, b_group x v x (L-1) / (L k), and a rank
        receives b_group / L x v less what it holds itself; they scale by dedup's ratio of
        ids. A table of c column slices is c tables of v / c bytes, each spanning j = span /
        c ranks (TorchRec's CW output dist is its TW one, slices concatenated, not summed):
        column-wise (j = 1), a slice's rank sends b_group x v / c x (L-1)/L and a rank
        receives b_group / L x v / c from each slice it does not hold. `unpooled`: the
        busiest rank's unpooled bytes (sent, received) as counted (`unpooled_exchange`),
        replacing the even spread of the unpooled rows; added to the pooled maxima (exact
        for a collection of unpooled tables only, else an upper bound: the two maxima may
        be different ranks')."""
        L = self.L
        if L == 1:
            return 0.0, 0.0, 0.0
        scale = ids / all_ids if all_ids else 1.0
        c = self.cols.astype(float)  # column slices (1: whole rows)
        pooled = self.pooled_out / c  # per slice
        rows = scale * self.unpooled_out / c if unpooled is None else np.zeros_like(pooled)
        span = np.array(self.layout.span, float)
        k = np.maximum(span / c, 1.0)  # the ranks of one slice
        local = self.node_local
        holds = self.holds
        sharded = np.array(self.layout.span) > 0
        per_send = (np.where(local, b_group * pooled * (L - 1) / (L * k),
                             b_group * pooled * (L - 1) / L)
                    + b_group * rows * (L - 1) / (L * k))  # an unpooled row: one rank
        send = (holds * per_send).sum(axis=1)
        from_span = np.where(local, c, span) - holds * np.where(local, 1.0 / k, 1.0)
        recv = (sharded * b_group / L * (from_span * pooled + (c - holds / k) * rows)
                ).sum(axis=1)
        intra = (holds * local * b_group * pooled * (k - 1) / k).sum(axis=1)
        if unpooled is not None:
            return (float(send.max()) + unpooled[0], float(recv.max()) + unpooled[1],
                    float(intra.max()))
        return float(send.max()), float(recv.max()), float(intra.max())

    def _report(self, m, c, exchange: list[float]) -> None:
        wu = m.warmup
        done = m.done
        span = float(done[-1] - (done[wu - 1] if wu > 0 else 0.0))
        samples = sum(c.samples[wu:]) * self.ranks / self.traced
        sps = samples / span * 1e9 if span > 0 else float("inf")
        timed = len(done) - wu
        stage = m.stage_ns
        comm = sum(float(np.sum(stage[s][wu:])) for s in ("input_dist", "output_dist",
                                                            "grad_dist") if s in stage)
        nodes = self.cfg.hardware.cluster.nodes
        prices = self.cfg.hardware.prices
        per_hour = self.ranks * prices.gpu_usd_per_hour + nodes * prices.host_usd_per_hour
        m.counters["rank_cache_hit_ratio"] = 1.0  # every shard in HBM: every lookup hits
        if self.params.rank_cache != "none":
            acc = float(np.sum(c.column("rc_accesses")[wu:]))
            fills = float(np.sum(c.column("rc_fills")[wu:]))
            m.counters["rank_cache_hit_ratio"] = 1.0 - fills / acc if acc else 1.0
            # the smallest rank cache: below load_factor x its shard's rows where its HBM
            # holds no more beside the batches in flight (`rank_cache_capacity`)
            m.counters["rank_cache_rows"] = min(self.rank_cache_capacity(g)
                                                for g in range(self.L))
        hw = self.cfg.hardware
        in_flight_GiB = float(self.in_flight.max()) / GiB
        per_gpu_GiB = (hw.gpu.hbm_capacity_GiB - in_flight_GiB
                       if self.params.rank_cache == "none"
                       else hw.dram_capacity_GiB / self.G)
        m.counters.update({
            # the largest model one shard group holds: its ranks' HBM less what the batches
            # in flight hold, or with per-rank caches their shares of host DRAM (what stops
            # fitting first)
            "max_model_GiB": self.L * per_gpu_GiB,
            "hbm_in_flight_GiB": in_flight_GiB,
            "gpus": self.ranks,
            "nodes": nodes,
            "shard_group": self.L,
            "samples_per_s": sps,
            "usd_per_million_samples": (per_hour / (sps * 3600.0) * 1e6
                                        if 0 < sps < float("inf") else None),
            "data_parallel_tables": sum(k == 0 for k in self.layout.span),
            "table_GiB": sum(table_bytes(self.cfg)) / GiB,
            "shard_GiB_per_gpu": self.shard_bytes / GiB,
            "samples_per_s_per_gpu": sps / self.ranks,
            "alltoall_bytes_per_gpu": (sum(exchange[wu:]) / timed) if timed > 0 else 0.0,
            "exchange_share": comm / span if span > 0 else 0.0,
        })


#: code behind the cached per-rank counts (`traces.disk_cache.code_digest`)
_RANK_SOURCES = ("timing/rank_streams.py", "timing/designs/cluster.py", "traces/csr_trace.py")
#: code behind a cached per-rank replay: the rank's stream and the policies
_REPLAY_SOURCES = tuple(sorted(set(_RANK_SOURCES) | set(POLICY_SOURCES)))
#: the cached counts' column of each rank's lookups over the trace (length: the ranks)
_RANK_TOTALS = "rank_lookup_totals"
#: a float column's name in a cache entry (int64 columns only: its float64 bits stored)
_F64 = "@f64"


def _as_int64(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns as int64 for the replay cache: a float column's float64 bits, renamed, so
    what is read back is bit for bit what was made (not truncated)."""
    out = {}
    for k, v in cols.items():
        v = np.asarray(v)
        if np.issubdtype(v.dtype, np.floating):
            out[k + _F64] = np.ascontiguousarray(v, np.float64).view(np.int64)
        else:
            out[k] = v.astype(np.int64)
    return out


def _from_int64(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`_as_int64` undone."""
    return {(k[:-len(_F64)] if k.endswith(_F64) else k):
            (np.asarray(v, np.int64).view(np.float64) if k.endswith(_F64) else v)
            for k, v in cols.items()}


def _max_columns(counts: RankCounts) -> dict[str, np.ndarray]:
    """The per-batch columns the design reads from its per-rank counts."""
    cols = counts.max_per_batch()
    # ids received over all ranks, deduplicated or not: scales unpooled outputs
    cols["rank_ids_recv_total"] = counts.ids_recv.sum(axis=1)
    cols["rank_ids_total"] = counts.ids_recv_all.sum(axis=1)
    return cols


def _replay_rank(state, rank: int) -> dict[str, np.ndarray]:
    """One rank's cache replayed on its stream (a module-level function: fork_map's)."""
    trace, plan, dedup, name, params, design = state
    stream = rank_stream(trace, plan, rank, dedup)
    # not under the stream's own key (hashing the stream costs about what replaying it
    # does): `rank_cache_columns` caches it under the key of what the stream is made from
    cols, _ = policy_columns(stream, name, design.rank_cache_capacity(rank), False, **params)
    return {k: np.asarray(cols[k], np.int64) for k in ("accesses", "unique", "fills",
                                                        "writebacks")}
