"""The dense work of one training iteration as a GPU runs it: the bottom and top MLPs'
GEMMs (forward, data gradient, weight gradient), their element-wise kernels, the
interaction (DLRM's dot, concatenation, DCNv2's low-rank cross layers), the dense
optimizer's update, and the launches of all of them. Pure functions, no SimPy:
`Machine.mlp` prices a batch with `dense_iteration`, `multi-gpu` all-reduces
`dense_params` parameters, `validate --published` prints the breakdown.

Why a roofline per kernel and not FLOPs / one rate: a DLRM's GEMMs are small (a 13-wide
bottom layer, a 1-wide output), so their time is set by tile and wave quantization, by
memory traffic or by the launch, and precision matters only where the GEMM is
compute-bound (docs/timing.md, dense compute).

A GEMM C[M,N] = A[M,K] B[K,N] costs max(2MNK / (peak x gemm_efficiency x quantization),
bytes x (MK + KN + MN) / (hbm_GBps x stream_efficiency)); quantization is the share of
the launched tiles' waves that holds output (NVIDIA's Matrix Multiplication Background
guide), for the best of the usual cuBLAS/CUTLASS threadblock tiles; a GEMM whose K or N
is not a multiple of the tensor cores' alignment (8 for 16-bit, 4 for TF32) runs on the
CUDA cores at peak_tflops_fp32. An element-wise kernel costs its bytes at the same
streaming rate. Eager PyTorch launches each kernel from the CPU, so a kernel takes
max(its time, kernel_launch_ns) (the GPU waits for launches shorter kernels do not
hide); a CUDA graph launches once and pays graph_node_ns per kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratchpipe_sim.config.hardware import GpuConfig
from scratchpipe_sim.config.model import ModelConfig

#: threadblock tiles (M x N) cuBLAS / CUTLASS pick from for these shapes; a GEMM runs with
#: the one that wastes least of its waves
TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128), (128, 64),
                                      (64, 128), (64, 64))
#: split-K factors cuBLAS may use, and the least of K one split works on
SPLITS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
MIN_SPLIT_K = 128
#: K and N multiples the tensor cores need (Matrix Multiplication guide: 8 elements of a
#: 16-bit type, 4 of TF32); a misaligned GEMM falls back to the CUDA cores
TENSOR_ALIGN: dict[str, int] = {"tf32": 4, "bf16": 8, "fp16": 8}
#: bytes per activation / GEMM operand element by precision (AMP: 16-bit)
ELEMENT_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
#: fp32 bytes per dense parameter the optimizer step moves (read weight and gradient, write
#: the weight, its states read and written) plus zero_grad's write of the gradient
OPTIMIZER_BYTES_PER_PARAM: dict[str, int] = {"sgd": 16, "adagrad": 24,
                                             "rowwise-adagrad": 24, "adam": 32}
#: kernels of one step of a multi-tensor (foreach) optimizer, zero_grad included
OPTIMIZER_KERNELS: dict[str, int] = {"sgd": 2, "adagrad": 4, "rowwise-adagrad": 4,
                                     "adam": 6}
#: the parts of the dense work, in the order an iteration runs them
PARTS = ("bottom", "interaction", "top", "optimizer")


@dataclass(frozen=True)
class Kernel:
    """One kernel of the dense work: what it does and its GPU time (no launch)."""

    part: str
    name: str
    flops: float
    nbytes: float
    exec_ns: float
    #: K splits of a GEMM (1: none; element-wise kernels 1)
    splits: int = 1


@dataclass(frozen=True)
class DenseCost:
    """One iteration's dense work: its kernels and the time the GPU spends on them."""

    kernels: tuple[Kernel, ...]
    #: GPU time of the kernels themselves
    busy_ns: float
    #: GPU time waiting for launches (eager: kernels shorter than a launch; graph: the
    #: graph's launch and the per-node gaps)
    launch_ns: float
    #: wall time of each part (kernels + their launch waits), in PARTS order
    part_ns: tuple[tuple[str, float], ...]

    @property
    def total_ns(self) -> float:
        return self.busy_ns + self.launch_ns

    @property
    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)


