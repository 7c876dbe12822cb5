"""`calibrate --cpu`: the fit recovers known constants exactly; the preset it writes loads,
merges over a GPU preset and round-trips through `config show`; bad input is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from cpu_fakes import (
    AGG_HIT,
    AGG_LOOKUP,
    AGG_ROW,
    COLD_ONE,
    DRAM_GBPS,
    GATHER,
    MIX,
    MIX_W,
    ONE,
    synthetic,
)

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config
from scratchpipe_sim.config.hardware import CpuConfig
from scratchpipe_sim.cpu import host_bench as bench
from scratchpipe_sim.cpu.host_bench import CpuMeasurements, PlanBatch
from scratchpipe_sim.cpu.host_preset_fit import (
    cpu_preset_yaml,
    fit_aggregate,
    fit_aggregate_onchip,
    fit_cpu,
    fit_mix,
    fit_planner,
    llc_from_sysfs,
)
from scratchpipe_sim.measure.fitting import fit_latency_bandwidth


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
    # per row size, a hit's and a miss's core rate and the window, from the mix exactly
    assert v["core_window_rows"] == MIX_W
    assert v["core_llc_GBps"] == [[float(rb), pytest.approx(rb / t, abs=1e-3)]
                                  for rb, (t, _) in MIX.items()]
    assert v["core_dram_GBps"] == [[float(rb), pytest.approx(rb / t, abs=1e-3)]
                                   for rb, (_, t) in MIX.items()]
    # the three aggregation coefficients, exactly (rounded to 0.01 ns in the preset)
    assert v["aggregate_ns_per_lookup"] == pytest.approx(AGG_LOOKUP, abs=0.006)
    assert v["aggregate_onchip_ns_per_lookup"] == pytest.approx(AGG_HIT, abs=0.006)
    assert v["aggregate_ns_per_row"] == pytest.approx(AGG_ROW, abs=0.006)
    # both planner coefficients, exactly
    assert v["plan_ns_per_id"] == pytest.approx(40.0, abs=0.006)
    assert v["plan_ns_per_eviction"] == pytest.approx(300.0, abs=0.006)
    # the usable LLC: up to the first hot set below half the smallest set's rate; hits at
    # the smallest set's rate, one thread's (core) and every thread's (the LLC server)
    assert (v["llc_MiB"], v["llc_ways"]) == (4.0, 16)
    assert v["llc_GBps"] == pytest.approx(36.0)
    assert set(cal.how) == set(v)  # every value says how it was measured
    assert "40.0 ns per id, 300.0 ns per eviction" in cal.how["plan_ns_per_id"]
    assert len(cal.checks) == len(GATHER)


def test_without_the_mix_the_core_rates_come_from_uniform_and_hot_set_gathers():
    m = synthetic()
    m.mix = []
    v = fit_cpu(m, llc=(32.0, 16)).values
    # one core's miss rate: the one-thread uniform gather, median over row sizes; its hit
    # rate: the smallest hot set's; no window (each row at its own rate)
    assert v["core_dram_GBps"] == pytest.approx(np.median(list(COLD_ONE.values())))
    assert v["core_llc_GBps"] == 20.0 and "core_window_rows" not in v


def test_one_thread_does_not_claim_the_sockets_gather_efficiency():
    """On one thread the uniform gather is one core's rate (core_dram_GBps prices it): the
    socket's efficiency is not measured, so the base's curve stays and a check says why."""
    m = synthetic()
    m.threads = [1]
    cal = fit_cpu(m)
    assert "gather_efficiency" not in cal.values and cal.values["cores"] == 1
    assert any("gather_efficiency not measured" in c for c in cal.checks)
    assert _replace_cpu(cal).gather_efficiency == CpuConfig().gather_efficiency


def _replace_cpu(cal):
    from scratchpipe_sim.cpu.host_preset_fit import _replace

    return _replace(CpuConfig(), cal.values)


def test_fit_mix_needs_varied_hits_and_positive_costs():
    assert fit_mix({256.0: [(0.5, 40.0), (0.52, 41.0)]}) is None  # h barely varies
    assert fit_mix({256.0: [(0.0, 10.0), (0.9, 50.0)]}) is None  # hits dearer than misses
    w, fits, rmse = fit_mix({256.0: [(0.0, 60.0), (0.5, 35.0), (1.0, 10.0)]})
    assert w == 1.0 and fits[256.0] == pytest.approx((10.0, 60.0)) and rmse < 1e-9


def test_aggregation_without_varied_hits_fits_one_cost_per_lookup():
    # every point as on chip as the next: the split cannot be fitted; one a for every lookup
    # (the old two-term fit) and no on-chip key
    m = synthetic()
    m.aggregate = [a._replace(hits=[[4.0, 0.3 * a.lookups]]) for a in m.aggregate]
    v = fit_cpu(m, llc=(32.0, 16)).values
    assert "aggregate_onchip_ns_per_lookup" not in v
    assert v["aggregate_ns_per_lookup"] > 0 and v["aggregate_ns_per_row"] >= 0


def test_a_row_size_without_a_split_is_left_out_not_the_split():
    # 64 B rows: every point as on chip as the next (no split there); the other sizes'
    # exact split is still written, and says which size was left out
    m = synthetic()
    m.aggregate = [a._replace(hits=[[4.0, 0.3 * a.lookups]]) if a.row_bytes == 64.0 else a
                   for a in m.aggregate]
    cal = fit_cpu(m, llc=(32.0, 16))
    assert cal.values["aggregate_ns_per_lookup"] == pytest.approx(AGG_LOOKUP, abs=0.006)
    assert cal.values["aggregate_onchip_ns_per_lookup"] == pytest.approx(AGG_HIT, abs=0.006)
    assert "no split at 64 B" in cal.how["aggregate_ns_per_lookup"]


def test_fit_aggregate_onchip_recovers_its_coefficients_or_declines():
    pts = [(n, n / k, h, 3e-6 + (n * (1 - h) * 140.0 + n * h * 20.0 + n / k * 30.0) / 2.0
            * 1e-9) for n, shrink in ((1e4, 1.0), (1e5, 0.5), (3e5, 0.2))
           for k, h in ((1, 0.0), (2, 0.5 * shrink), (5, 0.8 * shrink), (20, 0.95 * shrink))]
    a_miss, a_hit, c = fit_aggregate_onchip(pts, 2.0)
    assert (a_miss, a_hit, c) == (pytest.approx(140.0, rel=1e-9), pytest.approx(20.0, rel=1e-9),
                                  pytest.approx(30.0, rel=1e-9))
    # hits that do not vary, or hits dearer than misses: no split
    assert fit_aggregate_onchip([(n, u, 0.5, t) for n, u, _h, t in pts], 2.0) is None
    dear = [(n, u, h, (n * (1 - h) * 20.0 + n * h * 140.0 + u * 30.0) * 1e-9)
            for n, u, h, _t in pts]
    assert fit_aggregate_onchip(dear, 1.0) is None
    # a negative unique-row slope (noise) is refitted as zero, never written negative
    neg = [(n, u, h, t - u * 5e-9) for n, u, h, t in pts]
    assert min(fit_aggregate_onchip(neg, 2.0)) >= 0


def test_fit_aggregate_and_planner_recover_their_coefficients():
    pts = [(n, n / k, 3e-6 + (n * 12.5 + n / k * 80.0) / 3.0 * 1e-9)
           for n in (1e4, 3e4, 1e5) for k in (1, 3, 10)]
    a, c = fit_aggregate(pts, 3.0)
    assert (a, c) == (pytest.approx(12.5, rel=1e-9), pytest.approx(80.0, rel=1e-9))
    with pytest.raises(ValueError):  # one repetition: per lookup and per row are one term
        fit_aggregate([(n, n, 1e-3 * n) for n in (1e4, 2e4, 3e4)], 1.0)
    b = [PlanBatch(i, e, (i * 55.0 + e * 150.0) * 1e-9)
         for i, e in ((1e5, 0), (2e5, 1e4), (1e5, 3e4))]
    assert fit_planner(b) == (pytest.approx(55.0, rel=1e-9), pytest.approx(150.0, rel=1e-9))
    # evictions per id constant: the two terms cannot be told apart
    assert fit_planner([PlanBatch(1e5, 1e4, 1e-3), PlanBatch(2e5, 2e4, 2e-3),
                        PlanBatch(3e5, 3e4, 3e-3)]) is None
    # a negative per-eviction slope (noise) is refitted as zero: ids alone
    neg = [PlanBatch(1e5, 0.0, 4e-3), PlanBatch(1e5, 1e4, 3.9e-3), PlanBatch(2e5, 2e4, 8e-3)]
    a, c = fit_planner(neg)
    assert c == 0.0 and a == pytest.approx((1e5 * 4e-3 + 1e5 * 3.9e-3 + 2e5 * 8e-3)
                                           / (2 * 1e10 + 4e10) * 1e9)


def test_planner_without_a_two_term_fit_writes_one_term():
    m = synthetic()
    m.plan_batches = [PlanBatch(1e5, 1e4, 1e-3)] * 4  # no variation in evictions per id
    v = fit_cpu(m).values
    assert v["plan_ns_per_id"] == 31.5 and v["plan_ns_per_eviction"] == 0.0


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
    assert hw.cpu.plan_ns_per_id == 40.0 and hw.cpu.plan_ns_per_eviction == 300.0
    assert hw.cpu.aggregate_ns_per_row == AGG_ROW
    assert hw.cpu.core_dram_GBps == tuple(tuple(p) for p in cal.values["core_dram_GBps"])
    assert hw.cpu.core_window_rows == MIX_W
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
    monkeypatch.setattr(bench, "measure_all", lambda threads, sizes, statistic: synthetic())
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
    monkeypatch.setattr(bench, "measure_all", lambda *a, **k: called.append(1))
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
    assert m.statistic == "median"
    z = bench.TINY
    assert len(m.stream) == len(m.copy) == len(z.copy_bytes)
    assert len(m.gather) == len(z.row_bytes) * len(z.lookups)
    assert len(m.scaling) == len(z.row_bytes) * len(z.lookups)
    assert len(m.aggregate) == (len(z.row_bytes) * len(z.aggregate_alphas)
                                * len(z.aggregate_batches))
    # generated batches: every size, unique rows per lookup varied; hits as the model's
    # simulator counts them: more in a larger cache, never more than the batch's lookups,
    # more for the skewed batches than for the uniform ones
    assert {a[1] for a in m.aggregate} == {float(b * z.pooling) for b in z.aggregate_batches}
    share = [u / n for _, n, u, _s, _h in m.aggregate]
    assert min(share) < 0.5 < max(share) <= 1.0
    for _rb, n, _u, _s, hits in m.aggregate:
        h = [x for _, x in hits]
        assert h and h == sorted(h) and h[-1] <= n
    k = len(z.aggregate_batches)  # points go (alpha, batch) in order, per row size
    per_alpha = [m.aggregate[i : i + k] for i in range(0, len(m.aggregate), k)]
    for uniform, skewed in zip(per_alpha[0::2], per_alpha[1::2], strict=True):
        assert all(s[4][-1][1] > u[4][-1][1] for u, s in zip(uniform, skewed, strict=True))
    assert len(m.apply) == 2 * len(z.row_bytes) * len(z.lookups)  # sgd and adagrad
    assert [p[:2] for p in m.onchip] == [(1.0, 1.0), (1.0, 2.0)]
    assert m.gather_one == []  # one thread only: m.gather is already one core's
    assert [p[:2] for p in m.mix] == [(float(rb), a) for rb in z.row_bytes
                                      for a in z.mix_alphas]
    # hits as the model's simulator counts them: none beyond the timed lookups, more in a
    # larger cache, more for the skewed trace
    for _rb, _a, n, s, hits in m.mix:
        h = [x for _, x in hits]
        assert s > 0 and 0 <= h[0] and h == sorted(h) and h[-1] <= n
    by = {(p[0], p[1]): p[4][-1][1] / p[2] for p in m.mix}
    assert all(by[(rb, 1.2)] > by[(rb, 0.0)] for rb in z.row_bytes)
    assert all(s > 0 for *_, s in m.stream + m.gather)
    assert all(a[3] > 0 for a in m.aggregate)
    assert m.latency_ns > 0 and m.plan_ns_per_id > 0 and m.plan_ids > 0
    # steady batches that evict, from every scratchpad size
    assert m.plan_batches and all(e > 0 and s > 0 for _, e, s in m.plan_batches)
    assert len(m.plan_batches) <= len(z.plan_load_factors) * (z.plan_batches - 1)
    assert json.loads(m.to_json())["threads"] == [1]


def test_summarize_is_the_median_or_the_best():
    from scratchpipe_sim.cpu.measure import Timing, summarize

    t = [[3.0, 9.0], [1.0, 7.0], [2.0, 8.0]]  # three repetitions of two points
    assert summarize(t, "median").tolist() == [2.0, 8.0]
    assert summarize(t, "best").tolist() == [1.0, 7.0]
    assert Timing(1.0, 2.0).value("median") == 2.0 and Timing(1.0, 2.0).value("best") == 1.0


# -- issue 28, class 14: a busy host's curve is re-measured, or written with a warning -----

def _scripted(times: dict[int, list[float]]):
    """`once(i)` answering point i's scripted seconds in turn (the last one repeated)."""
    calls: dict[int, int] = {}

    def once(i: int) -> float:
        k = calls.get(i, 0)
        calls[i] = k + 1
        return times[i][min(k, len(times[i]) - 1)]

    return once, calls


