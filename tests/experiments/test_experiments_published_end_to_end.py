"""End-to-end points of `validate --published`: the shipped ones, a bad one, and the CLI
listing a whole iteration with its breakdown."""

from __future__ import annotations

import json

import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import published_points as PP
from scratchpipe_sim.experiments import published as P


def _raw() -> dict:
    return yaml.safe_load(PP.DATA_FILE.read_text(encoding="utf-8"))


def test_shipped_end_to_end_points_load_with_roles():
    points = {p.id: p for p in PP.load_end_to_end()}
    assert {"E3.8-sgd-256", "E3.8-adagrad-2048-dot", "E3.8-adagrad-2048-dcn",
            "E3.8-adagrad-16384-dcn", "E3.12", "E3.11"} <= set(points)
    # gemm_efficiency, TorchRec's ops per feature, host_op_ns (docs/validation.md)
    assert [i for i, p in points.items() if p.role == "fit"] == [
        "E3.8-sgd-256", "E3.8-adagrad-16384-dcn", "E3.12"]
    assert {p.model.framework for p in points.values()} == {"torchrec", "eager-per-table"}
    # samples/s per GPU become ms per iteration of the local batch: 9.08 it/s
    assert points["E3.8-adagrad-16384-dcn"].measured_ms == pytest.approx(1e3 / 9.08, rel=1e-3)
    assert points["E3.12"].measured_ms == pytest.approx(17.304 / 5)
    assert points["E3.11"].skip_reason  # dense-gradient embeddings: not FBGEMM's TBE
    for p in points.values():  # each config passes the model's checks (widths included)
        if p.skip_reason is None:
            assert P.end_to_end_config(p)["model"]["top_mlp"][0] == p.model.top_mlp[0]


def _tiny(**change) -> dict:
    point = {"id": "X.tiny", "source": "https://example.org", "gpu": "A100",
             "preset": "a100-gen4", "hardware": {}, "design": "gpu-only", "gpus": 1,
             "alpha": 1.05,
             "model": {"tables": 2, "rows_per_table": 1000, "dim": 16, "pooling": 2,
                       "batch_size": 64, "optimizer": "sgd", "bottom_mlp": [13, 16],
                       "top_mlp": [19, 1], "interaction": "dot", "precision": "fp32",
                       "framework": "eager"},
             "measured": {"ms_per_iter": 0.5}, "role": "check", "note": "tiny",
             "skip_reason": None}
    point.update(change)
    return point


def _write(tmp_path, *e2e) -> str:
    doc = _raw()
    doc["end_to_end"] = list(e2e)
    path = tmp_path / "points.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("change, words", [
    ({"model": None}, "has no model"),
    ({"model": {"tables": 2, "dim": 16}}, "has no batch"),
])
def test_a_point_missing_its_model_or_batch_is_one_line_naming_it(tmp_path, capsys, change,
                                                                  words):
    point = _tiny()
    if change["model"] is None:
        del point["model"]
    else:
        point["model"] = change["model"]
    path = _write(tmp_path, point)
    assert main(["validate", "--published", "--data", path, "--only", "X.tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "X.tiny" in err[0] and words in err[0] and path in err[0]


def test_an_unknown_framework_is_one_line_naming_its_key(tmp_path, capsys):
    path = _write(tmp_path, _tiny(model={**_tiny()["model"], "framework": "pytorch"}))
    assert main(["validate", "--published", "--data", path, "--only", "X.tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "end_to_end[0].model.framework" in err[0] and "eager" in err[0]


def test_both_or_neither_measurement_is_refused(tmp_path, capsys):
    path = _write(tmp_path, _tiny(measured={"ms_per_iter": 1, "samples_per_s_per_gpu": 2}))
    assert main(["validate", "--published", "--data", path, "--only", "X.tiny"]) == 2
    assert "end_to_end[0].measured" in capsys.readouterr().err


def test_cli_lists_the_end_to_end_point_with_its_breakdown(tmp_path, capsys):
    path = _write(tmp_path, _tiny())
    assert main(["validate", "--published", "--data", path, "--only", "X.tiny"]) == 0
    out = capsys.readouterr().out
    assert "end-to-end points" in out and "X.tiny" in out
    assert "X.tiny breakdown (ms): embedding" in out and "interaction" in out
    assert main(["validate", "--published", "--data", path, "--only", "X.tiny",
                 "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["kind"] == "end-to-end" and row["measured_ms"] == 0.5
    assert row["factor"] == pytest.approx(row["predicted_ms"] / 0.5)
    # the breakdown is the iteration: embedding stages + dense + interaction + host_wait
    # + other; this batch-64 eager model is host-bound (timing/host_dispatch.py)
    assert sum(row["breakdown_ms"].values()) == pytest.approx(row["predicted_ms"])
    assert row["breakdown_ms"]["host_wait"] > 0
    assert row["predicted_samples_per_s_per_gpu"] == pytest.approx(
        64 / row["predicted_ms"] * 1e3)


@pytest.mark.parametrize("change, key", [
    ({"input_pipeline": {"loader_in_workers": True}}, "end_to_end[0].input_pipeline"),
    ({"input_pipeline": {"loader_ns_per_sample": -1}},
     "end_to_end[0].input_pipeline.loader_ns_per_sample"),
    ({"model": {**_tiny()["model"], "optimizer_foreach": "sometimes"}},
     "end_to_end[0].model.optimizer_foreach"),
])
def test_bad_loader_and_optimizer_keys_are_one_line_naming_them(tmp_path, capsys, change,
                                                                 key):
    path = _write(tmp_path, _tiny(**change))
    assert main(["validate", "--published", "--data", path, "--only", "X.tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and path in err[0]


def test_the_e38_points_run_torchrec_dlrm_as_its_requirements_pin():
    """E3.8's trainer (torchrec 0.3.2, PyTorch 1.13): the dense optimizer per tensor, the
    DataLoader without workers (the trainer's thread builds each batch)."""
    for p in PP.load_end_to_end():
        if p.id.startswith("E3.8"):
            assert p.model.optimizer_foreach is False
            assert p.input_pipeline["loader_in_trainer"] is True
            cfg = P.end_to_end_config(p)
            assert cfg["model"]["optimizer_foreach"] is False
            assert cfg["input_pipeline"]["loader_in_trainer"] is True


@pytest.mark.parametrize("hbm_GiB", [None, 38.0])
def test_e38_placement_under_torchrec_v032_default_hbm_cap(hbm_GiB):
    """E3.8's tables are placed against torchrec v0.3.2's default HBM_CAP (32 GiB) less the
    5% reservation: the five 40M-row tables row-wise under Adagrad (38.1 GiB with its
    per-element state), none under SGD (19.1 GiB); the A100's 40 GiB less 5% (38, the file's
    value before) places them the same."""
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.timing.placement import shard

    points = {p.id: p for p in PP.load_end_to_end()}
    for pid, row_wise in (("E3.8-sgd-256", False), ("E3.8-adagrad-2048-dot", True),
                          ("E3.8-adagrad-16384-dcn", True)):
        d = P.end_to_end_config(points[pid])
        assert d["hardware"]["gpu"]["hbm_capacity_GiB"] == pytest.approx(32 * 0.95)
        if hbm_GiB is not None:
            d["hardware"]["gpu"]["hbm_capacity_GiB"] = hbm_GiB
        cfg = load_config(d)
        placed = shard(cfg, 8, "auto", "test").row_wise
        rows = points[pid].model.rows_per_table
        assert placed == tuple(row_wise and r == 40_000_000 for r in rows)
