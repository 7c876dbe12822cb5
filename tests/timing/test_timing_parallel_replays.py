"""Parallel replays (`run --jobs`, `Replays.precompute`): the independent passes of one run
(each cache policy's replay, the on-chip passes, first touches) made in forked processes give
exactly the serial results, and the number of processes stays within the memory bound."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os

import numpy as np
import pytest

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety import memory_guard
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.replay_passes import AccessUnique, Checksum, PolicyPart, Replays
from scratchpipe_sim.timing.runner import simulate
from scratchpipe_sim.timing.trace_setup import build_trace, fit_trace, sized_config
from scratchpipe_sim.traces.forked import check_jobs

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="parallel replays fork; this platform cannot")


@pytest.fixture(autouse=True)
def _fork_even_small_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """These traces are far below the size where forking pays: fork anyway."""
    from scratchpipe_sim.traces import generators

    monkeypatch.setattr(generators, "PARALLEL_MIN_ACCESSES", 0)

ALL_DESIGNS = ["hybrid", "gpu-only", "uvm", "static-cache", "lru-cache", "lru-prefetch",
               "scratchpipe", "bagpipe"]

#: small configs covering every kind of pass: one table, several tables of mixed dims
#: (per-table bytes), a static cache profiling its prefix and the oracle
CASES = {
    "quickstart-small": ["model.num_batches=12", "model.batch_size=512"],
    "mixed-dims": ["model.num_batches=10", "model.batch_size=256",
                   "model.tables={count: 2, rows: [20000, 5000], dim: [64, 128]}",
                   "model.pooling=[4, 2]", "cache.load_factor=0.3",
                   "model.interaction=cat", "model.top_mlp=null"],
    "static-oracle": ["model.num_batches=10", "model.batch_size=256",
                      "design_params.static-cache.profile=oracle"],
}


def _config(texts: list[str]):
    return load_config("configs/quickstart.yaml", texts)


def _without_wall(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("_wall_s")} for r in rows]


def _column_hashes(cfg, jobs: int) -> dict[str, str]:
    """sha256 of every count column each design is priced from, made with `jobs`."""
    trace = build_trace(cfg, cache=False)
    cfg = sized_config(cfg, trace)
    trace = fit_trace(trace, cfg)
    keys = {n: DESIGNS.get(n)(cfg).workload_key() for n in ALL_DESIGNS}
    replays = Replays(cfg, trace, True, replay_cache=False)
    passes = replays.passes(list(keys.values()))
    used = replays.precompute(list(keys.values()), jobs)
    assert used == (1 if jobs == 1 else min(jobs, len(passes)))
    out = {}
    for name, key in keys.items():
        w, _ = replays.get(key)
        for col, arr in sorted(w.cols.items()):
            out[f"{name}.{col}"] = hashlib.sha256(
                np.ascontiguousarray(arr, dtype="<i8").tobytes()).hexdigest()
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_parallel_and_serial_replays_give_the_same_columns(case: str) -> None:
    cfg = _config(CASES[case])
    serial = _column_hashes(cfg, 1)
    parallel = _column_hashes(cfg, 2)
    assert serial == parallel
    assert any(k.endswith(".l2_hits") for k in serial)  # the on-chip passes are covered


def test_designs_without_a_cache_share_one_access_unique_pass() -> None:
    """hybrid and gpu-only are priced from the same accesses and unique rows: one pass makes
    them for both (each forked worker once made its own), and their parts are no passes."""
    cfg = _config(CASES["quickstart-small"])
    trace = build_trace(cfg, cache=False)
    cfg = sized_config(cfg, trace)
    trace = fit_trace(trace, cfg)
    keys = [DESIGNS.get(n)(cfg).workload_key() for n in ALL_DESIGNS]
    assert sum(k.policy is None for k in set(keys)) == 2  # hybrid (host), gpu-only (device)
    passes = Replays(cfg, trace, True, replay_cache=False).passes(keys)
    assert passes.count(AccessUnique()) == 1
    parts = [p for p in passes if isinstance(p, PolicyPart)]
    assert not [p for p in parts if p.key.policy is None]
    assert len({p.key for p in parts}) == sum(
        k.policy is not None for k in set(keys))


def test_a_forked_run_hashes_the_callers_trace_beside_the_replays(tmp_path, monkeypatch):
    """`simulate(checksum=True)`: the trace passed in (not its fitted slice) is hashed by a
    worker, once, to the digest a fresh copy gives; without it, or once hashed, no task."""
    from scratchpipe_sim.traces.csr_trace import Trace

    cfg = _config(CASES["quickstart-small"])
    trace = build_trace(cfg, cache=False)
    expected = dataclasses.replace(trace).content_sha256()  # a copy: its own memo
    assert trace.checksum_pending()
    simulate(cfg, ["lru-cache"], trace=trace, replay_cache=False, jobs=2)
    assert trace.checksum_pending()  # not asked for: not hashed
    log = tmp_path / "hashed_by"
    original = Trace.content_sha256

    def logged(self: Trace) -> str:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return original(self)

    monkeypatch.setattr(Trace, "content_sha256", logged)
    simulate(cfg, ["lru-cache", "hybrid"], trace=trace, replay_cache=False, jobs=2,
             checksum=True)
    pids = log.read_text().split()
    assert len(pids) == 1 and int(pids[0]) != os.getpid()  # one worker hashed it
    assert not trace.checksum_pending()
    assert trace.checksum() == expected
    fitted = fit_trace(trace, sized_config(cfg, trace))
    keys = [DESIGNS.get("lru-cache")(sized_config(cfg, trace)).workload_key()]
    assert Checksum() not in Replays(cfg, fitted, True, False, checksum_of=trace).passes(keys)


@pytest.mark.parametrize("case", sorted(CASES))
def test_parallel_and_serial_runs_give_the_same_rows(case: str) -> None:
    cfg = _config(CASES[case])
    trace = build_trace(cfg, cache=False)
    one = simulate(cfg, ALL_DESIGNS, trace=trace, replay_cache=False, jobs=1)
    two = simulate(cfg, ALL_DESIGNS, trace=trace, replay_cache=False, jobs=3)
    assert _without_wall(one) == _without_wall(two)


def test_jobs_within_memory_is_the_documented_bound() -> None:
    rows, accesses = 1000, 5000
    base = accesses * memory_guard.BYTES_PER_ACCESS
    per = rows * memory_guard.RUN_BYTES_PER_ROW
    f = memory_guard.jobs_within_memory
    assert f(rows, accesses, 4, available=base + 4 * per) == 4
    assert f(rows, accesses, 4, available=base + 4 * per - 1) == 3
    assert f(rows, accesses, 4, available=base + per) == 1
    assert f(rows, accesses, 4, available=0) == 1  # never below the serial run
    assert f(rows, accesses, 2, available=10**18) == 2  # never above what was asked
    # a memory-mapped trace shares nothing: each worker keeps its state and chunk buffers
    big = 10**9  # lookups: 20 GB held in memory, only bounded buffers mapped
    per_mapped = per + memory_guard.streaming_bytes(big)
    assert f(rows, big, 4, available=4 * per_mapped, mapped=True) == 4
    assert f(rows, big, 4, available=4 * per_mapped - 1, mapped=True) == 3
    assert f(rows, big, 4, available=4 * per_mapped) == 1  # held in memory it would not fit


def test_run_lowers_jobs_to_what_fits_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(CASES["quickstart-small"])
    trace = build_trace(cfg, cache=False)
    per = trace.total_rows * memory_guard.RUN_BYTES_PER_ROW
    need_one = trace.num_accesses * memory_guard.BYTES_PER_ACCESS + per
    seen: list[int] = []
    real = Replays.precompute

    def spy(self, keys, jobs):
        seen.append(jobs)
        return real(self, keys, jobs)

    monkeypatch.setattr(Replays, "precompute", spy)
    monkeypatch.setenv(memory_guard.ENV, str(need_one + per))  # room for two
    simulate(cfg, trace=trace, replay_cache=False, jobs=8)
    monkeypatch.setenv(memory_guard.ENV, str(need_one))  # room for one: serial
    simulate(cfg, trace=trace, replay_cache=False, jobs=8)
    assert seen == [2]


def test_a_failing_pass_raises_the_serial_error() -> None:
    cfg = _config(CASES["quickstart-small"] + ["cache.warmup_batches=0"])
    trace = build_trace(cfg, cache=False)
    messages = []
    for jobs in (1, 2):
        with pytest.raises(UserError) as e:
            simulate(cfg, ["lru-cache", "static-cache"], trace=trace, replay_cache=False,
                     jobs=jobs)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "warmup_batches" in messages[0]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_jobs_is_refused(bad) -> None:
    with pytest.raises(UserError, match="--jobs"):
        check_jobs(bad)


def test_cli_run_jobs(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "configs/quickstart.yaml", "--json", "--no-cache", "--no-timeline", "-q",
            "--set", "model.num_batches=12", "--set", "model.batch_size=256"]
    outs = []
    for jobs in ("1", "2"):
        assert main(args + ["--jobs", jobs, "--out", str(tmp_path / jobs)]) == 0
        outs.append(_without_wall(json.loads(capsys.readouterr().out)))
    assert outs[0] == outs[1]
    assert main(args + ["--jobs", "0", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs" in err[0]
    assert not (tmp_path / "bad").exists()


TRACE_CASES = [
    dict(distribution="zipf", table_rows=[50000, 2000, 300000], batch_size=128,
         num_batches=45, pooling=[3, 1, 7], seed=5, reuse=0.3),
    dict(distribution="zipf", table_rows=[50000, 2000], batch_size=64, num_batches=20,
         pooling=[4, 2], seed=7, pooling_sigma=0.5, reuse=0.1),
    dict(distribution="uniform", table_rows=1000, batch_size=1, num_batches=500, pooling=3,
         seed=1),
]


@pytest.mark.parametrize("case", range(len(TRACE_CASES)))
def test_tables_drawn_in_parallel_give_the_streamed_trace(case: int) -> None:
    """`generate_trace(jobs=N)` equals the block-by-block stream `generate_to_store`
    writes (`iter_blocks`), for every N."""
    from scratchpipe_sim.traces.generators import generate_trace, iter_blocks, make_spec

    c = TRACE_CASES[case]
    spec = make_spec(c["distribution"], c["table_rows"], c["batch_size"], c["num_batches"],
                     c["pooling"], c["seed"], c.get("reuse", 0.0), None, "",
                     c.get("pooling_sigma", 0.0))
    streamed = np.concatenate([ids for ids, _, _ in iter_blocks(spec)])
    for jobs in (1, 2, 3):
        t = generate_trace(**c, jobs=jobs)
        assert np.array_equal(t.indices, streamed)
        assert t.offsets[-1] == len(streamed) and t.num_batches == c["num_batches"]


def test_small_runs_stay_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below PARALLEL_MIN_ACCESSES a pool would cost more than it saves: no fork."""
    from scratchpipe_sim.traces import generators

    cfg = _config(CASES["quickstart-small"])
    trace = build_trace(cfg, cache=False)
    called: list[int] = []
    monkeypatch.setattr(Replays, "precompute", lambda self, keys, jobs: called.append(jobs))
    monkeypatch.setattr(generators, "PARALLEL_MIN_ACCESSES", trace.num_accesses + 1)
    simulate(cfg, trace=trace, replay_cache=False, jobs=2)
    assert called == []
    monkeypatch.setattr(generators, "PARALLEL_MIN_ACCESSES", trace.num_accesses)
    simulate(cfg, trace=trace, replay_cache=False, jobs=2)  # the spy made nothing: serial
    assert called == [2]


