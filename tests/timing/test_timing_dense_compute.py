"""The dense model's closed forms at the roofline's two ends (timing/dense_compute.py):
a large GEMM that fills whole waves costs FLOPs / (peak x gemm_efficiency); a tiny layer
costs one launch per kernel, whatever the precision; the interaction's FLOPs are its
formulas."""

from __future__ import annotations

import dataclasses

import pytest
from small_configs import gpu_of, model_of

from scratchpipe_sim.timing.dense_compute import (
    dense_iteration,
    dense_params,
    gemm,
    peak_tflops,
    tilings,
)


def test_large_aligned_gemm_is_flops_over_peak_times_efficiency():
    g = gpu_of()
    m, n, k = 256 * g.sm_count, 1024, 4096  # 256 x 128 tiles: 8 whole waves
    assert (1.0, 1) in tilings(m, n, k, g.sm_count)
    flops = 2.0 * m * n * k
    for precision, peak in (("fp32", 19.5), ("tf32", 156.0), ("bf16", 312.0),
                            ("fp16", 312.0)):
        kern = gemm(g, precision, "top", "fwd", m, n, k)
        assert kern.flops == flops
        assert kern.exec_ns == pytest.approx(flops / (peak * 1e3 * g.gemm_efficiency),
                                             rel=1e-12)
    assert (gemm(g, "bf16", "top", "fwd", m, n, k).exec_ns
            < gemm(g, "fp32", "top", "fwd", m, n, k).exec_ns / 10)


def test_one_small_tile_uses_one_sm_of_the_wave():
    g = gpu_of()
    # 64 x 64 output, K too short to split: one 64 x 64 tile on one SM of one wave
    assert max(tilings(64, 64, 64, g.sm_count)) == (pytest.approx(1 / g.sm_count), 1)
    # a weight gradient (K = the batch) splits K to fill the GPU: faster than one split
    wgrad = gemm(g, "bf16", "top", "wgrad", 512, 512, 65536)
    assert wgrad.splits > 1
    flops = 2.0 * 512 * 512 * 65536
    one_split = max(u for u, s in tilings(512, 512, 65536, g.sm_count) if s == 1)
    assert wgrad.exec_ns < flops / (312e3 * g.gemm_efficiency * one_split)
    # a GEMM whose tiles nearly fill the GPU stays compute-bound: no split whose partial
    # tiles' traffic costs more than the waves it fills (MLPerf's 3456 -> 1024 layer at
    # 6,912 rows; a 16-way split once priced it at 5.5x its FLOPs)
    h100 = gpu_of("h100-gen5")
    big = gemm(h100, "fp16", "top", "fwd", 6912, 1024, 3456)
    assert big.exec_ns < 1.2 * big.flops / (h100.peak_tflops_fp16 * 1e3 * h100.gemm_efficiency)


def test_misaligned_k_or_n_falls_off_the_tensor_cores():
    g = gpu_of()
    assert peak_tflops(g, "bf16", 16, 512) == 312.0
    assert peak_tflops(g, "bf16", 13, 512) == g.peak_tflops_fp32  # DLRM's 13 features
    assert peak_tflops(g, "fp16", 512, 479) == g.peak_tflops_fp32  # an unpadded 479
    assert peak_tflops(g, "tf32", 6, 512) == g.peak_tflops_fp32
    assert peak_tflops(g, "tf32", 8, 512) == 156.0
    v100 = gpu_of("v100-gen3")
    assert peak_tflops(v100, "tf32", 512, 512) == v100.peak_tflops_fp32  # no TF32 there


def test_memory_bound_gemm_is_its_bytes_at_the_streaming_rate():
    g = gpu_of()
    m, n, k = 1_000_000, 64, 1  # K = 1: an outer product, all traffic
    kern = gemm(g, "fp32", "top", "fwd", m, n, k)
    assert kern.exec_ns == pytest.approx(4.0 * (m * k + k * n + m * n)
                                         / (g.hbm_GBps * g.stream_efficiency), rel=1e-12)


