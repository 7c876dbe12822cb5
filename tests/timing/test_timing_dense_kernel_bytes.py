"""Bytes each dense kernel moves (timing/dense_compute.py), as exact formulas: the
interaction's concatenation and triangle kernels, a split-K GEMM's partial tiles, and the
element-wise kernels' single split. Shapes are chosen so that no two summed terms share a
set bit (a `+` read as `^` or `|` would otherwise give the same number)."""

from __future__ import annotations

import pytest
from small_configs import gpu_of, model_of

from scratchpipe_sim.timing.dense_compute import ELEMENT_BYTES, dense_iteration, gemm


def test_dot_interaction_kernels_move_their_operands_bytes():
    g = gpu_of()
    f, d, b = 26, 48, 512  # f1 = 27: 27^2 = 729 and the triangle 351 share bits
    m = model_of(tables={"count": f, "dim": d}, batch_size=b, bottom_mlp=[13, d])
    eb = ELEMENT_BYTES[m.precision]
    kern = {k.name: k for k in dense_iteration(m, g, float(b)).kernels
            if k.part == "interaction"}
    x_bytes = eb * b * (d + f * d)  # the bottom MLP's output and every table's vector
    assert kern["cat"].nbytes == 2.0 * x_bytes
    assert kern["split"].nbytes == 2.0 * x_bytes
    assert kern["grad_sum"].nbytes == 3.0 * x_bytes
    f1 = f + 1
    tri = f1 * (f1 - 1) // 2
    assert kern["tril"].nbytes == eb * b * (f1 * f1 + tri)
    assert kern["tril_bwd"].nbytes == eb * b * (f1 * f1 + tri)
    assert kern["cat_out"].nbytes == 2.0 * eb * b * m.interaction_width


def test_interaction_input_counts_every_table_dim():
    """Mixed dims: the concatenation holds the bottom output plus the sum of the dims (48
    and 16 + 32 = 48 share every bit, so a sum read as xor would give 0)."""
    g = gpu_of()
    m = model_of(tables={"rows": 100, "dim": [16, 32]},
                 batch_size=256, bottom_mlp=[13, 48], interaction="cat", top_mlp=[96, 1])
    eb = ELEMENT_BYTES[m.precision]
    cat = next(k for k in dense_iteration(m, g, 256.0).kernels if k.name == "cat")
    assert cat.nbytes == 2.0 * eb * 256 * (48 + 16 + 32)


def test_split_k_gemm_moves_its_partial_tiles_in_fp32():
    """A weight gradient (M x N a layer's weights, K the batch) splits K; each split writes
    an fp32 partial tile that is read back to be summed: 2 x 4 bytes x splits x M x N on top
    of the operands."""
    g = gpu_of()
    m, n, k = 512, 512, 65536
    kern = gemm(g, "bf16", "top", "wgrad", m, n, k)
    assert kern.splits > 1
    operands = 2 * (m * k + k * n + m * n)
    assert kern.nbytes == operands + 2.0 * 4.0 * kern.splits * m * n
    one = gemm(g, "bf16", "top", "fwd", 64, 64, 64)  # K too short to split
    assert one.splits == 1 and one.nbytes == 2 * 3 * 64 * 64


def test_elementwise_kernels_run_as_one_split():
    g = gpu_of()
    m = model_of(tables={"count": 4, "dim": 16}, batch_size=128, bottom_mlp=[13, 16])
    kernels = dense_iteration(m, g, 128.0).kernels
    elementwise = [k for k in kernels if k.flops == 0.0]
    assert elementwise and all(k.splits == 1 for k in elementwise)


def test_mlp_elementwise_kernels_move_their_activations_bytes():
    """Per layer a -> b on s samples at e bytes an element: the activation reads and writes
    s x b (2 e s b), its backward reads two and writes one (3 e s b), the bias gradient reads
    s x b and writes b fp32 values; AMP casts each fp32 weight to 16 bits (4 + 2 bytes)."""
    from scratchpipe_sim.timing.dense_compute import mlp_kernels

    g = gpu_of()
    layers, s = (13, 48, 80), 1000.0
    for precision in ("fp32", "bf16"):
        e = ELEMENT_BYTES[precision]
        kern = {k.name: k for k in mlp_kernels(g, precision, "top", layers, s, True)}
        for i, (a, b) in enumerate(zip(layers, layers[1:], strict=False)):
            assert kern[f"act{i}"].nbytes == 2.0 * e * s * b
            assert kern[f"act_bwd{i}"].nbytes == 3.0 * e * s * b
            assert kern[f"bias_grad{i}"].nbytes == e * s * b + 4.0 * b
            assert (f"cast{i}" in kern) == (e == 2)
            if e == 2:
                assert kern[f"cast{i}"].nbytes == 6.0 * a * b


