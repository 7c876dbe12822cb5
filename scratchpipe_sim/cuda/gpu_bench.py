"""GPU and host microbenchmarks behind `calibrate` (needs a real GPU for the GPU parts).

Bandwidths count memory traffic (bytes read + bytes written), as datasheets do: a copy of S
bytes moves 2S, a gather of n rows of r bytes into a buffer moves 2nr. Gather efficiencies
are gather traffic rate / streaming traffic rate of the same memory. PCIe transfers count the
bytes sent once. Each point is the median of several repetitions, timed with CUDA events
(host work with perf_counter). Sizes are small enough that a full run takes about a minute.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np

from scratchpipe_sim.cuda.gpu_preset_fit import Measurements
from scratchpipe_sim.cuda.runtime import EventTimer, cuda, gpu_status
from scratchpipe_sim.measure import host


@dataclass(frozen=True)
class BenchSizes:
    """How big each microbenchmark is (the defaults fit an H100/H200 class machine)."""

    pcie_bytes: tuple[int, ...] = tuple(1 << s for s in range(12, 27, 2))  # 4 KiB .. 64 MiB
    reps: int = 7
    hbm_copy_bytes: int = 1 << 30
    hbm_table_bytes: int = 1 << 31
    gather_rows: int = 1 << 21
    row_bytes: tuple[int, ...] = (64, 128, 256, 512)
    hot_rows: int = 1 << 14
    dram_copy_bytes: int = 1 << 30
    dram_table_bytes: int = 1 << 31
    gemm_n: int = 2048
    launches: int = 200
    plan_rows: int = 8_000_000
    plan_ids: int = 327_680
    plan_batches: int = 8


TINY = BenchSizes(pcie_bytes=(1 << 10, 1 << 12), reps=2, hbm_copy_bytes=1 << 12,
                  hbm_table_bytes=1 << 14, gather_rows=8, row_bytes=(64, 128), hot_rows=4,
                  dram_copy_bytes=1 << 12, dram_table_bytes=1 << 14, gemm_n=16, launches=2,
                  plan_rows=1000, plan_ids=64, plan_batches=3)


def _median_event_s(fn: Callable[[], None], stream: Any, reps: int) -> float | None:
    """Median seconds of `fn` on `stream` over reps (after one warm-up); None: no timing."""
    fn()
    times = []
    for _ in range(reps):
        t = EventTimer(stream).start()
        fn()
        s = t.stop().elapsed_s()
        if s is None:
            return None
        times.append(s)
    return float(np.median(times))


def _median_wall_s(fn: Callable[[], None], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure_pcie(m: Measurements, z: BenchSizes) -> None:
    c = cuda()
    s = c.stream()
    biggest = max(z.pcie_bytes)
    h = c.pinned_array(biggest, np.uint8)
    h[:] = 1
    d = c.device_array(biggest, np.uint8)
    for n in z.pcie_bytes:
        t = _median_event_s(lambda n=n: d[:n].copy_to_device(h[:n], stream=s), s, z.reps)
        if t is not None:
            m.h2d.append((float(n), t))
        t = _median_event_s(lambda n=n: d[:n].copy_to_host(h[:n], stream=s), s, z.reps)
        if t is not None:
            m.d2h.append((float(n), t))
    # both directions at once, on two streams
    s2 = c.stream()
    h2 = c.pinned_array(biggest, np.uint8)
    d2 = c.device_array(biggest, np.uint8)
    ta, tb = EventTimer(s), EventTimer(s2)
    c.synchronize()
    ta.start()
    tb.start()
    d.copy_to_device(h, stream=s)
    d2.copy_to_host(h2, stream=s2)
    ta.stop()
    tb.stop()
    sa, sb = ta.elapsed_s(), tb.elapsed_s()
    if sa and sb:
        m.duplex_GBps = (biggest / sa / 1e9, biggest / sb / 1e9)


def measure_hbm(m: Measurements, z: BenchSizes) -> None:
    from scratchpipe_sim.cuda import gpu_kernels as K  # noqa: PLC0415

    c = cuda()
    s = c.stream()
    n = z.hbm_copy_bytes // 4
    a = c.device_array(n, np.float32, stream=s)
    b = c.device_array(n, np.float32, stream=s)
    t = _median_event_s(lambda: b.copy_to_device(a, stream=s), s, z.reps)
    if t is not None:
        m.hbm_stream_GBps = 2 * z.hbm_copy_bytes / t / 1e9
    rng = np.random.default_rng(0)
    for rb in z.row_bytes:
        w = rb // 4
        rows = max(z.hbm_table_bytes // rb, z.gather_rows)
        table = c.device_array((rows, w), np.float32, stream=s)
        out = c.device_array((z.gather_rows, w), np.float32, stream=s)
        for hot, dest in ((rows, m.hbm_gather), (min(z.hot_rows, rows), m.hbm_gather_hot)):
            ids = c.to_device(rng.integers(0, hot, z.gather_rows).astype(np.int64), stream=s)
            t = _median_event_s(lambda ids=ids, table=table, out=out, w=w: K.launch2(
                K.row_gather, z.gather_rows, w, s, table, ids, out), s, z.reps)
            if t is not None:
                dest.append((float(rb), 2 * z.gather_rows * rb / t / 1e9))


def measure_dram(m: Measurements, z: BenchSizes) -> None:
    n = z.dram_copy_bytes // 4
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    t = _median_wall_s(lambda: host.stream_copy(src, dst), z.reps)
    m.dram_stream_GBps = 2 * z.dram_copy_bytes / t / 1e9
    m.cores = int(nb.get_num_threads())
    rng = np.random.default_rng(1)
    for rb in z.row_bytes:
        w = rb // 4
        rows = max(z.dram_table_bytes // rb, z.gather_rows)
        table = np.ones((rows, w), np.float32)
        out = np.empty((z.gather_rows, w), np.float32)
        for hot, dest in ((rows, m.dram_gather), (min(z.hot_rows, rows), m.dram_gather_hot)):
            ids = rng.integers(0, hot, z.gather_rows).astype(np.int64)
            t = _median_wall_s(lambda ids=ids, table=table, out=out: host.gather_rows(
                table, ids, out), z.reps)
            dest.append((float(rb), 2 * z.gather_rows * rb / t / 1e9))
        if m.dram_gather_1core_GBps is None and rb in (256, z.row_bytes[-1]):
            ids = rng.integers(0, rows, z.gather_rows).astype(np.int64)
            t = _median_wall_s(lambda ids=ids, table=table, out=out: host.gather_rows_1core(
                table, ids, out), z.reps)
            m.dram_gather_1core_GBps = z.gather_rows * rb / t / 1e9


def measure_planner(m: Measurements, z: BenchSizes) -> None:
    """The reference plan stage (the `scratchpipe` policy, one batch at a time, W = 2) on
    Zipf batches, one thread."""
    from scratchpipe_sim.cuda.scratchpad_plan import ScratchpadState  # noqa: PLC0415
    from scratchpipe_sim.policies.scratchpipe import min_scratchpipe_capacity  # noqa: PLC0415
    from scratchpipe_sim.traces.csr_trace import Trace  # noqa: PLC0415

    rng = np.random.default_rng(2)
    perm = rng.permutation(z.plan_rows)
    ids = np.concatenate([perm[np.minimum(rng.zipf(1.05, z.plan_ids) - 1, z.plan_rows - 1)]
                          for _ in range(z.plan_batches)])
    trace = Trace.single_table(ids, z.plan_rows, z.plan_ids)
    cap = max(z.plan_rows // 20, min_scratchpipe_capacity(trace, 2))
    st = ScratchpadState(trace, cap, 2)
    times = []
    for k in range(z.plan_batches):
        t0 = time.perf_counter()
        st.plan(k)
        times.append(time.perf_counter() - t0)
    if len(times) > 1:
        m.plan_ns_per_id = float(np.median(times[1:])) / z.plan_ids * 1e9  # [0]: warm-up


def measure_compute(m: Measurements, z: BenchSizes) -> None:
    from scratchpipe_sim.cuda import gpu_kernels as K  # noqa: PLC0415

    c = cuda()
    s = c.stream()
    g = z.gemm_n
    a = c.to_device(np.full((g, g), 0.5, np.float32), stream=s)
    b = c.to_device(np.full((g, g), 0.5, np.float32), stream=s)
    out = c.device_array((g, g), np.float32, stream=s)
    t = _median_event_s(lambda: K.launch_gemm(a, b, out, s), s, max(3, z.reps // 2))
    if t is not None:
        m.gemm_tflops = 2.0 * g ** 3 / t / 1e12
    tiny = c.device_array((1, 1), np.float32, stream=s)

    def launches() -> None:
        for _ in range(z.launches):
            K.launch2(K.fill_zero, 1, 1, s, tiny)

    t = _median_event_s(launches, s, 3)
    if t is not None:
        m.kernel_launch_ns = t / z.launches * 1e9


def measure_all(z: BenchSizes = BenchSizes(), log: Callable[[str], None] = print
                ) -> Measurements:
    """Every microbenchmark; GPU parts record nothing where timing is unavailable."""
    st = gpu_status()
    m = Measurements(device=st.reason if st.usable else "no GPU")
    for name, fn in (("pcie", measure_pcie), ("hbm", measure_hbm), ("dram", measure_dram),
                     ("planner", measure_planner), ("compute", measure_compute)):
        t0 = time.perf_counter()
        fn(m, z)
        log(f"calibrate: {name} done in {time.perf_counter() - t0:.1f} s")
    return m
