"""The simulated machine: every resource of one hardware config, the cost of every kind of
work a design does, and stage bookkeeping.

Resources (one `Server` each, processor sharing — see resources.py):

    cpu_dram    CPU DRAM; random row gathers at dram_GBps x gather_efficiency(row); DMA
                traffic (every PCIe copy reads or writes host memory) streams at dram_GBps
    cpu_llc     rows that hit in the CPU last-level cache (llc_GBps)
    cxl         the CXL memory tier (only with model.cxl_share > 0): the cxl_fraction of
                every gather of host-table rows (`table_gather`) at cxl.bandwidth_GBps x
                gather_efficiency(row), cxl.load_latency_ns per transfer; the LLC caches
                its lines as DRAM's. Staging buffers, gradients and DMA stay in DRAM
    cpu_cores   the CPU cores: cores x parallel_efficiency core-ns per ns; a gathered
                row's core time (bytes / the core's rate from where the row is: LLC
                core_llc_GBps, DRAM core_dram_GBps, never above embedding_op_GBps), gradient
                aggregation (aggregate_ns_per_lookup, _onchip_ns_per_lookup, _per_row) and
                ScratchPipe's planner (plan_ns_per_id, _per_eviction) all compete for them
    pcie_h2d,   the link, per direction (or one `pcie` server when not full duplex)
    pcie_d2h
    hbm         GPU HBM; gathers at hbm_GBps x gather_efficiency(row)
    gpu_l2      rows that hit in the GPU L2 (l2_GBps)
    gpu_compute the dense work (MLPs, interaction, dense optimizer): its FLOPs over the
                kernels' GPU time, after the launch waits (timing/dense_compute.py); the
                iteration ends no earlier than the host issued it (timing/host_dispatch.py)
    gpu_mmu     address translations of host pages that miss the GPU TLB (UVM reads and
                writes in place): uvm_translation_ns per walk, walks sharing the walkers
    nvlink_tx,  this GPU's NVLink/NVSwitch port, per direction (made on a design's first
    nvlink_rx   `collective`, so only the designs that talk to other GPUs have them)
    net_tx,     this GPU's share of its node's NICs, per direction (made on the first
    net_rx      `cluster_collective` that crosses nodes)

Every design prices its work through the helpers below, so the same work costs the same
in every design (docs/timing.md lists each formula and its source).
"""

from __future__ import annotations

import enum
import math
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field

import numpy as np
import simpy

from scratchpipe_sim.config import Config, interpolate
from scratchpipe_sim.config.hardware import doc, rate_at
from scratchpipe_sim.config.model import GiB
from scratchpipe_sim.timing.collectives import (
    Fabric,
    Group,
    allreduce_split,
    alltoall_split,
    net_latency_ns,
    net_share_GBps,
)
from scratchpipe_sim.timing.cpu_update_cost import (
    forward_overhead_ns,
    grad_output_offchip,
    update_cost,
)
from scratchpipe_sim.timing.dense_compute import DenseCost, dense_iteration
from scratchpipe_sim.timing.host_dispatch import HostCost, host_iteration, trainer_loader_ns
from scratchpipe_sim.timing.resources import (
    AllDone,
    Memory,
    Pcie,
    Recorder,
    Server,
    Span,
    run_to_end,
)

#: bits a CUB onesweep radix-sort pass sorts on (CCCL dispatch_radix_sort: ONESWEEP_RADIX_BITS)
RADIX_BITS = 8
#: kernels FBGEMM's _update_cache_miss_counter launches after torch.unique's host sync and
#: before lru_cache_populate's first sort: where(==), sum, >, .to, and two indexed += (a
#: select-add and a copy each) -> 2 + 1 + 1 + 1 + 2 + 2 (fbgemm_gpu
#: split_table_batched_embeddings_ops_training.py, _update_cache_miss_counter)
MISS_COUNTER_KERNELS = 9


class Collective(enum.Enum):
    """The NCCL collectives `Machine.collective` prices, each at its own efficiency of
    nvlink_GBps (hardware.interconnect.alltoall_efficiency / allreduce_efficiency)."""

    ALL_TO_ALL = enum.auto()
    ALL_REDUCE = enum.auto()


@dataclass(frozen=True)
class PlannerParams:
    """The cost knobs of a planner on the host cores, priced by `Machine.plan`. A design
    with such a planner inherits these fields into its own params (`design_params.NAME`),
    so each design's setting prices only that design; null takes hardware.cpu's value."""

    plan_ns_per_id: float | None = field(default=None, metadata={
        "help": "plan cost per looked-up id on one CPU core, core-ns (null: "
                "hardware.cpu.plan_ns_per_id)", "min": 0})
    plan_ns_per_eviction: float | None = field(default=None, metadata={
        "help": "plan cost per evicted row on one CPU core, core-ns (null: "
                "hardware.cpu.plan_ns_per_eviction)", "min": 0})
    plan_threads: int | None = field(default=None, metadata=doc(
        "cores", "1 - hardware.cpu.cores", "the planner may use every core") | {
        "help": "cores the planner may use at once, shared with collect and write-back "
                "(null: hardware.cpu.cores)", "min": 1})


#: every knob from the hardware (what a design without its own planner knobs is priced with)
PLANNER_DEFAULTS = PlannerParams()


