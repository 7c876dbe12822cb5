"""Config fragments and small traces several test files share (one copy each, not a dict
per file)."""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.traces.csr_trace import Trace

#: two 4,000-row tables, 12 small batches, scratchpipe's fused three-group pipeline at W = 3:
#: a run of every design in well under a second (no hardware: each file picks its preset)
TWO_SMALL_TABLES = {
    "model": {
        "tables": {"count": 2, "rows": 4000, "dim": 32},
        "pooling": 4,
        "batch_size": 64,
        "num_batches": 12,
        "warmup_batches": 3,
        "bottom_mlp": [13, 16],
        "interaction": "cat",
        "top_mlp": [80, 1],
    },
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 1200},
    "design_params": {
        "scratchpipe": {
            "lookahead": 3,
            "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]],
        }
    },
    "seed": 5,
}

#: a two-table config whose hardware is only three ranges (no preset: a preset brings its
#: own), for sensitivity's tests of one config and of a sweep
SENSITIVITY_BASE = {
    "seed": 3,
    "hardware": {
        "ranges": {  # no preset: only these ranges (a preset brings its own)
            "pcie.duplex_h2d_GBps": [11, 25],
            "cpu.dram_GBps": [50, 300],
            "gpu.gather_efficiency": [0.6, 1.2],
        }
    },
    "model": {
        "tables": {"count": 2, "rows": 20000, "dim": 16, "bytes_per_element": 4},
        "pooling": 4,
        "batch_size": 64,
        "bottom_mlp": [13, 16],
        "top_mlp": [19, 1],
        "num_batches": 8,
        "warmup_batches": 2,
    },
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"load_factor": 0.2},
    "design_params": {"scratchpipe": {"lookahead": 5, "queue_depth": 2}},
}

#: two 400-row tables on a100-gen4, 12 batches: the API's and the input checks' config
SMALL_A100 = {
    "hardware": {"preset": "a100-gen4"},
    "model": {"tables": {"count": 2, "rows": 400, "dim": 16}, "pooling": 3, "batch_size": 32,
              "num_batches": 12, "warmup_batches": 2, "bottom_mlp": [13, 32, 16],
              "top_mlp": [19, 16, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.1},
    "cache": {"capacity_rows": 500}, "design_params": {"scratchpipe": {"lookahead": 5}},
    "seed": 5,
}

#: SMALL_A100 with 8 batches: the input and hostile-input checks' config (short runs)
SHORT_A100 = {**SMALL_A100, "model": {**SMALL_A100["model"], "num_batches": 8}}

#: the input pipeline reduced to the batch's ids and offsets copied one batch ahead (no
#: loader cost, no dense features or labels): what a closed form about another mechanism
#: prices beside its own terms (tests/timing/test_timing_input_pipeline.py tests the rest)
IDS_ONLY_INPUTS = {"loader_ns_per_sample": 0, "loader_ns_per_id": 0, "dense_features": 0,
                   "label_bytes": 0, "prefetch_batches": 1}


def off_chip(preset: str | None = None) -> dict:
    """A `hardware` section with the on-chip caches (CPU LLC, GPU L2) and the DMA's DRAM
    load off, so that closed forms price DRAM, HBM and PCIe alone; `preset` named if given.
    A new dict each call (tests merge into it)."""
    hw: dict = {"cpu": {"llc_MiB": 0}, "gpu": {"l2_MiB": 0}, "pcie": {"dma_loads_dram": False}}
    return hw if preset is None else {"preset": preset, **hw}


#: one DGX H100 node (8 ranks, on-chip caches off) with two 400-row, 128-wide tables and a
#: small DCN-free dense model: the column-wise and rank-cache tests' base (a new dict each call)
def one_node_two_tables() -> dict:
    return {
        "hardware": deep_merge(off_chip("dgx-h100-cluster"), {"cluster": {"nodes": 1}}),
        "model": {"tables": {"count": 2, "rows": 400, "dim": 128}, "pooling": 4,
                  "batch_size": 64, "num_batches": 5, "warmup_batches": 1,
                  "bottom_mlp": [13, 64, 16], "interaction": "cat", "top_mlp": None},
        "trace": {"distribution": "zipf", "alpha": 1.05},
        "designs": ["cluster"],
        "seed": 11,
    }


#: two 4,000-row tables on h100-gen5 with the on-chip caches and the DMA load off (so the
#: closed forms price DRAM, HBM and PCIe alone), 6 batches; each file adds its `designs`
H100_OFF_CHIP = {
    "hardware": off_chip("h100-gen5"),
    "model": {"tables": {"count": 2, "rows": 4000, "dim": 32}, "pooling": 4, "batch_size": 64,
              "num_batches": 6, "warmup_batches": 2, "bottom_mlp": [13, 64, 16],
              "interaction": "cat", "top_mlp": [80, 32, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 600},
    "input_pipeline": IDS_ONLY_INPUTS,
    "seed": 5,
}


def small_zipf_trace(seed: int, n: int = 600, rows: int = 80, batch: int = 7) -> Trace:
    """One table of `rows` rows, `n` Zipf(1.3) ids (unpermuted), batches of `batch` ids."""
    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.3, n) - 1, rows - 1).astype(np.int64)
    return Trace.single_table(ids, rows, batch)


def gpu_of(preset: str = "a100-gen4"):
    """A preset's loaded `hardware.gpu` (the dense-compute tests' GPU)."""
    return load_config({"hardware": {"preset": preset}}).hardware.gpu


def model_of(**model):
    """A loaded `model` section from its keys, every other one at its default."""
    return load_config({"model": model}).model


def nested(dotted: str, value) -> dict:
    """`{"a": {"b": value}}` for "a.b": a dotted key as the config fragment it names."""
    out: dict = {}
    node = out
    *parts, last = dotted.split(".")
    for p in parts:
        node = node.setdefault(p, {})
    node[last] = value
    return out
