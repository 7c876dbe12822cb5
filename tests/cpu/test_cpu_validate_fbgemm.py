"""`validate --cpu --against fbgemm` (issue 25): FBGEMM's CPU TBE on the trace's own ids.

The comparison is of time on the same work only if FBGEMM computes what the simulator's
trace says: so the inputs `cpu/fbgemm_tbe.py` feeds FBGEMM (`fbgemm_inputs`, through the
simulator's trace reader) must pool, for a given weight matrix, exactly what numpy pools
from the same reader (sum, mean, and a mix, which runs as one TBE per mode), and the fused
SGD backward must move each row by its lookups' gradients. Then the CLI end to end (the
JSON's shape, no timing thresholds) and its one-line exits. Tests that run FBGEMM skip
without fbgemm-gpu-cpu (the `peers` extra).
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import yaml
from peer_packages import fbgemm_reason  # the one check that FBGEMM's CPU build loads

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config

needs_fbgemm = pytest.mark.skipif(fbgemm_reason() is not None,
                                  reason=str(fbgemm_reason()))

CONFIG = """
name: fbgemm-cpu-tiny
seed: 5
hardware: {preset: a100-gen4, cpu: {cores: 1}}
model:
  tables: {count: 3, rows: [500, 800, 300], dim: 8}
  pooling: [5, 1, 3]
  batch_size: 32
  num_batches: 3
  warmup_batches: 1
trace: {distribution: zipf, alpha: 1.05}
designs: [hybrid]
"""

FBGEMM_MODULES = ("fbgemm_gpu", "fbgemm_gpu.split_embedding_configs",
                  "fbgemm_gpu.split_table_batched_embeddings_ops_common",
                  "fbgemm_gpu.split_table_batched_embeddings_ops_training")


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(CONFIG)
    return p


def _cfg(**model):
    d = yaml.safe_load(CONFIG)
    d["model"].update(model)
    return load_config(d)


def _setup(cfg):
    """The trace (through the simulator's reader), the TBEs, and integer weights (exact
    float32 sums) copied into them; returns (trace, tbes, per-table weights)."""
    import torch

    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm
    from scratchpipe_sim.timing import build_trace

    trace = build_trace(cfg, cache=False)
    tbes = fbgemm.build_tbes(cfg, trace, fbgemm.import_fbgemm())
    rng = np.random.default_rng(0)
    weights = [rng.integers(-8, 9, (int(r), d)).astype(np.float32)
               for r, d in zip(trace.table_rows, cfg.model.dims, strict=True)]
    for tbe, tables in tbes:
        for w, t in zip(tbe.split_embedding_weights(), tables, strict=True):
            w.copy_(torch.from_numpy(weights[t]))
    return trace, tbes, weights


def _numpy_pooled(trace, k: int, weights, mode: str, t: int) -> np.ndarray:
    """Table t's pooled vectors of batch k, [B, dim], from the reader's ids alone."""
    ids, offs = trace.batch(k).table(t)
    out = np.zeros((len(offs) - 1, weights[t].shape[1]), np.float32)
    for s in range(len(offs) - 1):
        rows = weights[t][np.asarray(ids[offs[s]:offs[s + 1]], np.int64)]
        if len(rows):
            out[s] = rows.sum(axis=0) / (len(rows) if mode == "mean" else 1)
    return out


@needs_fbgemm
@pytest.mark.parametrize("modes", ["sum", "mean", ["sum", "mean", "sum"]])
def test_fbgemm_pools_exactly_what_the_trace_reader_says(modes):
    import torch

    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm

    cfg = _cfg(pooling_mode=modes)
    trace, tbes, weights = _setup(cfg)
    assert len(tbes) == len(set(cfg.model.pooling_modes))
    for k in range(trace.num_batches):
        for tbe, tables in tbes:
            i, o = fbgemm.fbgemm_inputs(trace, k, tables)
            got = tbe(torch.from_numpy(i), torch.from_numpy(o)).detach().numpy()
            want = np.concatenate([_numpy_pooled(trace, k, weights,
                                                 cfg.model.pooling_modes[t], t)
                                   for t in tables], axis=1)  # FBGEMM: [B, sum of dims]
            if cfg.model.pooling_modes[tables[0]] == "sum":
                np.testing.assert_array_equal(got, want)  # integer weights: exact sums
            else:  # a mean divides: one rounding of the same exact sum
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@needs_fbgemm
def test_fbgemm_unpooled_outputs_the_trace_readers_rows():
    """pooling_mode none: one output row per lookup, in the reader's order (table-major)."""
    import torch

    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm

    cfg = _cfg(pooling_mode="none")
    trace, tbes, weights = _setup(cfg)
    ((tbe, tables),) = tbes
    for k in range(trace.num_batches):
        i, o = fbgemm.fbgemm_inputs(trace, k, tables)
        got = tbe(torch.from_numpy(i), torch.from_numpy(o)).detach().numpy()
        want = np.concatenate([weights[t][np.asarray(trace.batch(k).table(t)[0], np.int64)]
                               for t in tables])
        np.testing.assert_array_equal(got, want)


