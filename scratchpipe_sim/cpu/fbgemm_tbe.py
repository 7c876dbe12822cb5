"""`validate --cpu --against fbgemm`: FBGEMM's CPU TBE on the trace's ids vs hybrid's model.

Hybrid trains the embeddings on the CPU; the code that does so in practice is FBGEMM's
`SplitTableBatchedEmbeddingBagsCodegen` with `EmbeddingLocation.HOST, ComputeDevice.CPU`.
Here it is built for the config's tables (rows, dim, pooling mode; float32 weights) with the
config's optimizer (`FBGEMM_OPTIMIZERS`: sgd = EXACT_SGD, rowwise-adagrad =
EXACT_ROWWISE_ADAGRAD, adagrad = EXACT_ADAGRAD; FBGEMM 1.8's CPU build refuses Adam, so a
config with adam stops with one line) and run on the config's own trace, read through the
simulator's reader (`Trace.batch`: per-table ids with table-major bag offsets, FBGEMM's own
layout). Measured per batch:

    cpu_gather   FBGEMM's forward (gather + pool of every lookup)
    cpu_update   its backward with the fused optimizer (the output gradient -> per-row
                 gradients, sorted and reduced, then the optimizer applied in place)

Predicted: hybrid's own `run` on a fresh SimPy `Machine`, on the counts `simulate` uses
(`timing.replay_passes.Replays`), each batch's `cpu_gather` and `cpu_update` stage time read from
the Machine (`stage_ns`). Hybrid runs its stages strictly in order, so a stage's time is
its own price: nothing here copies a formula.

Passes over the measured batches are repeated `reps` times; within a pass every batch runs
forward then backward, so the two stages' samples are interleaved pairs and a slow minute
of a shared host lands on both. A batch's time is its median (or best) over the passes,
the stage's the mean over the batches. The host's drift since calibration: before each
pass, `validate --cpu`'s probe (one thread's gather + pool of uniform random rows, fresh
ids) runs on FBGEMM's own weight array (no second copy of the tables) and is reported as
`host.uniform_gather` with the model's price, so a ratio can be read against the host's
state (only when every table has one dim and one pooling mode: one weight array). That
probe compares a measurement with the model's price, so it mixes the host's drift with the
model's own error on uniform gathers (0.43-0.95 on a quiet host, lower on larger tables).
The host's speed itself: before each pass the host reference (cpu/host_reference.py: a
fixed FBGEMM forward + backward, the one calibrate timed beside its points) is timed
(`reference_per_pass`: about as many samples in all as the calibration took), and
`host.reference` reports its time now beside its time at calibration (from the preset's
raw JSON sidecar); their ratio (> 1: the host is slower now) gives each stage a
`host_adjusted` ratio = predicted x (t_ref now / t_ref at calibration) / measured, next to
the raw ratio, which stays the result. A preset without a recorded reference (shipped,
or calibrated before issue 43) gets the row without a ratio and no adjusted column.
The threads: `hardware.cpu.cores` (at most this machine's CPUs) for both torch and Numba;
on one thread the clock is the thread's CPU time (`cpu/measure.py`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numba as nb
import numpy as np

from scratchpipe_sim.config import Config
from scratchpipe_sim.cpu.host_reference import (
    REFERENCE,
    REFERENCE_STAGE,
    HostReference,
    ReferenceSamples,
    host_adjusted,
    host_ratio,
)
from scratchpipe_sim.cpu.host_validation import PROBE_LOOKUPS, Probe
from scratchpipe_sim.cpu.measure import summarize, timed
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.machine import price_alone
from scratchpipe_sim.timing.replay_passes import Replays
from scratchpipe_sim.timing.runner import run_design
from scratchpipe_sim.timing.stage_columns import StageNotTimed, phase_stages, require_timed
from scratchpipe_sim.timing.trace_setup import build_trace, config_accesses
from scratchpipe_sim.traces.csr_trace import Trace

#: what `--against` accepts
AGAINST = ("fbgemm",)
#: the FBGEMM call each of hybrid's phases is measured on (in the order `pair` times them);
#: hybrid's `phase_stages` name its stage in each
PHASE_CALLS = {"forward": "forward", "backward": "backward + fused optimizer"}
#: the drift probe's row in the table (as in validate --cpu)
PROBE_STAGE = "host.uniform_gather"
#: the config's optimizer -> FBGEMM's EmbOptimType name (None: not on FBGEMM's CPU)
FBGEMM_OPTIMIZERS: dict[str, str | None] = {
    "sgd": "EXACT_SGD", "rowwise-adagrad": "EXACT_ROWWISE_ADAGRAD",
    "adagrad": "EXACT_ADAGRAD", "adam": None}
#: the config's pooling mode -> FBGEMM's PoolingMode name
FBGEMM_POOLING = {"sum": "SUM", "mean": "MEAN", "none": "NONE"}
INSTALL_HINT = 'pip install -e ".[peers]"'
LEARNING_RATE = 0.01
#: the output gradient every backward gets (small: the weights barely move over the passes)
GRAD_VALUE = 1e-4
#: OpenMP waits passively (set before torch and Numba start their thread pools, unless the
#: user set it). Why: on this project's shared 2-vCPU host, libgomp's default active wait
#: made FBGEMM's CPU backward on 2 threads take 280 ms for a batch it does in 0.2 ms
#: passively (576 lookups, 3 tables): a waiting thread spins on a core the working one needs
OMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
#: torch backs large tensors with transparent huge pages (unless the user set it). Why: the
#: calibration and validate --cpu gather from numpy arrays, which Linux backs with huge
#: pages (numpy asks for them), so the model's per-core rates carry huge pages' TLB reach;
#: torch's default 4 KiB pages made FBGEMM's quickstart forward 1.14-1.46x slower and the
#: drift probe on its weights 1.16-1.45x (docs/validation.md). Set it to 0 for torch's
#: default.
THP_ENV = "THP_MEM_ALLOC_ENABLE"
#: glibc malloc keeps what the process frees mapped for reuse (unless the user set either
#: variable: glibc reads them at start). Why: FBGEMM's forward allocates its output
#: (`at::empty({B, total_D})`) on every call, and with glibc's defaults whether those bytes
#: come back as fresh pages (each faulted and zeroed by the kernel at its first write)
#: depends on the process's allocation history: its dynamic mmap threshold and the heap
#: top's trimming. Measured here: the d128p1 config's forward (16 MiB output, then its
#: 16 MiB gradient, both freed each batch) faulted 520 times a call and took 4.5-5.0 ms;
#: with the freed memory kept, 0 times and 2.9-3.7 ms; the quickstart's (4 MiB) never
#: faulted. A trainer reuses its memory (PyTorch's CPU performance tuning guide recommends
#: jemalloc or tcmalloc for that), so the model prices no page faults and the measurement
#: keeps them out; `faults` in the table counts those left (an output above 32 MiB,
#: glibc's largest mmap threshold, is still mapped fresh on every call)
MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
#: mallopt's parameter numbers (glibc malloc.h) and the values set
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TRIM_THRESHOLD_BYTES = 1 << 30
#: a config larger than this share of the available memory has its rows capped
MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class FbgemmStage:
    """One hybrid stage: the model's time beside FBGEMM's, ms per batch (mean over batches)."""

    stage: str
    predicted_ms: float
    measured_ms: float
    batches: int
    spread_pct: float  # mean over batches of (median - best) / best of the passes
    fbgemm_op: str
    faults_per_call: float = 0.0  # minor page faults per call (mean over the timed calls)
    #: predicted x (t_ref now / t_ref at calibration) / measured (None: no reference
    #: recorded at calibration)
    host_adjusted: float | None = None

    @property
    def ratio(self) -> float:
        """predicted / measured (> 1: the model is slower than FBGEMM)."""
        return self.predicted_ms / self.measured_ms if self.measured_ms > 0 else float("inf")

    def as_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "predicted_ms": self.predicted_ms,
                "measured_ms": self.measured_ms, "ratio": self.ratio,
                "batches": self.batches, "spread_pct": self.spread_pct,
                "fbgemm_op": self.fbgemm_op, "faults_per_call": self.faults_per_call,
                "host_adjusted": self.host_adjusted}


@dataclass(frozen=True)
class ReferenceRow:
    """validate's `host.reference`: the host reference's time now beside its time at
    calibration (None: the preset records none, `why` says why)."""

    now: ReferenceSamples
    calibration: ReferenceSamples | None
    why: str = ""
    stage: str = REFERENCE_STAGE

    @property
    def measured_ms(self) -> float:
        return self.now.value_s() * 1e3

    @property
    def calibration_ms(self) -> float | None:
        return None if self.calibration is None else self.calibration.value_s() * 1e3

    @property
    def ratio(self) -> float | None:
        """t_ref now / t_ref at calibration (> 1: the host is slower now)."""
        return None if self.calibration is None else host_ratio(self.now, self.calibration)

    def as_json(self) -> dict[str, Any]:
        c = self.calibration
        return {"stage": self.stage, "calibration_ms": self.calibration_ms,
                "measured_ms": self.measured_ms, "ratio": self.ratio,
                "samples": len(self.now.forward_s),
                "calibration_samples": None if c is None else len(c.forward_s),
                "spread_pct": self.now.spread_pct(), "statistic": self.now.statistic,
                "calibration_statistic": None if c is None else c.statistic,
                "workload": REFERENCE.label(), "note": self.why,
                "samples_ms": [float(x) * 1e3 for x in self.now.seconds]}


_MALLOPT_DONE: list[bool] = []


def keep_freed_memory() -> bool:
    """glibc's malloc told to keep freed memory mapped (MALLOC_ENV's why), once per process;
    False where the user set MALLOC_ENV or the C library has no mallopt (not glibc)."""
    if _MALLOPT_DONE:
        return _MALLOPT_DONE[0]
    ok = False
    if not any(k in os.environ for k in MALLOC_ENV):
        try:
            libc = ctypes.CDLL(None)
            ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                      and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
        except (OSError, AttributeError):
            ok = False
    _MALLOPT_DONE.append(ok)
    return ok


def minor_faults() -> int:
    """The process's minor page faults so far (every thread's)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def check_against(value: str) -> None:
    if value not in AGAINST:
        raise UserError(f"unknown peer {value!r}: expected one of {', '.join(AGAINST)}",
                        field="--against")


