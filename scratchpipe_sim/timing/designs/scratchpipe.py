"""`scratchpipe`: the lookahead scratchpad, pipelined over mini-batches (Kwon & Rhu, ISCA'22).

Its knobs are `design_params.scratchpipe` (`ScratchpipeDesignParams`, below: the policy's
`ScratchpipeParams` and the pipeline's own).

Stages of one batch (F fills, V victims, A lookups, U unique rows; R bytes per moved row):

    inputs    the batch built by the data loader and copied to the GPU with its ids and
              offsets (`Design.inputs`, `timing/input_pipeline.py`): plan waits for the
              loader (no stage: it runs ahead), train for the copy (`input_wait`)
    plan      the `scratchpipe` policy on the CPU cores: A x plan_ns_per_id + E x
              plan_ns_per_eviction core-ns (E: the batch's evictions) on at most
              plan_threads cores, sharing them with collect and write-back
    collect   CPU gathers the F missed rows into a pinned staging buffer (Machine.collect:
              the table reads and the buffer writes, each a cpu_gather: DRAM || cores)
              || the GPU copies the V victims out of the scratchpad (HBM)
    exchange  H2D of the F rows || D2H of the V victims (both DMA: they also load CPU DRAM)
    insert    HBM writes of the F rows into their slots || the CPU reads the V victims from
              the staging buffer and scatters them into the table (Machine.write_back: two
              cpu_gathers): the write-back
    train     GPU: gather A lookups (forward) -> mlp -> sort + segment-reduce and update U
              rows (backward); with on_overflow=stall the surplus rows are read and
              updated over UVM, as lru-cache's conflict misses are

**Shape.** `pipeline` groups the stages (default: one group each). Each group is one
SimPy process that works on one batch at a time, in order, and hands it to the next group
through a `simpy.Store` of `queue_depth` batches; so the groups work on different
batches, the batches in flight are the number of groups, and in steady state the iteration
is the slowest group. Inside a group, plan runs first, then the group's data-movement stages
(collect, exchange, insert) stream concurrently — all their transfers start together, as
lru-cache's fetch does — then train. A window of `lookahead` = W tokens bounds what is
in flight: plan(j) takes one and train(j) returns it, so plan(j) starts after train(j-W):
the policy's pinned set (batches j-W+1..j) is then exactly what is resident or in flight.
W may exceed the number of groups (the planner then runs further ahead); it may not be
smaller (`ScratchpipeDesignParams.check` names the minimum).

**Variants** (issue 27: which of its parts decide its lead). `planner: gpu` runs the
planner as a GPU hash table (`Machine.gpu_plan`: HierarchicalKV's measured lookup and
insert-with-eviction rates, on HBM), after the batch's inputs with its indices crossed
PCIe; the plan's decisions stay on the GPU, which drives collect.
`collect: gpu` replaces the CPU gather into a pinned staging buffer and its DMA with
GPU loads of the missed rows in place (`Machine.uvm_read`, as FBGEMM's fills) and the
victims' D2H + CPU scatter with GPU stores in place (`Machine.uvm_write`): exchange then
moves nothing.

**Refetch hazard.** plan(j) may evict a row that a later batch b (b - j = d < W) fills again
(the policy's farthest-next-use victim, mostly at the capacity floor). Its newest value
reaches the CPU table only when insert(j)'s write-back ends. The policy reports, per batch,
how many rows it refetches at each distance d (`refetch_d{d}` columns). When collect(b)
starts, the rows whose insert(b-d) has not finished are *hazards*, counted in the metric
`refetch_hazards` (a time-based count: it depends on the schedule; 0 in any shape where
collect and insert share a group, since a group finishes batch j before it starts j+1).
`refetch`:

* `wait` (default): those rows are gathered only after insert(b-d) has finished (the rest
  of collect proceeds); collect's stage time includes the wait, also reported as the stage
  `refetch_wait` (time from collect's start until the last awaited write-back).
* `forward`: those rows are copied on the GPU from the victim buffer that collect(b-d)
  filled (it is held until the row is re-inserted, at most W batches) instead of from
  CPU DRAM: per row, no DRAM gather and no H2D; one extra HBM read of R bytes in insert(b)
  (the HBM write is the fill's, as for any row). No wait.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.policies.scratchpipe import ScratchpipeParams
from scratchpipe_sim.timing.counts import Workload
from scratchpipe_sim.timing.designs._cache_stages import CacheStages
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import WorkloadKey
from scratchpipe_sim.timing.designs.design_parameters import design_params, params_tuple
from scratchpipe_sim.timing.designs.design_registry import DESIGNS
from scratchpipe_sim.timing.machine import Machine, PlannerParams

DATA_STAGES = ("collect", "exchange", "insert")
#: scratchpipe's stages in data-flow order; `pipeline` groups them
STAGES = ("plan", "collect", "exchange", "insert", "train")


@dataclass(frozen=True)
class ScratchpipeDesignParams(ScratchpipeParams, PlannerParams):
    """`design_params.scratchpipe`: the policy's knobs (inherited, so one default each:
    lookahead, on_overflow), the planner's cost knobs (`PlannerParams`) and the
    pipeline's."""

    queue_depth: int = field(default=2, metadata={
        "help": "batches buffered between consecutive stages", "min": 1})
    pipeline: tuple[tuple[str, ...], ...] = field(
        default=(("plan",), ("collect",), ("exchange",), ("insert",), ("train",)),
        metadata={"help": "stage groups, in order; each group works on a different batch, "
                          "so the window must be at least the number of groups; stages "
                          "fused in one group stream concurrently"})
    planner: str = field(default="cpu", metadata={
        "help": "variant: where its planner runs — cpu (the paper: the policy on the host "
                "cores) or gpu (a GPU hash table of the scratchpad's rows, priced at "
                "hardware.gpu.hash_lookup_Gps / hash_insert_Gps on HBM; the batch's ids "
                "cross PCIe before planning)", "choices": ("cpu", "gpu")})
    collect: str = field(default="cpu", metadata={
        "help": "variant: how missed rows reach the scratchpad — cpu (the paper: host cores "
                "gather them into a pinned staging buffer, copied by DMA) or gpu (GPU loads "
                "read them in place from host memory, victims stored back in place: "
                "Machine.uvm_read / uvm_write)", "choices": ("cpu", "gpu")})
    refetch: str = field(default="wait", metadata={
        "help": "a row evicted and needed again while its write-back is in flight waits "
                "for the write-back (wait) or is copied from the victim buffer (forward)",
        "choices": ("wait", "forward")})

    def policy_params(self) -> ScratchpipeParams:
        """The policy's share of these knobs (what its replay is keyed by)."""
        return ScratchpipeParams(lookahead=self.lookahead, on_overflow=self.on_overflow)

    def check(self, source: str | None, where: str) -> None:
        """Every stage once, in data-flow order; the window covers the pipeline's depth."""
        flat = [s for g in self.pipeline for s in g]
        for i, g in enumerate(self.pipeline):
            if not g:
                raise UserError("expected a non-empty group of stages", source=source,
                                field=f"{where}.pipeline[{i}]")
            for s in g:
                if s not in STAGES:
                    raise UserError(f"unknown stage {s!r}{closest(s, STAGES)}; expected one "
                                    f"of: {', '.join(STAGES)}", source=source,
                                    field=f"{where}.pipeline[{i}]")
        if tuple(flat) != STAGES:
            raise UserError(f"expected each of {', '.join(STAGES)} exactly once and in that "
                            f"order, got {', '.join(flat)}", source=source,
                            field=f"{where}.pipeline")
        depth = len(self.pipeline)
        if self.lookahead < depth:
            raise UserError(f"the pipeline has {depth} stage groups, so {depth} batches are in "
                            f"flight: expected {where}.lookahead >= {depth}, got "
                            f"{self.lookahead} (or fuse stages, e.g. {where}.pipeline: "
                            "[[plan], [collect, exchange, insert], [train]])", source=source,
                            field=f"{where}.lookahead")