def test_tiny_layers_are_launch_bound_and_precision_changes_nothing_but_casts():
    g = gpu_of()
    tiny = {"tables": {"count": 2, "rows": 100, "dim": 16}, "batch_size": 8,
            "bottom_mlp": [13, 16], "top_mlp": [19, 1]}
    costs = {p: dense_iteration(model_of(**tiny, precision=p), g, 8.0)
             for p in ("fp32", "bf16")}
    for cost in costs.values():
        assert all(k.exec_ns < g.kernel_launch_ns for k in cost.kernels)
        assert cost.total_ns == pytest.approx(len(cost.kernels) * g.kernel_launch_ns,
                                              rel=1e-12)
    # AMP adds one weight cast per layer, nothing else: the same GEMMs at the same time
    casts = sum(k.name.startswith("cast") for k in costs["bf16"].kernels)
    assert casts == 2
    assert costs["bf16"].total_ns - costs["fp32"].total_ns == pytest.approx(
        casts * g.kernel_launch_ns, rel=1e-12)


def test_cuda_graphs_pay_one_launch_and_a_gap_per_kernel():
    g = gpu_of()
    m = model_of(cuda_graphs=True)
    cost = dense_iteration(m, g, 2048.0)
    n = len(cost.kernels)
    assert cost.launch_ns == pytest.approx(g.kernel_launch_ns + n * g.graph_node_ns)
    assert cost.total_ns == pytest.approx(sum(k.exec_ns for k in cost.kernels)
                                          + g.kernel_launch_ns + n * g.graph_node_ns)
    eager = dense_iteration(dataclasses.replace(m, cuda_graphs=False), g, 2048.0)
    assert eager.busy_ns == cost.busy_ns  # the same kernels, launched differently


def test_dot_interaction_flops_are_the_batched_product_and_its_two_gradients():
    g = gpu_of()
    f, d, b = 8, 64, 2048
    m = model_of(tables={"count": f, "dim": d}, batch_size=b)
    assert m.interaction_width == d + f * (f + 1) // 2
    inter = [k for k in dense_iteration(m, g, float(b)).kernels if k.part == "interaction"]
    assert sum(k.flops for k in inter) == 3 * 2.0 * (f + 1) ** 2 * d * b


def test_dcn_v2_flops_are_two_low_rank_gemms_per_layer_times_three():
    g = gpu_of()
    f, d, b, layers, r = 4, 32, 1024, 3, 64
    n = (f + 1) * d
    m = model_of(tables={"count": f, "dim": d}, batch_size=b, bottom_mlp=[13, d],
                 interaction="dcn-v2", dcn_layers=layers, dcn_rank=r, top_mlp=[n, 1])
    inter = [k for k in dense_iteration(m, g, float(b)).kernels if k.part == "interaction"]
    # forward U (N -> r) and V (r -> N); backward a data and a weight gradient of each
    assert sum(k.flops for k in inter) == 3 * layers * 2 * (2.0 * b * n * r)
    mlp = (13 * d + d) + (n * 1 + 1)
    assert dense_params(m) == mlp + layers * (2 * n * r + n)


def test_the_optimizer_moves_its_bytes_per_parameter():
    g = gpu_of()
    sgd = model_of(optimizer="sgd")
    adam = model_of(optimizer="adam")
    moved = {name: sum(k.nbytes for k in dense_iteration(m, g, 2048.0).kernels
                       if k.part == "optimizer") for name, m in (("sgd", sgd), ("adam", adam))}
    assert moved["sgd"] == 16 * dense_params(sgd)
    assert moved["adam"] == 32 * dense_params(adam)


def test_calibrated_tflops_replaces_peak_times_efficiency():
    g = dataclasses.replace(gpu_of(), tflops=10.0)
    kern = gemm(g, "bf16", "top", "fwd", 4096, 4096, 4096)
    assert kern.exec_ns == pytest.approx(2.0 * 4096 ** 3 / 10e3, rel=1e-12)
