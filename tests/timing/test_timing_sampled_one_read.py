"""A sampled run's whole-trace passes (issue 41): every salt's sample made in one read and
the window pass forked beside it (`sampled_run.windows_and_samples`) give the rows of the
reference path, each salt sampled alone (`cached_sample`) after a serial window pass, at
chunk sizes of one batch, an odd size and more than the trace."""

from __future__ import annotations

import pytest

from scratchpipe_sim.config import load_config
from scratchpipe_sim.policies.scratchpipe import mean_window_rows
from scratchpipe_sim.timing import sampled_run, simulate
from scratchpipe_sim.timing.trace_setup import build_trace
from scratchpipe_sim.traces import csr_trace
from scratchpipe_sim.traces.spatial_sampling import cached_sample

SMALL = {
    "hardware": {"preset": "a100-gen4"},
    "model": {"tables": {"count": 2, "rows": 20000, "dim": 32}, "pooling": 4,
              "batch_size": 128, "num_batches": 10, "warmup_batches": 2,
              "bottom_mlp": [13, 16], "interaction": "cat", "top_mlp": [80, 1]},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"load_factor": 0.1, "warmup_batches": 6},
    "design_params": {"scratchpipe": {
        "lookahead": 3, "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]]}},
    "designs": ["hybrid", "lru-cache", "scratchpipe"],
    "seed": 3,
}
RATE = 0.3


def _strip(rows):
    return [{k: v for k, v in r.items() if not k.endswith("_wall_s")} for r in rows]


def _reference(trace, rate, salts, ws, cache, source, jobs=1):
    """One salt at a time, the window pass first, in this process."""
    windows = tuple((int(w), mean_window_rows(trace, int(w))) for w in ws)
    return windows, [cached_sample(trace, rate, s, cache=cache, source=source)
                     for s in range(salts)]


@pytest.fixture(scope="module")
def cfg():
    return load_config(SMALL)


@pytest.fixture(scope="module")
def want(cfg):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sampled_run, "windows_and_samples", _reference)
        return _strip(simulate(cfg, sample=RATE, replay_cache=False))


@pytest.mark.parametrize("chunk", ["1", "37", str(1 << 30)])
@pytest.mark.parametrize("jobs", [1, 2])
def test_one_read_and_the_forked_window_pass_give_the_reference_rows(cfg, want, chunk,
                                                                     jobs, monkeypatch):
    monkeypatch.setenv(csr_trace.CHUNK_ENV, chunk)
    assert _strip(simulate(cfg, sample=RATE, replay_cache=False, jobs=jobs)) == want


def test_windows_and_samples_equal_the_reference(cfg):
    trace = build_trace(cfg, cache=False)
    for jobs in (1, 2):
        windows, samples = sampled_run.windows_and_samples(trace, RATE, 3, [2, 3], False,
                                                           None, jobs)
        ref_windows, ref_samples = _reference(trace, RATE, 3, [2, 3], False, None)
        assert windows == ref_windows
        for s, r in zip(samples, ref_samples, strict=True):
            assert (s.linear_ids() == r.linear_ids()).all()
    assert sampled_run._WINDOW_WORK is None  # nothing left set for a later fork


def test_a_sampling_error_leaves_no_forked_window_pass(monkeypatch):
    """The sampling pass fails in the parent (a rate that keeps no row, a full disk): the
    error reaches the caller and the forked window pass is gone — even under the CLI's
    SIGTERM handler, which a multiprocessing Pool's worker inherited and its terminate()
    could wait on forever (the hang CI met)."""
    import multiprocessing
    import signal

    from scratchpipe_sim.errors import Terminated, UserError

    trace = build_trace(load_config(SMALL), cache=False)

    def fail(*args, **kwargs):
        raise UserError("no row kept", field="--sample")

    def raise_terminated(signum, frame):
        raise Terminated()

    monkeypatch.setattr(sampled_run, "cached_samples", fail)
    old = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        with pytest.raises(UserError, match="no row kept"):
            sampled_run.windows_and_samples(trace, RATE, 3, (3, 4), False, None, jobs=2)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert multiprocessing.active_children() == []


def test_a_window_pass_that_dies_is_made_here(monkeypatch):
    """The forked window pass exits without an answer (killed, out of memory): the parent
    makes the pass itself, with the same numbers."""
    import os

    trace = build_trace(load_config(SMALL), cache=False)
    monkeypatch.setattr(sampled_run, "_forked_window_rows", lambda send: os._exit(1))
    got = sampled_run.windows_and_samples(trace, RATE, 2, (3, 4), False, None, jobs=2)
    want = _reference(trace, RATE, 2, (3, 4), False, None)
    assert got[0] == want[0]
    assert [s.indices.tolist() for s in got[1]] == [s.indices.tolist() for s in want[1]]