# -- one kernel ------------------------------------------------------------------------------
def tilings(m: float, n: int, k: float, sm_count: int) -> list[tuple[float, int]]:
    """(share of the launched waves' work that is useful, K splits) for every tile of TILES
    and split-K factor of SPLITS (util 1: whole tiles filling whole waves). cuBLAS splits K
    over several CTAs when the M x N tiles cannot fill the GPU (a weight gradient: M x N a
    layer's weights, K the batch); each split works on ceil(K / splits) of K, at least
    MIN_SPLIT_K. `gemm` runs the one that takes least time: a split fills more SMs but
    writes and sums partial tiles."""
    out: list[tuple[float, int]] = []
    for tm, tn in TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn)
        for splits in SPLITS:
            if splits > 1 and k / splits < MIN_SPLIT_K:
                break
            waves = math.ceil(tiles * splits / sm_count)
            out.append((m * n * k / (waves * sm_count * tm * tn * math.ceil(k / splits)),
                        splits))
    return out


def peak_tflops(gpu: GpuConfig, precision: str, k: int, n: int) -> float:
    """The peak a GEMM of inner size k and output width n runs at: the precision's tensor
    peak when k and n are aligned, else (or without one) the CUDA cores' fp32 peak."""
    align = TENSOR_ALIGN.get(precision)
    if align is None or k % align or n % align:
        return gpu.peak_tflops_fp32
    peak = getattr(gpu, f"peak_tflops_{precision}")
    return gpu.peak_tflops_fp32 if peak is None else peak


def stream_ns(gpu: GpuConfig, nbytes: float) -> float:
    """A memory-bound kernel moving `nbytes` through HBM."""
    return nbytes / (gpu.hbm_GBps * gpu.stream_efficiency)


def gemm(gpu: GpuConfig, precision: str, part: str, name: str, m: float, n: int, k: int,
         batch: float = 1.0) -> Kernel:
    """`batch` GEMMs C[m,n] = A[m,k] B[k,n] in one kernel, at the roofline (module
    docstring). A batched GEMM (batch > 1) fills the GPU with its batch: no quantization.
    With gpu.tflops set (calibrate's measured GEMM), compute runs at that rate."""
    flops = 2.0 * m * n * k * batch
    nbytes = ELEMENT_BYTES[precision] * (m * k + k * n + m * n) * batch
    if gpu.tflops is not None:
        compute = flops / (gpu.tflops * 1e3)
        return Kernel(part, name, flops, nbytes, max(compute, stream_ns(gpu, nbytes)))
    peak = peak_tflops(gpu, precision, k, n) * 1e3 * gpu.gemm_efficiency
    options = [(1.0, 1)] if batch > 1 else tilings(m, n, k, gpu.sm_count)
    best: Kernel | None = None
    for util, splits in options:
        # the partial tiles of a split, written and summed in fp32
        moved = nbytes + (2.0 * 4.0 * splits * m * n if splits > 1 else 0.0)
        kern = Kernel(part, name, flops, moved,
                      max(flops / (peak * util), stream_ns(gpu, moved)), splits)
        if best is None or kern.exec_ns < best.exec_ns:
            best = kern
    assert best is not None
    return best


def elementwise(gpu: GpuConfig, part: str, name: str, nbytes: float) -> Kernel:
    return Kernel(part, name, 0.0, nbytes, stream_ns(gpu, nbytes))


