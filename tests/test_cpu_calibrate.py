"""`calibrate --cpu`: the fit recovers known constants exactly; the preset it writes loads,
merges over a GPU preset and round-trips through `config show`; bad input is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config
from scratchpipe_sim.cpu import bench
from scratchpipe_sim.cpu.bench import CpuMeasurements
from scratchpipe_sim.cpu.fit import cpu_preset_yaml, fit_cpu, llc_from_sysfs
from scratchpipe_sim.cuda.fit import fit_latency_bandwidth

# known truth: every sample is exactly latency + bytes / rate (stream: bytes read)
DRAM_GBPS, LAT_NS = 40.0, 2000.0
GATHER = {64: 8.0, 128: 12.0, 256: 16.0, 512: 20.0}  # GB/s of rows on 2 threads
ONE = {64: 4.5, 128: 6.5, 256: 9.0, 512: 10.0}  # GB/s on one thread
AGG_NS_2T = 40.0  # ns per lookup on 2 threads


def synthetic() -> CpuMeasurements:
    m = CpuMeasurements(threads=[1, 2], reps=3)
    for s in (1e7, 4e7, 1.6e8):
        m.stream.append((s, LAT_NS * 1e-9 + s / (DRAM_GBPS * 1e9)))
    for rb, g in GATHER.items():
        for n in (1e5, 1e6, 4e6):
            m.gather.append((float(rb), n, LAT_NS * 1e-9 + n / (g * 1e9)))
            m.scaling.append((2.0, float(rb), n, LAT_NS * 1e-9 + n / (g * 1e9)))
            m.scaling.append((1.0, float(rb), n, LAT_NS * 1e-9 + n / (ONE[rb] * 1e9)))
        for a in (1e4, 1e5):
            m.aggregate.append((float(rb), a, 5e-6 + a * AGG_NS_2T * 1e-9))
        m.apply.append(("sgd", float(rb), 1e5, float(rb), 0.01))
    for mib, rate in ((1, 40.0), (2, 30.0), (4, 20.0), (8, 12.0), (16, 30.0), (32, 6.0)):
        m.onchip.append((float(mib), 256.0, rate))  # 1.5 x the cold 16 GB/s at 256 B: 24
    m.latency_ns = 95.0
    m.plan_ns_per_id = np.float64(31.5)  # numpy scalars must still write as YAML
    m.plan_ids = 1000
    # planner batches: exactly 40 ns per id + 300 ns per eviction
    m.plan_batches = [(1e5, e, 1e5 * 40e-9 + e * 300e-9) for e in (0.0, 0.0, 1e4, 2e4, 3e4)]
    return m


def test_shared_fit_recovers_exact_latency_and_bandwidth():
    x = np.array([1e3, 1e5, 1e7])
    f = fit_latency_bandwidth(x, 3e-6 + x / 12.5e9)
    assert f.latency_ns == pytest.approx(3000.0, rel=1e-9)
    assert f.GBps == pytest.approx(12.5, rel=1e-9)


def test_cpu_fit_recovers_every_constant():
    cal = fit_cpu(synthetic(), llc=(32.0, 16))
    v = cal.values
    assert v["dram_GBps"] == pytest.approx(DRAM_GBPS)
    assert v["dram_latency_ns"] == 95.0  # the pointer chase, not the fits' intercepts
    assert v["gather_efficiency"] == [[float(rb), pytest.approx(g / DRAM_GBPS)]
                                      for rb, g in GATHER.items()]
    assert v["cores"] == 2
    assert v["embedding_op_GBps"] == pytest.approx(max(ONE.values()))
    pe = GATHER[256] / (2 * ONE[256])
    assert v["parallel_efficiency"] == pytest.approx(pe, abs=1e-4)
    op = max(ONE.values())
    expect = np.median([AGG_NS_2T * 2 * pe - rb / op for rb in GATHER])
    assert v["aggregate_ns_per_lookup"] == pytest.approx(expect, abs=0.01)
    assert v["plan_ns_per_id"] == 31.5
    # the usable LLC: up to the first hot set below 1.5x the cold rate (16 MiB's 30 GB/s is
    # past it: noise does not extend it); its rate at half that size
    assert (v["llc_MiB"], v["llc_ways"], v["llc_GBps"]) == (2.0, 16, 40.0)
    assert set(cal.how) == set(v)  # every value says how it was measured
    assert "40.0 ns per id + 300.0 ns per eviction" in cal.how["plan_ns_per_id"]
    assert len(cal.checks) == len(GATHER)


def _write(tmp_path, base):
    m = synthetic()
    cal = fit_cpu(m)
    path = tmp_path / "measured-cpu.yaml"
    path.write_text(cpu_preset_yaml(cal, m, "measured-cpu", base))
    return cal, path


def test_preset_merges_over_a_gpu_preset_and_comments_every_value(tmp_path):
    cal, path = _write(tmp_path, "a100-gen4")
    text = path.read_text()
    for key in cal.values:
        line = next(i for i, t in enumerate(text.splitlines()) if t.startswith(f"  {key}:"))
        assert text.splitlines()[line - 1].startswith("  # ")
    hw = load_config({"hardware": {"preset": str(path)}, "designs": ["hybrid"]}).hardware
    a100 = load_config({"hardware": {"preset": "a100-gen4"}, "designs": ["hybrid"]}).hardware
    assert hw.cpu.dram_GBps == cal.values["dram_GBps"]
    assert hw.cpu.plan_ns_per_id == 31.5
    assert hw.gpu == a100.gpu and hw.pcie == a100.pcie
    assert hw.cpu.llc_ways == a100.cpu.llc_ways  # a key not measured keeps the base's


def test_preset_round_trips_through_config_show(tmp_path, capsys):
    _, path = _write(tmp_path, None)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"hardware": {"preset": str(path)}, "designs": ["hybrid"]}))
    assert main(["config", "show", str(cfg)]) == 0
    shown = capsys.readouterr().out
    again = tmp_path / "again.yaml"
    again.write_text(shown)
    a, b = load_config(str(cfg)), load_config(str(again))
    assert a.hardware == b.hardware
    assert a.hardware.cpu.dram_GBps == pytest.approx(DRAM_GBPS)


def test_cli_calibrate_cpu_writes_the_fitted_preset(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "measure_all", lambda threads, sizes: synthetic())
    out = tmp_path / "sub" / "cpu.yaml"
    assert main(["calibrate", "--cpu", "--base", "h100-gen5", "--out", str(out)]) == 0
    hw = load_config({"hardware": {"preset": str(out)}, "designs": ["hybrid"]}).hardware
    assert hw.cpu.cores == 2 and hw.cpu.dram_GBps == pytest.approx(DRAM_GBPS)
    assert hw.name == "measured-cpu"
    assert out.with_suffix(".json").exists()
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("argv, msg", [
    (["--out", "{tmp}/afile/x.yaml"], "writable folder"),
    (["--base", "{tmp}/missing.yaml", "--out", "{tmp}/x.yaml"], "missing.yaml"),
    (["--threads", "0", "--out", "{tmp}/x.yaml"], "--threads"),
    (["--threads", "two", "--out", "{tmp}/x.yaml"], "--threads"),
])
def test_cli_calibrate_cpu_bad_input_is_one_line(argv, msg, tmp_path, capsys, monkeypatch):
    (tmp_path / "afile").write_text("not a folder")
    called = []
    monkeypatch.setattr(bench, "measure_all", lambda *a: called.append(1))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["calibrate", "--cpu", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1
    assert not called


def test_llc_from_sysfs_reads_the_highest_level(tmp_path):
    for i, (lvl, size, ways) in enumerate([(1, "32K", 8), (3, "32768K", 16), (2, "1M", 8)]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{lvl}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "ways_of_associativity").write_text(f"{ways}\n")
    assert llc_from_sysfs(tmp_path) == (32.0, 16)
    assert llc_from_sysfs(tmp_path / "none") is None


def test_microbenchmarks_record_every_sample_at_tiny_sizes():
    """The real benchmarks (compiled kernels, tiny sizes): every series filled, times and
    rates positive (no bound on them: a shared machine)."""
    m = bench.measure_all([1], bench.TINY, log=lambda _s: None)
    z = bench.TINY
    assert len(m.stream) == len(m.copy) == len(z.copy_bytes)
    assert len(m.gather) == len(z.row_bytes) * len(z.lookups)
    assert len(m.scaling) == len(z.row_bytes) * len(z.lookups)
    assert len(m.aggregate) == len(z.row_bytes) * len(z.lookups)
    assert len(m.apply) == 2 * len(z.row_bytes) * len(z.lookups)  # sgd and adagrad
    assert [p[0] for p in m.onchip] == [1.0, 2.0]
    assert all(s > 0 for *_, s in m.stream + m.gather + m.aggregate)
    assert m.latency_ns > 0 and m.plan_ns_per_id > 0 and m.plan_ids > 0
    assert len(m.plan_batches) == z.plan_batches - 1
    assert json.loads(m.to_json())["threads"] == [1]