class Machine:
    def __init__(self, env: simpy.Environment, cfg: Config, num_batches: int,
                 keep_spans: bool = False, design: str = ""):
        self.env = env
        self.cfg = cfg
        hw = cfg.hardware
        self.num_batches = num_batches
        self.recorder = Recorder(keep_spans)
        cpu, gpu = hw.cpu, hw.gpu
        rec = self.recorder

        def server(name: str, GBps: float, latency_ns: float) -> Server:
            return Server(env, name, GBps, latency_ns, num_batches, rec)

        self.dram = Memory(server("cpu_dram", cpu.dram_GBps, cpu.dram_latency_ns),
                           lambda rb: interpolate(cpu.gather_efficiency, rb),
                           server("cpu_llc", cpu.llc_GBps, 0.0) if cpu.llc_MiB > 0 else None)
        self.hbm = Memory(server("hbm", gpu.hbm_GBps, gpu.hbm_latency_ns),
                          lambda rb: interpolate(gpu.gather_efficiency, rb),
                          server("gpu_l2", gpu.l2_GBps, 0.0) if gpu.l2_MiB > 0 else None)
        #: the share of every host-table gather served by the CXL tier (0: no tier)
        self.cxl_fraction = cfg.cxl_fraction
        self.cxl = (Memory(server("cxl", hw.cxl.bandwidth_GBps, hw.cxl.load_latency_ns),
                           self.dram.gather_eff, self.dram.onchip)
                    if self.cxl_fraction > 0 else None)
        #: a core's miss rate on CXL rows over its rate on DRAM rows (Little's law)
        self.cxl_core_scale = (cpu.dram_latency_ns / hw.cxl.load_latency_ns
                               if self.cxl is not None and hw.cxl.load_latency_ns > 0
                               else 1.0)
        self.pcie = Pcie(env, hw.pcie, num_batches, rec, dram=self.dram.server)
        # FLOPs at the rate `mlp` sets per call (dense_compute prices each kernel)
        self.compute = server("gpu_compute", 1.0, 0.0)
        # "bandwidth" in walks per ns: a transfer of `walks x uvm_translation_ns` at 1 per ns
        self.mmu = server("gpu_mmu", 1.0, 0.0)
        # "bandwidth" in core-ns of work per ns
        self.cores = server("cpu_cores", cpu.cores * cpu.parallel_efficiency, 0.0)
        self.stage_ns: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(num_batches))
        self.stage_order: list[str] = []
        #: design-specific totals written as metric columns (e.g. refetch_hazards)
        self.counters: dict[str, float] = {}
        self.done = np.full(num_batches, np.nan)
        self.warmup = cfg.model.warmup_batches
        self.window_start_ns = 0.0
        self.busy_at_window_start = {s.name: 0.0 for s in self.servers}
        m = cfg.model
        self.sample_output_bytes = m.sample_output_bytes
        sector = gpu.sector_bytes
        self.sector_aligned = all(
            x % sector == 0 for x in (*m.row_bytes_per_table, *m.moved_row_bytes_per_table))
        self.total_rows = cfg.total_rows
        self.r = m.row_bytes
        self.R = m.moved_row_bytes
        self.index_bytes = m.index_bytes
        self.tables = m.table_count
        #: the mean table's weight bytes: what a unique row's translation spans in the
        #: hybrid update (FBGEMM's walk runs table by table; `table_doublings`)
        self.table_weight_bytes = float(sum(
            r * b for r, b in zip(m.rows_per_table, m.row_bytes_per_table, strict=True))
            / max(1, m.table_count))
        self._nvlink: tuple[Server, Server] | None = None
        self._net: tuple[Server, Server] | None = None
        #: the dense work's price per distinct samples per batch (`mlp`)
        self._dense: dict[float, DenseCost] = {}
        #: the host's issue work per iteration (model.framework), when the host has issued
        #: everything so far, and the earliest it may start the next iteration (a sync)
        self._design = design
        self._host = host_iteration(m, cpu, design=design)
        #: the same with the trainer's thread building each batch, per samples per batch
        self._host_at: dict[float, HostCost] = {}
        self._host_free = 0.0
        self._host_gate = 0.0
        self._host_counters()

    def _host_counters(self) -> None:
        if self._host.total_ns > 0 or self.cfg.input_pipeline.loader_in_trainer:
            self.counters.update({"host_issue_ns": self._host.total_ns,
                                  "host_ops": float(self._host.op_count),
                                  "host_wait_ns": 0.0})

    def set_sharding_types(self, types: frozenset[str]) -> None:
        """A sharded design's placement ("table-wise", "row-wise"), before its first batch:
        TorchRec issues each sharding group's dists and syncs (`host_dispatch.host_ops`)."""
        self._host = host_iteration(self.cfg.model, self.cfg.hardware.cpu,
                                    design=self._design, sharding_types=types)
        self._host_at.clear()
        self._host_counters()

    def batch_done(self, b: int) -> None:
        """Batch b finished training; at the end of warm-up, snapshot busy times."""
        self.done[b] = self.env.now
        if b == self.warmup - 1:
            self.window_start_ns = self.env.now
            self.busy_at_window_start = {s.name: s.busy_now() for s in self.servers}

    @property
    def servers(self) -> list[Server]:
        out = [self.dram.server]
        if self.dram.onchip is not None:
            out.append(self.dram.onchip)
        if self.cxl is not None:
            out.append(self.cxl.server)
        out += [self.cores, *self.pcie.servers, self.hbm.server]
        if self.hbm.onchip is not None:
            out.append(self.hbm.onchip)
        return out + [self.compute, self.mmu]

    # -- CPU work ----------------------------------------------------------------------------
    def cpu_work(self, core_ns: float, batch: int, label: str, max_share: float = 1.0
                 ) -> simpy.Process | None:
        """`core_ns` of work on the CPU cores (spread over as many as `max_share` allows)."""
        return self.cores.transfer(core_ns, batch, label, max_share=max_share)

    def cpu_gather(self, rows: float, row_bytes: float, batch: int, label: str,
                   onchip_fraction: float = 0.0) -> simpy.Event | None:
        """A CPU-executed random gather or scatter of rows (lookups, collect, write-back,
        update, the staging buffer's side of a copy): the memory's traffic (LLC hits on
        `cpu_llc`, misses on `cpu_dram` at the gather efficiency: what the socket's memory
        allows) || the cores' time for the same rows. A core handles its hits and misses
        in sequence, sharing its memory-level parallelism: each row costs its core
        row_bytes / (the core's rate from where the row is), core_llc_GBps for a hit and
        core_dram_GBps for a miss, never faster than the op itself (embedding_op_GBps).
        Both parts must finish: a roofline of the socket's memory and the cores."""
        if rows <= 0:
            return None
        cpu = self.cfg.hardware.cpu
        h = onchip_fraction if self.dram.onchip is not None else 0.0
        if self.cxl is None:
            core_ns = gather_core_ns(cpu, rows, row_bytes, h)
        else:  # the tier's rows miss at the core's slower CXL rate
            f = self.cxl_fraction
            core_ns = (gather_core_ns(cpu, rows * (1.0 - f), row_bytes, h)
                       + gather_core_ns(cpu, rows * f, row_bytes, h, self.cxl_core_scale))
        return self.all_of([self.table_gather(rows, row_bytes, batch, label, onchip_fraction),
                            self.cpu_work(core_ns, batch, label)])

    def cpu_embedding_bag(self, lookups: float, row_bytes: float, bags: float, batch: int,
                          onchip_fraction: float = 0.0) -> simpy.Event | None:
        """Hybrid's forward on the CPU: the lookups' rows gathered and pooled (`cpu_gather`),
        then, with `hardware.cpu.forward` set, FBGEMM's forward's own costs beyond the rows
        (per call, per bag beyond the rates' share, per strided bag of a multi-table
        call: `forward_overhead_ns`) on
        every core (at::parallel_for over the bags)."""
        terms = self.cfg.hardware.cpu.forward
        if terms is None:
            return self.cpu_gather(lookups, row_bytes, batch, "gather", onchip_fraction)
        extra = forward_overhead_ns(terms, lookups, bags,
                                    row_bytes / self.cfg.model.tables.bytes_per_element,
                                    self.tables)
        return self.seq(
            lambda: self.cpu_gather(lookups, row_bytes, batch, "gather", onchip_fraction),
            lambda: self.cpu_work(extra, batch, "pool"))

    def table_gather(self, rows: float, row_bytes: float, batch: int, label: str,
                     onchip_fraction: float = 0.0) -> simpy.Event | None:
        """The host memory's side of a random access to `rows` rows of the embedding tables
        (CPU gathers and scatters, GPU loads and stores in place): on DRAM, or with a CXL
        tier split by `model.cxl_share`'s rule — cxl_fraction of the rows on `cxl`, the rest
        on `cpu_dram`, at once (two devices), each behind the LLC. Why one helper: every
        design's host-row traffic is priced here, so every design sees the tier."""
        if self.cxl is None:
            return self.dram.gather(rows, row_bytes, batch, label, onchip_fraction)
        f = self.cxl_fraction
        return self.all_of([
            self.dram.gather(rows * (1.0 - f), row_bytes, batch, label, onchip_fraction),
            self.cxl.gather(rows * f, row_bytes, batch, label, onchip_fraction)])

    def collect(self, batch: int, rows: float, row_bytes: float, label: str = "collect"
                ) -> simpy.Event | None:
        """Rows gathered from the host table into a pinned staging buffer (ScratchPipe's
        collect, Bagpipe's prefetch): the table reads are a CPU gather (DRAM || cores);
        the buffer is written in order, so its bytes are DRAM streaming traffic (the
        hardware prefetches a sequential write's lines: no per-row core stall)."""
        return self.all_of([self.cpu_gather(rows, row_bytes, batch, label),
                            self.dram.stream(rows * row_bytes, batch, label + " staging")])

    def write_back(self, batch: int, rows: float, row_bytes: float, label: str = "writeback"
                   ) -> simpy.Event | None:
        """Victim rows read in order from the staging buffer the GPU wrote (DRAM streaming
        traffic) and scattered into the host table (a CPU gather: each written row's lines
        are read for ownership like a missed read)."""
        if rows <= 0:
            return None
        return self.all_of([self.dram.stream(rows * row_bytes, batch, label + " staging"),
                            self.cpu_gather(rows, row_bytes, batch, label)])

    def cpu_backward(self, batch: int, lookups: float, unique_rows: float,
                     onchip_fraction: float = 0.0, r: float | None = None,
                     R: float | None = None, lookup_onchip: float = 0.0,
                     bags: float = 0.0) -> simpy.Process:
        """Hybrid's backward on the CPU: aggregate the lookups' gradient contributions into
        row gradients — core work (`aggregate_core_ns`: per lookup the op on the gradient
        row and the aggregation's own cost, dearer for a lookup whose row is off chip —
        `lookup_onchip` is the batch's on-chip fraction of lookups — plus a cost per unique
        row; fitted by calibrate --cpu, the cores' own memory stalls included) || the
        gradients' memory traffic (r bytes per lookup on DRAM/LLC, `onchip_fraction` on
        chip: the socket's limit) — then update each unique row with its optimizer state (a
        read and a write per row: 2U x R, `onchip_fraction` of them on chip).

        With `hardware.cpu.update` terms for the config's optimizer, priced instead as
        FBGEMM's CPU backward runs it (timing/cpu_update_cost.py; `bags`: the batch's
        samples x tables, whose grad_output rows it reads; a unique row dearer per doubling
        of its table's weight bytes): csr2csc's sort on every
        core, then the walk over the unique rows (one core, or every core where FBGEMM
        parallelizes it), with the grad_output rows that do not fit the LLC beside the
        walk's rows at the miss rate (`grad_output_miss_ns`) || the rows' read and write
        on the socket's memory (2U x R)."""
        cpu = self.cfg.hardware.cpu
        r = self.r if r is None else r
        R = self.R if R is None else R
        terms = cpu.update.of(self.cfg.model.optimizer)
        if terms is not None:
            bpe = self.cfg.model.tables.bytes_per_element
            cost = update_cost(terms, lookups, unique_rows, r / bpe, self.tables, bags,
                               self.table_weight_bytes)
            walk_ns = cost.walk_ns + grad_output_miss_ns(cpu, bags, r, unique_rows, bpe)
            share = 1.0 if cost.parallel else plan_share(1, cpu.cores,
                                                         cpu.parallel_efficiency)
            return self.seq(
                lambda: self.cpu_work(cost.sort_ns, batch, "sort"),
                lambda: self.all_of([
                    self.cpu_work(walk_ns, batch, "update", max_share=share),
                    self.table_gather(2 * unique_rows, R, batch, "update",
                                      onchip_fraction)]))
        return self.seq(
            lambda: self.all_of([
                self.cpu_work(aggregate_core_ns(cpu, lookups, unique_rows, r,
                                                lookup_onchip if self.dram.onchip is not None
                                                else 0.0), batch, "aggregate"),
                self.dram.gather(lookups, r, batch, "aggregate", onchip_fraction)]),
            lambda: self.cpu_gather(2 * unique_rows, R, batch, "update", onchip_fraction))

    def gpu_plan(self, batch: int, ids: float, evictions: float = 0.0
                 ) -> simpy.Event | None:
        """ScratchPipe's planner on the GPU: a hash table of row -> slot probed per id and
        updated per eviction (hash_lookup_Gps, hash_insert_Gps: HierarchicalKV's measured
        rates, memory-bound random accesses), priced as that time of HBM service, shared
        with the HBM's other traffic."""
        gpu = self.cfg.hardware.gpu
        busy_ns = ids / gpu.hash_lookup_Gps + evictions / gpu.hash_insert_Gps
        return self.hbm.server.transfer(busy_ns * gpu.hbm_GBps, batch, "gpu plan")

    def plan(self, batch: int, ids: float, evictions: float = 0.0,
             knobs: PlannerParams = PLANNER_DEFAULTS) -> simpy.Process | None:
        """A host-side planner (ScratchPipe's plan stage, Bagpipe's oracle): ids x
        plan_ns_per_id + evictions x plan_ns_per_eviction core-ns on at most plan_threads
        cores, sharing the cores with collect and write-back; `knobs` are the calling
        design's own (a null knob takes hardware.cpu's)."""
        cpu = self.cfg.hardware.cpu
        work = (ids * _override(knobs.plan_ns_per_id, cpu.plan_ns_per_id)
                + evictions * _override(knobs.plan_ns_per_eviction, cpu.plan_ns_per_eviction))
        share = plan_share(knobs.plan_threads, cpu.cores, cpu.parallel_efficiency)
        return self.cpu_work(work, batch, "plan", share)

    # -- GPU work ----------------------------------------------------------------------------
    def id_bytes(self, lookups: float, samples: float) -> float:
        """Bytes of one batch's indices and offsets (index_bytes each; T x B + 1 offsets)."""
        return (lookups + samples * self.tables + 1) * self.index_bytes

    def gpu_forward(self, batch: int, lookups: float, samples: float,
                    onchip_fraction: float = 0.0, r: float | None = None
                    ) -> simpy.Event | None:
        """Embedding-bag forward: gather `lookups` rows of r bytes from HBM (or L2) and write
        each sample's outputs (sample_output_bytes: a pooled vector per table, one row per
        lookup of an unpooled table, `model.pooling_mode: none`) to HBM as a stream. Why
        the writes: unpooled, they are as many bytes as the reads (FBGEMM's H100 DEVICE
        forward, published point T1.2, is half output writes)."""
        r = self.r if r is None else r
        return self.all_of([self.hbm.gather(lookups, r, batch, "gather", onchip_fraction),
                            self.hbm.stream(samples * self.sample_output_bytes, batch,
                                            "output")])

    # -- UVM: the GPU reading and writing host memory in place ------------------------------
    def uvm_walks(self, rows: float, table_bytes: float, sorted_ids: bool) -> float:
        """Page walks of `rows` rows read or written in place in a host allocation of
        `table_bytes`: a row misses the GPU TLB with probability 1 - reach / table bytes
        (0 when the allocation fits the reach); in random order (a forward's lookups, a
        cache's fills) every row is a new chance to miss, in sorted order (the backward's
        unique ids) only each distinct page is: P x (1 - exp(-rows / P)) pages of
        uvm_page_bytes among P (rows spread uniformly over the allocation)."""
        gpu = self.cfg.hardware.gpu
        if rows <= 0 or table_bytes <= 0:
            return 0.0
        miss = max(0.0, 1.0 - gpu.tlb_reach_GiB * GiB / table_bytes)
        if not sorted_ids:
            return rows * miss
        pages = max(1.0, table_bytes / gpu.uvm_page_bytes)
        return pages * -math.expm1(-rows / pages) * miss

    def link_bytes(self, rows: float, row_bytes: float) -> float:
        """Bytes a GPU load or store of `rows` rows moves over the link: whole sectors. With
        tables of several row sizes `row_bytes` is a mean: when every table's sizes are
        whole sectors it is exact, else the mean is rounded up (an approximation)."""
        if self.sector_aligned:
            return rows * row_bytes
        sector = self.cfg.hardware.gpu.sector_bytes
        return rows * math.ceil(row_bytes / sector) * sector

    def uvm_read(self, batch: int, rows: float, row_bytes: float, label: str,
                 sorted_ids: bool = False, table_bytes: float | None = None,
                 accesses: float | None = None) -> simpy.Event | None:
        """GPU kernels reading `rows` host rows in place (UVM): the link at uvm_read_share x
        h2d_GBps (SM loads, whole sectors) || the host's DRAM serving the rows (a gather)
        || the page walks of rows that miss the GPU TLB (gpu_mmu). Duplicate ids of a batch
        are read once (the caller passes distinct rows: the first load brings the row's
        sectors into L2, the others hit them), but in random order every access is
        translated (`accesses`, default `rows`: a load is translated before it reaches the
        physically addressed L2, so a duplicate id still misses the TLB): FBGEMM's MANAGED
        forward on H100 costs the same 7.9 ms for 1.05M lookups over 435k (T1.10) or 368k
        (FK.3) distinct rows of 137 GB. `table_bytes`: the host allocation (default: every
        table's rows at row_bytes)."""
        return self._in_place(self.pcie.h2d, batch, rows, row_bytes, label, sorted_ids,
                              table_bytes, accesses)

    def uvm_write(self, batch: int, rows: float, row_bytes: float, label: str,
                  sorted_ids: bool = False, table_bytes: float | None = None
                  ) -> simpy.Event | None:
        """GPU stores of `rows` rows into host memory in place: the link at uvm_write_share
        x d2h_GBps || the host's DRAM (a scatter, priced as a gather) || page walks, as
        uvm_read."""
        return self._in_place(self.pcie.d2h, batch, rows, row_bytes, label, sorted_ids,
                              table_bytes, None)

    def _in_place(self, link: Callable[..., simpy.Event | None], batch: int, rows: float,
                  row_bytes: float, label: str, sorted_ids: bool, table_bytes: float | None,
                  accesses: float | None) -> simpy.Event | None:
        """One direction of in-place UVM traffic: `link` (pcie.h2d or d2h, at its in-place
        share) || the host DRAM || the translations on gpu_mmu."""
        if rows <= 0:
            return None
        tb = self.total_rows * row_bytes if table_bytes is None else table_bytes
        n = rows if sorted_ids or accesses is None else max(rows, accesses)
        walks = self.uvm_walks(n, tb, sorted_ids)
        return self.all_of([
            link(self.link_bytes(rows, row_bytes), batch, label, uvm=True),
            self.table_gather(rows, row_bytes, batch, label),
            self.mmu.transfer(walks * self.cfg.hardware.gpu.uvm_translation_ns, batch,
                              label + " walks")])

    def uvm_update(self, batch: int, rows: float, row_bytes: float, label: str,
                   table_bytes: float | None = None) -> simpy.Event | None:
        """The backward's read-modify-write of `rows` unique rows (weights and/or optimizer
        state, `row_bytes` each) kept in host memory: sorted ids, each row read then
        written in place; the reads and the writes of different rows overlap (two link
        directions), their page walks once per distinct page."""
        if rows <= 0:
            return None
        return self.all_of([self.uvm_read(batch, rows, row_bytes, label, sorted_ids=True,
                                          table_bytes=table_bytes),
                            self.pcie.d2h(self.link_bytes(rows, row_bytes), batch, label,
                                          uvm=True),
                            self.table_gather(rows, row_bytes, batch, label + " write")])

    def gpu_backward(self, batch: int, lookups: float, unique_rows: float,
                     onchip_fraction: float = 0.0, r: float | None = None,
                     R: float | None = None,
                     host: Callable[[], Iterable[simpy.Event | None]] | None = None
                     ) -> simpy.Process:
        """FBGEMM-style backward: sort the lookups' ids and segment-reduce their gradients
        (lookups x (r + 2 index_bytes) at aggregate_efficiency), then update each unique row
        with its state (2U x R gathers) || `host()`: the same kernel's updates of rows or
        optimizer state kept in host memory (UVM: `uvm_update`), which start after the sort
        too and overlap the HBM updates."""
        gpu = self.cfg.hardware.gpu
        r = self.r if r is None else r
        R = self.R if R is None else R
        agg = lookups * (r + 2 * self.index_bytes)
        return self.seq(
            lambda: self.hbm.stream(agg, batch, "sort+reduce", gpu.aggregate_efficiency),
            lambda: self.all_of([
                self.hbm.gather(2 * unique_rows, R, batch, "update", onchip_fraction),
                *(host() if host is not None else ())]))

    def cache_lookup(self, batch: int, lookups: float, unique_rows: float, fills: float
                     ) -> simpy.Process | None:
        """An on-demand cache's bookkeeping kernels, as FBGEMM runs them: the tag set of every
        lookup probed (lxu_cache_lookup runs on all the batch's ids, duplicates included),
        again per unique id (lru_cache_find_uncached) and per fill (the victim search):
        cache_probe_bytes each, a random set of the cache: an HBM gather of rows that
        size."""
        probe = self.cfg.hardware.gpu.cache_probe_bytes
        return self.hbm.gather(lookups + unique_rows + fills, probe, batch, "cache lookup")

    def radix_sort(self, batch: int, n: float, key_bytes: float, value_bytes: float,
                   key_bits: int, label: str) -> simpy.Event | None:
        """A CUB DeviceRadixSort (onesweep LSD, the sort FBGEMM's cache kernels and
        torch.unique call) of `n` keys of `key_bytes` with values of `value_bytes`: one
        histogram pass reading the keys, then ceil(key_bits / RADIX_BITS) passes (8-bit
        digits: CCCL's ONESWEEP_RADIX_BITS) each reading and writing every key and value,
        streamed through HBM at gpu.aggregate_efficiency (the backward's sort)."""
        passes = math.ceil(key_bits / RADIX_BITS)
        nbytes = n * (key_bytes + passes * 2 * (key_bytes + value_bytes))
        return self.hbm.stream(nbytes, batch, label,
                               self.cfg.hardware.gpu.aggregate_efficiency)

    def cache_populate_sorts(self, batch: int, lookups: float, sets: int
                             ) -> simpy.Process:
        """FBGEMM lru_cache_populate's sorts, over every lookup of the batch (the unique
        buffer has one slot per lookup, and the second sort runs on all of them):
        get_unique_indices sorts the int64 linear ids over log2(total rows) + 1 bits and
        DeviceSelect::Unique reads and writes them (16 B each); lru_cache_find_uncached
        sorts (int32 set, int64 id) pairs over log2(sets) + 1 bits."""
        id_bits = int(math.log2(self.total_rows + 1)) + 1
        set_bits = int(math.log2(sets + 1)) + 1
        ib = self.index_bytes
        return self.seq(
            lambda: self.radix_sort(batch, lookups, ib, 0, id_bits, "populate unique sort"),
            lambda: self.hbm.stream(lookups * 2 * ib, batch, "populate unique"),
            lambda: self.radix_sort(batch, lookups, 4, ib, set_bits, "populate set sort"))

    def cache_miss_counter(self, batch: int, lookups: float) -> simpy.Process:
        """FBGEMM's record_cache_miss_counter (`record_miss_counter` of
        `design_params.lru-cache`): each prefetch
        probes every lookup's set once more (lxu_cache_lookup, cache_probe_bytes each), then
        torch.where (4 + 8 B read, 8 B written a lookup) and torch.unique: a radix sort of
        its int64 keys on all 64 bits, a unique pass (16 B a lookup) and `length.item()`,
        a host sync after which the GPU waits while the host launches the counter's
        MISS_COUNTER_KERNELS small kernels (kernel_launch_ns each)."""
        gpu = self.cfg.hardware.gpu
        ib = self.index_bytes
        return self.seq(
            lambda: self.hbm.gather(lookups, gpu.cache_probe_bytes, batch,
                                    "miss counter lookup"),
            lambda: self.hbm.stream(lookups * (4 + 2 * ib), batch, "miss counter where"),
            lambda: self.radix_sort(batch, lookups, ib, 0, 8 * ib, "miss counter sort"),
            lambda: self.hbm.stream(lookups * 2 * ib, batch, "miss counter unique"),
            lambda: self.env.timeout(MISS_COUNTER_KERNELS * gpu.kernel_launch_ns))

    # -- GPU to GPU ----------------------------------------------------------------------------
    @property
    def nvlink(self) -> tuple[Server, Server]:
        """This GPU's NVLink port (tx, rx): one server per direction at nvlink_GBps, each
        transfer paying nvlink_latency_ns. Made on first use: a server has no SimPy state
        until a transfer, so the designs that never use it price exactly as without it."""
        if self._nvlink is None:
            ic = self.cfg.hardware.interconnect
            self._nvlink = tuple(
                Server(self.env, name, ic.nvlink_GBps, ic.nvlink_latency_ns,
                       self.num_batches, self.recorder) for name in ("nvlink_tx", "nvlink_rx"))
        return self._nvlink

    def collective(self, batch: int, send: float, recv: float, label: str,
                   kind: Collective) -> simpy.Event | None:
        """One step of a collective over NVLink: `send` bytes out || `recv` bytes in, at
        nvlink_GBps x the collective's efficiency (alltoall_efficiency for
        Collective.ALL_TO_ALL, allreduce_efficiency for ALL_REDUCE)."""
        ic = self.cfg.hardware.interconnect
        if kind is Collective.ALL_TO_ALL:
            eff = ic.alltoall_efficiency
        elif kind is Collective.ALL_REDUCE:
            eff = ic.allreduce_efficiency
        else:
            raise TypeError(f"expected a Collective, got {kind!r}")
        tx, rx = self.nvlink
        return self.all_of([tx.transfer(send, batch, label, efficiency=eff),
                            rx.transfer(recv, batch, label, efficiency=eff)])

    @property
    def net(self) -> tuple[Server, Server]:
        """This GPU's share of its node's NICs (tx, rx), made on first use like `nvlink`."""
        if self._net is None:
            fabric = Fabric.of(self.cfg.hardware)
            self._net = tuple(
                Server(self.env, name, fabric.net_GBps_per_gpu, fabric.net_latency_ns,
                       self.num_batches, self.recorder) for name in ("net_tx", "net_rx"))
        return self._net

    def cluster_collective(self, batch: int, send: float, recv: float, label: str,
                           kind: Collective, group: Group) -> simpy.Event | None:
        """One collective over `group`'s ranks of the cluster (`timing/collectives.py`):
        for ALL_TO_ALL `send` / `recv` are this GPU's bytes off itself, for ALL_REDUCE
        `send` is the buffer all-reduced. The NVLink phase is `collective` (so one node
        prices exactly as `multi-gpu`); across nodes the network phase runs beside it on
        `net_tx` / `net_rx`, at its share of the NICs, paying its inter-node latency."""
        if kind is Collective.ALL_TO_ALL:
            split, name = alltoall_split(group, send, recv), "all-to-all"
        elif kind is Collective.ALL_REDUCE:
            split, name = allreduce_split(group, send), "all-reduce"
        else:
            raise TypeError(f"expected a Collective, got {kind!r}")
        parts = [self.collective(batch, split.nvlink_send, split.nvlink_recv, label, kind)]
        if split.net_send > 0 or split.net_recv > 0:
            fabric = Fabric.of(self.cfg.hardware)
            GBps = net_share_GBps(fabric, group, name)
            lat = net_latency_ns(fabric, group, name)
            tx, rx = self.net
            parts += [tx.transfer(split.net_send, batch, label, GBps=GBps, latency_ns=lat),
                      rx.transfer(split.net_recv, batch, label, GBps=GBps, latency_ns=lat)]
        return self.all_of(parts)

    def mlp(self, batch: int, samples: float) -> simpy.Event | None:
        """The dense work of one iteration on `samples` samples (MLPs, interaction, dense
        optimizer: `dense_compute.dense_iteration`): its FLOPs on `gpu_compute` for the
        kernels' GPU time, after the launch waits (idle, not busy). The iteration's host
        issue (`host_dispatch.host_iteration`) is joined here, the one place every
        design's iteration passes: the host issues batch b's ops from when it finished
        batch b - 1's (running ahead of the GPU), or, with a host sync per iteration, not
        before the GPU reached batch b - 1's dense work; the dense work ends no earlier
        than the host has issued the whole iteration (the GPU then waits: `host_wait`)."""
        cost = self._dense.get(samples)
        if cost is None:  # once per distinct batch size (every batch asks)
            cost = self._dense[samples] = dense_iteration(self.cfg.model,
                                                          self.cfg.hardware.gpu,
                                                          float(samples))
        ev = self.compute.transfer(cost.flops, batch, "mlp",
                                   GBps=cost.flops / cost.busy_ns,
                                   latency_ns=cost.launch_ns)
        host = self._host_at.get(samples)
        if host is None:  # once per distinct batch size
            loader = trainer_loader_ns(self.cfg.input_pipeline, self.cfg.model, samples)
            host = self._host_at[samples] = HostCost(
                self._host.ops, self._host.syncs, self._host.host_op_ns,
                self._host.sync_ns, self._host.drains, loader)
            if loader > 0:
                self.counters["host_issue_ns"] = host.total_ns
        if host.total_ns <= 0:
            return ev
        shift = 0.0
        if host.drains:  # the sync waits for batch b - 1's last kernel: nothing overlaps
            prev = float(self.done[batch - 1]) if batch > 0 else 0.0
            self._host_gate = self.env.now if math.isnan(prev) else prev
            shift = host.pre_ns  # the GPU starts batch b once its inputs are issued
        start = max(self._host_free, self._host_gate)
        self._host_free = start + host.total_ns
        if host.syncs and not host.drains:
            self._host_gate = self.env.now
        return self.env.process(self._host_join(batch, ev, self._host_free, shift))

    def _host_join(self, batch: int, ev: simpy.Event | None, issued_ns: float,
                   shift_ns: float) -> Generator:
        """Wait for the dense work, then for the host to have issued the iteration;
        `shift_ns`: host issue the GPU waited for before its first kernel of the batch."""
        if ev is not None:
            yield ev
        wait = max(issued_ns - self.env.now, shift_ns)
        if wait > 0:
            if batch >= self.warmup:  # a mean over the measured batches
                self.counters["host_wait_ns"] += wait / (self.num_batches - self.warmup)
            yield self.env.timeout(wait)

    # -- stages ------------------------------------------------------------------------------
    def stage(self, name: str, batch: int, parts: Iterable[simpy.Event | None]
              ) -> Generator:
        """Run `parts` concurrently; the stage ends when all have (skips None/empty parts)."""
        start = self.env.now
        ev = self.all_of(parts)
        if ev is not None:
            yield ev
        self.end_stage(name, batch, start)

    def all_of(self, parts: Iterable[simpy.Event | None]) -> simpy.Event | None:
        """One event for the parts that move anything (zero-byte transfers are None)."""
        evs = [p for p in parts if p is not None]
        if not evs:
            return None
        return evs[0] if len(evs) == 1 else AllDone(self.env, evs)

    def end_stage(self, name: str, batch: int, start: float) -> None:
        if name not in self.stage_ns:
            self.stage_order.append(name)
        now = self.env._now
        self.stage_ns[name][batch] += now - start
        if self.recorder.keep_spans:  # no Span built for a run without a timeline
            self.recorder.spans.append(Span("stages", name, start, now, batch))

    def seq(self, *steps) -> simpy.Process:
        """A process running zero-argument event factories one after another."""

        def run():
            for step in steps:
                ev = step()
                if ev is not None:
                    yield ev

        return self.env.process(run())