# -- the iteration's kernels -----------------------------------------------------------------
def mlp_kernels(gpu: GpuConfig, precision: str, part: str, layers: tuple[int, ...],
                samples: float, input_grad: bool) -> list[Kernel]:
    """An MLP of nn.Linear + activation layers, forward and backward: per layer the forward
    GEMM (bias fused) and activation, then the activation's backward, the bias gradient,
    the data gradient (not for a first layer whose input needs none: the dense features)
    and the weight gradient; AMP casts each fp32 master weight to 16 bits."""
    eb = ELEMENT_BYTES[precision]
    amp = eb == 2
    out: list[Kernel] = []
    pairs = list(zip(layers, layers[1:], strict=False))
    for i, (a, b) in enumerate(pairs):
        if amp:
            out.append(elementwise(gpu, part, f"cast{i}", 6.0 * a * b))
        out.append(gemm(gpu, precision, part, f"fwd{i}", samples, b, a))
        out.append(elementwise(gpu, part, f"act{i}", 2.0 * eb * samples * b))
    for i in reversed(range(len(pairs))):
        a, b = pairs[i]
        out.append(elementwise(gpu, part, f"act_bwd{i}", 3.0 * eb * samples * b))
        out.append(elementwise(gpu, part, f"bias_grad{i}", eb * samples * b + 4.0 * b))
        if i > 0 or input_grad:
            out.append(gemm(gpu, precision, part, f"dgrad{i}", samples, a, b))
        out.append(gemm(gpu, precision, part, f"wgrad{i}", b, a, samples))
    return out


def interaction_kernels(gpu: GpuConfig, model: ModelConfig, samples: float
                        ) -> list[Kernel]:
    """The interaction forward and backward. dot: (F+1) x D vectors per sample, their
    (F+1)^2 dot products (one batched GEMM, 2 (F+1)^2 D FLOPs a sample), the lower
    triangle kept (torchrec's DLRM); backward the two operand gradients (two batched
    GEMMs). cat: one concatenation and its split. dcn-v2: the concatenation x0 of width N,
    then per layer x_{l+1} = x0 * (V(U x_l) + b) + x_l with U: N x r, V: r x N (two GEMMs
    and an element-wise kernel forward; six kernels backward)."""
    p = model.precision
    eb = ELEMENT_BYTES[p]
    f1 = model.table_count + 1
    d = model.bottom_layers[-1]
    width = model.interaction_width
    x_bytes = eb * samples * (d + sum(model.dims))
    out = [elementwise(gpu, "interaction", "cat", 2.0 * x_bytes)]
    if model.interaction == "dot":
        tri = f1 * (f1 - 1) // 2
        out += [gemm(gpu, p, "interaction", "bmm", f1, f1, d, batch=samples),
                elementwise(gpu, "interaction", "tril", eb * samples * (f1 * f1 + tri)),
                elementwise(gpu, "interaction", "cat_out", 2.0 * eb * samples * width),
                elementwise(gpu, "interaction", "tril_bwd", eb * samples * (f1 * f1 + tri)),
                gemm(gpu, p, "interaction", "bmm_bwd_a", f1, d, f1, batch=samples),
                gemm(gpu, p, "interaction", "bmm_bwd_b", f1, d, f1, batch=samples),
                elementwise(gpu, "interaction", "grad_sum", 3.0 * x_bytes)]
    elif model.interaction == "dcn-v2":
        r = model.dcn_rank
        n = width
        vec = eb * samples * n
        for i in range(model.dcn_layers):
            out += [gemm(gpu, p, "interaction", f"dcn_u{i}", samples, r, n),
                    gemm(gpu, p, "interaction", f"dcn_v{i}", samples, n, r),
                    elementwise(gpu, "interaction", f"dcn_cross{i}", 4.0 * vec)]
        for i in reversed(range(model.dcn_layers)):
            out += [elementwise(gpu, "interaction", f"dcn_cross_bwd{i}", 5.0 * vec),
                    elementwise(gpu, "interaction", f"dcn_bias_grad{i}", vec),
                    gemm(gpu, p, "interaction", f"dcn_v_dgrad{i}", samples, r, n),
                    gemm(gpu, p, "interaction", f"dcn_v_wgrad{i}", n, r, samples),
                    gemm(gpu, p, "interaction", f"dcn_u_dgrad{i}", samples, n, r),
                    gemm(gpu, p, "interaction", f"dcn_u_wgrad{i}", r, n, samples)]
    out.append(elementwise(gpu, "interaction", "split", 2.0 * x_bytes))
    return out


