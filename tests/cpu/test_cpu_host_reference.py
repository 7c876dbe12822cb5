"""The host's speed measured against itself (issue 43, `cpu/host_reference.py`).

No timing thresholds: samples are injected. The reference's ratio is exactly 1 on the same
samples; the host-adjusted ratio is predicted x (t_ref now / t_ref at calibration) /
measured, each side by its own statistic; calibrate's raw JSON sidecar carries the samples
to validate unchanged (and the preset's comment names them); a preset without a recorded
reference (shipped, or calibrated before) gives the row without a ratio, no adjusted
column and no error. The FBGEMM runs (the update bench sampling the reference once a round,
validate's JSON end to end) skip without the `peers` extra.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from cpu_fakes import synthetic
from peer_packages import fbgemm_reason

from scratchpipe_sim.cli import main
from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm
from scratchpipe_sim.cpu import host_reference as hr
from scratchpipe_sim.errors import UserError

needs_fbgemm = pytest.mark.skipif(fbgemm_reason() is not None, reason=str(fbgemm_reason()))

FWD = (0.0011, 0.0009, 0.0014, 0.0010)
BWD = (0.0016, 0.0019, 0.0015, 0.0021)


def _samples(statistic: str = "best", scale: float = 1.0, blocks=()) -> hr.ReferenceSamples:
    return hr.ReferenceSamples(hr.REFERENCE, statistic, tuple(x * scale for x in FWD),
                               tuple(x * scale for x in BWD), tuple(blocks))


def _stages() -> list[fbgemm.FbgemmStage]:
    return [fbgemm.FbgemmStage("cpu_gather", 6.0, 8.0, 4, 3.0, "forward"),
            fbgemm.FbgemmStage("cpu_update", 21.0, 14.0, 4, 5.0, "backward + fused optimizer"),
            fbgemm.FbgemmStage(fbgemm.PROBE_STAGE, 1.2, 1.9, 4, 9.0, "-")]


@pytest.mark.parametrize("statistic", ["best", "median"])
def test_the_same_samples_on_both_sides_give_exactly_one(statistic):
    s = _samples(statistic)
    assert hr.host_ratio(s, s) == 1.0
    rows = fbgemm.with_reference(_stages(), s, s)
    ref = rows[-1]
    assert isinstance(ref, fbgemm.ReferenceRow) and ref.stage == "host.reference"
    assert ref.ratio == 1.0 and ref.calibration_ms == ref.measured_ms
    for r in rows[:-1]:
        assert r.host_adjusted == r.ratio  # nothing to take out


def test_the_adjusted_ratio_is_predicted_times_the_host_ratio_over_measured():
    # now: best of the samples x 1.5; at calibration: their median (each its own statistic)
    now, calib = _samples("best", 1.5), _samples("median")
    t_now = min(f + b for f, b in zip(FWD, BWD, strict=True)) * 1.5
    t_cal = float(np.median([f + b for f, b in zip(FWD, BWD, strict=True)]))
    k = t_now / t_cal
    assert hr.host_ratio(now, calib) == pytest.approx(k, rel=1e-12)
    rows = fbgemm.with_reference(_stages(), now, calib)
    for r, (p, m) in zip(rows[:-1], ((6.0, 8.0), (21.0, 14.0), (1.2, 1.9)), strict=True):
        assert r.ratio == pytest.approx(p / m, rel=1e-12)  # the raw ratio is kept
        assert r.host_adjusted == pytest.approx(p * k / m, rel=1e-12)
        assert r.as_json()["host_adjusted"] == r.host_adjusted
    ref = rows[-1].as_json()
    assert ref["ratio"] == pytest.approx(k, rel=1e-12)
    assert ref["measured_ms"] == pytest.approx(t_now * 1e3, rel=1e-12)
    assert ref["calibration_ms"] == pytest.approx(t_cal * 1e3, rel=1e-12)
    assert (ref["statistic"], ref["calibration_statistic"]) == ("best", "median")
    assert ref["samples_ms"] == pytest.approx([(f + b) * 1.5e3 for f, b in zip(FWD, BWD,
                                                                             strict=True)])
    table = fbgemm.format_table(rows)
    assert "adjusted" in table.splitlines()[0] and "host.reference" in table


def test_the_sidecar_carries_the_samples_to_validate_and_the_preset_names_them(tmp_path):
    from scratchpipe_sim.cpu.host_preset_fit import cpu_preset_yaml, fit_cpu

    s = _samples("best", blocks=("sgd", "sgd", "adagrad", "adagrad"))
    m = synthetic()
    m.host_reference = s.as_json()
    preset = tmp_path / "cal.yaml"
    text = cpu_preset_yaml(fit_cpu(m), m, "measured-cpu", None)
    preset.write_text(text)
    preset.with_suffix(".json").write_text(m.to_json())  # as calibrate writes it
    got, why = hr.load_reference(preset)
    assert got == s and why == ""
    assert got.by_block() == {"sgd": min(FWD[0] + BWD[0], FWD[1] + BWD[1]),
                              "adagrad": min(FWD[2] + BWD[2], FWD[3] + BWD[3])}
    line = next(t for t in text.splitlines() if "host reference" in t)
    assert line.startswith("# ") and f"best of {len(FWD)} = {s.value_s() * 1e3:.3f} ms" in line
    assert "sgd" in line and "adagrad" in line
    yaml.safe_load(text)  # still a preset


def test_an_old_or_shipped_preset_gives_no_adjusted_column_and_no_error(tmp_path):
    preset = tmp_path / "old.yaml"
    preset.write_text("name: old\n")
    ref, why = hr.load_reference(preset)  # no sidecar (a shipped preset)
    assert ref is None and "no raw samples" in why
    doc = json.loads(synthetic().to_json())
    del doc["host_reference"]  # calibrated before the reference existed
    preset.with_suffix(".json").write_text(json.dumps(doc))
    ref, why = hr.load_reference(preset)
    assert ref is None and "older calibration" in why
    other = _samples().as_json()
    other["workload"]["rows"] = 1024  # another workload's samples are not compared
    preset.with_suffix(".json").write_text(json.dumps({"host_reference": other}))
    ref, why = hr.load_reference(preset)
    assert ref is None and "another workload" in why
    rows = fbgemm.with_reference(_stages(), _samples(), None, why)
    assert all(r.host_adjusted is None for r in rows[:-1])
    assert rows[-1].ratio is None and rows[-1].as_json()["ratio"] is None
    table = fbgemm.format_table(rows)
    assert "adjusted" not in table.splitlines()[0]
    assert "no host-adjusted column" in table and "another workload" in table


def _short() -> dict:
    d = _samples().as_json()
    d["backward_s"] = d["backward_s"][:-1]
    return d


@pytest.mark.parametrize("record", [{"statistic": 1}, [1, 2], "x", _short(),
                                    {**_samples().as_json(), "statistic": "mean"}])
def test_a_broken_record_is_one_error_naming_the_file_and_key(record, tmp_path):
    preset = tmp_path / "cal.yaml"
    preset.with_suffix(".json").write_text(json.dumps({"host_reference": record}))
    with pytest.raises(UserError) as e:
        hr.load_reference(preset)
    assert e.value.field == "host_reference" and "cal.json" in str(e.value.source)


@pytest.mark.parametrize(("calib", "reps", "want"), [(None, 7, 1), (15, 7, 2), (15, 5, 3),
                                                     (4, 7, 1), (4, 2, 2)])
def test_validate_takes_about_as_many_reference_samples_as_the_calibration(calib, reps,
                                                                           want):
    s = None if calib is None else hr.ReferenceSamples(hr.REFERENCE, "best", (1.0,) * calib,
                                                       (1.0,) * calib)
    assert fbgemm.reference_per_pass(s, reps) == want


def test_validate_finds_the_preset_file_after_the_overrides(tmp_path):
    from scratchpipe_sim.config.loader import preset_file

    (tmp_path / "cal.yaml").write_text("name: cal\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("hardware: {preset: a100-gen4}\n")
    assert preset_file(str(cfg), []).name == "a100-gen4.yaml"
    got = preset_file(str(cfg), [f"hardware.preset={tmp_path / 'cal.yaml'}"])
    assert got == tmp_path / "cal.yaml"
    cfg.write_text("hardware: {cpu: {cores: 1}}\n")
    assert preset_file(str(cfg), []) is None


class _Counting:
    """A stand-in reference: records which block each sample opened."""

    def __init__(self):
        self.blocks: list[str] = []

    def sample(self, block: str = "") -> None:
        self.blocks.append(block)


@needs_fbgemm
def test_the_update_bench_samples_the_reference_once_a_timed_round():
    from scratchpipe_sim.cpu import fbgemm_update_bench as ub

    ref = _Counting()
    fit = [ub.UpdateShape(1, 16, 2, 16, 1), ub.UpdateShape(2, 16, 4, 16, 1)]
    ub.measure_update(fbgemm.import_fbgemm(), 1 << 10, 0, 3, "best", lambda t: t.best_s,
                      optimizers=("sgd", "adagrad"), shape_set=(fit, []), reference=ref)
    assert ref.blocks == ["sgd"] * 3 + ["adagrad"] * 3  # not in the warm-up round


@needs_fbgemm
def test_the_reference_workload_records_one_sample_a_call():
    ref = hr.HostReference(fbgemm.import_fbgemm(),
                           hr.ReferenceWorkload(rows=4096, dim=16, batch=64, pooling=4))
    assert ref.forward_s == []  # nothing timed until asked
    ref.sample("a")
    ref.sample("b")
    s = ref.record("median")
    assert len(s.forward_s) == len(s.backward_s) == 2 and s.blocks == ("a", "b")
    assert all(x > 0 for x in s.seconds)


CONFIG = """
name: fbgemm-ref-tiny
seed: 5
hardware: {preset: PRESET}
model:
  tables: {count: 2, rows: 400, dim: 8}
  pooling: 3
  batch_size: 32
  num_batches: 3
  warmup_batches: 1