def _override(value: float | None, default: float) -> float:
    """A design's own value where set, else the hardware's."""
    return default if value is None else value


def plan_share(plan_threads: int | None, cores: int, parallel_efficiency: float) -> float:
    """The share of `cpu_cores` (cores x parallel_efficiency core-ns per ns) the planner may
    use: plan_threads cores, at parallel_efficiency when it runs on several (one thread
    loses nothing to scaling, so it gets one whole core), never more than the server."""
    threads = min(plan_threads or cores, cores)
    eff = 1.0 if threads == 1 else parallel_efficiency
    return min(1.0, threads * eff / (cores * parallel_efficiency))


def gather_core_ns(cpu, rows: float, row_bytes: float, onchip_fraction: float = 0.0,
                   miss_scale: float = 1.0) -> float:
    """Core-ns of `rows` gathered rows, a fraction h of them on chip. A core overlaps
    W = core_window_rows consecutive rows: a window whose rows all hit runs at the hit
    rate min(core_llc_GBps, op), a window with a miss at the miss rate min(core_dram_GBps,
    op) (its hits wait with the miss), so a row costs t_hit x h^W + t_miss x (1 - h^W)
    (W = 1: each row at its own rate). Why: on this project's host one thread's gather
    of generated traces fell with h far more slowly than h x t_hit + (1 - h) x t_miss
    (docs/validation.md). `miss_scale` scales the miss rate: rows missing to a slower
    memory (the CXL tier: dram_latency_ns / cxl.load_latency_ns)."""
    h = min(max(onchip_fraction, 0.0), 1.0)
    op = cpu.embedding_op_GBps
    t_hit = row_bytes / min(rate_at(cpu.core_llc_GBps, row_bytes), op)
    t_miss = row_bytes / min(rate_at(cpu.core_dram_GBps, row_bytes) * miss_scale, op)
    all_hit = h ** cpu.core_window_rows
    return rows * (t_hit * all_hit + t_miss * (1.0 - all_hit))


