"""Sweep machinery: points, resume after SIGKILL / torn writes, --jobs, dask, bad input.

The point function here is a cheap deterministic stand-in for the simulator (a closed form of
the swept values), so each test checks exact cells; the real simulator is exercised end to
end in test_experiments_sweep_e2e.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sweep_fakes import BASE, DESIGNS, METRICS, fake_point, table, write_exp

from scratchpipe_sim.cli import main
from scratchpipe_sim.experiments.spec import expand_points, load_experiment
from scratchpipe_sim.experiments.sweep_runner import run_sweep


def expected(lf: float, alpha: float, i: int) -> float:
    return 1000.0 * alpha / (1.0 + i * lf * 10)


def test_points_are_grid_times_zip_in_order_with_distinct_hashes(tmp_path):
    spec = load_experiment(write_exp(
        tmp_path, grid={"cache.load_factor": [0.1, 0.2]},
        zip_={"trace.distribution": ["zipf", "uniform"], "trace.alpha": [1.1, 1.0]}))
    pts = expand_points(spec)
    assert [p.values for p in pts] == [
        {"cache.load_factor": 0.1, "trace.distribution": "zipf", "trace.alpha": 1.1},
        {"cache.load_factor": 0.1, "trace.distribution": "uniform", "trace.alpha": 1.0},
        {"cache.load_factor": 0.2, "trace.distribution": "zipf", "trace.alpha": 1.1},
        {"cache.load_factor": 0.2, "trace.distribution": "uniform", "trace.alpha": 1.0}]
    assert len({p.key for p in pts}) == 4
    # the resolved config carries the preset, defaults and the point's values
    assert pts[3].config["hardware"]["pcie"]["h2d_GBps"] == 25.0
    assert pts[3].config["trace"]["distribution"] == "uniform"
    assert pts[3].config["designs"] == DESIGNS
    # same file -> same hashes (deterministic); a changed base -> different ones
    assert [p.key for p in expand_points(load_experiment(spec.source))] == [p.key for p in pts]


def test_rows_hold_values_and_metrics_exactly_and_rerun_skips(tmp_path):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2],
                                    "trace.alpha": [1.0, 1.2]})
    calls = []

    def counting(config, designs):
        calls.append(config["cache"]["load_factor"])
        return fake_point(config, designs)

    s = run_sweep(load_experiment(exp), tmp_path / "out", run_point=counting, quiet=True)
    assert (s.points, s.ran, s.skipped, s.failed) == (4, 4, 0, 0)
    rows = table(tmp_path / "out")
    assert rows[0] == ["point", "index", "cache.load_factor", "trace.alpha", "design",
                       "status", "error", *METRICS]
    assert len(rows) == 1 + 4 * 3
    for r in rows[1:]:
        lf, alpha, i = float(r[2]), float(r[3]), DESIGNS.index(r[4])
        assert r[5] == "ok" and r[6] == ""
        assert float(r[7]) == expected(lf, alpha, i)  # repr round-trips exactly
    assert len(calls) == 4
    s2 = run_sweep(load_experiment(exp), tmp_path / "out", run_point=counting, quiet=True)
    assert (s2.ran, s2.skipped) == (0, 4) and len(calls) == 4
    assert table(tmp_path / "out") == rows
    assert (tmp_path / "out" / "results.parquet").is_file()


def test_torn_last_line_and_partial_point_are_rerun_once(tmp_path):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2, 0.4]})
    out = tmp_path / "out"
    run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True)
    full = (out / "results.csv").read_bytes()
    lines = full.splitlines(keepends=True)
    # a kill -9 mid-write: the last point lost its last design row, and a torn fragment
    (out / "results.csv").write_bytes(b"".join(lines[:-1]) + lines[-1][:17])
    calls = []

    def counting(config, designs):
        calls.append(config["cache"]["load_factor"])
        return fake_point(config, designs)

    s = run_sweep(load_experiment(exp), out, run_point=counting, quiet=True)
    assert calls == [0.4] and (s.ran, s.skipped) == (1, 2)
    assert (out / "results.csv").read_bytes() == full


KILL_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from sweep_fakes import fake_point
    from scratchpipe_sim.experiments.sweep_runner import run_sweep
    from scratchpipe_sim.experiments.spec import load_experiment
    run_sweep(load_experiment({exp!r}), {out!r}, run_point=fake_point, quiet=True)
""")


def test_sigkill_mid_sweep_resumes_to_the_same_table(tmp_path):
    grid = {"cache.load_factor": [0.05, 0.1, 0.15, 0.2, 0.25], "trace.alpha": [1.0, 1.1]}
    exp = write_exp(tmp_path, grid=grid)
    ref = tmp_path / "ref"
    run_sweep(load_experiment(exp), ref, run_point=fake_point, quiet=True)
    out = tmp_path / "killed"
    script = KILL_SCRIPT.format(tests=str(Path(__file__).parents[1]), exp=str(exp), out=str(out))
    env = dict(os.environ, FAKE_SLEEP_S="0.15")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            csv_path = out / "results.csv"
            if csv_path.is_file() and csv_path.read_bytes().count(b"\n") >= 1 + 3 * 3:
                break
            assert proc.poll() is None, "sweep ended before it could be killed"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    done_before = (out / "results.csv").read_bytes().count(b"\n") - 1
    assert 9 <= done_before < 30
    s = run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True)
    assert s.skipped >= 3 and s.skipped + s.ran == 10
    assert (out / "results.csv").read_bytes() == (ref / "results.csv").read_bytes()


