"""FBGEMM's cache bookkeeping in the prefetch (issue 24's residual, docs/validation.md): the
radix sorts of lru_cache_populate and the miss counter of record_cache_miss_counter, by
closed form on the h100-gen5 preset, and the option's effect on a lru-cache run."""

from __future__ import annotations

import math

import pytest
from small_configs import H100_OFF_CHIP

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.machine import MISS_COUNTER_KERNELS, RADIX_BITS, price_alone

BASE = {**H100_OFF_CHIP, "designs": ["lru-cache"]}
A = 1_048_570.0  # the published points' lookups per iteration


def cfg_of(over=None):
    return load_config(deep_merge(BASE, over or {}))


def _stream_ns(nbytes, gpu, eff=1.0):
    return gpu.hbm_latency_ns + nbytes / (gpu.hbm_GBps * eff)


def test_radix_sort_closed_form():
    cfg = cfg_of()
    gpu = cfg.hardware.gpu
    # 64-bit keys on all 64 bits: 8 passes of 8-bit digits, plus the histogram read
    t = price_alone(cfg, 1, lambda m, b: m.radix_sort(b, A, 8, 0, 64, "s"), [0])[0]
    assert RADIX_BITS == 8
    assert t == pytest.approx(_stream_ns(A * (8 + 8 * 2 * 8), gpu, gpu.aggregate_efficiency))
    # (int32 set, int64 id) pairs on 20 bits: 3 passes
    t = price_alone(cfg, 1, lambda m, b: m.radix_sort(b, A, 4, 8, 20, "s"), [0])[0]
    assert t == pytest.approx(_stream_ns(A * (4 + 3 * 2 * 12), gpu, gpu.aggregate_efficiency))


def test_populate_sorts_closed_form():
    cfg = cfg_of()
    gpu = cfg.hardware.gpu
    sets = 613_000
    t = price_alone(cfg, 1, lambda m, b: m.cache_populate_sorts(b, A, sets), [0])[0]
    id_passes = math.ceil((int(math.log2(cfg.total_rows + 1)) + 1) / 8)  # 8000 rows: 13 b
    set_passes = math.ceil((int(math.log2(sets + 1)) + 1) / 8)  # 20 bits
    assert (id_passes, set_passes) == (2, 3)
    agg = gpu.aggregate_efficiency
    want = (_stream_ns(A * (8 + id_passes * 16), gpu, agg) + _stream_ns(A * 16, gpu)
            + _stream_ns(A * (4 + set_passes * 24), gpu, agg))
    assert t == pytest.approx(want)


def test_miss_counter_closed_form():
    cfg = cfg_of()
    gpu = cfg.hardware.gpu
    t = price_alone(cfg, 1, lambda m, b: m.cache_miss_counter(b, A), [0])[0]
    probe_eff = 0.27  # h100-gen5 gather_efficiency at 256 B
    want = (_stream_ns(A * gpu.cache_probe_bytes, gpu, probe_eff)
            + _stream_ns(A * 20, gpu)
            + _stream_ns(A * (8 + 8 * 16), gpu, gpu.aggregate_efficiency)
            + _stream_ns(A * 16, gpu)
            + MISS_COUNTER_KERNELS * gpu.kernel_launch_ns)
    assert t == pytest.approx(want)
    # at the published points' size: 0.30 ms of probes, 0.11 ms of sort, 36 us of sync
    assert 0.44e6 < t < 0.46e6


@pytest.mark.parametrize("design", ["lru-cache", "lru-prefetch"])
def test_record_miss_counter_adds_its_price_to_the_fetch_only(design):
    plain = simulate(cfg_of({"designs": [design]}), [design])[0]
    counted = simulate(
        cfg_of(
            {
                "designs": [design],
                "cache": {},
                "design_params": {
                    "lru-cache": {"record_miss_counter": True},
                    "lru-prefetch": {"record_miss_counter": True},
                },
            }
        ),
        [design],
    )[0]
    stage = "fetch" if design == "lru-cache" else "prefetch"
    assert counted[f"stage_{stage}_ns"] > plain[f"stage_{stage}_ns"]
    assert counted["stage_backward_ns"] == pytest.approx(plain["stage_backward_ns"])
