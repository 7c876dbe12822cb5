"""The runner's seams (issue 40): the passes over the trace are typed objects, not tagged
tuples; the on-disk auto warm-up cache is keyed by the code that decides it, not by the
metrics; the metrics return their warnings instead of printing them."""

from __future__ import annotations

import dataclasses
import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import scratchpipe_sim
from scratchpipe_sim.config import load_config
from scratchpipe_sim.timing import counts, replay_passes, run_metrics, trace_setup
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.onchip import onchip_hits
from scratchpipe_sim.timing.replay_passes import (
    AccessUnique,
    Checksum,
    FirstTouches,
    OnChip,
    PolicyPart,
    Replays,
    TableBytes,
    TracePass,
)
from scratchpipe_sim.traces import disk_cache

PACKAGE = Path(scratchpipe_sim.__file__).resolve().parent
KINDS = {PolicyPart, AccessUnique, TableBytes, FirstTouches, OnChip, Checksum}


def _small(sets=()):
    return load_config("configs/quickstart.yaml",
                       ["model.num_batches=12", "model.batch_size=64", *sets])


def _fitted(cfg):
    trace = trace_setup.build_trace(cfg, cache=False)
    cfg = trace_setup.sized_config(cfg, trace)
    return cfg, trace_setup.fit_trace(trace, cfg)


def test_every_pass_kind_is_a_frozen_dataclass_with_the_four_methods():
    assert set(TracePass.__subclasses__()) == KINDS  # a new kind joins this list
    for kind in KINDS:
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, kind
        assert not inspect.isabstract(kind), kind  # run, keep, rank, cacheable: its own
        for method in ("run", "keep", "rank", "cacheable"):
            assert getattr(kind, method) is not getattr(TracePass, method), (kind, method)
    with pytest.raises(dataclasses.FrozenInstanceError):
        OnChip("l2", 10, 4).rows = 5  # type: ignore[misc]


def test_no_tag_dispatch_is_left_in_the_package():
    """No `task[0] == "part"`-style dispatch on a tuple's first item: the only `x[0] ==
    "..."` left compare text (a string's first character, a dotted key's first part)."""
    text_holders = {"rest", "parts"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        src = path.read_text()
        assert "task[0]" not in src, path
        for m in re.finditer(r"\b([A-Za-z_]\w*)\[0\]\s*(?:==|!=)\s*[\"']", src):
            if m.group(1) not in text_holders:
                found.append(f"{path.relative_to(PACKAGE)}: {m.group(0)}")
    assert found == []


def test_read_cached_asks_each_pass_whether_the_disk_cache_may_hold_it(tmp_path,
                                                                          monkeypatch):
    """A pass that says it is not cacheable is left to make, never run under the cache's
    lookup (a per-table bytes pass has no cache entry to read: it would be made here)."""
    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))
    cfg, trace = _fitted(_small())
    ran: list[str] = []

    @dataclasses.dataclass(frozen=True)
    class Probe:
        may_cache: bool

        def run(self, replays):
            ran.append("run")
            return 0

        def keep(self, replays, result, seconds):
            ran.append("keep")

        def rank(self):
            return 0

        def cacheable(self, replays):
            return self.may_cache

    replays = Replays(cfg, trace, True, replay_cache=True)
    assert replays._read_cached([Probe(False)]) == [Probe(False)] and ran == []
    assert replays._read_cached([Probe(True)]) == [] and ran == ["run", "keep"]
    mixed = _fitted(_small(["model.tables={count: 2, rows: [2000, 500], dim: [64, 128]}",
                            "model.pooling=[4, 2]", "model.interaction=cat",
                            "model.top_mlp=null"]))
    assert mixed[0].model.heterogeneous and not cfg.model.heterogeneous
    key = DESIGNS.get("lru-cache")(cfg).workload_key()
    other = Replays(*mixed, True, replay_cache=False)
    assert PolicyPart(key).cacheable(replays) and not PolicyPart(key).cacheable(other)
    assert not TableBytes().cacheable(replays) and not Checksum().cacheable(replays)
    assert AccessUnique().cacheable(replays) and FirstTouches().cacheable(replays)


