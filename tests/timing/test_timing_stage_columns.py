"""Stage times read by name (`timing/stage_columns.py`): every design's declared
`phase_stages` are stages its run times, and a stage or a design that is not there is an
error, never a silent 0."""

from __future__ import annotations

import copy

import pytest

from scratchpipe_sim.config import load_config
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.designs import DESIGNS
from scratchpipe_sim.timing.stage_columns import (
    StageNotTimed,
    phases_ms,
    stage_key,
    stage_ns,
    timed_stages,
)
from tests.small_configs import TWO_SMALL_TABLES

DECLARING = sorted(n for n in DESIGNS.names() if DESIGNS.get(n).phase_stages)


def _rows() -> list[dict]:
    d = copy.deepcopy(TWO_SMALL_TABLES)
    d.update(hardware={"preset": "h100-gen5"}, designs=DECLARING)
    return simulate(load_config(d), replay_cache=False)


def test_declared_phase_stages_are_timed_and_summed_exactly():
    assert DECLARING, "no design declares its phases"
    for row in _rows():
        declared = DESIGNS.get(row["design"]).phase_stages
        assert set(declared) == {"forward", "backward"}
        timed = timed_stages(row)
        for phase, stages in declared.items():
            assert stages and set(stages) <= set(timed), (row["design"], phase, timed)
        got = phases_ms(row)
        for phase, stages in declared.items():  # the sum of the row's own columns, in ms
            assert got[phase] == sum(row[stage_key(s)] for s in stages) / 1e6
            assert got[phase] > 0


def test_a_renamed_produced_stage_is_an_error_not_zero():
    row = next(r for r in _rows() if r["design"] == "gpu-only")
    renamed = {("stage_gpu_gathr_ns" if k == "stage_gpu_gather_ns" else k): v
               for k, v in row.items()}
    with pytest.raises(StageNotTimed, match="timed no stage 'gpu_gather'") as e:
        phases_ms(renamed)
    assert "did you mean 'gpu_gathr'" in str(e.value)
    with pytest.raises(StageNotTimed):
        stage_ns(renamed, "gpu_gather")


def test_a_renamed_declared_stage_is_an_error_not_zero(monkeypatch):
    row = next(r for r in _rows() if r["design"] == "lru-cache")
    cls = DESIGNS.get("lru-cache")
    monkeypatch.setattr(cls, "phase_stages", {"forward": ("fetch", "forwrd"),
                                              "backward": ("backward",)})
    with pytest.raises(StageNotTimed, match="design 'lru-cache' timed no stage 'forwrd'"):
        phases_ms(row)


def test_a_design_declaring_no_phases_is_an_error():
    undeclared = [n for n in DESIGNS.names() if not DESIGNS.get(n).phase_stages]
    assert undeclared  # e.g. scratchpipe: its stages are a pipeline, not TBE phases
    with pytest.raises(StageNotTimed, match="declares no phase_stages"):
        phases_ms({"design": undeclared[0]})
