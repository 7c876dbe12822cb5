"""Synthetic `calibrate --cpu` measurements whose fit is known exactly (shared by
tests/cpu/test_cpu_calibrate.py and tests/reliability/test_reliability_hostile.py)."""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.cpu.host_bench import (
    AggregatePoint,
    ApplyPoint,
    CpuMeasurements,
    GatherPoint,
    MixPoint,
    OnchipPoint,
    PlanBatch,
    ScalingPoint,
    SizeTime,
)

# known truth: every sample is exactly latency + bytes / rate (stream: bytes read)
DRAM_GBPS, LAT_NS = 40.0, 2000.0
GATHER = {64: 8.0, 128: 12.0, 256: 16.0, 512: 20.0}  # GB/s of rows on 2 threads
ONE = {64: 4.5, 128: 6.5, 256: 9.0, 512: 10.0}  # GB/s on one thread (hot set)
COLD_ONE = {64: 2.0, 128: 3.0, 256: 3.5, 512: 4.0}  # GB/s of uniform rows on one thread
# core-ns per lookup off chip and on chip (beyond the op) and per unique row
AGG_LOOKUP, AGG_HIT, AGG_ROW = 25.0, 4.0, 70.0
# the mix: ns per lookup = hit x h^W + miss x (1 - h^W), h counted at the fitted LLC (4 MiB)
MIX_W = 2.5
MIX = {64: (8.0, 30.0), 128: (10.0, 40.0), 256: (16.0, 64.0), 512: (32.0, 128.0)}


def synthetic() -> CpuMeasurements:
    m = CpuMeasurements(threads=[1, 2], reps=3)
    for s in (1e7, 4e7, 1.6e8):
        m.stream.append(SizeTime(s, LAT_NS * 1e-9 + s / (DRAM_GBPS * 1e9)))
    pe = GATHER[256] / (2 * ONE[256])  # what the fit finds (hot-set scaling at 256 B)
    op = max(ONE.values())
    for rb, g in GATHER.items():
        for n in (1e5, 1e6, 4e6):
            m.gather.append(GatherPoint(float(rb), n, LAT_NS * 1e-9 + n / (g * 1e9)))
            m.gather_one.append(GatherPoint(float(rb), n, LAT_NS * 1e-9 + n / (COLD_ONE[rb] * 1e9)))
            m.scaling.append(ScalingPoint(2.0, float(rb), n, LAT_NS * 1e-9 + n / (g * 1e9)))
            m.scaling.append(ScalingPoint(1.0, float(rb), n, LAT_NS * 1e-9 + n / (ONE[rb] * 1e9)))
        # aggregation: exactly fixed + (a x lookups + c x unique rows) / (2 threads x pe),
        # a = AGG_LOOKUP off chip, AGG_HIT on chip, + the op on the gradient row (rb / op),
        # on rows repeated 1..20 times; a larger batch keeps fewer of its repeats on chip
        for a in (1e4, 1e5):
            for k in (1, 2, 5, 20):
                u = a / k
                h = (1 - 1 / k) * (1.0 if a < 5e4 else 0.4)  # at 4 MiB, the fitted LLC
                core_ns = (a * (1 - h) * (AGG_LOOKUP + rb / op) + a * h * (AGG_HIT + rb / op)
                           + u * AGG_ROW)
                m.aggregate.append(AggregatePoint(
                    float(rb), a, u, 5e-6 + core_ns / (2 * pe) * 1e-9,
                    [[1.0, 0.5 * h * a], [4.0, h * a], [8.0, h * a]]))
        m.apply.append(ApplyPoint("sgd", float(rb), 1e5, float(rb), 0.01))
    # hot sets on one thread: half the smallest set's 20 GB/s is 10 -> 1, 2, 4 MiB pass, 8
    # is the first below (16 MiB's 15 GB/s after it is noise: it does not extend the LLC)
    for mib, rate in ((1, 20.0), (2, 16.0), (4, 10.5), (8, 9.0), (16, 15.0), (32, 3.0)):
        m.onchip.append(OnchipPoint(1.0, float(mib), 256.0, rate))
        m.onchip.append(OnchipPoint(2.0, float(mib), 256.0, 1.8 * rate))
    for rb, (t_hit, t_miss) in MIX.items():
        for alpha, h in ((0.0, 0.01), (0.9, 0.4), (1.1, 0.7), (1.4, 0.95)):
            n = 1e5
            ns = t_hit * h ** MIX_W + t_miss * (1 - h ** MIX_W)
            # other hot-set sizes count other hits: only 4 MiB (the fitted LLC) is used
            m.mix.append(MixPoint(float(rb), alpha, n, n * ns * 1e-9,
                                  [[1.0, 0.5 * h * n], [4.0, h * n],
                                   [8.0, min(1.0, 1.1 * h) * n]]))
    m.latency_ns = 95.0
    m.plan_ns_per_id = np.float64(31.5)  # numpy scalars must still write as YAML
    m.plan_ids = 1000
    # planner batches: exactly 40 ns per id + 300 ns per eviction
    m.plan_batches = [PlanBatch(1e5, e, 1e5 * 40e-9 + e * 300e-9)
                      for e in (0.0, 0.0, 1e4, 2e4, 3e4)]
    return m