def test_a_clean_curve_is_not_remeasured():
    from scratchpipe_sim.cpu.measure import settle_curve

    once, calls = _scripted({0: [9.0], 1: [9.0], 2: [9.0]})
    s = settle_curve([1.0, 2.0, 4.0], [1.0, 2.0, 4.0], once, reps=3, statistic="median")
    assert s.seconds == (1.0, 2.0, 4.0) and s.noisy == () and s.rounds == 0
    assert not calls


def test_interleaved_remeasurement_fixes_a_busy_moment():
    from scratchpipe_sim.cpu.measure import not_growing, settle_curve

    # the middle point was measured during a busy moment (slower than the largest)
    assert not_growing([1.0, 2.0, 4.0], [1.0, 5.0, 4.0]) == [1, 2]
    once, calls = _scripted({1: [2.0], 2: [4.0]})
    s = settle_curve([1.0, 2.0, 4.0], [1.0, 5.0, 4.0], once, reps=3, statistic="median")
    assert s.seconds == (1.0, 2.0, 4.0) and s.noisy == () and s.rounds == 1
    assert calls == {1: 4, 2: 4}  # the offending points only: a warm-up and 3 repetitions
    assert s.remeasured == 2


def test_a_curve_that_stays_flat_is_bounded_and_named():
    from scratchpipe_sim.cpu.measure import CURVE_RETRIES, settle_curve

    once, calls = _scripted({0: [3.0], 1: [3.0], 2: [3.0]})
    s = settle_curve([1.0, 2.0, 4.0], [3.0, 3.0, 3.0], once, reps=2, statistic="best")
    assert s.noisy == (0, 1, 2) and s.rounds == CURVE_RETRIES
    assert all(c == CURVE_RETRIES * 3 for c in calls.values())  # bounded: (1 + 2) a round