def test_a_warm_run_reads_its_passes_without_forking(tmp_path, monkeypatch) -> None:
    """Every pass in the on-disk cache is read in the parent: no pool is started, and the
    rows equal the cold parallel run's."""
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))
    cfg = _config(CASES["quickstart-small"])
    trace = build_trace(cfg, cache=False)
    import concurrent.futures

    pools: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def counting(*args, **kwargs):
        pools.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", counting)
    cold = simulate(cfg, trace=trace, jobs=2)
    assert pools == [1]
    warm = simulate(cfg, trace=trace, jobs=2)
    assert pools == [1]
    assert _without_wall(cold) == _without_wall(warm)


def test_sensitivity_prices_its_samples_in_parallel_to_the_same_result() -> None:
    from scratchpipe_sim.experiments.sensitivity_analysis import run_sensitivity

    cfg = _config(CASES["quickstart-small"])
    trace = build_trace(cfg, cache=False)
    one = run_sensitivity(cfg, ["hybrid", "lru-cache", "scratchpipe"], samples=5, seed=3,
                          trace=trace, jobs=1).to_json()
    two = run_sensitivity(cfg, ["hybrid", "lru-cache", "scratchpipe"], samples=5, seed=3,
                          trace=trace, jobs=2).to_json()
    assert one == two and len(one["lhs"]["speedup"]["scratchpipe"]) == 5


def test_cli_sensitivity_jobs_on_a_config(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sensitivity", "configs/quickstart.yaml", "--json", "--samples", "3",
            "--design", "lru-cache", "--set", "model.num_batches=12",
            "--set", "model.batch_size=256"]
    outs = []
    for jobs in ("1", "2"):
        assert main(args + ["--jobs", jobs]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1]
    assert main(args + ["--jobs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs" in err[0]