def import_fbgemm() -> dict[str, Any]:
    """torch and FBGEMM's TBE classes, or a UserError naming the extra to install."""
    for k, v in OMP_ENV.items():
        os.environ.setdefault(k, v)
    keep_freed_memory()
    if "torch" not in sys.modules:  # torch reads it once, at its first large allocation
        os.environ.setdefault(THP_ENV, "1")
    try:
        import torch
    except ImportError:
        raise UserError(f"--against fbgemm needs torch (not importable); install: "
                        f"{INSTALL_HINT}", field="torch") from None
    try:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            EmbeddingLocation,
            PoolingMode,
        )
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    except ImportError:
        raise UserError(f"--against fbgemm needs fbgemm-gpu-cpu (fbgemm_gpu not "
                        f"importable); install: {INSTALL_HINT}", field="fbgemm_gpu") from None
    return {"torch": torch, "EmbOptimType": EmbOptimType, "SparseType": SparseType,
            "EmbeddingLocation": EmbeddingLocation, "PoolingMode": PoolingMode,
            "ComputeDevice": ComputeDevice, "TBE": SplitTableBatchedEmbeddingBagsCodegen}


def check_config(cfg: Config) -> None:
    """What FBGEMM's CPU TBE can run of the config, or one line saying what it cannot."""
    m = cfg.model
    if m.tables.bytes_per_element != 4:
        raise UserError("--against fbgemm runs float32 tables: expected "
                        f"model.tables.bytes_per_element 4, got {m.tables.bytes_per_element}",
                        source=cfg.source, field="model.tables.bytes_per_element")
    if FBGEMM_OPTIMIZERS.get(m.optimizer) is None:
        runs = ", ".join(k for k, v in FBGEMM_OPTIMIZERS.items() if v)
        raise UserError(f"FBGEMM's CPU TBE does not run {m.optimizer} (fbgemm-gpu-cpu 1.8 "
                        f"refuses it in CPU mode): expected one of {runs}",
                        source=cfg.source, field="model.optimizer")
    for mode in set(m.pooling_modes):
        tables = [d for d, md in zip(m.dims, m.pooling_modes, strict=True) if md == mode]
        if mode == "none" and len(set(tables)) > 1:
            raise UserError("FBGEMM's unpooled TBE needs one dim for its tables: expected "
                            f"equal model.tables.dim, got {sorted(set(tables))}",
                            source=cfg.source, field="model.tables.dim")


