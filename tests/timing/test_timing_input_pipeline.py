"""The input pipeline (timing/input_pipeline.py): bytes per batch, a loader-bound iteration,
the copy hidden by prefetching, resident inputs, more workers never slower, bad input, and
the new columns end to end through the CLI."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from cli_errors import one_line_error
from small_configs import off_chip

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.timing import simulate

B, T, POOL, BATCHES, WU = 64, 2, 4, 12, 4
A = B * T * POOL  # ids per batch (a generated trace: every bag holds `pooling` ids)
DENSE = 13
BASE = {
    # on-chip caches and the DMA load off: the copy is the link alone
    "hardware": off_chip("a100-gen4"),
    "model": {"tables": {"count": T, "rows": 500, "dim": 16}, "pooling": POOL,
              "batch_size": B, "num_batches": BATCHES, "warmup_batches": WU,
              "bottom_mlp": [DENSE, 32, 16], "top_mlp": None},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 600},
    "seed": 3,
}
#: a loader that costs nothing: what is left is the copy
FREE_LOADER = {"input_pipeline": {"loader_ns_per_sample": 0, "loader_ns_per_id": 0}}


def cfg_of(*overs, sets=()):
    d = BASE
    for o in overs:
        d = deep_merge(d, o)
    return load_config(d, sets)


def run(cfg, design):
    return simulate(cfg, [design])[0]


def id_bytes(cfg):
    """The batch's ids and its T x B + 1 offsets, index_bytes each (the CSR FBGEMM reads)."""
    return (A + B * T + 1) * cfg.model.index_bytes


def test_bytes_per_batch_are_dense_labels_and_the_ids_the_gpu_reads():
    cfg = cfg_of()
    p = cfg.input_pipeline
    dense = B * (DENSE * p.dense_bytes + p.label_bytes)  # 13 fp32 + a 4-byte label: 56 B
    assert DENSE * p.dense_bytes + p.label_bytes == 56
    measured = BATCHES - WU
    gpu = run(cfg, "gpu-only")
    assert gpu["pcie_h2d_bytes"] == measured * (dense + id_bytes(cfg))
    # hybrid's ids stay on the CPU: its dense features beside its pooled vectors
    hyb = run(cfg, "hybrid")
    pooled = B * cfg.model.sample_output_bytes
    assert hyb["pcie_h2d_bytes"] == measured * (dense + pooled)
    # a design that copied its ids itself (scratchpipe's exchange) no longer does: once
    sp = run(cfg_of({"input_pipeline": {"inputs_on_gpu": True}}), "scratchpipe")
    sp_in = run(cfg, "scratchpipe")
    assert sp_in["pcie_h2d_bytes"] - sp["pcie_h2d_bytes"] == measured * (dense + id_bytes(cfg))
    # fp16 features, no label
    half = run(cfg_of({"input_pipeline": {"dense_bytes": 2, "label_bytes": 0}}), "gpu-only")
    assert half["pcie_h2d_bytes"] == measured * (B * DENSE * 2 + id_bytes(cfg))


def test_dense_features_default_to_the_bottom_mlp_input():
    cfg = cfg_of({"input_pipeline": {"dense_features": 3}})
    row = run(cfg, "hybrid")
    pooled = B * cfg.model.sample_output_bytes
    assert row["pcie_h2d_bytes"] == (BATCHES - WU) * (B * (3 * 4 + 4) + pooled)


def test_inputs_on_gpu_copy_and_load_nothing():
    cfg = cfg_of({"input_pipeline": {"inputs_on_gpu": True}})
    row = run(cfg, "gpu-only")
    assert row["pcie_h2d_bytes"] == 0.0
    assert row["input_stall_ns"] == 0.0 and row["input_bound_share"] == 0.0
    assert row["input_load_ns"] == 0.0 and row["input_copy_ns"] == 0.0
    # multi-gpu's indices (its own all-to-all follows) are resident too
    assert run(cfg, "multi-gpu")["pcie_h2d_bytes"] == 0.0


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_a_loader_slower_than_the_iteration_sets_it(workers):
    """Loader-bound: `workers` batches load at once, one core each, so in steady state a
    batch ends every (B x ns_per_sample + A x ns_per_id) / workers. One worker: exactly,
    but for the GPU time of the window's last batch against its first's (< 1e-4 here);
    several: batches of equal cost keep the workers in phase, so they arrive in bursts of
    `workers` and the mean over 8 measured batches is the period to 1%."""
    ns_sample, ns_id = 20_000.0, 50.0
    cfg = cfg_of({"input_pipeline": {"loader_ns_per_sample": ns_sample,
                                     "loader_ns_per_id": ns_id, "loader_workers": workers,
                                     "prefetch_batches": workers}})
    row = run(cfg, "gpu-only")
    per_batch = B * ns_sample + A * ns_id
    assert row["input_load_ns"] == pytest.approx(per_batch, rel=1e-12)
    rel = 1e-4 if workers == 1 else 1e-2
    assert row["iter_ns_mean"] == pytest.approx(per_batch / workers, rel=rel)
    assert row["input_stall_ns"] > 0 and row["input_bound"]
    assert row["input_period_ns"] == pytest.approx(per_batch / workers, rel=1e-12)
    if workers == 1:
        assert row["input_bound_share"] == 1.0