def test_jobs_2_gives_the_same_rows_as_jobs_1(tmp_path):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2, 0.4],
                                    "trace.alpha": [1.0, 1.2]})
    run_sweep(load_experiment(exp), tmp_path / "j1", run_point=fake_point, quiet=True)
    s = run_sweep(load_experiment(exp), tmp_path / "j2", jobs=2, run_point=fake_point,
                  quiet=True)
    assert s.ran == 6
    assert table(tmp_path / "j2") == table(tmp_path / "j1")


def test_dask_local_cluster_gives_the_same_rows(tmp_path):
    distributed = pytest.importorskip("distributed")
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2],
                                    "trace.alpha": [1.0, 1.2]})
    run_sweep(load_experiment(exp), tmp_path / "local", run_point=fake_point, quiet=True)
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=2,
                                  dashboard_address=None) as cluster:
        s = run_sweep(load_experiment(exp), tmp_path / "dask", executor="dask",
                      scheduler=cluster.scheduler_address, run_point=fake_point, quiet=True)
    assert s.ran == 4
    assert table(tmp_path / "dask") == table(tmp_path / "local")


def test_a_failing_point_is_recorded_and_the_rest_run(tmp_path):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.3, 0.4]})
    out = tmp_path / "out"
    s = run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True)
    assert (s.ran, s.failed) == (3, 1)
    rows = table(out)[1:]
    bad = [r for r in rows if r[2] == "0.3"]
    assert len(bad) == 3 and {r[4] for r in bad} == {"error"}
    assert all(r[5].startswith("ValueError: boom at 0.3") for r in bad)
    assert all(r[6] == "" for r in bad)
    assert sum(r[4] == "ok" for r in rows) == 6
    # a plain rerun keeps the recorded failure; --retry-failed reruns it without duplicates
    assert run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True).ran == 0
    s3 = run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True,
                   retry_failed=True)
    assert (s3.ran, s3.failed) == (1, 1) and table(out)[1:] == rows


def test_unknown_metric_is_a_user_error(tmp_path):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1]}, metrics=["hit_ratoi"])
    with pytest.raises(Exception) as e:
        run_sweep(load_experiment(exp), tmp_path / "o", run_point=fake_point, quiet=True)
    assert "no metric 'hit_ratoi' (did you mean 'hit_ratio'?)" in str(e.value)


@pytest.mark.parametrize("kwargs, needle", [
    ({"grid": {"cache.load_factr": [0.1]}},
     "sweep.cache.load_factr: sweep axis names no config key 'cache.load_factr' "
     "(did you mean 'cache.load_factor'?)"),
    ({"grid": {"cache.load_factor": []}},
     "sweep.grid.cache.load_factor: empty axis"),
    ({"zip_": {"trace.alpha": [1.0, 1.1], "cache.load_factor": [0.1]}},
     "sweep.zip: zipped axes must have equal lengths: trace.alpha has 2, "
     "cache.load_factor has 1"),
    ({"grid": {"cache.load_factor": 0.1}}, "sweep.grid.cache.load_factor: expected a list"),
    ({"grid": {"cache.load_factor": [0.1, 0.1]}}, "resolve to the same config"),
    ({"grid": {"cache.load_factor": [-1.0]}}, "cache.load_factor"),
    ({"grid": {"multi_gpu.gpus": [2, 4]}},
     "sweep.multi_gpu.gpus: 'multi_gpu' was removed: set design_params.multi-gpu"),
])
def test_bad_sweep_input_exits_2_with_one_line(tmp_path, capsys, kwargs, needle):
    exp = write_exp(tmp_path, **kwargs)
    assert main(["sweep", str(exp), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert "Traceback" not in err


def test_results_folder_of_another_experiment_exits_2(tmp_path, capsys):
    a = write_exp(tmp_path, "a", grid={"cache.load_factor": [0.1]})
    run_sweep(load_experiment(a), tmp_path / "o", run_point=fake_point, quiet=True)
    b = write_exp(tmp_path, "b", grid={"cache.load_factor": [0.2]})
    assert main(["sweep", str(b), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds results of experiment 'a'" in err
    # a changed base config under the same name is another experiment too
    a2 = write_exp(tmp_path, "a", grid={"cache.load_factor": [0.1]},
                   base={**BASE, "seed": 7})
    assert main(["sweep", str(a2), "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "holds results of experiment 'a'" in capsys.readouterr().err
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    assert main(["sweep", str(a), "--out", str(tmp_path / "junk"), "-q"]) == 2
    assert "not a sweep results folder" in capsys.readouterr().err


def test_dry_run_lists_points(tmp_path, capsys):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2]})
    assert main(["sweep", str(exp), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].split()[2] == "cache.load_factor=0.2"