def memory_needed(cfg: Config) -> int:
    """Bytes a run allocates: FBGEMM's weights and optimizer state (the moved row bytes),
    the replay's per-row state and the trace with its per-access arrays and int64 copies
    (the host reference's fixed table, REFERENCE.table_bytes = 128 MiB, is left out: it
    does not scale with the config and sits in the share not used)."""
    m = cfg.model
    rows = sum(r * (b + memory_guard.RUN_BYTES_PER_ROW)
               for r, b in zip(m.rows_per_table, m.moved_row_bytes_per_table, strict=True))
    return rows + config_accesses(cfg) * memory_guard.BYTES_PER_ACCESS


def capped_rows(cfg: Config, available: int | None = None) -> int | None:
    """Rows per table that fit in MEMORY_SHARE of the available memory (None: the config
    fits as it is). The trace's bytes do not shrink with the rows, so they come off first."""
    have = memory_guard.available_bytes() if available is None else available
    need = memory_needed(cfg)
    if have is None or need <= have * MEMORY_SHARE:
        return None
    m = cfg.model
    trace_bytes = config_accesses(cfg) * memory_guard.BYTES_PER_ACCESS
    scale = max(have * MEMORY_SHARE - trace_bytes, 0) / max(need - trace_bytes, 1)
    return max(1, int(max(m.rows_per_table) * scale))