def test_passes_start_longest_first():
    cfg, trace = _fitted(_small())
    keys = [DESIGNS.get(n)(cfg).workload_key()
            for n in ("hybrid", "gpu-only", "lru-cache", "scratchpipe")]
    passes = Replays(cfg, trace, True, replay_cache=False).passes(keys)
    ranks = [p.rank() for p in passes]
    assert ranks == sorted(ranks)
    assert isinstance(passes[0], PolicyPart) and passes[0].key.policy == "scratchpipe"
    assert {type(p) for p in passes} == {PolicyPart, OnChip, AccessUnique, FirstTouches}


def _home(fn) -> str:
    """The package file (relative, as the digests' sources name it) defining `fn`."""
    return Path(inspect.getsourcefile(fn)).resolve().relative_to(PACKAGE).as_posix()


def _digest_of_copy(root: Path, monkeypatch) -> str:
    """`code_digest` of the auto warm-up cache's sources as a package at `root` has them."""
    monkeypatch.setattr(scratchpipe_sim, "__file__", str(root / "__init__.py"))
    monkeypatch.setattr(disk_cache, "_CODE_DIGESTS", {})
    return disk_cache.code_digest(trace_setup._AUTO_SOURCES)


def test_editing_the_metrics_keeps_cached_warm_up_decisions(tmp_path, monkeypatch):
    """The auto warm-up cache is keyed by the code deciding it (the passes it makes,
    `steady`, `auto_warmup_trace`): editing `summarize` leaves its key, editing `steady`
    changes it."""
    for fn in (trace_setup.auto_warmup_trace, trace_setup.steady, counts.warmup_length,
               counts.first_touches, counts.access_unique):
        assert _home(fn) in trace_setup._AUTO_SOURCES, fn
    for fn in (counts.warmup_length, counts.first_touches, counts.access_unique):
        assert _home(fn) in replay_passes._COUNTS_SOURCES, fn  # Replays' own cached passes
    assert _home(onchip_hits) in replay_passes._ONCHIP_SOURCES
    assert _home(run_metrics.summarize) not in trace_setup._AUTO_SOURCES
    copy = tmp_path / "scratchpipe_sim"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    before = _digest_of_copy(copy, monkeypatch)
    metrics = copy / _home(run_metrics.summarize)
    metrics.write_text(metrics.read_text().replace('"""Metrics over the measured batches',
                                                   '"""Edited: metrics over the measured'))
    assert metrics.read_text() != Path(run_metrics.__file__).read_text()
    assert _digest_of_copy(copy, monkeypatch) == before
    setup = copy / "timing" / "trace_setup.py"
    setup.write_text(setup.read_text().replace("def steady(", "def steady(  "))
    assert _digest_of_copy(copy, monkeypatch) != before


def test_steady_state_warnings_are_returned_not_printed(capsys):
    cfg = _small()
    rows = [{"design": "lru-cache", "steady_state": False, "fill_rate_drift": 0.25,
             "cold_miss_share": 0.5, "cache_warmup_batches": 3},
            {"design": "hybrid"},
            {"design": "static-cache", "steady_state": True}]
    warnings = run_metrics.steady_state_warnings(cfg, rows)
    assert warnings == [run_metrics.steady_state_warning(cfg, rows[0])]
    assert "lru-cache did not reach steady state" in warnings[0] and "+25%" in warnings[0]
    assert capsys.readouterr() == ("", "")


def test_speedups_are_over_the_baseline_row():
    rows = [{"design": "lru-cache", "iter_ns_mean": 50.0},
            {"design": "hybrid", "iter_ns_mean": 200.0}]
    assert run_metrics.speedups_vs_baseline(rows) == [4.0, 1.0]
    assert run_metrics.speedups_vs_baseline(rows[:1]) == [None]


def test_checking_jobs_forks_nothing_and_imports_no_multiprocessing():
    """`run` checks `--jobs` on every call (`traces/forked.py:check_jobs`); the pool's
    modules (~7 ms) are imported only where a process forks."""
    probe = ("import sys\nfrom scratchpipe_sim.cli import run\n"
             "from scratchpipe_sim.traces.forked import check_jobs\ncheck_jobs(2)\n"
             "print(sorted(m for m in ('multiprocessing', 'concurrent.futures')"
             " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
