"""The read-recording hardware view: every leaf read is recorded (through properties and
methods too), anything it cannot follow fails loudly, and the diff of two configs names
exactly the keys that differ."""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field

import pytest
from small_configs import SMALL_A100

from scratchpipe_sim.config import load_config
from scratchpipe_sim.config.read_tracking import (
    HardwareReads,
    UntrackedAccess,
    hardware_diff,
    reads_any,
    track_hardware_reads,
    untracked,
)
from scratchpipe_sim.experiments.sensitivity_analysis import with_values


@dataclass(frozen=True)
class Inner:
    a: float = 1.0
    b: float = 2.0
    c: float = 4.0

    @property
    def total(self) -> float:
        return self.a + self.b

    def scaled(self, k: float) -> float:
        return self.c * k

    @staticmethod
    def unit() -> float:
        return 3.0

    @functools.cached_property
    def cached(self) -> float:
        return self.a


@dataclass(frozen=True)
class Outer:
    inner: Inner = field(default_factory=Inner)
    curve: tuple = ((64.0, 0.5), (128.0, 0.75))
    table: dict = field(default_factory=lambda: {"x": 1.0})


@dataclass(frozen=True)
class Holder:
    hw: object


def _view() -> tuple[HardwareReads, set[str]]:
    reads: set[str] = set()
    return HardwareReads(Outer(), "", reads), reads


def test_leaves_properties_and_methods_record_the_fields_they_read():
    v, reads = _view()
    assert v.inner.a == 1.0 and reads == {"inner.a"}
    assert v.inner.total == 3.0 and reads == {"inner.a", "inner.b"}
    assert v.inner.scaled(2.0) == 8.0 and "inner.c" in reads
    assert v.inner.unit() == 3.0
    assert v.curve == ((64.0, 0.5), (128.0, 0.75)) and "curve" in reads
    assert v.table == {"x": 1.0} and "table" in reads
    assert reads == {"inner.a", "inner.b", "inner.c", "curve", "table"}


@pytest.mark.parametrize("touch", [
    lambda v: dataclasses.asdict(Holder(v)),  # a config's to_dict() around the view
    lambda v: copy.deepcopy(v.inner),
    lambda v: copy.copy(v.inner),
    lambda v: v.inner == Inner(),
    lambda v: hash(v.inner),
    lambda v: v.inner.cached,
    lambda v: setattr(v.inner, "a", 2.0),
])
def test_what_the_view_cannot_follow_fails_loudly(touch):
    v, _reads = _view()
    with pytest.raises(UntrackedAccess):
        touch(v)


def test_untracked_access_passes_through_except_exception():
    """The observed code's own `except Exception` must not swallow the failure."""
    v, _reads = _view()

    def careless():
        try:
            return copy.deepcopy(v.inner)
        except Exception:  # noqa: BLE001 - what the test is about
            return None

    with pytest.raises(UntrackedAccess):
        careless()


def test_a_tracked_config_reads_the_same_values_and_unwraps():
    cfg = load_config(copy.deepcopy(SMALL_A100))
    reads: set[str] = set()
    t = track_hardware_reads(cfg, reads)
    assert t.hardware.pcie.h2d_GBps == cfg.hardware.pcie.h2d_GBps
    assert t.hardware.cpu.gather_efficiency == cfg.hardware.cpu.gather_efficiency
    assert reads == {"pcie.h2d_GBps", "cpu.gather_efficiency"}
    assert t.model is cfg.model and cfg.hardware is not t.hardware
    assert untracked(t).hardware is cfg.hardware
    assert untracked(cfg) is cfg
    with pytest.raises(UntrackedAccess):
        t.to_dict()


def test_hardware_diff_names_exactly_the_changed_keys():
    cfg = load_config(copy.deepcopy(SMALL_A100))
    assert hardware_diff(cfg, cfg) == frozenset()
    one = with_values(cfg, {"pcie.latency_ns": 7000.0})
    assert hardware_diff(cfg, one) == {"pcie.latency_ns"}
    two = with_values(cfg, {"gpu.gather_efficiency": 0.5, "cpu.cores": 3})
    assert hardware_diff(cfg, two) == {"gpu.gather_efficiency", "cpu.cores"}
    # a change outside hardware: no hardware read set can vouch for the result
    other = dataclasses.replace(cfg, seed=cfg.seed + 1)
    assert hardware_diff(cfg, other) is None


def test_reads_any_covers_keys_inside_a_read_whole_and_sections():
    reads = {"cpu.gather_efficiency", "pcie"}
    assert reads_any(reads, ["cpu.gather_efficiency"])
    assert reads_any(reads, ["pcie.latency_ns"])  # the whole section was read
    assert reads_any({"cpu.gather_efficiency.0"}, ["cpu.gather_efficiency"])
    assert not reads_any(reads, ["cpu.gather"])  # a prefix of a name is not a parent key
    assert not reads_any(reads, ["gpu.l2_GBps"])
    assert not reads_any(reads, [])
