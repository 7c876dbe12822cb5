"""`cluster`: the tables sharded over every GPU of a multi-node cluster (TorchRec / HugeCTR
model-parallel embeddings, data-parallel dense part), the exchange over NVLink and the network.

The cluster is `hardware.cluster.nodes` x `hardware.interconnect.gpus_per_node` = n ranks.
Tables are placed (`design_params.cluster.sharding`: table-wise, row-wise or auto by
`timing/placement.py` as `multi-gpu`'s; hybrid, HugeCTR's: small tables data-parallel, the
others row-wise over one node; or `placement`: table -> the ranks of its shard group it
lives on) inside shard groups of L = `shard_group` ranks (null: L = n); with L < n the groups
are replicas (2D sparse parallelism) whose embedding weights and optimizer state are
all-reduced every `sync_every_batches` batches. Each rank's lookups come from the global
trace by its shards (`timing/rank_streams.py`: one trace in, per-rank streams out); with
`trace_scope: shard-group` the trace is one group's batch and the statistically identical
groups are priced once.

The simulated rank is the critical one: per batch each quantity is the largest rank's (every
collective waits for the slowest rank). Pricing one rank is exact when one rank is the
largest on every quantity of every batch — row-wise sharding of evenly spread rows, or ranks
with statistically identical shards — and an upper bound otherwise (the max of each quantity
may come from different ranks). Per batch, as `multi-gpu`:

    input_wait   its B/n samples' indices over PCIe, then the ids all-to-all to the shards'
                 owners (ids deduplicated per destination with `dedup`)
    rank_fetch   (rank_cache) its cache's misses from host DRAM: on demand, or batch i+1's
                 during batch i (lru-prefetch, scratchpipe)
    emb_forward  gpu_forward(its lookups) from its HBM
    output_dist  the output all-to-all inside the shard group (`output_bytes`, closed form)
    mlp          mlp(B/n)
    grad_dist    the same all-to-all reversed
    emb_backward gpu_backward(its lookups, its unique rows) || the dense ring all-reduce over
                 all n ranks (with the data-parallel tables' gradients) || (2D, every
                 sync_every_batches-th batch) the all-reduce of its shard's rows with their
                 state over the n / L replicas

Collectives go through `Machine.cluster_collective` (`timing/collectives.py`: NVLink inside
a node, each GPU's share of the NICs across nodes). Not modelled (yet): column-wise
sharding, pipelining across batches beyond the input copy and the rank fetch (TorchRec's
train pipeline, NestPipe), SHARP in-network reductions, the L2 hits of each rank's own
stream (the lookups are priced with no L2 hits), a node's host DRAM and PCIe shared by its
ranks' caches (docs/timing.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.replay_cache import cached_columns, policy_columns
from scratchpipe_sim.timing.collectives import Group
from scratchpipe_sim.timing.counts import Where
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_parameters import params_tuple, policy_params
from scratchpipe_sim.timing.designs.design_registry import DESIGNS
from scratchpipe_sim.timing.designs.multi_gpu import mlp_param_bytes
from scratchpipe_sim.timing.machine import Collective
from scratchpipe_sim.timing.placement import GiB, shard, table_bytes
from scratchpipe_sim.timing.rank_streams import RankCounts, RankPlan, rank_counts, rank_stream
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.forked import can_fork, fork_map, usable_cores

A2A, AR = Collective.ALL_TO_ALL, Collective.ALL_REDUCE
#: batches a per-rank scratchpipe cache pins (the one training, the one being fetched)
RANK_LOOKAHEAD = 2
#: the config key of this design's parameters (errors name it)
PARAMS_KEY = "design_params.cluster"


@dataclass(frozen=True)
class ClusterParams:
    sharding: str = field(default="auto", metadata={
        "help": "table-wise (whole tables per rank), row-wise (every table split over the "
                "shard group), auto (table-wise, row-wise for a table larger than one GPU) "
                "or hybrid (HugeCTR's: small tables data-parallel, see dp_max_MiB)",
        "choices": ("table-wise", "row-wise", "auto", "hybrid")})
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
                "table-wise; a run of consecutive ranks: row-wise over them); tables not named are "
                "placed by `sharding` (null: all by `sharding`)"})
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


@dataclass(frozen=True)
class Layout:
    """Each table's span inside a shard group of `group` ranks: its first local rank
    (`start[t]`) and its width (`span[t]`: 1 table-wise, k row-wise over k ranks, 0
    data-parallel on every rank), and the HBM each local rank holds."""

    group: int
    start: tuple[int, ...]
    span: tuple[int, ...]
    used_bytes: tuple[float, ...]

    @classmethod
    def of(cls, L: int, start: list[int], span: list[int], sizes: list[float]) -> Layout:
        used = [0.0] * L
        for t, (s0, k) in enumerate(zip(start, span, strict=True)):
            for g in range(L) if k == 0 else range(s0, s0 + k):
                used[g] += sizes[t] / max(k, 1)
        return cls(L, tuple(start), tuple(span), tuple(used))


def cluster_layout(cfg: Config, p: ClusterParams, L: int) -> Layout:
    """The tables placed on a shard group of L ranks: `placement`'s tables where it names
    them, the rest by `sharding` (one-line errors naming the key that cannot be met)."""
    src = cfg.source
    if p.rank_cache != "none":  # shards live in host DRAM: a GPU's share of its node's
        hw = cfg.hardware
        per_gpu = hw.dram_capacity_GiB / hw.interconnect.gpus_per_node
        cfg = dataclasses.replace(cfg, hardware=dataclasses.replace(
            hw, gpu=dataclasses.replace(hw.gpu, hbm_capacity_GiB=per_gpu)))
    T = cfg.model.table_count
    sizes = table_bytes(cfg)
    hbm = cfg.hardware.gpu.hbm_capacity_GiB * GiB
    fixed: dict[int, tuple[int, ...]] = {}
    for key, ranks in (p.placement or {}).items():
        where = f"{PARAMS_KEY}.placement.{key}"
        if not key.isdigit() or int(key) >= T:
            raise UserError(f"no table {key!r}: expected a table index 0-{T - 1}",
                            source=src, field=where)
        if not ranks or len(set(ranks)) != len(ranks):
            raise UserError(f"expected distinct ranks, got {list(ranks)}", source=src,
                            field=where)
        bad = [r for r in ranks if not 0 <= r < L]
        if bad:
            raise UserError(f"rank {bad[0]} is beyond the shard group's {L} ranks: expected "
                            f"ranks 0-{L - 1}", source=src, field=where)
        if sorted(ranks) != list(range(min(ranks), min(ranks) + len(ranks))):
            raise UserError(f"ranks {list(ranks)}: expected one rank (table-wise) or a run "
                            "of consecutive ranks (row-wise over them)", source=src,
                            field=where)
        fixed[int(key)] = tuple(sorted(ranks))
    if p.sharding == "hybrid":
        layout = hybrid_layout(cfg, p, L, sizes, hbm)
        start, span = list(layout.start), list(layout.span)
    else:
        where_nodes = ("hardware.cluster.nodes" if p.shard_group is None
                       else f"{PARAMS_KEY}.shard_group")
        try:
            base = shard(cfg, L, p.sharding, PARAMS_KEY)
        except UserError as e:
            field_ = where_nodes if e.field == f"{PARAMS_KEY}.gpus" else e.field
            raise UserError(e.message.replace("more GPUs", "more ranks"), source=src,
                            field=field_) from None
        start = [0 if base.row_wise[t] else
                 max(range(L), key=lambda g, t=t: base.frac[g][t]) for t in range(T)]
        span = [L if base.row_wise[t] else 1 for t in range(T)]
        if not fixed:
            return Layout.of(L, start, span, sizes)
    for t, ranks in fixed.items():
        start[t], span[t] = ranks[0], len(ranks)
    layout = Layout.of(L, start, span, sizes)
    for g, used in enumerate(layout.used_bytes):
        if used > hbm:
            field_ = (f"{PARAMS_KEY}.placement" if fixed else
                      f"{PARAMS_KEY}.dp_max_MiB")
            raise UserError(f"rank {g} holds {used / GiB:.2f} GiB of tables but a GPU holds "
                            f"{hbm / GiB:g} GiB: expected a placement that fits",
                            source=src, field=field_)
    return layout


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

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        p: ClusterParams = self.params
        self.ranks = cluster_ranks(cfg)
        self.G = cfg.hardware.interconnect.gpus_per_node
        self.L = group_size(cfg, p)
        self.layout = cluster_layout(cfg, p, self.L)
        n, L, G = self.ranks, self.L, self.G
        #: the trace's batch covers every rank, or one shard group (priced once)
        self.traced = n if p.trace_scope == "global" else L
        self.plan = RankPlan(self.traced, L, self.layout.start, self.layout.span)
        m = cfg.model
        r_t = tuple(float(r) for r in m.row_bytes_per_table)
        rows_out = m.output_rows_per_table
        unpooled = tuple(mode == "none" for mode in m.pooling_modes)
        self.pooled_out = np.array([0.0 if u else r * k for r, k, u in
                                    zip(r_t, rows_out, unpooled, strict=True)])
        self.unpooled_out = np.array([r * k if u else 0.0 for r, k, u in
                                      zip(r_t, rows_out, unpooled, strict=True)])
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
        start = np.array(self.layout.start)
        g = np.arange(L)[:, None]
        self.holds = (span[None, :] > 0) & (g >= start) & (g < start + span)  # [rank, table]
        # a span inside one node of a multi-node group is reduced over NVLink first (TWRW)
        self.node_local = ((span > 1) & (L > G) & (start // G == (start + span - 1) // G))

    def workload_key(self) -> WorkloadKey:
        # each rank's lookups are priced with no L2 hits (see the module doc): no L2 walk
        return WorkloadKey(None, where=Where.DEVICE, onchip=False)

    def trace_columns(self, trace: Trace, replay_cache: bool = True) -> dict[str, np.ndarray]:
        """The largest rank's counts per batch (`timing/rank_streams.py`). Without per-rank
        caches they go through the on-disk replay cache, keyed by the trace and the plan
        (a warm run reads them: a pass over the trace per run otherwise); with them the
        per-rank counts order the ranks to replay, and are made here."""
        plan, dedup = self.plan, self.params.dedup

        def compute() -> tuple[dict[str, np.ndarray], dict[str, int]]:
            return _max_columns(rank_counts(trace, plan, dedup)), {}

        if self.params.rank_cache == "none":
            if not replay_cache:
                return compute()[0]
            # every field of the plan (one added later joins the key by itself)
            key = {"kind": "cluster-rank-counts", "trace": trace.fingerprint(),
                   "plan": dataclasses.asdict(plan), "dedup": bool(dedup)}
            return dict(cached_columns(key, compute, True, sources=_RANK_SOURCES)[0])
        counts = rank_counts(trace, plan, dedup)
        cols = _max_columns(counts)
        cols.update(self.rank_cache_columns(trace, counts))
        return cols

    def rank_cache_capacity(self, rank: int) -> int:
        """Rows of a rank's HBM cache: cache.capacity_rows, else cache.load_factor x the
        rows of its shard."""
        cfg = self.cfg
        if cfg.cache.capacity_rows is not None:
            return int(cfg.cache.capacity_rows)
        g = rank % self.L
        rows = sum(math.ceil(r / max(k, 1)) for r, k, h in
                   zip(cfg.model.rows_per_table, self.layout.span, self.holds[g], strict=True)
                   if h)
        return max(1, math.ceil((cfg.cache.load_factor or 1.0) * rows))

    def rank_cache_columns(self, trace: Trace, counts) -> dict[str, np.ndarray]:
        """Each cached rank's policy replayed on its own stream (`rank_stream`), the most
        loaded `cached_ranks` ranks, forked over the cores; per batch the largest count."""
        p: ClusterParams = self.params
        order = np.argsort(-counts.lookups.sum(axis=0), kind="stable")[:p.cached_ranks]
        if p.rank_cache == "scratchpipe":
            # batch i trains while i+1 is fetched: two batches pinned
            name, params = "scratchpipe", {"lookahead": RANK_LOOKAHEAD}
        else:
            name = self.cfg.cache.policy
            params = dict(params_tuple(policy_params(self.cfg)))
        state = (trace, self.plan, p.dedup, name, params, self)
        ranks = [int(r) for r in order]
        jobs = min(len(ranks), usable_cores())
        try:
            if jobs > 1 and can_fork():
                per_rank = fork_map(_replay_rank, state, ranks, jobs)
            else:
                per_rank = [_replay_rank(state, r) for r in ranks]
        except UserError as e:  # a cache too small for the rank's pinned batches
            raise UserError(e.message, source=self.cfg.source,
                            field="cache.capacity_rows") from None
        out = {f"rc_{k}": np.max([c[k] for c in per_rank], axis=0)
               for k in ("accesses", "unique", "fills", "writebacks")}
        return out

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

        # this design's own per-batch columns (`trace_columns`): MissingColumn if absent
        ids_send, ids_recv = c.column("rank_ids_send"), c.column("rank_ids_recv")
        ids_recv_total, ids_total = c.column("rank_ids_recv_total"), c.column("rank_ids_total")
        lookups, unique = c.column("rank_lookups"), c.column("rank_unique")
        routed = c.column("rank_routed")

        def input_copy(b):
            A, B = c.accesses[b], c.samples[b]
            ev = m.index_h2d(b, A / per, B / per)
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
        R = self.cfg.model.moved_row_bytes  # a row with its optimizer state

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
            yield from m.stage("input_wait", b, [inputs.pop(b)])
            start(b + 1)
            if mode != "none":
                fetch(b)
                yield from m.stage("rank_fetch", b, [fetches.pop(b)])
                if mode == "scratchpipe":
                    fetch(b + 1)
            out_samples = B * routed[b] / A if A else 0.0
            yield from m.stage("emb_forward", b, [
                m.gpu_forward(b, look, out_samples, 0.0, c.r[b])])
            if mode == "lru-prefetch":
                fetch(b + 1)
            send, recv, intra = self.output_bytes(B * L / per, ids_recv_total[b],
                                                  ids_total[b])
            exchange.append(max(send, recv) + intra)
            yield from m.stage("output_dist", b, [
                env.process(exchange_of(b, send, recv, intra, "pooled"))])
            yield from m.stage("mlp", b, [m.mlp(b, B / per)])
            yield from m.stage("grad_dist", b, [
                env.process(exchange_of(b, recv, send, intra, "grads"))])
            parts = [m.gpu_backward(b, look, uniq, 0.0, c.r[b], c.R[b]),
                     m.cluster_collective(b, ar, ar, "allreduce", AR, self.all_ranks)]
            if L < n and (b + 1) % sync_every == 0:
                parts.append(m.cluster_collective(b, self.shard_bytes, self.shard_bytes,
                                                  "replica sync", AR, self.replicas))
            yield from m.stage("emb_backward", b, parts)
            m.batch_done(b)
        self._report(m, c, exchange)

    def output_bytes(self, b_group: float, ids: float, all_ids: float
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
        ids."""
        L = self.L
        if L == 1:
            return 0.0, 0.0, 0.0
        scale = ids / all_ids if all_ids else 1.0
        pooled, rows = self.pooled_out, scale * self.unpooled_out  # bytes per sample
        k = np.maximum(np.array(self.layout.span, float), 1.0)
        local = self.node_local
        holds = self.holds
        sharded = np.array(self.layout.span) > 0
        per_send = (np.where(local, b_group * pooled * (L - 1) / (L * k),
                             b_group * pooled * (L - 1) / L)
                    + b_group * rows * (L - 1) / (L * k))  # an unpooled row: one rank
        send = (holds * per_send).sum(axis=1)
        from_span = np.where(local, 1.0, k) - holds * np.where(local, 1.0 / k, 1.0)
        recv = (sharded * b_group / L * (from_span * pooled + (1.0 - holds / k) * rows)
                ).sum(axis=1)
        intra = (holds * local * b_group * pooled * (k - 1) / k).sum(axis=1)
        return float(send.max()), float(recv.max()), float(intra.max())

    def _report(self, m, c, exchange: list[float]) -> None:
        wu = m.warmup
        done = m.done
        span = float(done[-1] - (done[wu - 1] if wu > 0 else 0.0))
        samples = sum(c.samples[wu:]) * self.ranks / self.traced
        sps = samples / span * 1e9 if span > 0 else float("inf")
        timed = len(done) - wu
        stage = m.stage_ns
        comm = sum(float(np.sum(stage[s][wu:])) for s in ("input_wait", "output_dist",
                                                            "grad_dist") if s in stage)
        nodes = self.cfg.hardware.cluster.nodes
        prices = self.cfg.hardware.prices
        per_hour = self.ranks * prices.gpu_usd_per_hour + nodes * prices.host_usd_per_hour
        m.counters["rank_cache_hit_ratio"] = 1.0  # every shard in HBM: every lookup hits
        if self.params.rank_cache != "none":
            acc = float(np.sum(c.column("rc_accesses")[wu:]))
            fills = float(np.sum(c.column("rc_fills")[wu:]))
            m.counters["rank_cache_hit_ratio"] = 1.0 - fills / acc if acc else 1.0
        hw = self.cfg.hardware
        per_gpu_GiB = (hw.gpu.hbm_capacity_GiB if self.params.rank_cache == "none"
                       else hw.dram_capacity_GiB / self.G)
        m.counters.update({
            # the largest model one shard group holds: its ranks' HBM, or with per-rank
            # caches their shares of host DRAM (what stops fitting first)
            "max_model_GiB": self.L * per_gpu_GiB,
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
    # not through the on-disk replay cache: the design cannot see `--no-cache`, and a rank's
    # stream is small beside the global trace (replaying it costs less than hashing it)
    cols, _ = policy_columns(stream, name, design.rank_cache_capacity(rank), False, **params)
    return {k: np.asarray(cols[k], np.int64) for k in ("accesses", "unique", "fills",
                                                        "writebacks")}
