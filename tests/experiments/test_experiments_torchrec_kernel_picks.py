"""`torchrec-plan --published` (issue 45): the published configurations grouped and their
measured-fastest kernel (exact, from the data file), and both planners' picks on a scaled-
down copy of one configuration. The planner tests need torchrec 1.8.0 (skip otherwise)."""

from __future__ import annotations

import dataclasses

import pytest
from peer_packages import torchrec_reason

from scratchpipe_sim.cli import main
from scratchpipe_sim.config.published_points import load_points
from scratchpipe_sim.experiments import torchrec_kernel_picks as kp

needs_torchrec = pytest.mark.skipif(torchrec_reason() is not None, reason=str(torchrec_reason()))


def _total(p) -> float:
    return sum(ms for _, ms in p.measured_ms.items())


def test_groups_and_the_measured_fastest_kernel():
    pts = {p.id: p for p in load_points()}
    groups = {tuple(p.id for p in g) for g in kp.groups(list(pts.values()))}
    # one configuration per (tables, ids, optimizer); FK and T1.24 are not T1 H100 runs
    assert groups == {("T1.1",), ("T1.2",), ("T1.3", "T1.4", "T1.7", "T1.9"),
                      ("T1.5", "T1.6", "T1.8", "T1.10")}
    g = next(g for g in kp.groups(list(pts.values())) if g[0].id == "T1.5")
    times, caching = kp.measured(g)
    assert times == {"fused_uvm": min(_total(pts["T1.8"]), _total(pts["T1.10"])),
                     "fused_uvm_caching": min(_total(pts["T1.5"]), _total(pts["T1.6"]))}
    assert caching is pts["T1.6"]  # cfr 1.0 is the faster cache size
    assert min(times, key=times.__getitem__) == "fused_uvm_caching"


def _small(group, rows: int = 4000, batch: int = 256):
    """The configuration scaled down: 2 tables of `rows`, `batch` samples."""
    return [dataclasses.replace(p, model=dataclasses.replace(
        p.model, tables=2, rows_per_table=rows, batch_size=batch)) for p in group]


@needs_torchrec
def test_picks_on_a_scaled_down_configuration():
    g = next(g for g in kp.groups(load_points()) if g[0].id == "T1.5")
    r = kp.pick(_small(g), batches=4)
    assert r.fastest == "fused_uvm_caching" and r.ids == ("T1.5", "T1.6", "T1.8", "T1.10")
    assert 0 < r.load_factor <= 1.0
    for scope in kp.SCOPES:
        assert set(r.picks[scope]) == {"torchrec", "simulator"}
        for planner in ("torchrec", "simulator"):
            used = set(r.picks[scope][planner].split("+"))
            if scope == "measured":
                assert used <= set(r.measured_ms)
            # each plan priced by both estimators
            assert set(r.iter_ms[scope][planner]) == {"torchrec", "simulator"}
        # the simulator-backed planner never picks what the simulator prices slower
        assert r.sim_not_slower(scope)
    js = r.as_json()
    assert js["measured_fastest"] == "fused_uvm_caching"
    assert "measured" in kp.format_picks([r])


@needs_torchrec
def test_published_flags_are_one_line_errors(capsys, tmp_path):
    for argv, what in ((["torchrec-plan", "--published", "--only", "T9.9"], "no point"),
                       (["torchrec-plan", "--published", "--batches", "1"], "--batches"),
                       (["torchrec-plan", "--published", "--only", "FK.1"], "no T1.x"),
                       (["torchrec-plan", "--published", "x.yaml"], "takes no CONFIG"),
                       (["torchrec-plan", "--batches", "4"], "only with --published"),
                       (["torchrec-plan"], "expected a CONFIG")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and what in err, (argv, err)


def test_the_simulator_backed_answer_is_never_slower_by_its_own_price():
    """simulator_choice: the simulator-backed planner keeps its own plan unless the simulator
    prices TorchRec's faster (TorchRec's greedy partitioner can balance its estimates
    worse), then answers with TorchRec's plan and says so."""
    from scratchpipe_sim.experiments.torchrec_planner import PlanSide, simulator_choice

    def side(name: str, sim_ms: float, tr_ms: float) -> PlanSide:
        return PlanSide(name, (), {"simulator": sim_ms, "torchrec": tr_ms}, 1, 0)

    tr, own = side("torchrec", 0.0976, 0.0649), side("simulator", 0.0998, 0.0669)
    got = simulator_choice(tr, own)
    assert got.planner == "simulator" and got.iter_ms == tr.iter_ms
    assert "TorchRec's plan kept" in got.note and "0.0998" in got.note
    better = side("simulator", 0.09, 0.07)
    assert simulator_choice(tr, better) is better
    tie = side("simulator", 0.0976, 0.07)
    assert simulator_choice(tr, tie) is tie
