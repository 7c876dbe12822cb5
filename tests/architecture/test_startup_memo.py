"""Issue 15's in-process memos are invisible: same answers as without them, an edited file is
read again, a returned value can be changed by its caller without changing the next one."""

from __future__ import annotations

import gc
import os
import time
import weakref

import numpy as np
import pytest
import yaml

from scratchpipe_sim.config import hardware, load_config, loader, read_yaml
from scratchpipe_sim.config.hardware import CpuConfig, interpolate
from scratchpipe_sim.config.schema import build
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces import csr_trace as rc
from scratchpipe_sim.traces.csr_trace import Trace


# -- interpolate ------------------------------------------------------------------------------
def _interp(curve, x) -> float:
    """The oracle: np.interp on the curve's points, no memo."""
    return float(np.interp(x, [p[0] for p in curve], [p[1] for p in curve]))


@pytest.mark.parametrize("curve", [CpuConfig().gather_efficiency,
                                   ((32.0, 0.1), (100.0, 0.37), (4096.0, 0.9)),
                                   ((64.0, 0.5),)])
def test_interpolate_memo_is_bit_identical_to_np_interp(curve):
    xs = [1.0, 31.9, 32.0, 63.0, 64, 64.0, 65.5, 96.0, 100.0, 128, 200.25, 256.0, 300.0, 511.9,
          512.0, 513.0, 1e6, np.float64(96.0), np.int64(128)]
    rng = np.random.default_rng(1)
    xs += list(rng.uniform(1, 5000, 200))
    first = [interpolate(curve, x) for x in xs]
    again = [interpolate(curve, x) for x in xs]  # every one a memo hit now
    expect = [_interp(curve, x) for x in xs]
    assert [v.hex() for v in first] == [v.hex() for v in expect]
    assert [v.hex() for v in again] == [v.hex() for v in expect]
    assert all(type(v) is float for v in again)


def test_interpolate_memo_keys_on_the_curve_and_stays_bounded(monkeypatch):
    monkeypatch.setattr(hardware, "_INTERP_MEMO", {})
    monkeypatch.setattr(hardware, "_INTERP_MEMO_MAX", 8)
    a, b = ((64.0, 0.3), (512.0, 0.7)), ((64.0, 0.6), (512.0, 0.9))
    assert interpolate(a, 288.0) == pytest.approx(0.5)
    assert interpolate(b, 288.0) == pytest.approx(0.75)  # another curve: not a's answer
    for x in range(100):
        assert interpolate(a, float(x)) == _interp(a, float(x))
    assert len(hardware._INTERP_MEMO) <= 8
    # a list curve (unhashable) is computed, never memoized
    assert interpolate([[64.0, 0.3], [512.0, 0.7]], 288.0) == pytest.approx(0.5)


def test_config_curves_are_hashable_so_the_memo_applies():
    cfg = load_config({"hardware": {"preset": "a100-gen4"}})
    for curve in (cfg.hardware.cpu.gather_efficiency, cfg.hardware.gpu.gather_efficiency):
        hash(curve)