def _timer(script: list[float]):
    it = iter(script)
    last = [script[-1]]

    def timed(fn) -> float:
        fn()
        last[0] = next(it, last[0])
        return last[0]

    return timed


def test_pool_samples_remeasure_with_an_injected_timer(monkeypatch):
    """The real gather loop (tiny sizes) with an injected timer: its first pass is out of
    order, the re-measured points in order -> no noise recorded."""
    z = bench.TINY  # two lookup counts, 2 repetitions
    # first pass: warm-up + 2 reps per point (best_of), both points 5 ms: not growing;
    # then the interleaved round (warm-up each, 2 rounds of both points)
    first = [5e-3, 5e-3, 5e-3, 5e-3, 5e-3, 5e-3]
    again = [1e-3, 8e-3, 1e-3, 8e-3, 1e-3, 8e-3]
    monkeypatch.setattr(bench, "timed", _timer(first + again))
    monkeypatch.setattr(bench, "best_of", lambda fn, reps, setup=None: bench.Timing.of(
        [bench.timed(fn) for _ in range(reps + 1)][1:]))
    m = CpuMeasurements(threads=[1], reps=z.reps)
    store = np.ones((1 << 12, 16), np.float32)
    out = bench._pool_samples(m, z, 64, store, np.random.default_rng(0))
    assert [s for _, s in out] == [1e-3, 8e-3]
    assert m.noisy == [] and m.remeasured == 2