trace: {distribution: zipf, alpha: 1.05}
designs: [hybrid]
"""


@needs_fbgemm
def test_validate_json_reports_the_reference_and_the_adjusted_ratios(tmp_path, capsys):
    preset = tmp_path / "cal.yaml"
    preset.write_text("name: cal\npreset: a100-gen4\ncpu: {cores: 1}\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG.replace("PRESET", "a100-gen4, cpu: {cores: 1}"))
    argv = ["validate", "--cpu", str(cfg), "--against", "fbgemm", "--json", "--reps", "2"]
    assert main(argv) == 0  # a shipped preset: the row without a ratio, no error
    rows = json.loads(capsys.readouterr().out)
    assert [r["stage"] for r in rows] == ["cpu_gather", "cpu_update", "host.uniform_gather",
                                          "host.reference"]
    assert all(r["host_adjusted"] is None for r in rows[:-1])
    assert rows[-1]["ratio"] is None and rows[-1]["samples"] == 2
    assert rows[-1]["measured_ms"] > 0 and "no raw samples" in rows[-1]["note"]

    calib = _samples("median")
    preset.with_suffix(".json").write_text(json.dumps({"host_reference": calib.as_json()}))
    assert main([*argv, "--set", f"hardware.preset={preset}"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ref = rows[-1]
    assert ref["samples"] == 4 == ref["calibration_samples"]  # 2 a pass: as many in all
    assert ref["calibration_ms"] == pytest.approx(calib.value_s() * 1e3, rel=1e-12)
    assert ref["ratio"] == pytest.approx(ref["measured_ms"] / ref["calibration_ms"],
                                         rel=1e-12)
    for r in rows[:-1]:
        assert r["host_adjusted"] == pytest.approx(
            r["predicted_ms"] * ref["ratio"] / r["measured_ms"], rel=1e-12)