@needs_fbgemm
def test_fused_sgd_backward_moves_each_row_by_its_lookups():
    import torch

    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm

    cfg = _cfg()
    trace, tbes, weights = _setup(cfg)
    (tbe, tables), k, g = tbes[0], 1, 0.5
    i, o = fbgemm.fbgemm_inputs(trace, k, tables)
    out = tbe(torch.from_numpy(i), torch.from_numpy(o))
    out.backward(torch.full_like(out, g))
    for t, w in zip(tables, tbe.split_embedding_weights(), strict=True):
        ids, _ = trace.batch(k).table(t)
        counts = np.bincount(np.asarray(ids, np.int64), minlength=weights[t].shape[0])
        want = weights[t] - fbgemm.LEARNING_RATE * g * counts[:, None].astype(np.float32)
        np.testing.assert_allclose(w.detach().numpy(), want, rtol=1e-6, atol=1e-6)


@needs_fbgemm
def test_cli_json_shape(cfg_file, capsys):
    assert main(["validate", "--cpu", str(cfg_file), "--against", "fbgemm", "--json",
                 "--reps", "2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    # the two stages, the drift probe (one dim, one pooling mode: one weight array), then
    # the host reference (a shipped preset: no ratio)
    assert [r["stage"] for r in rows] == ["cpu_gather", "cpu_update", "host.uniform_gather",
                                          "host.reference"]
    for r in rows[:-1]:
        for key in ("predicted_ms", "measured_ms"):
            assert math.isfinite(r[key]) and r[key] > 0, r
    assert [r["batches"] for r in rows[:-1]] == [2, 2, 2]  # the probe: one sample per pass
    assert rows[-1]["samples"] == 2 and rows[-1]["ratio"] is None  # one per pass


@needs_fbgemm
def test_cli_table_and_row_cap(cfg_file, capsys, monkeypatch):
    """A config that does not fit comfortably is capped, with one line saying so."""
    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm

    cfg = load_config(str(cfg_file))
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", str(int(fbgemm.memory_needed(cfg) * 1.5)))
    assert main(["validate", "--cpu", str(cfg_file), "--against", "fbgemm", "--reps",
                 "1"]) == 0
    cap = capsys.readouterr()
    notes = [s for s in cap.err.splitlines() if s.startswith("note:")]
    assert len(notes) == 1 and "capped to" in notes[0] and "--rows" in notes[0]
    assert "cpu_gather" in cap.out and "cpu_update" in cap.out


def test_capped_rows():
    """The capped tables fit in MEMORY_SHARE of what is available."""
    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm

    cfg = _cfg(tables={"count": 3, "rows": 800, "dim": 8})
    need = fbgemm.memory_needed(cfg)
    assert fbgemm.capped_rows(cfg, available=need * 10) is None
    have = int(need * 1.5)
    cap = fbgemm.capped_rows(cfg, available=have)
    assert cap is not None and 1 <= cap < 800
    smaller = _cfg(tables={"count": 3, "rows": cap, "dim": 8})
    assert fbgemm.memory_needed(smaller) <= have * fbgemm.MEMORY_SHARE


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_missing_fbgemm_is_one_line_exit_2(cfg_file, capsys, monkeypatch):
    """Without fbgemm_gpu (simulated: its modules blocked in sys.modules): one line naming
    the extra; exit 2. Needs nothing installed."""
    for name in FBGEMM_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    err = _one_line_error(capsys, ["validate", "--cpu", str(cfg_file), "--against",
                                   "fbgemm"])
    assert 'pip install -e ".[peers]"' in err


@pytest.mark.parametrize("argv", [
    ["--cpu", "CFG", "--against", "tensorflow"],   # unknown peer
    ["CFG", "--against", "fbgemm"],                # not without --cpu
    ["--published", "--against", "fbgemm"],        # nor with --published
])
def test_bad_against_is_one_line_exit_2(argv, cfg_file, capsys):
    argv = [str(cfg_file) if a == "CFG" else a for a in argv]
    err = _one_line_error(capsys, ["validate", *argv])
    assert "--against" in err


@needs_fbgemm
def test_adam_is_refused_in_one_line(cfg_file, capsys):
    err = _one_line_error(capsys, ["validate", "--cpu", str(cfg_file), "--against", "fbgemm",
                                   "--set", "model.optimizer=adam"])
    assert "adam" in err


@needs_fbgemm
def test_calibrate_mix_on_fbgemms_forward():
    """calibrate --cpu --kernel fbgemm: the mix times FBGEMM's forward (tiny sizes): every
    point filled, times positive, the kernel recorded and named in the fitted comment."""
    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm
    from scratchpipe_sim.cpu import host_bench as bench
    from scratchpipe_sim.cpu.host_preset_fit import _fit_mix

    z = bench.TINY
    m = bench.CpuMeasurements(threads=[1], reps=z.reps, mix_kernel="fbgemm")
    bench.measure_mix(m, z, fbgemm.mix_pool)
    assert [p[:2] for p in m.mix] == [(float(rb), a) for rb in z.row_bytes
                                      for a in z.mix_alphas]
    assert all(s > 0 for _rb, _a, _n, s, _h in m.mix)
    assert json.loads(m.to_json())["mix_kernel"] == "fbgemm"
    vals: dict = {}
    how: dict = {}
    _fit_mix(m, vals, how, 1.0)
    assert all("FBGEMM" in how[k] for k in vals)


def test_calibrate_kernel_needs_cpu_and_the_package(tmp_path, capsys, monkeypatch):
    from scratchpipe_sim.cpu import host_bench as bench

    called = []
    monkeypatch.setattr(bench, "measure_all", lambda *a, **k: called.append(1))
    out = str(tmp_path / "x.yaml")
    err = _one_line_error(capsys, ["calibrate", "--kernel", "fbgemm", "--out", out])
    assert "--kernel" in err
    for name in FBGEMM_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    err = _one_line_error(capsys, ["calibrate", "--cpu", "--kernel", "fbgemm", "--out", out])
    assert 'pip install -e ".[peers]"' in err and not called


def test_compared_stages_are_hybrids_declared_and_a_renamed_one_is_an_error(monkeypatch):
    """The stages FBGEMM's calls are put beside are hybrid's own `phase_stages`; one its run
    does not time is an error (the Machine's stage times would read zeros)."""
    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm
    from scratchpipe_sim.timing import build_trace
    from scratchpipe_sim.timing.designs import DESIGNS
    from scratchpipe_sim.timing.stage_columns import StageNotTimed

    assert fbgemm.hybrid_stages() == {"cpu_gather": "forward",
                                      "cpu_update": "backward + fused optimizer"}
    cfg = _cfg()
    trace = build_trace(cfg, cache=False)
    replays = fbgemm.Replays(cfg, trace, cached=False)
    pred = fbgemm.predicted_stages(cfg, trace, replays)
    assert list(pred) == ["cpu_gather", "cpu_update"]
    assert all(len(v) == cfg.model.num_batches and v.sum() > 0 for v in pred.values())
    monkeypatch.setattr(DESIGNS.get("hybrid"), "phase_stages",
                        {"forward": ("cpu_gathr",), "backward": ("cpu_update",)})
    with pytest.raises(StageNotTimed, match="design 'hybrid' timed no stage 'cpu_gathr'"):
        fbgemm.predicted_stages(cfg, trace, replays)
