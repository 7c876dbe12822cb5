"""Issue 13, sweeps: one sweep per folder, keyed rows, workers die with their parent,
infeasible vs error points, metric typos, unwritable folders, permissions, progress lines."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sweep_fakes import fake_point, table, write_exp

from scratchpipe_sim.cli import main
from scratchpipe_sim.experiments import sweep_runner
from scratchpipe_sim.experiments.results_store import LOCK, ResultStore
from scratchpipe_sim.experiments.spec import load_experiment
from scratchpipe_sim.experiments.sweep_runner import run_sweep

TESTS = str(Path(__file__).parents[1])  # sweep_fakes
HERE = str(Path(__file__).parent)  # this module (sleepy_point)


def sleepy_point(config: dict, designs: tuple) -> list[dict]:
    """Marks its pid in $MARK_DIR, then sleeps $SLEEPY_S (a point that takes long)."""
    mark = Path(os.environ["MARK_DIR"])
    (mark / f"worker-{os.getpid()}").write_text("")
    time.sleep(float(os.environ.get("SLEEPY_S", "120")))
    return fake_point(config, designs)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as dead)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next((ln for ln in f if ln.startswith("State:")), "")
        return "Z" not in state.split(":", 1)[1][:3] if state else True
    except FileNotFoundError:
        return False


def _start_sweep(exp: Path, out: Path, env: dict, jobs: int = 1,
                 point: str = "fake_point") -> subprocess.Popen:
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{HERE!r}, {TESTS!r}]
        from test_reliability_sweep import sleepy_point
        from sweep_fakes import fake_point
        from scratchpipe_sim.experiments.sweep_runner import run_sweep
        from scratchpipe_sim.experiments.spec import load_experiment
        run_sweep(load_experiment({str(exp)!r}), {str(out)!r}, run_point={point},
                  jobs={jobs}, executor={"'process'" if jobs > 1 else "'local'"}, quiet=True)
    """)
    return subprocess.Popen([sys.executable, "-c", script], env={**os.environ, **env})


def _wait_for(cond, proc: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"the sweep ended before {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_second_sweep_on_a_busy_folder_exits_2_and_no_row_is_written_twice(
        tmp_path, capsys, monkeypatch):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2, 0.4]})
    out = tmp_path / "out"
    marks = tmp_path / "marks"
    marks.mkdir()
    # the first sweep finishes one point, then sits in the second until it is killed
    first = _start_sweep(exp, out, {"MARK_DIR": str(marks), "SLEEPY_S": "120"},
                         point="lambda c, d: fake_point(c, d) if c['cache']['load_factor'] "
                               "== 0.1 else sleepy_point(c, d)")
    try:
        _wait_for(lambda: any(marks.iterdir()), first, "the second point")
        holder = json.loads((out / LOCK).read_text())
        assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()
        monkeypatch.setattr(sweep_runner, "simulate_point", lambda c, d, **_: fake_point(c, d))
        assert main(["sweep", str(exp), "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "another sweep is writing here" in err
        assert f"pid {first.pid} on {socket.gethostname()}" in err
        assert len(table(out)) == 1 + 3  # the busy folder was not touched
    finally:
        first.kill()
        first.wait(10)
    # the killed sweep's lock file remains; its holder is dead, so the next sweep takes it
    assert (out / LOCK).is_file()
    assert main(["sweep", str(exp), "--out", str(out), "--quiet"]) == 0
    assert "2 run, 1 already done" in capsys.readouterr().out
    assert not (out / LOCK).exists()
    rows = table(out)[1:]
    keys = [(r[0], r[3]) for r in rows]
    assert len(rows) == 3 * 3 and len(set(keys)) == len(keys)


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2]})
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / LOCK).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(),
                                        "started": "yesterday"}))
    s = run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True)
    assert s.ran == 2 and not (out / LOCK).exists()


