"""The simulated machine: every resource of one hardware config, plus stage bookkeeping.

Resources (one `Server` each, processor sharing — see resources.py):

    cpu_dram    CPU DRAM; gathers at dram_GBps x min(gather_efficiency(row), op cap)
                where op cap = cores x embedding_op_GBps / dram_GBps (CPU-side op limit)
    pcie_h2d,   the link, per direction (or one `pcie` server when not full duplex)
    pcie_d2h
    hbm         GPU HBM; gathers at hbm_GBps x gather_efficiency(row)
    gpu_compute dense MLPs: tflops x 1e3 FLOP/ns; latency = kernels x kernel_launch_ns
    cpu_plan    ScratchPipe's planner threads (work = ids x plan_ns_per_id / threads)

A design yields on `m.stage(name, batch, *events)`-style helpers; stage time is summed per
stage name and recorded as a span on the design's "stages" track.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator, Iterable

import numpy as np
import simpy

from scratchpipe_sim.config import Config, interpolate
from scratchpipe_sim.timing.resources import Memory, Pcie, Recorder, Server, Span


class Machine:
    def __init__(self, env: simpy.Environment, cfg: Config, num_batches: int,
                 keep_spans: bool = False):
        self.env = env
        self.cfg = cfg
        hw = cfg.hardware
        self.num_batches = num_batches
        self.recorder = Recorder(keep_spans)
        cpu, gpu = hw.cpu, hw.gpu
        op_cap = cpu.cores * cpu.embedding_op_GBps / cpu.dram_GBps
        self.dram = Memory(
            Server(env, "cpu_dram", cpu.dram_GBps, cpu.dram_latency_ns, num_batches,
                   self.recorder),
            lambda rb: min(interpolate(cpu.gather_efficiency, rb), op_cap, 1.0))
        self.hbm = Memory(
            Server(env, "hbm", gpu.hbm_GBps, gpu.hbm_latency_ns, num_batches, self.recorder),
            lambda rb: interpolate(gpu.gather_efficiency, rb))
        self.pcie = Pcie(env, hw.pcie, num_batches, self.recorder)
        self.compute = Server(env, "gpu_compute", gpu.tflops * 1e3, gpu.kernel_launch_ns,
                              num_batches, self.recorder)
        threads = cfg.cache.plan_threads or cpu.cores
        self.plan_ns_per_id = cfg.cache.plan_ns_per_id / threads
        # planner "bandwidth" is 1 unit/ns; work units are ns of planning
        self.planner = Server(env, "cpu_plan", 1.0, 0.0, num_batches, self.recorder)
        self.stage_ns: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(num_batches))
        self.stage_order: list[str] = []
        self.done = np.full(num_batches, np.nan)
        self.warmup = cfg.model.warmup_batches
        self.window_start_ns = 0.0
        self.busy_at_window_start = {s.name: 0.0 for s in self.servers}

    def batch_done(self, b: int) -> None:
        """Batch b finished training; at the end of warm-up, snapshot busy times."""
        self.done[b] = self.env.now
        if b == self.warmup - 1:
            self.window_start_ns = self.env.now
            self.busy_at_window_start = {s.name: s.busy_now() for s in self.servers}

    @property
    def servers(self) -> list[Server]:
        out = [self.dram.server, *self.pcie.servers, self.hbm.server, self.compute]
        return out + [self.planner]

    # -- helpers designs use ------------------------------------------------------------------
    def mlp(self, batch: int, samples: int) -> simpy.Process:
        m = self.cfg.model
        flops = m.mlp_flops / m.batch_size * samples
        launch = m.mlp_kernels * self.cfg.hardware.gpu.kernel_launch_ns
        return self.compute.transfer(flops, batch, "mlp", latency_ns=launch)

    def plan(self, batch: int, ids: float) -> simpy.Process:
        return self.planner.transfer(ids * self.plan_ns_per_id, batch, "plan")

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
        return self.env.all_of(evs) if evs else None

    def end_stage(self, name: str, batch: int, start: float) -> None:
        if name not in self.stage_ns:
            self.stage_order.append(name)
        self.stage_ns[name][batch] += self.env.now - start
        self.recorder.add(Span("stages", name, start, self.env.now, batch))

    def seq(self, *steps) -> simpy.Process:
        """A process running zero-argument event factories one after another."""

        def run():
            for step in steps:
                ev = step()
                if ev is not None:
                    yield ev

        return self.env.process(run())