# -- read_yaml --------------------------------------------------------------------------------
def test_read_yaml_sees_an_edited_file_at_once(tmp_path):
    p = tmp_path / "preset.yaml"
    p.write_text("pcie: {h2d_GBps: 25.0}\n")
    assert read_yaml(p) == {"pcie": {"h2d_GBps": 25.0}}
    st = p.stat()
    # same size and the same mtime: only the content differs
    p.write_text("pcie: {h2d_GBps: 26.0}\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size
    assert read_yaml(p) == {"pcie": {"h2d_GBps": 26.0}}
    # a new size and mtime
    time.sleep(0.01)
    p.write_text("pcie: {h2d_GBps: 12.5, d2h_GBps: 12.5}\n")
    assert read_yaml(p) == {"pcie": {"h2d_GBps": 12.5, "d2h_GBps": 12.5}}


def test_read_yaml_result_can_be_changed_by_its_caller(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("model: {tables: {rows: 1000}, bottom_mlp: [13, 64]}\nseed: 3\n")
    first = read_yaml(p)
    first["model"]["tables"]["rows"] = 5
    first["model"]["bottom_mlp"].append(99)
    first["seed"] = 4
    del first["model"]
    second = read_yaml(p)
    assert second == {"model": {"tables": {"rows": 1000}, "bottom_mlp": [13, 64]}, "seed": 3}
    second["model"]["bottom_mlp"].clear()
    assert read_yaml(p)["model"]["bottom_mlp"] == [13, 64]


def test_read_yaml_errors_are_not_memoized(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("a: 1\na: 2\n")
    for _ in range(2):
        with pytest.raises(UserError, match="duplicate key"):
            read_yaml(p)
    p.write_text("a: 1\n")
    assert read_yaml(p) == {"a": 1}
    q = tmp_path / "other.yaml"  # the same text in another file: its own name in errors
    q.write_text("a: 1\na: 2\n")
    with pytest.raises(UserError) as e:
        read_yaml(q)
    assert e.value.source == str(q)


def test_preset_edit_reaches_the_next_load_config(tmp_path):
    hw = tmp_path / "hardware"
    hw.mkdir()
    (hw / "mine.yaml").write_text(yaml.safe_dump({"pcie": {"h2d_GBps": 7.0}}))
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(yaml.safe_dump({"hardware": {"preset": "mine"}}))
    assert load_config(cfg_file).hardware.pcie.h2d_GBps == 7.0
    (hw / "mine.yaml").write_text(yaml.safe_dump({"pcie": {"h2d_GBps": 9.0}}))
    assert load_config(cfg_file).hardware.pcie.h2d_GBps == 9.0
    # a config built from a memoized preset, then changed by --set, leaves the next alone
    assert load_config(cfg_file, ["hardware.pcie.h2d_GBps=3"]).hardware.pcie.h2d_GBps == 3.0
    assert load_config(cfg_file).hardware.pcie.h2d_GBps == 9.0


def test_read_yaml_memo_stays_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "_YAML_MEMO", {})
    monkeypatch.setattr(loader, "_YAML_MEMO_MAX", 4)
    for k in range(10):
        p = tmp_path / f"f{k}.yaml"
        p.write_text(f"k: {k}\n")
        assert read_yaml(p) == {"k": k}
    assert len(loader._YAML_MEMO) <= 4


# -- schema.build's per-class shape ---------------------------------------------------------------
def test_build_still_rejects_unknown_keys_and_bad_types_after_the_memo():
    for _ in range(2):
        with pytest.raises(UserError, match="unknown key 'h2d'"):
            build(hardware.PcieConfig, {"h2d": 1}, "x.yaml", "hardware.pcie")
        with pytest.raises(UserError) as e:
            build(hardware.PcieConfig, {"h2d_GBps": "fast"}, "x.yaml", "hardware.pcie")
        assert e.value.field == "hardware.pcie.h2d_GBps"
    assert build(hardware.PcieConfig, {"h2d_GBps": 3}, None).h2d_GBps == 3.0


# -- slice_trace ------------------------------------------------------------------------------
def _trace(n_batches: int = 12) -> Trace:
    rng = np.random.default_rng(0)
    return Trace.single_table(rng.integers(0, 50, 8 * n_batches).astype(np.int64), 50, 8)


def test_slice_memo_returns_the_same_slice_with_the_right_content():
    rc.forget_slices()
    t = _trace()
    a = rc.slice_trace(t, 2, 9)
    assert rc.slice_trace(t, np.int64(2), 9) is a
    fresh = t.slice(2, 9)
    for name in ("indices", "offsets", "batch_bounds", "table_rows"):
        assert np.array_equal(getattr(a, name), getattr(fresh, name))
    assert a.fingerprint() == rc.slice_trace(t, 2, 9).fingerprint()
    assert a.fingerprint() != rc.slice_trace(t, 2, 10).fingerprint()
    assert rc.slice_trace(t, 0, t.num_batches) is t


def test_slice_memo_never_confuses_parents_and_frees_them():
    rc.forget_slices()
    t1, t2, t3 = _trace(12), _trace(10), _trace(11)
    s1 = rc.slice_trace(t1, 1, 5)
    s2 = rc.slice_trace(t2, 1, 5)
    s3 = rc.slice_trace(t3, 1, 5)  # a third parent: the memo starts over (bounded)
    assert s1 is not s2 and s2 is not s3
    assert len(rc._SLICE_MEMO) <= rc._SLICE_MEMO_PARENTS
    ref = weakref.ref(t1)
    del t1, s1
    rc.forget_slices()
    gc.collect()
    assert ref() is None, "a forgotten parent must be freed"
    again = rc.slice_trace(t3, 1, 5)  # made afresh after forget_slices, same content
    assert again is not s3 and np.array_equal(again.indices, s3.indices)