def test_rows_are_keyed_by_point_and_design(tmp_path):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2]})
    out = tmp_path / "out"
    run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True)
    clean = table(out)
    # a table that holds a point twice (as two unlocked sweeps used to write) is healed
    text = (out / "results.csv").read_text()
    body = text.split("\n", 1)[1]
    (out / "results.csv").write_text(text + body)
    assert len(table(out)) == 1 + 2 * (len(clean) - 1)
    s = run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True)
    assert (s.ran, s.skipped) == (0, 2) and table(out) == clean
    # and the store refuses to append a key it already holds
    manifest = json.loads((out / "manifest.json").read_text())
    store = ResultStore.open(out, manifest)
    try:
        row = dict(zip(clean[0], clean[1], strict=True))
        with pytest.raises(RuntimeError, match="already in"):
            store.append_point([row])
    finally:
        store.close()
    assert table(out) == clean


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_of_a_jobs_2_sweep_leaves_no_worker_alive(tmp_path):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2, 0.4, 0.5]})
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = _start_sweep(exp, tmp_path / "out", {"MARK_DIR": str(marks), "SLEEPY_S": "120"},
                        jobs=2, point="sleepy_point")
    try:
        _wait_for(lambda: len(list(marks.iterdir())) >= 2, proc, "two busy workers", 120)
        workers = [int(p.name.split("-")[1]) for p in marks.iterdir()]
        assert all(_alive(w) for w in workers)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.time() + 30
        while any(_alive(w) for w in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived their sweep"
    finally:
        for p in marks.iterdir():
            try:
                os.kill(int(p.name.split("-")[1]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        if proc.poll() is None:
            proc.kill()


def _boom(config: dict, designs: tuple, **_: object) -> list[dict]:
    return fake_point(config, designs)


def test_errors_exit_1_and_are_listed_on_every_rerun_until_retried(tmp_path, capsys,
                                                                     monkeypatch):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.3]})
    out = tmp_path / "out"
    monkeypatch.setattr(sweep_runner, "simulate_point", _boom)
    argv = ["sweep", str(exp), "--out", str(out), "--quiet"]
    for ran in (2, 0):  # the first run and a plain rerun both report the error
        assert main(argv) == 1
        cap = capsys.readouterr()
        assert f"{ran} run" in cap.out and "1 point(s) with errors" in cap.out
        listed = [ln for ln in cap.err.splitlines() if ln.startswith("error: point 1 ")]
        assert len(listed) == 3 and "cache.load_factor=0.3" in listed[0]
        assert "ValueError: boom at 0.3" in listed[0]
    # fixed (the point no longer fails): --retry-failed runs it again and the sweep is clean
    monkeypatch.setattr(sweep_runner, "simulate_point",
                        lambda c, d, **_: fake_point({**c, "cache": {**c["cache"],
                                                                "load_factor": 0.31}}, d))
    assert main(argv + ["--retry-failed", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["ran"], summary["failed"], summary["errors"]) == (1, 0, [])
    assert {r[4] for r in table(out)[1:]} == {"ok"}


def test_a_metric_typo_fails_before_simulating_and_leaves_no_folder(tmp_path, capsys,
                                                                     monkeypatch):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.2, 0.4]},
                    metrics=["iter_ns_mean", "hit_ratoi"])
    out = tmp_path / "out"
    calls = []
    monkeypatch.setattr(sweep_runner, "simulate_point",
                        lambda c, d, **_: calls.append(1) or fake_point(c, d))
    assert main(["sweep", str(exp), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics: the simulator reports no metric 'hit_ratoi'" \
        in err and "did you mean 'hit_ratio'" in err
    assert not out.exists() and calls == []


def test_a_folder_left_by_a_failed_first_point_does_not_block_the_corrected_sweep(tmp_path):
    # a custom point function cannot be probed: the typo surfaces at the first point; the
    # folder then holds no row, and the corrected experiment reuses it
    bad = write_exp(tmp_path, "e", grid={"cache.load_factor": [0.1]},
                    metrics=["iter_ns_mean", "hit_ratoi"])
    out = tmp_path / "out"
    with pytest.raises(Exception, match="hit_ratoi"):
        run_sweep(load_experiment(bad), out, run_point=fake_point, quiet=True)
    assert not (out / LOCK).exists()
    good = write_exp(tmp_path, "e", grid={"cache.load_factor": [0.1]})
    assert run_sweep(load_experiment(good), out, run_point=fake_point, quiet=True).ran == 1


@pytest.mark.parametrize("make, words", [
    (lambda p: p.write_text("x"), "exists and is not a folder"),
    (lambda p: None, "cannot create the results folder"),
])
def test_sweep_out_on_a_file_or_unwritable_path_is_one_line(tmp_path, capsys, make, words):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1]})
    target = tmp_path / "f"
    make(target)
    out = target if target.exists() else tmp_path / "file" / "sub"
    if not target.exists():
        (tmp_path / "file").write_text("a file where a folder is needed")
    assert main(["sweep", str(exp), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


def test_sweep_files_get_the_permissions_of_run_files(tmp_path):
    old = os.umask(0o022)
    try:
        exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1]})
        out = tmp_path / "out"
        run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True)
        with open(tmp_path / "like-run.csv", "w") as f:  # how `run` writes its files
            f.write("x")
        want = stat.S_IMODE((tmp_path / "like-run.csv").stat().st_mode)
        assert want == 0o644
        for name in ("results.csv", "manifest.json", "points.jsonl"):
            assert stat.S_IMODE((out / name).stat().st_mode) == want, name
    finally:
        os.umask(old)


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch):
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2, 0.4]})
    monkeypatch.setenv("SCRATCHPIPE_PROGRESS_S", "0")
    log = io.StringIO()
    run_sweep(load_experiment(exp), tmp_path / "a", run_point=fake_point, stream=log)
    lines = log.getvalue().splitlines()
    assert [ln.split(" [")[0] for ln in lines] == [
        "sweep exp: 1/3 points", "sweep exp: 2/3 points", "sweep exp: 3/3 points",
        "sweep exp: 3/3 points"]
    quiet = io.StringIO()
    run_sweep(load_experiment(exp), tmp_path / "b", run_point=fake_point, stream=quiet,
              quiet=True)
    assert quiet.getvalue() == ""


