"""Hardware schema: CPU DRAM, PCIe, GPU HBM and compute, an optional CXL memory tier (the
preset YAML format).

`configs/hardware/NAME.yaml` files and the `calibrate` command write exactly these keys.
Units are in every name (GBps = 1e9 bytes/s, ns, GiB = 2**30 bytes). Field names are
stable: other modules and calibrated presets depend on them.

The defaults are the values of one named preset, `DEFAULT_PRESET`
(configs/hardware/a100-gen4.yaml, the quickstart's and the study's), so a config without
`preset:` runs on hardware its sources document; tests/config/test_hardware_defaults.py compares
them field by field. Only `name` (the preset a config named) and `ranges` (a preset's
uncertainty, for `sensitivity`) stay empty without one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety.limits import CLUSTER_RANKS

#: the preset every default below equals (configs/hardware/NAME.yaml)
DEFAULT_PRESET = "a100-gen4"

#: (row_bytes, efficiency) points; efficiency = achieved / streaming bandwidth for random
#: gathers of rows that size, linearly interpolated and clamped at the ends.
Curve = tuple[tuple[float, float], ...]


def doc(unit: str, range_: str, source: str) -> dict:
    """A constant's documentation, written once beside its field: its unit, the plausible
    range `sensitivity` and docs cite, and where the default comes from (a measurement with
    its source, or "set by calibrate"). `config describe` and docs/timing.md's table are
    generated from it."""
    return {"unit": unit, "range": range_, "source": source}


def _pos(help_: str) -> dict:
    return {"help": help_, "gt": 0}


def _nonneg(help_: str) -> dict:
    return {"help": help_, "min": 0}


#: interpolate's results by (curve, row_bytes): the timing model prices every gather with it
#: (thousands of calls per simulated point, a handful of distinct row sizes), and np.interp
#: on one scalar costs ~15 us. Bounded: cleared when it reaches _INTERP_MEMO_MAX entries.
_INTERP_MEMO: dict[tuple[Curve, float], float] = {}
_INTERP_MEMO_MAX = 4096


def _interp(curve: Curve, row_bytes: float) -> float:
    xs = np.array([p[0] for p in curve], float)
    ys = np.array([p[1] for p in curve], float)
    return float(np.interp(row_bytes, xs, ys))


def interpolate(curve: Curve, row_bytes: float) -> float:
    """Efficiency at `row_bytes` (piecewise linear in row bytes, clamped); memoized per
    (curve, row_bytes), bit-identical to np.interp (an unhashable curve is not memoized)."""
    try:
        return _INTERP_MEMO[curve, row_bytes]
    except KeyError:
        pass
    except TypeError:  # a list curve (not from a config): compute every time
        return _interp(curve, row_bytes)
    value = _interp(curve, row_bytes)
    if len(_INTERP_MEMO) >= _INTERP_MEMO_MAX:
        _INTERP_MEMO.clear()
    _INTERP_MEMO[curve, row_bytes] = value
    return value


#: hardware.cpu keys that take a number or a [row_bytes, GBps] curve (`rate_at`)
RATE_CURVE_KEYS = ("core_dram_GBps", "core_llc_GBps")


def rate_at(value: float | Curve, row_bytes: float) -> float:
    """A per-core rate key (`core_dram_GBps`, `core_llc_GBps`) at `row_bytes`: a number is
    the same at every row size; a [row_bytes, GBps] curve (what `calibrate --cpu` writes:
    one core's rate depends on how many lines a row spans) is interpolated and clamped."""
    return value if isinstance(value, int | float) else interpolate(value, row_bytes)


def check_rate_curve(value: float | Curve, source: str | None, where: str) -> None:
    """A rate given as a curve: checked as a curve of GBps > 0 (a number is bounds-checked
    by the schema)."""
    if isinstance(value, int | float):
        return
    if not value:
        raise UserError("expected a number or at least one [row_bytes, GBps] point",
                        source=source, field=where)
    check_curve(value, source, where, unit="GBps")


def check_curve(curve: Curve, source: str | None, where: str, unit: str = "efficiency"
                ) -> None:
    """At least one point, row bytes strictly increasing; an efficiency in (0, 1], a rate
    (`unit` GBps) > 0."""
    if not curve:
        raise UserError(f"expected at least one [row_bytes, {unit}] point", source=source,
                        field=where)
    xs = [p[0] for p in curve]
    if any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
        raise UserError(f"row_bytes must increase strictly, got {xs}", source=source,
                        field=where)
    rate = unit != "efficiency"
    for i, (x, y) in enumerate(curve):
        if x <= 0 or y <= 0 or (not rate and y > 1):
            bound = f"{unit} > 0" if rate else "0 < efficiency <= 1"
            raise UserError(f"point {i} = [{x}, {y}]: expected row_bytes > 0 and {bound}",
                            source=source, field=f"{where}[{i}]")


@dataclass(frozen=True)
class UpdateTerms:
    """One optimizer's cost terms on FBGEMM's CPU backward (`split_embedding_backward_
    codegen_{optimizer}_cpu`; docs/timing.md, "The hybrid update"): per call and table
    (dispatch, csr2csc's buffers), per lookup (csr2csc: copy the (row, bag) pairs and radix
    sort them), per lookup element (add the bag's grad_output row into the unique row's
    buffer), per unique row (the segment's bookkeeping and its row's, and state's, first
    miss, dearer per doubling of its table's bytes: its translation) and per unique-row
    element (the optimizer's read-modify-write of weights and state). All core-ns on one
    thread; `calibrate --cpu --kernel fbgemm` fits them."""

    ns_per_call: float = field(default=0.0, metadata=doc(
        "core-ns per backward call", "0-500000",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "fixed cost of one backward call (Python, autograd, dispatch)"))
    ns_per_table: float = field(default=0.0, metadata=doc(
        "core-ns per table", "0-100000",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "fixed cost per table of a call (csr2csc's buffers and parallel regions)"))
    ns_per_lookup: float = field(default=0.0, metadata=doc(
        "core-ns per lookup", "0-100",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "csr2csc per lookup: the (row, bag) pair copied, radix-sorted (3 passes of 8 bits "
        "for 2^17-2^24 rows) and scanned for segment starts; on every thread"))
    ns_per_lookup_element: float = field(default=0.0, metadata=doc(
        "core-ns per float of a lookup", "0-10",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "per element of a lookup: its bag's grad_output row added into the unique row's "
        "gradient buffer"))
    ns_per_row: float = field(default=0.0, metadata=doc(
        "core-ns per unique row", "0-1000",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "per unique row: the segment's start, buffer reset and the row's (and its state's) "
        "first miss"))
    ns_per_row_element: float = field(default=0.0, metadata=doc(
        "core-ns per float of a unique row", "0-20",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "per element of a unique row: the optimizer's read-modify-write of the weight and "
        "its state"))
    ns_per_bag_element: float = field(default=0.0, metadata=doc(
        "core-ns per float of a bag's output gradient", "0-20",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "per element of a bag's grad_output row, read first by the walk (a miss once the "
        "table's B x D slice leaves the caches; its bag's other lookups find it on chip)"))
    ns_per_row_doubling: float = field(default=0.0, metadata=doc(
        "core-ns per unique row per doubling of its table's bytes beyond 32 MiB",
        "0-30", "set by calibrate --cpu --kernel fbgemm (7-7.5 measured on this project's "
        "host, SGD and rowwise Adagrad, one table of 32 MiB-2 GiB)") | _nonneg(
        "per unique row, per doubling of its table's bytes beyond TABLE_BYTES_REF "
        "(timing/cpu_update_cost.py): the row's first touch misses the TLB, and the page "
        "walk's own entries miss the caches more often the more memory the rows span"))
    parallel: bool = field(default=False, metadata=doc(
        "bool", "",
        "FBGEMM source: only rowwise Adagrad's fp32 path is at::parallel_for") | {
        "help": "the walk over unique rows (per lookup element, per row, per row element) "
                "runs on every core; false: on one (FBGEMM's generic loop, SGD and Adagrad)"})


@dataclass(frozen=True)
class ForwardTerms:
    """FBGEMM's CPU forward beyond the rows' gathers (`cpu_gather` prices those at the
    per-core rates the mix fitted, on FBGEMM's forward at `rates_pooling` lookups a bag, the
    call's fixed cost taken out): per call, and per bag beyond the rates' own
    share (one bag per rates_pooling lookups: the bag's loop and its D-float output row).
    Why: at pooling 1 a bag costs about as much as its one row, and a call's fixed cost
    spread over the mix's lookups would price a large batch's rows too dear
    (docs/validation.md)."""

    ns_per_call: float = field(default=0.0, metadata=doc(
        "core-ns per forward call", "0-1000000",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "fixed cost of one forward call (Python, autograd, dispatch, output allocation)"))
    ns_per_bag: float = field(default=0.0, metadata=doc(
        "core-ns per bag", "0-1000",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "per bag (sample x table) beyond the rates' share: the kernel's bag loop"))
    ns_per_bag_element: float = field(default=0.0, metadata=doc(
        "core-ns per float of a bag's output", "0-20",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "per output float of a bag beyond the rates' share: the pooled row written"))
    ns_per_strided_bag: float = field(default=0.0, metadata=doc(
        "core-ns per bag", "0-200",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "per bag of a call of more than one table: its output run written at a stride of "
        "total_D floats, one table's pass at a time (timing/cpu_update_cost.py: "
        "strided_bags; measured 6-9 ns a bag on a 2-vCPU EPYC)"))
    ns_per_strided_bag_element: float = field(default=0.0, metadata=doc(
        "core-ns per output float", "0-5",
        "set by calibrate --cpu --kernel fbgemm") | _nonneg(
        "per output float of a strided bag (more than one table a call): the run's lines "
        "written by a pass the core's prefetchers do not stream (measured ~0.13 ns)"))
    rates_pooling: float = field(default=20.0, metadata=doc(
        "lookups per bag", "1-1000",
        "calibrate --cpu's mix pooling") | {
        "help": "lookups per bag of the mix the per-core rates were fitted on: their "
                "lookups already carry one bag each this many", "gt": 0})


@dataclass(frozen=True)
class CpuUpdateConfig:
    """Per optimizer, FBGEMM's CPU backward terms (null: the aggregation keys price it)."""

    sgd: UpdateTerms | None = field(default=None, metadata=doc(
        "terms", "", "set by calibrate --cpu --kernel fbgemm (EXACT_SGD)") | {
        "help": "EXACT_SGD's terms (null: aggregate_* keys)"})
    adagrad: UpdateTerms | None = field(default=None, metadata=doc(
        "terms", "", "set by calibrate --cpu --kernel fbgemm (EXACT_ADAGRAD)") | {
        "help": "EXACT_ADAGRAD's terms (null: aggregate_* keys)"})
    rowwise_adagrad: UpdateTerms | None = field(default=None, metadata=doc(
        "terms", "", "set by calibrate --cpu --kernel fbgemm (EXACT_ROWWISE_ADAGRAD)") | {
        "help": "EXACT_ROWWISE_ADAGRAD's terms (null: aggregate_* keys)"})
    adam: UpdateTerms | None = field(default=None, metadata=doc(
        "terms", "", "FBGEMM 1.8's CPU build refuses Adam: not measured") | {
        "help": "Adam's terms (null: aggregate_* keys; FBGEMM's CPU TBE has no Adam)"})

    def of(self, optimizer: str) -> UpdateTerms | None:
        """The terms of `optimizer` (model.optimizer's spelling), or None."""
        return getattr(self, optimizer.replace("-", "_"), None)


@dataclass(frozen=True)
class CpuConfig:
    dram_GBps: float = field(default=150.0, metadata=doc(
        "GB/s", "120-180",
        "DDR4 8 ch x 3200 MT/s, STREAM ~75%") | _pos("streaming DRAM bandwidth"))
    dram_latency_ns: float = field(default=100.0, metadata=doc(
        "ns", "80-150",
        "typical loaded DRAM latency") | _nonneg("unloaded DRAM latency"))
    gather_efficiency: Curve = field(
        default=((64.0, 0.25), (128.0, 0.4), (256.0, 0.55), (512.0, 0.65)),
        metadata=doc(
        "fraction by row bytes", "0.15-0.8",
        "assumption; set by calibrate --cpu")
        | {"help": "[row_bytes, efficiency] points for random row gathers"})
    cores: int = field(default=32, metadata=doc(
        "cores", "",
        "host SKU") | {"help": "cores running embedding ops", "min": 1})
    embedding_op_GBps: float = field(
        default=3.0, metadata=doc(
        "GB/s per core", "1.5-30",
        "assumption; set by calibrate --cpu")
        | _pos("gather/pool/update throughput of one core (bytes of rows)"))
    parallel_efficiency: float = field(default=0.8, metadata=doc(
        "fraction", "0.5-1",
        "assumption; set by calibrate --cpu") | {
        "help": "fraction of cores x per-core rate reached when every core works (scaling "
                "loss of the CPU's embedding ops and the planner)", "gt": 0, "max": 1})
    core_dram_GBps: float | Curve = field(default=6.0, metadata=doc(
        "GB/s per core, a number or [row_bytes, GBps] points", "2.5-10",
        "Little's law (10-16 fill buffers x 64 B / ~100 ns); set by calibrate --cpu as a "
        "curve (this VM, 256 B rows: 3.0-4.2)") | _pos(
        "one core's gather + pool rate of rows that miss to DRAM (bytes of rows; its "
        "memory-level parallelism / loaded latency): core time of a missed row is "
        "row bytes / min(this, embedding_op_GBps); a number, or [row_bytes, GBps] points"))
    core_llc_GBps: float | Curve = field(default=15.0, metadata=doc(
        "GB/s per core, a number or [row_bytes, GBps] points", "8-30",
        "set by calibrate --cpu as a curve: a hit's rate inside a stream that also misses"
        " (this VM, 256 B rows: 9.4-13)") | _pos(
        "one core's gather + pool rate of rows that hit the LLC, in a stream that also "
        "misses (bytes of rows): core time of a hit is row bytes / min(this, "
        "embedding_op_GBps); a number, or [row_bytes, GBps] points"))
    core_window_rows: float = field(default=1.5, metadata=doc(
        "rows", "1-4",
        "rows one core overlaps; set by calibrate --cpu (this VM: 1.5-2.25)") | {
        "help": "rows one core overlaps (its memory-level parallelism, in rows): a window of "
                "this many consecutive rows costs the miss rate when any of them misses, so a "
                "row costs hit x h^W + miss x (1 - h^W) at on-chip hit fraction h (1: each row "
                "at its own rate); set by calibrate --cpu", "min": 1})
    aggregate_ns_per_lookup: float = field(default=6.0, metadata=doc(
        "core-ns per lookup", "3-60",
        "assumption; set by calibrate --cpu") | _nonneg(
        "core-ns to add one pooled-gradient contribution into its row gradient "
        "(gradient aggregation, per lookup whose row is off chip: its slot and gradient "
        "row miss; every lookup when aggregate_onchip_ns_per_lookup is unset)"))
    aggregate_onchip_ns_per_lookup: float | None = field(default=None, metadata=doc(
        "core-ns per lookup whose row is on chip", "0 - aggregate_ns_per_lookup",
        "set by calibrate --cpu (docs/validation.md, aggregation on chip and off)") | _nonneg(
        "the same per lookup whose row is on chip (the fraction the LLC simulator finds "
        "on chip); unset: aggregate_ns_per_lookup for every lookup; set by calibrate --cpu"))
    aggregate_ns_per_row: float = field(default=0.0, metadata=doc(
        "core-ns per unique row", "0-100",
        "set by calibrate --cpu (this VM: 69-86)") | _nonneg(
        "core-ns the gradient aggregation spends per unique row (slot allocation and first "
        "touch of the row's gradient), beside aggregate_ns_per_lookup"))
    plan_ns_per_id: float = field(default=25.0, metadata=doc(
        "core-ns per id", "10-300",
        "our reference planner on one thread; set by calibrate --cpu") | _nonneg(
        "ScratchPipe planner cost per looked-up id on one core (core-ns; our reference "
        "planner measured 25 ns on one thread; set by calibrate --cpu)"))
    plan_ns_per_eviction: float = field(default=0.0, metadata=doc(
        "core-ns per eviction", "0-250",
        "set by calibrate --cpu (this VM: 140-190)") | _nonneg(
        "ScratchPipe planner cost per evicted row on one core (core-ns: the victim search), "
        "beside plan_ns_per_id; set by calibrate --cpu"))
    host_op_ns: float = field(default=25_600.0, metadata=doc(
        "ns per op", "10000-30000",
        "set by fit on E3.12 (FAMBench DLRM on an A100, eager PyTorch, batch 64: "
        "host-bound, 135 ops an iteration); Lin et al. (arXiv 2201.07821) put CPU-side "
        "overheads per op on the critical path; eager PyTorch's ~0.1 ms floor per small "
        "linear layer's forward and backward (6 ops) is ~17 us an op") | _nonneg(
        "host time the trainer's thread spends issuing one eager op (Python, dispatcher, "
        "autograd, launch); model.framework says how many ops an iteration issues "
        "(timing/host_dispatch.py)"))
    host_sync_ns: float = field(default=30_000.0, metadata=doc(
        "ns per sync", "10000-100000",
        "assumption: a device-to-host copy of a few bytes and its stream synchronize "
        "(~10-20 us), with TorchRec's splits exchange a small all-to-all too") | _nonneg(
        "host time of one host sync of an iteration (TorchRec's input-dist splits "
        "exchange, .item()): the host waits, so it cannot run ahead"))
    llc_MiB: float = field(default=60.0, metadata=doc(
        "MiB", "0-256",
        "Intel ARK (Xeon 8380: 60 MB)") | _nonneg(
        "last-level cache one socket's embedding ops share (0: none)"))
    llc_ways: int = field(default=12, metadata=doc(
        "ways", "",
        "Intel ARK (Xeon 8380)") | {"help": "LLC associativity", "min": 1})
    llc_GBps: float = field(default=1000.0, metadata=doc(
        "GB/s", "500-3000",
        "assumption") | _pos(
        "LLC bandwidth for rows that hit on chip"))
    forward: ForwardTerms | None = field(default=None, metadata=doc(
        "terms", "", "set by calibrate --cpu --kernel fbgemm") | {
        "help": "hybrid's gather + pool priced with FBGEMM's CPU forward's per-call, "
                "per-table and per-bag costs beside the rows' gathers (unset: the rows "
                "alone)"})
    update: CpuUpdateConfig = field(default_factory=CpuUpdateConfig, metadata=doc(
        "per optimizer", "", "set by calibrate --cpu --kernel fbgemm") | {
        "help": "hybrid's update priced with FBGEMM's CPU backward structure, per optimizer "
                "(unset: the aggregate_* keys)"})


@dataclass(frozen=True)
class PcieConfig:
    #: keys a model change replaced, with what replaces them (schema.build's error)
    RENAMED_KEYS: ClassVar[dict[str, str]] = {
        "uvm_efficiency": "UVM traffic is priced by pcie.uvm_read_share and "
                          "uvm_write_share (the link share in-place GPU loads and stores "
                          "reach, of distinct rows in whole sectors) and "
                          "gpu.uvm_translation_ns (page walks); set those instead"}

    h2d_GBps: float = field(default=25.0, metadata=doc(
        "GB/s", "20-27 (Gen4)",
        "nvbandwidth issues 42, 53 (A100 Gen4: ~25)") | _pos("host-to-device bandwidth"))
    d2h_GBps: float = field(default=25.0, metadata=doc(
        "GB/s", "20-27 (Gen4)",
        "nvbandwidth issues 42, 53 (A100 Gen4: ~25)") | _pos("device-to-host bandwidth"))
    latency_ns: float = field(default=10_000.0, metadata=doc(
        "ns per transfer", "5000-15000",
        "cs.virginia.edu transfer overhead; 5-7 us per cudaMemcpyAsync")
        | _nonneg("cost of one transfer"))
    full_duplex: bool = field(default=True, metadata=doc(
        "bool", "",
        "PCIe is full duplex") | {
        "help": "both directions at once; false: one shared link, time-shared"})
    duplex_h2d_GBps: float | None = field(default=11.0, metadata=doc(
        "GB/s", "0.44-1.0 x h2d_GBps",
        "nvbandwidth issues 42, 53: H2D 25 -> ~11 while D2H runs (A100 Gen4)") | _pos(
        "H2D bandwidth while a D2H transfer runs (null: h2d_GBps)"))
    duplex_d2h_GBps: float | None = field(default=None, metadata=doc(
        "GB/s", "",
        "no measured drop (null: d2h_GBps)") | _pos(
        "D2H bandwidth while an H2D transfer runs (null: d2h_GBps)"))
    uvm_read_share: float = field(default=1.0, metadata=doc(
        "share of h2d_GBps", "0.722-1.0 (A100); 0.664-0.85 (H100)",
        "nvbandwidth SM H2D copy on A100, 25.13 GB/s (issue 42); H100: 0.807 fitted on "
        "published point T1.10's backward") | {
        "help": "GPU loads that read host memory in place (UVM / MANAGED tables, FBGEMM "
                "cache fills, optimizer state left in UVM; SM-issued reads, not copy-engine "
                "DMA) reach this share of h2d_GBps (bytes of rows in whole gpu.sector_bytes; "
                "a faster link reads faster: GH200's C2C SM copy reaches 0.99 of its copy "
                "engine, nvbandwidth issue 23)", "gt": 0, "max": 1})
    uvm_write_share: float = field(default=1.0, metadata=doc(
        "share of d2h_GBps", "",
        "copy-engine D2H (A100: no SM figure); H100: 0.996 (SM D2H 52.8 GB/s, nvbandwidth"
        " issue 24)") | {
        "help": "GPU stores that write host memory in place reach this share of d2h_GBps",
        "gt": 0, "max": 1})
    dma_loads_dram: bool = field(default=True, metadata=doc(
        "bool", "",
        "copy-engine DMA reads/writes host memory") | {
        "help": "copy-engine DMA also streams its bytes through CPU DRAM (reads for H2D, "
                "writes for D2H)"})
    gpus_per_switch: int = field(default=1, metadata=doc(
        "GPUs", "1-2",
        "DGX A100: 2 (four PCIe Gen4 switches for eight GPUs, each with two GPUs and two "
        "ConnectX-6 NICs: NVIDIA DGX A100 System Architecture whitepaper, 'First "
        "Accelerated System With All PCIe Gen4'; docs.nvidia.com GDS PCI topology "
        "validation, a DGX A100's GPUs and NICs under one switch); DGX H100: 1 (one "
        "ConnectX-7 with its switch per GPU, DGX H100 user guide)") | {
        "help": "GPUs behind one PCIe switch whose host<->GPU copies share its uplink "
                "to the CPU (switch_uplink_GBps); read by the cluster design, whose ranks "
                "are every GPU of a node; must divide interconnect.gpus_per_node", "min": 1})
    switch_uplink_GBps: float | None = field(default=None, metadata=doc(
        "GB/s per direction", "20-31.5 (Gen4 x16)",
        "DGX A100: the switch's x16 Gen4 link to its CPU (whitepaper block diagram), at "
        "the ~25 GB/s an x16 Gen4 copy reaches (nvbandwidth issues 42, 53); 31.5 "
        "theoretical") | _pos(
        "bandwidth of the PCIe switch's uplink to the CPU, shared by its gpus_per_switch "
        "GPUs' host<->GPU copies (null: no narrower than a GPU's own link, which sets "
        "the rate)"))


@dataclass(frozen=True)
class GpuConfig:
    hbm_GBps: float = field(default=2039.0, metadata=doc(
        "GB/s", "",
        "GPU datasheet (A100: 2039)") | _pos("HBM streaming bandwidth"))
    hbm_latency_ns: float = field(default=600.0, metadata=doc(
        "ns", "",
        "assumption (A100 ~600)") | _nonneg("unloaded HBM latency"))
    gather_efficiency: Curve = field(
        default=((64.0, 0.135), (128.0, 0.2025), (256.0, 0.27), (512.0, 0.315)),
        metadata=doc(
        "fraction by row bytes", "x0.88-1.11 (H100); x0.6-1.3 elsewhere",
        "fitted on published point T1.2 (FBGEMM DEVICE, H100 forward and backward); set "
        "by calibrate (GPU)") | {"help": "[row_bytes, efficiency] points for random row gathers"})
    hbm_capacity_GiB: float = field(default=80.0, metadata=doc(
        "GiB", "",
        "GPU datasheet") | _pos("HBM capacity"))
    tflops: float | None = field(default=None, metadata=doc(
        "TFLOP/s", "",
        "set by calibrate (GPU): the measured rate of its own tiled fp32 GEMM") | _pos(
        "a measured GEMM rate that replaces peak x efficiency for every GEMM of the dense "
        "model (what calibrate writes); null: the peaks below with gemm_efficiency and the "
        "shape's quantization (docs/timing.md, dense compute)"))
    peak_tflops_fp32: float = field(default=19.5, metadata=doc(
        "TFLOP/s", "",
        "NVIDIA A100 datasheet (FP32, CUDA cores)") | _pos(
        "dense FP32 peak without tensor cores (CUDA cores): model.precision fp32, and any "
        "GEMM whose K or N misses the tensor cores' alignment"))
    peak_tflops_tf32: float | None = field(default=156.0, metadata=doc(
        "TFLOP/s", "",
        "NVIDIA A100 datasheet (TF32 tensor, dense)") | _pos(
        "dense TF32 tensor-core peak (null: no TF32, e.g. V100, T4: tf32 runs at fp32)"))
    peak_tflops_fp16: float | None = field(default=312.0, metadata=doc(
        "TFLOP/s", "",
        "NVIDIA A100 datasheet (FP16 tensor, dense)") | _pos(
        "dense FP16 tensor-core peak (model.precision fp16: AMP; null: no FP16 tensor "
        "cores)"))
    peak_tflops_bf16: float | None = field(default=312.0, metadata=doc(
        "TFLOP/s", "",
        "NVIDIA A100 datasheet (BF16 tensor, dense)") | _pos(
        "dense BF16 tensor-core peak (model.precision bf16: AMP; null: no BF16, e.g. V100, "
        "T4: refused)"))
    sm_count: int = field(default=108, metadata=doc(
        "SMs", "",
        "NVIDIA A100 whitepaper (108 SMs); the Matrix Multiplication guide's wave "
        "quantization") | {
        "help": "streaming multiprocessors (AMD: compute units): a GEMM's output tiles run "
                "in waves of this many (wave quantization)", "min": 1})
    gemm_efficiency: float = field(default=0.8, metadata=doc(
        "fraction of peak", "0.6-0.9",
        "fitted on published point E3.8 at local batch 16384 (A100, fp32 DCNv2, "
        "compute-bound); cuBLAS large GEMMs reach 70-90% of peak (NVIDIA Matrix "
        "Multiplication guide)") | {
        "help": "fraction of the precision's peak a large GEMM whose tiles fill whole waves "
                "reaches (smaller GEMMs lose their tile and wave quantization on top)",
        "gt": 0, "max": 1})
    stream_efficiency: float = field(default=0.85, metadata=doc(
        "fraction of hbm_GBps", "0.7-0.93",
        "assumption: a GPU STREAM copy reaches ~85-93% of HBM peak (BabelStream on "
        "A100/H100)") | {
        "help": "fraction of hbm_GBps the dense model's memory-bound kernels reach "
                "(GEMMs' operands, activations, the interaction, the dense optimizer)",
        "gt": 0, "max": 1})
    graph_node_ns: float = field(default=1_000.0, metadata=doc(
        "ns per kernel", "500-3000",
        "assumption: a kernel inside a CUDA graph starts ~1 us after the one before "
        "(no CPU launch)") | _nonneg(
        "per-kernel cost inside a CUDA graph (model.cuda_graphs: true); the graph itself "
        "is one kernel_launch_ns"))
    kernel_launch_ns: float = field(default=5_000.0, metadata=doc(
        "ns per kernel", "2000-8000",
        "assumption (launch cost)") | _nonneg("cost per kernel"))
    aggregate_efficiency: float = field(default=0.4, metadata=doc(
        "fraction of HBM streaming bandwidth", "0.25-0.6",
        "FBGEMM backward ~0.41x forward (torchrec PR 4757)") | {
        "help": "fraction of HBM streaming bandwidth reached by the backward's sort + "
                "segment-reduce over the lookups (FBGEMM backward ~0.41x forward)",
        "gt": 0, "max": 1})
    cache_probe_bytes: float = field(default=256.0, metadata=doc(
        "bytes per unique id", "128-512",
        "a 32-way set of int64 tags (FBGEMM lxu_cache)") | _nonneg(
        "HBM bytes an on-demand cache's lookup kernel reads per unique id (a 32-way set "
        "of int64 tags)"))
    hash_lookup_Gps: float = field(default=2.0, metadata=doc(
        "billion lookups/s", "x0.5-2",
        "HierarchicalKV README: find* 1.9-4.1 B keys/s on an A100 80GB PCIe, scaled by "
        "HBM bandwidth") | _pos(
        "billion lookups per second of a GPU hash table of row -> slot (ScratchPipe's "
        "planner on the GPU, design_params.scratchpipe.planner: gpu)"))
    hash_insert_Gps: float = field(default=1.05, metadata=doc(
        "billion inserts/s", "x0.5-2",
        "HierarchicalKV README: insert_and_evict 1.0-1.1 B keys/s on an A100 80GB PCIe, "
        "scaled by HBM bandwidth") | _pos(
        "billion inserts with eviction per second of the same table"))
    sector_bytes: float = field(default=32.0, metadata=doc(
        "bytes", "",
        "L2 sector of every NVIDIA GPU since Volta") | _pos(
        "granularity of a GPU read of host memory: a row read in place moves its bytes "
        "rounded up to whole sectors (32 B L2 sectors on every NVIDIA GPU since Volta)"))
    uvm_translation_ns: float = field(default=7.8, metadata=doc(
        "ns per TLB-missing translation, whole GPU", "7.5-8.5 (H100); 4-16 elsewhere",
        "fitted on published point T1.10's forward (H100, FBGEMM MANAGED; FK.3 fits "
        "7.83)") | _nonneg(
        "GPU time per address translation that misses the GPU TLB on a host page (a page "
        "walk), amortized over the walkers working at once: ns per walk for the whole GPU"))
    tlb_reach_GiB: float = field(default=4.0, metadata=doc(
        "GiB", "0.125-16",
        "assumption: ~2k GPU TLB entries x 2 MiB pages. Page size: the UVM driver maps "
        "host-resident pages on the GPU with a 2 MiB PTE only when the CPU chunk behind "
        "them is 2 MiB and physically contiguous, else 64 KiB or 4 KiB "
        "(github.com/NVIDIA/open-gpu-kernel-modules kernel-open/nvidia-uvm/"
        "uvm_pmm_sysmem.h UVM_CPU_CHUNK_SIZES, uvm_va_block.c): 64 KiB entries give 1/32 "
        "the reach (the range's low end); entries: GPU TLB microbenchmarks (Jia et al., "
        "arxiv.org/abs/1804.06826 V100, arxiv.org/abs/1903.07486 T4) report L2-TLB "
        "coverage of device memory in GiB with 2 MiB entries; no published point "
        "separates it (docs/validation.md, UVM constants)") | _pos(
        "host memory the GPU TLBs map at once: a random row read of a UVM table larger than "
        "this misses with probability 1 - reach / table bytes"))
    uvm_page_bytes: float = field(default=2 * 1024 * 1024, metadata=doc(
        "bytes", "65536-2097152",
        "UVM's 2 MiB large pages: the driver maps host-resident managed memory on the GPU "
        "at 2 MiB when the CPU chunk behind it is 2 MiB and contiguous, else 64 KiB or "
        "4 KiB (github.com/NVIDIA/open-gpu-kernel-modules kernel-open/nvidia-uvm/"
        "uvm_va_block.c); not in the presets' ranges") | _pos(
        "page size of UVM host allocations (2 MiB large pages): rows read in sorted order "
        "(the backward) walk once per distinct page they touch"))
    l2_MiB: float = field(default=40.0, metadata=doc(
        "MiB", "",
        "GPU whitepaper (A100: 40)") | _nonneg("GPU L2 cache (0: none)"))
    l2_ways: int = field(default=16, metadata=doc(
        "ways", "",
        "assumption") | {"help": "L2 associativity", "min": 1})
    l2_GBps: float = field(default=4950.0, metadata=doc(
        "GB/s", "3000-7000",
        "A100 whitepaper: 2.3x V100's 2155 GB/s (Jia et al.)")
        | _pos("L2 bandwidth for rows that hit"))


@dataclass(frozen=True)
class InterconnectConfig:
    gpus_per_node: int = field(default=8, metadata=doc(
        "GPUs", "",
        "DGX A100/H100/H200") | {"help": "GPUs in one node", "min": 1})
    nvlink_GBps: float = field(default=300.0, metadata=doc(
        "GB/s per GPU per direction", "",
        "NVLink3 600 / NVLink4 900 GB/s total") | _pos(
        "NVLink/NVSwitch bandwidth per GPU per direction"))
    nvlink_latency_ns: float = field(default=3000.0, metadata=doc(
        "ns per collective step", "2000-10000",
        "assumption (launch + sync)") | _nonneg(
        "cost of one collective step (launch + synchronisation)"))
    alltoall_efficiency: float = field(default=0.7, metadata=doc(
        "fraction of nvlink_GBps", "0.4-0.8",
        "assumption (nccl-tests issue 100: below peak)") | {
        "help": "fraction of nvlink_GBps an all-to-all achieves", "gt": 0, "max": 1})
    allreduce_efficiency: float = field(default=0.8, metadata=doc(
        "fraction of nvlink_GBps", "0.65-1.0",
        "nccl-tests issues 149/178 (~200-208 of 300); nccl issue 1374 (~370 of 450)") | {
        "help": "fraction of nvlink_GBps a ring all-reduce achieves", "gt": 0, "max": 1})


@dataclass(frozen=True)
class ClusterConfig:
    """Nodes of `interconnect.gpus_per_node` GPUs joined by a network (InfiniBand / RoCE),
    read only by the `cluster` design: one node (the default) is the single machine every
    other design models, so nothing here changes their prices."""

    nodes: int = field(default=1, metadata=doc(
        "nodes", "1-128",
        "one node: every design but cluster prices one machine") | {
        "help": "nodes in the cluster (ranks = nodes x interconnect.gpus_per_node)",
        "min": 1})
    nics_per_node: int = field(default=8, metadata=doc(
        "NICs", "1-8",
        "DGX A100 / DGX H100: 8 compute NICs, one per GPU (NVIDIA DGX user guides)") | {
        "help": "network adapters per node for the GPUs' traffic (a GPU gets nic_GBps x "
                "min(1, nics_per_node / gpus_per_node))", "min": 1})
    nic_GBps: float = field(default=24.0, metadata=doc(
        "GB/s per NIC per direction", "22-25 (HDR); 46-49 (NDR)",
        "HDR 200 Gb/s ~24 GB/s measured (NCCL maintainers, nccl-tests issues; DGX A100 "
        "multi-node all-reduce ~192 GB/s busbw = 8 x 24)") | _pos(
        "bandwidth one NIC reaches per direction (measured, not the line rate)"))
    net_latency_ns: float = field(default=9600.0, metadata=doc(
        "ns per inter-node step", "2700-50000",
        "NCCL src/graph/tuning.cc hwLat[NET]: ring Simple 9.6 us (LL 2.7, tree Simple 50)")
        | _nonneg("cost of one step of a collective that crosses the network"))


@dataclass(frozen=True)
class PriceConfig:
    gpu_usd_per_hour: float = field(default=4.0, metadata=doc(
        "USD per GPU-hour", "up to on-demand 4.10 / 12.29",
        "AWS EC2 Capacity Blocks p4d / p5 / p5e, schedule to 2025-01-01") | _nonneg(
        "price of one GPU for an hour (with its share of the node)"))
    host_usd_per_hour: float = field(default=0.0, metadata=doc(
        "USD per hour", "",
        "the instance price includes the host") | _nonneg(
        "price of the host for an hour beyond the GPUs' share"))


@dataclass(frozen=True)
class CxlConfig:
    """A CXL-attached memory expander (a CXL.mem Type-3 device) under the host DRAM: rows
    `model.cxl_share` places there are gathered at its bandwidth and latency instead of
    DRAM's. Unset (null) keys: no tier; `Config.check` requires them once a share is set."""

    bandwidth_GBps: float | None = field(default=None, metadata=doc(
        "GB/s", "15-60",
        "one CXL memory expander's read bandwidth: tens of GB/s per device (Sun et al., "
        "MICRO 2023, arXiv 2303.15375)") | _pos(
        "the device's streaming read bandwidth as the CPU sees it (random row gathers reach "
        "cpu.gather_efficiency of it, as on DRAM)"))
    load_latency_ns: float | None = field(default=None, metadata=doc(
        "ns", "220-550",
        "DRAM's + ~170-250 ns the CXL port adds (Sun et al.); 2-5x local DRAM (arXiv "
        "2405.14209)") | _nonneg(
        "idle load-to-use latency of a CPU read of the device (DRAM's plus the CXL "
        "port's); a core's rate on rows there is core_dram_GBps x cpu.dram_latency_ns / "
        "this (Little's law: the same fill buffers held longer)"))
    capacity_GiB: float | None = field(default=None, metadata=doc(
        "GiB", "",
        "a typical expander card (assumption)") | _pos(
        "the device's capacity (null: not checked)"))


@dataclass(frozen=True)
class HardwareConfig:
    name: str = field(default="", metadata={"help": "preset name (filled from `preset`)"})
    clock_GHz: float = field(default=1.41, metadata=doc(
        "GHz", "",
        "GPU boost clock (datasheet); reporting only") | _pos("clock for reporting cycles"))
    cpu: CpuConfig = field(default_factory=CpuConfig)
    pcie: PcieConfig = field(default_factory=PcieConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    interconnect: InterconnectConfig = field(default_factory=InterconnectConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    prices: PriceConfig = field(default_factory=PriceConfig)
    cxl: CxlConfig = field(default_factory=CxlConfig)
    dram_capacity_GiB: float = field(default=512.0, metadata=doc(
        "GiB", "",
        "host SKU") | _pos(
        "host memory holding the embedding tables"))
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict, metadata={
        "help": "plausible [low, high] of each unmeasured constant, by dotted key under "
                "hardware (e.g. gpu.aggregate_efficiency: [0.3, 0.6]); `sensitivity` varies "
                "them"})

    def check_l2(self, source: str | None) -> None:
        """After the cache-fits-in-HBM check, which names the usual mistake first."""
        if self.gpu.l2_MiB / 1024 > self.gpu.hbm_capacity_GiB:
            raise UserError(f"an L2 of {self.gpu.l2_MiB} MiB is larger than "
                            f"hardware.gpu.hbm_capacity_GiB = {self.gpu.hbm_capacity_GiB}: "
                            "expected l2_MiB below the HBM size", source=source,
                            field="hardware.gpu.l2_MiB")

    def check(self, source: str | None) -> None:
        check_curve(self.cpu.gather_efficiency, source, "hardware.cpu.gather_efficiency")
        check_curve(self.gpu.gather_efficiency, source, "hardware.gpu.gather_efficiency")
        for key in RATE_CURVE_KEYS:
            check_rate_curve(getattr(self.cpu, key), source, f"hardware.cpu.{key}")
        if self.cpu.llc_MiB / 1024 > self.dram_capacity_GiB:
            raise UserError(f"an LLC of {self.cpu.llc_MiB} MiB is larger than "
                            f"hardware.dram_capacity_GiB = {self.dram_capacity_GiB}: expected "
                            "llc_MiB below the DRAM size", source=source,
                            field="hardware.cpu.llc_MiB")
        ranks = self.cluster.nodes * self.interconnect.gpus_per_node
        if ranks > CLUSTER_RANKS.value():
            # each node and GPU is cheap to write but costs the cluster design a rank's
            # stream: 10**9 nodes would run for hours before a word
            raise UserError(f"{self.cluster.nodes:,} nodes x {self.interconnect.gpus_per_node:,}"
                            f" GPUs per node = {ranks:,} GPUs: expected at most "
                            f"{CLUSTER_RANKS.value():,} ({CLUSTER_RANKS.advice()})",
                            source=source, field="hardware.interconnect.gpus_per_node"
                            if self.interconnect.gpus_per_node > CLUSTER_RANKS.value()
                            else "hardware.cluster.nodes")
        for key, rng in self.ranges.items():
            where = f"hardware.ranges.{key}"
            lo, hi = rng
            if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or lo < 0:
                raise UserError(f"expected a range [low, high] with 0 <= low <= high, got "
                                f"[{lo}, {hi}]", source=source, field=where)
