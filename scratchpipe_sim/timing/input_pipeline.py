"""A batch's inputs reaching the GPU: the data loader on the host cores, then one copy over
PCIe, prefetched ahead of training as real trainers do (`input_pipeline:` config section).

Per batch b of B samples and A sparse ids (`config/inputs.py` for the constants):

    load(b)   one loader worker builds the batch on one CPU core: B x loader_ns_per_sample
              + A x loader_ns_per_id core-ns on `cpu_cores` (shared with the designs' CPU
              work: a hybrid's gathers and a planner compete with the loader). Workers take
              batches round robin (PyTorch's DataLoader), each one batch at a time, so
              `loader_workers` batches load at once.
    copy(b)   after load(b), in batch order on one copy stream: B x (dense_features x
              dense_bytes + label_bytes) bytes, plus the ids and offsets
              (`Machine.id_bytes`) for a design whose GPU reads them
              (`Design.inputs_carry_ids`), over `pcie.h2d` (+ its DMA read of DRAM).

The window: load(b) starts once the trainer has taken batch b - prefetch_batches (its first
consumer asked for it), so at most `prefetch_batches` batches are loaded or in flight
beyond the one being consumed (0: a batch is loaded only when asked for). A design waits
with `wait(b)` (stage `input_wait`: batch b's inputs on the GPU) or, for a host-side first
consumer (hybrid's gather), `host_wait(b)` (stage `loader_wait`); a consumer that runs
ahead of training (scratchpipe's and bagpipe's planners) with `ahead_wait(b)`, no stage. Both are 0
while the pipeline keeps ahead; a design whose waits are not is *input-bound*
(`run_metrics`: `input_stall_ns`, `input_bound_share`). The pipeline's own times per batch,
`input_load_ns` and `input_copy_ns` (means over the measured batches, metric columns), are
not stages: they run beside the design's stages, off its path unless waited for (a stage
figure adds a serial design's stages up to its iteration). A timeline shows them on their
own track, `input pipeline`. `inputs_on_gpu`: the batches are resident (a benchmark's
generated inputs): nothing is loaded or copied. `loader_in_trainer` (DataLoader
num_workers=0): no workers; the trainer's thread builds each batch as part of its host
issue work (`host_dispatch.trainer_loader_ns`, priced in `Machine.mlp`), so here a batch is
built when asked for and only its copy runs beside training.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np
import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.timing.machine import Machine, plan_share
from scratchpipe_sim.timing.resources import Span

#: a consumer waited for its batch's inputs on the GPU
INPUT_WAIT = "input_wait"
#: a host-side consumer waited for the loader
LOADER_WAIT = "loader_wait"
#: the timeline track of the loads and copies
TRACK = "input pipeline"
#: metric columns: a worker's time building a batch, the batch's copy (ns, measured mean)
LOAD_COLUMN, COPY_COLUMN = "input_load_ns", "input_copy_ns"
#: the stages that are a design waiting on its inputs (what `input_bound` is made of)
WAIT_STAGES = (INPUT_WAIT, LOADER_WAIT)


def dense_features(cfg: Config) -> int:
    """Dense features per sample: input_pipeline.dense_features, else the bottom MLP's
    input width (DLRM's bottom MLP reads them)."""
    n = cfg.input_pipeline.dense_features
    return cfg.model.bottom_layers[0] if n is None else n


def dense_bytes_per_sample(cfg: Config) -> float:
    """Bytes per sample copied beside the ids: dense features and the label."""
    p = cfg.input_pipeline
    return dense_features(cfg) * p.dense_bytes + p.label_bytes


def loader_core_ns(cfg: Config, samples: float, ids: float) -> float:
    """Core-ns one worker spends building a batch of `samples` samples and `ids` ids."""
    p = cfg.input_pipeline
    return samples * p.loader_ns_per_sample + ids * p.loader_ns_per_id


def input_copy_bytes(m: Machine, samples: float, ids: float, carry_ids: bool) -> float:
    """Bytes one batch's inputs move host to device (0 when they are resident)."""
    if m.cfg.input_pipeline.inputs_on_gpu:
        return 0.0
    dense = samples * dense_bytes_per_sample(m.cfg)
    return dense + (m.id_bytes(ids, samples) if carry_ids else 0.0)


class InputPipeline:
    """The loader workers and the copy stream of one design's run, as SimPy processes
    started when it is made; `wait` / `host_wait` are what the design yields from."""

    def __init__(self, m: Machine, samples: Sequence[float], ids: Sequence[float],
                 carry_ids: bool, share: float = 1.0):
        """`samples`, `ids`: per batch; `share` of each this GPU loads (a data-parallel
        rank's B/N); `carry_ids`: its ids and offsets ride with the dense features."""
        self.m = m
        env = m.env
        p = m.cfg.input_pipeline
        n = len(samples)
        self.n = n
        self.samples = [s * share for s in samples]
        self.ids = [a * share for a in ids]
        self.carry_ids = carry_ids
        self.taken = [False] * n
        self._taken_ev = [env.event() for _ in range(n)]
        self.resident = p.inputs_on_gpu
        self.load_ns = np.zeros(n)
        self.copy_ns = np.zeros(n)
        m.counters[LOAD_COLUMN] = m.counters[COPY_COLUMN] = 0.0
        if self.resident:
            return
        self.loaded = [env.event() for _ in range(n)]
        self.ready = [env.event() for _ in range(n)]
        cpu = m.cfg.hardware.cpu
        self.one_core = plan_share(1, cpu.cores, cpu.parallel_efficiency)
        if p.loader_in_trainer:  # built on the trainer's thread: on the host's path
            for ev in self.loaded:
                ev.succeed()
            env.process(self._copier())
            return
        workers = min(p.loader_workers, max(n, 1))
        for k in range(workers):
            env.process(self._worker(k, workers, p.prefetch_batches))
        env.process(self._copier())

    def take(self, b: int) -> None:
        """Batch b's first consumer asked for it: the loader's window moves on."""
        if not self.taken[b]:
            self.taken[b] = True
            self._taken_ev[b].succeed()

    def _worker(self, k: int, workers: int, prefetch: int) -> Generator:
        m = self.m
        for b in range(k, self.n, workers):
            gate = b - prefetch
            if gate >= 0 and not self.taken[gate]:
                yield self._taken_ev[gate]
            start = m.env.now
            ev = m.cpu_work(loader_core_ns(m.cfg, self.samples[b], self.ids[b]), b,
                            "loader", max_share=self.one_core)
            if ev is not None:
                yield ev
            self._record(self.load_ns, "load", b, start)
            self.loaded[b].succeed()

    def _copier(self) -> Generator:
        m = self.m
        p = m.cfg.input_pipeline
        for b in range(self.n):
            gate = b - p.prefetch_batches
            if p.loader_in_trainer and gate >= 0 and not self.taken[gate]:
                yield self._taken_ev[gate]  # built when the trainer gets that far
            if not self.loaded[b].processed:
                yield self.loaded[b]
            start = m.env.now
            ev = m.pcie.h2d(input_copy_bytes(m, self.samples[b], self.ids[b],
                                              self.carry_ids), b, "inputs")
            if ev is not None:
                yield ev
            self._record(self.copy_ns, "copy", b, start)
            self.ready[b].succeed()
        # every batch loaded and copied: their means over the measured batches
        wu = min(m.warmup, self.n)
        if self.n > wu:
            m.counters[LOAD_COLUMN] = float(self.load_ns[wu:].mean())
            m.counters[COPY_COLUMN] = float(self.copy_ns[wu:].mean())

    def _record(self, times: np.ndarray, name: str, b: int, start: float) -> None:
        m = self.m
        times[b] = m.env.now - start
        if m.recorder.keep_spans:
            m.recorder.spans.append(Span(TRACK, name, start, m.env.now, b))

    def ready_event(self, b: int) -> simpy.Event | None:
        """Batch b's inputs on the GPU (None: already); takes the batch."""
        self.take(b)
        if self.resident or self.ready[b].processed:
            return None
        return self.ready[b]

    def loaded_event(self, b: int) -> simpy.Event | None:
        """Batch b built in host memory (None: already); takes the batch."""
        self.take(b)
        if self.resident or self.loaded[b].processed:
            return None
        return self.loaded[b]

    def wait(self, b: int) -> Generator:
        """Until batch b's inputs are on the GPU (stage `input_wait`)."""
        yield from self.m.stage(INPUT_WAIT, b, [self.ready_event(b)])

    def ahead_wait(self, b: int, on_gpu: bool = False) -> Generator:
        """Until batch b is built (`on_gpu`: and copied), for a consumer that runs ahead of
        training (a planner `lookahead` batches ahead): no stage, since its wait is upstream
        of the iteration (the planner's group has slack); when the pipeline does hold the
        iteration back, `input_period_ns` meets the iteration (`run_metrics.input_bound`)."""
        ev = self.ready_event(b) if on_gpu else self.loaded_event(b)
        if ev is not None:
            yield ev

    def host_wait(self, b: int) -> Generator:
        """Until batch b is built in host memory (stage `loader_wait`): a host-side first
        consumer (hybrid's gather, a planner on the CPU)."""
        yield from self.m.stage(LOADER_WAIT, b, [self.loaded_event(b)])