def test_a_repeated_design_in_the_base_config_is_an_error(tmp_path, capsys):
    exp = write_exp(
        tmp_path,
        grid={"cache.load_factor": [0.1]},
        designs=None,
        base={
            "model": {"num_batches": 4, "warmup_batches": 1},
            "cache": {},
            "design_params": {"scratchpipe": {"lookahead": 5}},
            "designs": ["hybrid", "hybrid"],
        },
    )
    assert main(["sweep", str(exp), "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "design 'hybrid' listed twice" in capsys.readouterr().err


def test_infeasible_design_rows_are_counted_and_exit_0(tmp_path, capsys, monkeypatch):
    def point(config, designs, **_):
        rows = fake_point(config, designs)
        rows[-1] = {"design": designs[-1],
                    sweep_runner.DESIGN_INFEASIBLE: "window does not fit the cache"}
        return rows

    monkeypatch.setattr(sweep_runner, "simulate_point", point)
    exp = write_exp(tmp_path, grid={"cache.load_factor": [0.1, 0.2]})
    out = tmp_path / "o"
    assert main(["sweep", str(exp), "--out", str(out), "-q"]) == 0
    assert "2 infeasible design result(s)" in capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    bad = [r for r in rows if r["status"] != "ok"]
    assert [(r["design"], r["status"], r["error"]) for r in bad] == [
        ("scratchpipe", "infeasible", "window does not fit the cache")] * 2


def test_a_point_too_large_for_memory_is_an_error_row_not_a_crash(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", str(2 * 10**6))
    # 2 x 1000 rows fit in 2 MB; 2 x 100000 rows (20 B of state each) do not
    exp = write_exp(
        tmp_path,
        grid={"model.tables.rows": [1000, 100000]},
        designs=["hybrid"],
        metrics=["iter_ns_mean"],
        base={
            "model": {
                "num_batches": 4,
                "warmup_batches": 1,
                "batch_size": 16,
                "pooling": 2,
                "tables": {"count": 2, "rows": 1000},
            },
            "cache": {},
            "design_params": {"scratchpipe": {"lookahead": 5}},
            "hardware": {"preset": "a100-gen4"},
        },
    )
    out = tmp_path / "o"
    assert main(["sweep", str(exp), "--out", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "error: point 1 (model.tables.rows=100000) hybrid:" in err
    assert "needs about" in err and "of memory" in err and "Traceback" not in err
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    assert [r["status"] for r in rows] == ["ok", "error"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_of_a_jobs_2_sweep_ends_its_workers_quietly_and_resumes(tmp_path):
    """`timeout 60 scratchpipe-sim sweep EXP --jobs 2` (issue 42, item 6): SIGTERM ends the
    workers, releases the lock and leaks no semaphore; the rerun ends as a clean sweep."""
    grid = {"cache.load_factor": [0.1, 0.2, 0.4, 0.5]}
    exp = write_exp(tmp_path, grid=grid)
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{HERE!r}, {TESTS!r}]
        from test_reliability_sweep import sleepy_point
        from scratchpipe_sim.cli import terminated_on_sigterm
        from scratchpipe_sim.errors import Terminated
        from scratchpipe_sim.experiments.sweep_runner import run_sweep
        from scratchpipe_sim.experiments.spec import load_experiment
        try:
            with terminated_on_sigterm():
                run_sweep(load_experiment({str(exp)!r}), {str(out)!r}, run_point=sleepy_point,
                          jobs=2, executor="process", quiet=True)
        except Terminated:
            sys.exit(143)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MARK_DIR": str(marks), "SLEEPY_S": "120"})
    try:
        _wait_for(lambda: len(list(marks.iterdir())) >= 2, proc, "two busy workers", 120)
        workers = [int(p.name.split("-")[1]) for p in marks.iterdir()]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # not the workers' 120 s
        assert proc.returncode == 143, err
        assert "leaked" not in err and "Traceback" not in err, err
        assert not [w for w in workers if _alive(w)], "workers outlived their sweep"
        assert not (out / LOCK).exists()
    finally:
        for p in marks.iterdir():
            try:
                os.kill(int(p.name.split("-")[1]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        if proc.poll() is None:
            proc.kill()
    s = run_sweep(load_experiment(exp), out, run_point=fake_point, quiet=True)
    assert s.skipped + s.ran == 4
    clean = tmp_path / "clean"
    run_sweep(load_experiment(exp), clean, run_point=fake_point, quiet=True)
    assert table(out) == table(clean)