def dense_params(model: ModelConfig) -> int:
    """Dense parameters: both MLPs' weights and biases, and dcn-v2's U, V and bias per
    layer (what the dense optimizer updates and multi-gpu all-reduces, fp32 each)."""
    total = 0
    for layers in (model.bottom_layers, model.top_layers):
        total += sum(a * b + b for a, b in zip(layers, layers[1:], strict=False))
    if model.interaction == "dcn-v2":
        n = model.interaction_width
        total += model.dcn_layers * (2 * n * model.dcn_rank + n)
    return total


def saved_activation_bytes(model: ModelConfig, samples: float) -> float:
    """Bytes of the tensors the forward keeps for the backward on `samples` samples (what a
    batch in training holds in HBM beside its inputs; autograd frees them as the backward
    passes): each MLP's input and, per layer, its GEMM output and activation output; the
    interaction's concatenation (bottom output + the embedding outputs) and its output
    (dot: the (F+1)^2 products and the kept triangle; dcn-v2: per layer U x_l, V(U x_l)
    and x_{l+1}), at the model's precision. Workspace and gradients are transient (one
    layer's at a time) and left out."""
    eb = ELEMENT_BYTES[model.precision]
    width = 0.0
    for layers in (model.bottom_layers, model.top_layers):
        width += layers[0] + 2.0 * sum(layers[1:])
    f1 = model.table_count + 1
    width += model.bottom_layers[-1] + sum(model.dims)  # the concatenation
    if model.interaction == "dot":
        width += f1 * f1 + f1 * (f1 - 1) // 2
    elif model.interaction == "dcn-v2":
        width += model.dcn_layers * (model.dcn_rank + 2.0 * model.interaction_width)
    return eb * samples * width


def optimizer_kernels(gpu: GpuConfig, model: ModelConfig) -> list[Kernel]:
    """The dense optimizer's step (model.optimizer: rowwise-adagrad's dense parameters take
    plain Adagrad) as multi-tensor element-wise kernels over every parameter."""
    nbytes = OPTIMIZER_BYTES_PER_PARAM[model.optimizer] * dense_params(model)
    k = OPTIMIZER_KERNELS[model.optimizer]
    return [elementwise(gpu, "optimizer", f"step{i}", nbytes / k) for i in range(k)]


def dense_kernels(model: ModelConfig, gpu: GpuConfig, samples: float) -> tuple[Kernel, ...]:
    """Every kernel of one iteration's dense work on `samples` samples, in PARTS order."""
    p = model.precision
    return tuple(mlp_kernels(gpu, p, "bottom", model.bottom_layers, samples, False)
                 + interaction_kernels(gpu, model, samples)
                 + mlp_kernels(gpu, p, "top", model.top_layers, samples, True)
                 + optimizer_kernels(gpu, model))


def dense_iteration(model: ModelConfig, gpu: GpuConfig, samples: float) -> DenseCost:
    """One iteration's dense work (not memoized here: `gpu` may be sensitivity's
    read-recording view, which refuses hashing; `Machine.mlp` keeps its own per samples)."""
    kernels = dense_kernels(model, gpu, samples)
    busy = sum(k.exec_ns for k in kernels)
    parts = dict.fromkeys(PARTS, 0.0)
    if model.cuda_graphs:
        wait = gpu.kernel_launch_ns + gpu.graph_node_ns * len(kernels)
        for k in kernels:
            parts[k.part] += k.exec_ns + gpu.graph_node_ns
        parts[PARTS[0]] += gpu.kernel_launch_ns
    else:
        wait = 0.0
        for k in kernels:
            t = max(k.exec_ns, gpu.kernel_launch_ns)
            wait += t - k.exec_ns
            parts[k.part] += t
    return DenseCost(kernels, busy, wait, tuple(parts.items()))