def test_prefetch_hides_a_copy_shorter_than_the_iteration():
    resident = run(cfg_of({"input_pipeline": {"inputs_on_gpu": True}}), "gpu-only")
    ahead = run(cfg_of(FREE_LOADER), "gpu-only")
    assert ahead["input_copy_ns"] < resident["iter_ns_mean"]  # the copy is shorter
    assert ahead["iter_ns_mean"] == pytest.approx(resident["iter_ns_mean"], rel=1e-12)
    assert ahead["stage_input_wait_ns"] == 0.0 and ahead["input_bound_share"] == 0.0
    assert not ahead["input_bound"]
    # prefetch_batches 0: each batch is loaded and copied only when asked for, so the copy
    # (latency + bytes / h2d) adds to every iteration
    cfg = cfg_of(FREE_LOADER, {"input_pipeline": {"prefetch_batches": 0}})
    sync = run(cfg, "gpu-only")
    pcie = cfg.hardware.pcie
    p = cfg.input_pipeline
    copy = pcie.latency_ns + (B * (DENSE * p.dense_bytes + p.label_bytes)
                              + id_bytes(cfg)) / pcie.h2d_GBps
    assert sync["stage_input_wait_ns"] == pytest.approx(copy, rel=1e-9)
    assert sync["iter_ns_mean"] == pytest.approx(resident["iter_ns_mean"] + copy, rel=1e-9)
    assert sync["input_bound_share"] == 1.0 and sync["input_bound"]


@pytest.mark.parametrize("design", ["hybrid", "gpu-only", "scratchpipe"])
def test_more_loader_workers_are_never_slower(design):
    """Never slower beyond the shift in when the workers take their cores from the
    design's own CPU stages (scratchpipe's collect and plan: under 1e-4 here)."""
    rows = [run(cfg_of({"input_pipeline": {"loader_ns_per_sample": 5_000.0,
                                           "loader_workers": w, "prefetch_batches": 8}}),
                design) for w in (1, 2, 4, 8)]
    times = [r["iter_ns_mean"] for r in rows]
    assert all(b <= a * (1 + 1e-4) for a, b in zip(times, times[1:], strict=False)), times
    assert times[-1] < times[0]
    # one worker bounds every design here; eight leave each to its own stages
    assert rows[0]["input_bound"] and not rows[-1]["input_bound"]


def test_multi_gpu_loads_and_copies_its_share_of_the_batch():
    n = 2
    cfg = cfg_of({"design_params": {"multi-gpu": {"gpus": n}}})
    row = run(cfg, "multi-gpu")
    p = cfg.input_pipeline
    per_gpu = (B / n * (DENSE * p.dense_bytes + p.label_bytes)
               + (A / n + B / n * T + 1) * cfg.model.index_bytes)
    assert row["pcie_h2d_bytes"] == pytest.approx((BATCHES - WU) * per_gpu, rel=1e-12)


def test_the_timeline_shows_the_loader_and_the_copy(tmp_path):
    simulate(cfg_of(), ["gpu-only"], timeline_dir=tmp_path)
    doc = json.loads((tmp_path / "timeline_gpu-only.json").read_text())
    stages = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 2}
    assert "input_wait" in stages
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
               if e["name"] == "thread_name"}
    spans = [(threads[e["tid"]], e["name"]) for e in doc["traceEvents"] if e["ph"] == "X"]
    # the pipeline's own track, and the loader's and the copy's work on their resources
    assert {("input pipeline", "load"), ("input pipeline", "copy")} <= set(spans)
    assert ("cpu_cores", "loader") in spans
    assert ("pcie_h2d", "h2d inputs") in spans


@pytest.mark.parametrize("key, value", [
    ("input_pipeline.loader_ns_per_sample", "-1"),
    ("input_pipeline.loader_ns_per_id", "-0.5"),
    ("input_pipeline.loader_workers", "0"),
    ("input_pipeline.prefetch_batches", "-1"),
])
def test_bad_input_pipeline_values_name_their_key(tmp_path, capsys, key, value):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(BASE))
    one_line_error(capsys, ["run", str(cfg), "--out", str(tmp_path / "o"), "--set",
                            f"{key}={value}"], key)


def test_cli_run_reports_the_input_columns_and_an_input_bound_design(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**BASE, "designs": ["hybrid", "gpu-only"]}))
    out = tmp_path / "res"
    assert main(["run", str(cfg), "--out", str(out), "--set",
                 "input_pipeline.loader_ns_per_sample=50000",
                 "--set", "input_pipeline.loader_workers=1"]) == 0
    captured = capsys.readouterr()
    assert "loader_wait" in captured.out  # the stage table: hybrid waited for its loader
    rows = {r["design"]: r for r in csv.DictReader(open(out / "results.csv"))}
    gpu = rows["gpu-only"]
    assert float(gpu["input_bound_share"]) == 1.0 and float(gpu["input_stall_ns"]) > 0
    assert gpu["input_bound"] == "True"
    # hybrid's first consumer is its CPU gather: it waits for the loader, not the copy
    hyb = rows["hybrid"]
    assert hyb["input_bound"] == "True" and float(hyb["stage_loader_wait_ns"]) > 0
    assert float(hyb["input_stall_ns"]) == pytest.approx(
        float(hyb["stage_loader_wait_ns"]) + float(hyb["stage_input_wait_ns"]))
    assert float(gpu["input_load_ns"]) == pytest.approx(B * 50_000 + A * 2.0)
    assert "gpu-only is input-bound" in captured.err


def test_workers_in_phase_are_input_bound_though_most_batches_do_not_wait():
    """Four workers of equal batches finish together: one batch of each burst of four
    waits, yet the iteration is the pipeline's period (load / workers): input-bound."""
    cfg = cfg_of({"input_pipeline": {"loader_ns_per_sample": 20_000.0,
                                     "loader_workers": 4, "prefetch_batches": 8}})
    row = run(cfg, "gpu-only")
    assert row["input_bound_share"] < 0.5
    assert row["input_bound"]
    assert row["iter_ns_mean"] == pytest.approx(row["input_period_ns"], rel=0.02)