def _flat_gather() -> CpuMeasurements:
    m = synthetic()
    m.gather = [g._replace(seconds=1e-3) if g.row_bytes == 128.0 else g for g in m.gather]
    m.noisy = ["gather 128 B on 2 thread(s) at 100,000, 1,000,000 B (1000, 1000 us)"]
    m.remeasured = 6
    return m


def test_a_noisy_curve_is_fitted_through_the_origin_and_named():
    with pytest.raises(Exception, match="does not grow"):
        fit_latency_bandwidth(np.array([1.0, 2.0]), np.array([2.0, 1.0]))
    cal = fit_cpu(_flat_gather(), llc=(32.0, 16))
    assert any("gather 128 B: time does not grow" in n for n in cal.noisy)
    assert cal.noisy[0].startswith("gather 128 B on 2 thread(s)")
    rb128 = dict((x, y) for x, y in cal.values["gather_efficiency"])[128.0]
    assert 0 < rb128 <= 1
    clean = fit_cpu(synthetic(), llc=(32.0, 16))
    assert clean.noisy == ()  # a clean curve: no warning, the same values as before
    assert clean.values["dram_GBps"] == pytest.approx(DRAM_GBPS)


def test_cli_writes_the_preset_with_a_warning_naming_the_noisy_points(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.setattr(bench, "measure_all", lambda threads, sizes, statistic: _flat_gather())
    out = tmp_path / "cpu.yaml"
    assert main(["calibrate", "--cpu", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "WARNING: noisy" in err and "gather 128 B" in err and "Traceback" not in err
    text = out.read_text()
    assert "# WARNING: noisy measurements" in text and "(6 point re-measurements)" in text
    assert "# noisy: gather 128 B on 2 thread(s)" in text
    hw = load_config({"hardware": {"preset": str(out)}, "designs": ["hybrid"]}).hardware
    assert hw.cpu.dram_GBps == pytest.approx(DRAM_GBPS)  # the rest is as measured
    # the clean case: no warning anywhere
    monkeypatch.setattr(bench, "measure_all", lambda threads, sizes, statistic: synthetic())
    assert main(["calibrate", "--cpu", "--out", str(out)]) == 0
    assert "WARNING" not in capsys.readouterr().err and "noisy" not in out.read_text()


def test_measurements_are_named_records_written_as_lists():
    """Each point is a named record read by its names; the JSON keeps the lists it had."""
    m = synthetic()
    doc = json.loads(m.to_json())
    a = m.aggregate[0]
    assert doc["aggregate"][0] == [a.row_bytes, a.lookups, a.unique_rows, a.seconds, a.hits]
    assert doc["apply"][0] == ["sgd", 64.0, 1e5, 64.0, 0.01]
    assert doc["plan_batches"][0] == [1e5, 0.0, 1e5 * 40e-9]
    assert m.mix[0].alpha == 0.0 and m.onchip[0].hot_MiB == 1.0 and m.stream[0].nbytes == 1e7