@DESIGNS.register("scratchpipe")
class ScratchPipe(Design):
    default = True
    order = 50
    summary = "lookahead scratchpad: plan, collect, exchange, insert, train pipelined"
    Params = ScratchpipeDesignParams
    lookahead_grid = (2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64)
    #: a window larger than the capacity holds stalls instead of failing the run
    lookahead_settings = {"on_overflow": "stall"}

    @classmethod
    def lookaheads(cls, cfg: Config) -> tuple[int, ...]:
        """The grid's windows that cover the pipeline (one batch per stage in flight)."""
        depth = len(design_params(cfg, cls.name, cross_check=False).pipeline)
        return tuple(v for v in cls.lookahead_grid if v >= depth)

    def workload_key(self) -> WorkloadKey:
        return WorkloadKey("scratchpipe", self.cfg.capacity_rows(),
                           params_tuple(self.params.policy_params()),
                           params_field="design_params.scratchpipe")

    def run(self, m, w):
        yield from _Pipeline(self, m, w).run()


class _Pipeline:
    """One run of scratchpipe's pipeline: what its stage groups share (the window's tokens,
    the queues between groups, which write-backs have finished, each batch's hazard rows),
    and one method per stage, each the events of its batch b."""

    def __init__(self, design: ScratchPipe, m: Machine, w: Workload):
        p = design.params
        self.m, self.env, self.p = m, m.env, p
        self.c = c = design.columns(w)
        self.train_parts = CacheStages(design, c)
        self.inputs = design.inputs(m, c)
        self.n = n = w.num_batches
        W = p.lookahead
        self.forward = p.refetch == "forward"
        self.gpu_collect = p.collect == "gpu"
        self.gpu_plan = p.planner == "gpu"
        # rows filled at plan(b) that plan(b-d) evicted, d = 1..W-1 (the policy's columns)
        self.refetch = [c.column(f"refetch_d{d}") for d in range(1, W)]
        self.tokens = simpy.Container(m.env, capacity=W, init=W)
        self.queues = [simpy.Store(m.env, capacity=p.queue_depth) for _ in p.pipeline[1:]]
        self.inserted = [m.env.event() for _ in range(n)]  # insert(j)'s write-back finished
        self.late = [0] * n  # per batch: hazard rows (forward mode: rows forwarded)
        self.data_parts = {"collect": self.collect, "exchange": self.exchange,
                           "insert": self.insert}
        m.counters["refetch_hazards"] = 0
        m.counters["refetch_rows"] = 0

    def run(self) -> Generator:
        """Every stage group as its own process, until all of them have ended."""
        procs = [self.env.process(self.group(g, stages))
                 for g, stages in enumerate(self.p.pipeline)]
        yield self.m.all_of(procs)

    def group(self, g: int, stages: tuple[str, ...]) -> Generator:
        """Stage group g: its stages of each batch in order, then the batch to group g+1
        (the last group, train, returns the window's token instead)."""
        m = self.m
        data = [s for s in stages if s in DATA_STAGES]
        for i in range(self.n):
            if g == 0:  # plan(i) waits for train(i - W)
                yield self.tokens.get(1)
                b = i
            else:  # in order, from group g-1
                b = yield self.queues[g - 1].get()
            if "plan" in stages:
                yield from self.plan(b)
            if data:  # fused stages stream: all their transfers start together
                yield m.all_of([self.env.process(self.data_stage(s, b)) for s in data])
            if "train" in stages:
                yield from self.train(b)
                m.batch_done(b)
                yield self.tokens.put(1)
            else:
                yield self.queues[g].put(b)

    def plan(self, b: int) -> Generator:
        """The policy on the host cores, or (planner: gpu) the ids to the GPU, then its
        hash table."""
        m, c = self.m, self.c
        # the planner runs ahead of training: its wait for the batch is no stage
        yield from self.inputs.ahead_wait(b, on_gpu=self.gpu_plan)
        if self.gpu_plan:  # its hash table reads the batch's ids on the GPU
            planned = m.gpu_plan(b, c.accesses[b], c.evictions[b])
        else:
            planned = m.plan(b, c.accesses[b], c.evictions[b], self.p)
        yield from m.stage("plan", b, [planned])

    def data_stage(self, name: str, b: int) -> Generator:
        """One of collect, exchange, insert (`DATA_STAGES`) as a stage; insert's end is
        the write-back a later refetch of its victims waits for."""
        yield from self.m.stage(name, b, self.data_parts[name](b))
        if name == "insert":
            self.inserted[b].succeed()

    def pending_writebacks(self, b: int) -> list[tuple[int, simpy.Event]]:
        """(rows, event) of batch b's refetches whose write-back is still in flight."""
        out = []
        for d, counts in enumerate(self.refetch, start=1):
            j = b - d
            if counts[b] and j >= 0 and not self.inserted[j].triggered:
                out.append((counts[b], self.inserted[j]))
        return out

    def collect(self, b: int) -> list:
        """The missed rows into the staging buffer (or in place) || the victims out of the
        scratchpad; hazard rows wait for their write-back (or are forwarded)."""
        m, c = self.m, self.c
        R, F = c.R_fill[b], c.fills[b]
        waits = self.pending_writebacks(b)
        hz = sum(k for k, _ in waits)
        self.late[b] = hz
        if b >= m.warmup:
            m.counters["refetch_hazards"] += hz
            m.counters["refetch_rows"] += sum(col[b] for col in self.refetch)
        # the GPU variant loads the rows in place into the scratchpad (no staging copy)
        rows_in = (m.uvm_read(b, F - hz, R, "collect in place") if self.gpu_collect
                   else m.collect(b, F - hz, R))
        parts = [rows_in, m.hbm.gather(c.writebacks[b], R, b, "victim read")]
        if hz and not self.forward:
            parts.append(self.env.process(self.refetch_after_writeback(b, hz, waits)))
        return parts

    def refetch_after_writeback(self, b: int, rows: int,
                                waits: list[tuple[int, simpy.Event]]) -> Generator:
        """The hazard rows of collect(b), gathered once their write-backs have ended (the
        wait is the stage `refetch_wait`)."""
        m, c = self.m, self.c
        start = self.env.now
        yield m.all_of([ev for _, ev in waits])
        m.end_stage("refetch_wait", b, start)
        ev = (m.uvm_read(b, rows, c.R_fill[b], "refetch collect") if self.gpu_collect
              else m.collect(b, rows, c.R_fill[b], "refetch collect"))
        if ev is not None:
            yield ev

    def exchange(self, b: int) -> list:
        """H2D of the fills || D2H of the victims (the batch's indices ride with its
        inputs: `timing/input_pipeline.py`)."""
        m, c = self.m, self.c
        R = c.R_fill[b]
        sent = c.fills[b] - (self.late[b] if self.forward else 0)
        # the GPU variant moved the rows in collect / insert
        return [None if self.gpu_collect else m.pcie.h2d(sent * R, b, "fill"),
                None if self.gpu_collect else m.pcie.d2h(c.writebacks[b] * R, b, "victims")]

    def insert(self, b: int) -> list:
        """The fills written into their slots || the victims written back to the table
        (forward mode: || the forwarded rows copied from the victim buffer)."""
        m, c = self.m, self.c
        R = c.R_fill[b]
        parts = [m.hbm.gather(c.fills[b], R, b, "insert"),
                 m.uvm_write(b, c.writebacks[b], R, "write back in place") if self.gpu_collect
                 else m.write_back(b, c.writebacks[b], R)]
        if self.forward:
            parts.append(m.hbm.gather(self.late[b], R, b, "forward from victims"))
        return parts

    def train(self, b: int) -> Generator:
        """Forward, mlp, backward over the scratchpad's rows."""
        m, c, parts = self.m, self.c, self.train_parts
        yield from self.inputs.wait(b)
        t = m.seq(lambda: m.all_of(parts.forward(m, b)),
                  lambda: m.mlp(b, c.samples[b]),
                  lambda: m.all_of(parts.backward(m, b)))
        yield from m.stage("train", b, [t])