def build_tbes(cfg: Config, trace: Trace, fb: dict[str, Any]
               ) -> list[tuple[Any, list[int]]]:
    """One FBGEMM CPU TBE per pooling mode among the tables (one TBE runs one mode), each
    with the tables it holds."""
    m = cfg.model
    rows = [int(r) for r in trace.table_rows]
    out = []
    for mode in dict.fromkeys(m.pooling_modes):
        tables = [t for t, md in enumerate(m.pooling_modes) if md == mode]
        specs = [(rows[t], m.dims[t], fb["EmbeddingLocation"].HOST, fb["ComputeDevice"].CPU)
                 for t in tables]
        tbe = fb["TBE"](specs,
                        optimizer=getattr(fb["EmbOptimType"], FBGEMM_OPTIMIZERS[m.optimizer]),
                        learning_rate=LEARNING_RATE,
                        pooling_mode=getattr(fb["PoolingMode"], FBGEMM_POOLING[mode]),
                        weights_precision=fb["SparseType"].FP32)
        out.append((tbe, tables))
    return out


def fbgemm_inputs(trace: Trace, k: int, tables: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Batch k of `tables` as FBGEMM's (indices, offsets), int64: the reader's per-table ids
    and table-major bag offsets (rebased), the tables' slices stacked in order."""
    b = trace.batch(k)
    if len(tables) == trace.num_tables:
        return np.array(b.indices, np.int64), np.array(b.offsets, np.int64)
    idx, offs, base = [], [np.zeros(1, np.int64)], 0
    for t in tables:
        i, o = b.table(t)
        idx.append(np.asarray(i, np.int64))
        offs.append(np.asarray(o[1:], np.int64) + base)
        base += len(i)
    return np.concatenate(idx), np.concatenate(offs)


def mix_pool(store: np.ndarray, dim: int, rows: int
             ) -> Callable[[np.ndarray, np.ndarray, np.ndarray], object]:
    """calibrate --cpu --kernel fbgemm: FBGEMM's CPU forward (one table of `rows` x `dim`,
    its own weights, one thread) as the mix's gather + pool, so the per-core rates the mix
    fits are FBGEMM's kernel's (software prefetch, JIT SIMD) instead of the simulator's."""
    fb = import_fbgemm()
    torch = fb["torch"]
    torch.set_num_threads(1)
    tbe = fb["TBE"]([(rows, dim, fb["EmbeddingLocation"].HOST, fb["ComputeDevice"].CPU)],
                    optimizer=fb["EmbOptimType"].EXACT_SGD, learning_rate=LEARNING_RATE,
                    pooling_mode=fb["PoolingMode"].SUM,
                    weights_precision=fb["SparseType"].FP32)

    def run(ids: np.ndarray, ptr: np.ndarray, _out: np.ndarray) -> None:
        with torch.no_grad():
            tbe(torch.from_numpy(ids), torch.from_numpy(ptr))

    return run


def measure_update(m, z) -> None:
    """calibrate --cpu --kernel fbgemm: FBGEMM's CPU backward per optimizer into m.update
    (cpu/fbgemm_update_bench.py), one thread, at the sizes' shapes; the host reference
    (cpu/host_reference.py) timed once a round beside them into m.host_reference."""
    from scratchpipe_sim.cpu import fbgemm_update_bench as ub  # noqa: PLC0415
    from scratchpipe_sim.cpu.host_bench import _note  # noqa: PLC0415

    fb = import_fbgemm()
    ref = HostReference(fb)
    m.update = ub.measure_update(fb, z.update_table_rows, z.update_max_lookups,
                                 z.update_reps, m.statistic, lambda t: _note(m, t),
                                 reference=ref)
    m.host_reference = ref.record(m.statistic).as_json()
    del ref


def hybrid_stages() -> dict[str, str]:
    """Hybrid's stage of each phase -> the FBGEMM call it is measured on, in phase order (as
    hybrid declares them: one stage a phase)."""
    declared = phase_stages("hybrid")
    out = {}
    for phase, call in PHASE_CALLS.items():
        stages = declared.get(phase, ())
        if len(stages) != 1:
            raise StageNotTimed(f"design 'hybrid' declares {phase} = {stages}; FBGEMM's "
                                f"{call} is compared with exactly one stage")
        out[stages[0]] = call
    return out


def alone(cfg: Config) -> Config:
    """The config as FBGEMM is measured: its inputs resident (`input_pipeline.inputs_on_gpu`:
    no data loader). Why: the model's loader workers share `cpu_cores` with hybrid's
    gather, so with them the predicted cpu_gather carries the loader's core time (on the
    d128p1 config with one core, 4.2 ms a batch instead of 3.3 while the loader ran ahead,
    the same 3.3 once it stopped), which FBGEMM's timed calls never see."""
    return replace(cfg, input_pipeline=replace(cfg.input_pipeline, inputs_on_gpu=True))


def predicted_stages(cfg: Config, trace: Trace, replays: Replays) -> dict[str, np.ndarray]:
    """Hybrid's own `run` on a fresh Machine of `alone(cfg)`: each of `hybrid_stages()`, ns
    per timed batch (a stage it did not time: StageNotTimed, never zeros)."""
    cfg = alone(cfg)
    design = DESIGNS.get("hybrid")(cfg)
    w = replays.get(design.workload_key())[0]
    m = run_design(cfg, design, w)
    out = {}
    for s in hybrid_stages():
        require_timed("hybrid", s, m.stage_order)
        out[s] = np.asarray(m.stage_ns[s], float)
    return out


def validate_fbgemm(cfg: Config, reps: int = 3, max_batches: int | None = None,
                    statistic: str = "median", log: Callable[[str], None] = print,
                    calibration: ReferenceSamples | None = None, why_none: str = ""
                    ) -> list[FbgemmStage | ReferenceRow]:
    """Measure FBGEMM's CPU forward and fused backward on the config's trace and put them
    beside hybrid's predicted cpu_gather and cpu_update; the host reference timed before
    each pass beside `calibration` (the preset's, None: `why_none`), last."""
    fb = import_fbgemm()
    torch = fb["torch"]
    check_config(cfg)
    trace = build_trace(cfg)
    m = cfg.model
    replays = Replays(cfg, trace, cached=False)
    measured = list(range(m.warmup_batches, m.num_batches))[:max_batches]
    if not measured:
        raise UserError("no batch to measure: expected model.num_batches > "
                        "model.warmup_batches", source=cfg.source, field="model.num_batches")
    predicted = predicted_stages(cfg, trace, replays)
    threads = max(1, min(cfg.hardware.cpu.cores, os.cpu_count() or 1,
                         nb.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(threads)
    nb.set_num_threads(threads)  # measure.clock(): CPU time on one thread, else wall time
    tbes = build_tbes(cfg, trace, fb)
    inputs = {b: [tuple(torch.from_numpy(a) for a in fbgemm_inputs(trace, replays.prefix + b,
                                                                     tables))
                  for _, tables in tbes] for b in measured}

    def pair(b: int) -> tuple[float, float]:
        outs: list[Any] = []

        def forward() -> None:
            outs.extend(tbe(i, o) for (tbe, _), (i, o) in zip(tbes, inputs[b], strict=True))

        grads = None

        def backward() -> None:
            for out, g in zip(outs, grads, strict=True):
                out.backward(g)

        f0 = minor_faults()
        t_fwd = timed(forward)
        f1 = minor_faults()
        grads = [torch.full_like(o, GRAD_VALUE) for o in outs]  # untimed
        f2 = minor_faults()
        t_bwd = timed(backward)
        faults.append((f1 - f0, minor_faults() - f2))
        return t_fwd, t_bwd

    faults: list[tuple[int, int]] = []
    for b in measured[:2]:  # warm-up: FBGEMM's first calls allocate and touch
        pair(b)
    faults.clear()
    probe = _probe(cfg, tbes, len(measured))
    reference = HostReference(fb)
    per_pass = reference_per_pass(calibration, reps)
    log(f"validate --cpu --against fbgemm: {len(measured)} batches x {reps} passes on "
        f"{threads} thread(s)")
    passes = []
    for _ in range(max(1, reps)):
        if probe is not None:
            probe.sample()
        for _ in range(per_pass):
            reference.sample()
        passes.append([pair(b) for b in measured])
    samples = np.array(passes)
    per_call = np.mean(np.array(faults, float), axis=0)
    out = []
    for j, (stage, op) in enumerate(hybrid_stages().items()):
        t = samples[:, :, j]  # passes x batches, seconds
        best, med = t.min(axis=0), np.median(t, axis=0)
        busy = best > 0
        spread = (float(np.mean((med[busy] - best[busy]) / best[busy])) * 100
                  if busy.any() else 0.0)
        out.append(FbgemmStage(
            stage, float(predicted[stage][measured].mean()) / 1e6,
            float(summarize(t, statistic).mean()) * 1e3, len(measured), spread, op,
            float(per_call[j])))
    if probe is not None:
        n, r = probe.lookups, m.row_bytes
        pred = price_alone(cfg, m.num_batches,
                           lambda mm, b: mm.cpu_gather(n, r, b, "probe"), [0])
        t = np.array(probe.seconds)
        out.append(FbgemmStage(PROBE_STAGE, float(pred[0]) / 1e6,
                               float(summarize(t, statistic)) * 1e3, len(t),
                               float((np.median(t) - t.min()) / t.min() * 100), "-"))
    return with_reference(out, reference.record(statistic), calibration, why_none)


def reference_per_pass(calibration: ReferenceSamples | None, reps: int) -> int:
    """Reference samples before each pass: about as many in all as the calibration took
    (one a round of each optimizer: 15 with --quick), at least one. Why: the best (or the
    median) of more samples of a fluctuating host is lower (or steadier), so unequal
    counts would bias the ratio (best of 9 at calibration vs 3 now read 1.02-1.31 on one
    host minute)."""
    if calibration is None:
        return 1
    return max(1, round(len(calibration.forward_s) / max(1, reps)))


def with_reference(rows: list[FbgemmStage], now: ReferenceSamples,
                   calibration: ReferenceSamples | None, why_none: str = ""
                   ) -> list[FbgemmStage | ReferenceRow]:
    """`rows` with their host-adjusted ratios (when `calibration` is given), then the
    host.reference row."""
    ref = ReferenceRow(now, calibration, "" if calibration is not None else
                       why_none or "the preset records no host reference")
    k = ref.ratio
    adjusted = [r if k is None else
                replace(r, host_adjusted=host_adjusted(r.predicted_ms, r.measured_ms, k))
                for r in rows]
    return [*adjusted, ref]


def _probe(cfg: Config, tbes: list, seed: int) -> Probe | None:
    """validate --cpu's drift probe on FBGEMM's weights (one TBE of one dim), else None."""
    m = cfg.model
    if len(tbes) != 1 or len(set(m.dims)) != 1:
        return None
    store = tbes[0][0].weights_host.detach().numpy().reshape(-1, m.dims[0])
    return Probe(store, m.dims[0], min(PROBE_LOOKUPS, store.shape[0]), seed=seed)


def format_table(rows: list[FbgemmStage | ReferenceRow]) -> str:
    stages = [r for r in rows if isinstance(r, FbgemmStage)]
    refs = [r for r in rows if isinstance(r, ReferenceRow)]
    adjusted = any(r.host_adjusted is not None for r in stages)
    adj_head = f" {'adjusted':>9}" if adjusted else ""
    head = (f"{'stage':<20} {'predicted_ms':>13} {'measured_ms':>12} {'ratio':>7}{adj_head} "
            f"{'spread':>7} {'faults':>7}  fbgemm")
    lines = [head, "-" * len(head)]
    for r in stages:
        adj = "" if not adjusted else (f" {r.host_adjusted:>9.2f}" if r.host_adjusted
                                       is not None else f" {'-':>9}")
        lines.append(f"{r.stage:<20} {r.predicted_ms:>13.3f} {r.measured_ms:>12.3f} "
                     f"{r.ratio:>7.2f}{adj} {r.spread_pct:>6.1f}% {r.faults_per_call:>7.0f}  "
                     f"{r.fbgemm_op}")
    for r in refs:
        calib = "-" if r.calibration_ms is None else f"{r.calibration_ms:.3f}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"{r.stage:<20} {calib:>13} {r.measured_ms:>12.3f} {ratio:>7}"
                     f"{' ' * len(adj_head)} {r.now.spread_pct():>6.1f}% {'-':>7}  "
                     "the reference now / at calibration")
    lines.append("ratio = predicted / measured (> 1: the model is slower than FBGEMM); "
                 "faults: minor page faults per call (the model prices none)")
    if any(r.stage == PROBE_STAGE for r in stages):
        lines.append(f"{PROBE_STAGE}: validate --cpu's drift probe (uniform rows, fresh ids) "
                     "on FBGEMM's weights beside the model's price of it: the host's drift "
                     "mixed with the model's error on uniform gathers")
    for r in refs:
        if r.ratio is None:
            lines.append(f"{r.stage}: {r.why}: no host-adjusted column")
        else:
            lines.append(f"{r.stage}: {REFERENCE.label()}, {r.now.statistic} of "
                         f"{len(r.now.forward_s)} now vs {r.calibration.statistic} of "
                         f"{len(r.calibration.forward_s)} at calibration (ms in the "
                         "predicted_ms column); ratio = now / calibration (> 1: the host "
                         "is slower now); adjusted = ratio x that host ratio")
    return "\n".join(lines)


def huge_pages() -> bool:
    """Whether torch was asked for huge pages (THP_ENV; read after import_fbgemm)."""
    return os.environ.get(THP_ENV, "0") == "1"


def note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr, flush=True)