def test_whole_tiles_in_one_wave_use_tiles_over_sms_of_it():
    """A 256 x 256 output (K too short to split) is whole tiles of every shape in TILES
    (256x128, 128x256, 128x128, 128x64, 64x128, 64x64), each set in one wave: the useful
    share of the wave is tiles / SMs."""
    from scratchpipe_sim.timing.dense_compute import tilings

    sm = gpu_of().sm_count
    got = tilings(256, 256, 128, sm)
    assert all(s == 1 for _, s in got)
    assert sorted(round(u * sm, 12) for u, _ in got) == [2, 2, 4, 8, 8, 16]


def test_tf32_moves_fp32_operands():
    """TF32 is a tensor-core compute mode: its operands are fp32 in memory (4 bytes)."""
    g = gpu_of()
    tf32 = gemm(g, "tf32", "top", "fwd", 4096, 1024, 128)  # K too short to split
    fp32 = gemm(g, "fp32", "top", "fwd", 4096, 1024, 128)
    assert tf32.splits == fp32.splits == 1
    assert tf32.nbytes == fp32.nbytes == 4 * (4096 * 128 + 128 * 1024 + 4096 * 1024)


def test_rowwise_adagrad_dense_parameters_take_plain_adagrad():
    """Row-wise Adagrad is an embedding optimizer: the dense parameters' step is plain
    Adagrad's, kernel for kernel (same count, same bytes, so the same launch waits)."""
    g = gpu_of()
    steps = {}
    for opt in ("adagrad", "rowwise-adagrad"):
        m = model_of(optimizer=opt, tables={"count": 4, "dim": 16}, bottom_mlp=[13, 16])
        steps[opt] = [(k.name, k.nbytes) for k in dense_iteration(m, g, 64.0).kernels
                      if k.part == "optimizer"]
    assert steps["rowwise-adagrad"] == steps["adagrad"]
    assert len(steps["adagrad"]) == 4


def test_dcn_v2_elementwise_kernels_move_their_vectors():
    """Per cross layer on vectors of width N (v = e x samples x N bytes): forward the cross
    x0 * (V U x + b) + x_l reads three vectors and writes one (4 v); backward its gradient
    reads four and writes one (5 v), and the bias gradient reads one (v)."""
    g = gpu_of()
    f, d, b, layers = 4, 32, 1024, 2
    n = (f + 1) * d
    m = model_of(tables={"count": f, "dim": d}, batch_size=b, bottom_mlp=[13, d],
                 interaction="dcn-v2", dcn_layers=layers, dcn_rank=16, top_mlp=[n, 1])
    v = ELEMENT_BYTES[m.precision] * b * n
    kern = {k.name: k for k in dense_iteration(m, g, float(b)).kernels}
    for i in range(layers):
        assert kern[f"dcn_cross{i}"].nbytes == 4.0 * v
        assert kern[f"dcn_cross_bwd{i}"].nbytes == 5.0 * v
        assert kern[f"dcn_bias_grad{i}"].nbytes == v


def test_the_parts_walls_add_up_to_the_iteration():
    """Each part's wall (its kernels and their launch waits) sums to the iteration's time,
    eager or as a CUDA graph (the graph's launch charged to the first part)."""
    import dataclasses

    g = gpu_of()
    m = model_of(tables={"count": 4, "dim": 16}, batch_size=256, bottom_mlp=[13, 16])
    for graphs in (False, True):
        cost = dense_iteration(dataclasses.replace(m, cuda_graphs=graphs), g, 256.0)
        parts = dict(cost.part_ns)
        assert sum(parts.values()) == pytest.approx(cost.total_ns, rel=1e-12)
        if graphs:
            n = sum(k.part == "top" for k in cost.kernels)
            top = sum(k.exec_ns for k in cost.kernels if k.part == "top")
            assert parts["top"] == pytest.approx(top + n * g.graph_node_ns, rel=1e-12)