def grad_output_miss_ns(cpu, bags: float, row_bytes: float, unique_rows: float,
                        bytes_per_element: float = 4.0) -> float:
    """Core-ns FBGEMM's backward walk adds for the bags' grad_output rows it reads from
    DRAM (`grad_output_offchip`'s share of the bags), each a row of `row_bytes` at the
    core's miss rate beyond its hit rate (the per-bag-element term prices the hit)."""
    if bags <= 0 or cpu.llc_MiB <= 0:
        return 0.0
    dim = row_bytes / bytes_per_element
    miss = bags * grad_output_offchip(bags, dim, unique_rows, row_bytes,
                                      cpu.llc_MiB * 2**20, bytes_per_element)
    return gather_core_ns(cpu, miss, row_bytes, 0.0) - gather_core_ns(cpu, miss, row_bytes,
                                                                        1.0)


def aggregate_core_ns(cpu, lookups: float, unique_rows: float, r: float,
                      onchip_fraction: float = 0.0) -> float:
    """Core-ns of the gradient aggregation of one batch (r: gradient bytes per lookup, a
    fraction h of the lookups on chip): lookups x (r / embedding_op_GBps + a_miss x (1 - h)
    + a_hit x h) + unique rows x aggregate_ns_per_row, a_miss = aggregate_ns_per_lookup,
    a_hit = aggregate_onchip_ns_per_lookup (unset: a_miss). Why: a lookup's slot and
    gradient row are a random access into the batch's working set; once that spills the
    LLC a repeated row costs several times a resident one (one thread here, rows used 5
    times each: 47 ns per lookup in 16k-lookup batches, 133-159 in 262k-524k ones;
    docs/validation.md)."""
    per_lookup = cpu.aggregate_ns_per_lookup
    if cpu.aggregate_onchip_ns_per_lookup is not None:
        h = min(max(onchip_fraction, 0.0), 1.0)
        per_lookup = per_lookup * (1.0 - h) + cpu.aggregate_onchip_ns_per_lookup * h
    return (lookups * (r / cpu.embedding_op_GBps + per_lookup)
            + unique_rows * cpu.aggregate_ns_per_row)


def price_alone(cfg: Config, num_batches: int,
                part: Callable[[Machine, int], simpy.Event | None],
                batches: Iterable[int]) -> np.ndarray:
    """Time of `part(machine, b)` for each batch b, one after another on a fresh SimPy
    environment and Machine (nothing else contends): the model's price of one stage, for
    `validate --cpu` and `calibrate --cpu`'s checks."""
    env = simpy.Environment()
    m = Machine(env, cfg, num_batches)
    bs = list(batches)
    out = np.zeros(len(bs))

    def run():
        for i, b in enumerate(bs):
            t0 = env.now
            ev = part(m, b)
            if ev is not None:
                yield ev
            out[i] = env.now - t0

    env.process(run())
    run_to_end(env)
    return out
