"""The registry is the single source of truth for plug-ins: a name written once, modules
discovered on first use, design metadata (default, order, baseline) with the lists derived."""

from __future__ import annotations

import sys

import pytest

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config, resolve
from scratchpipe_sim.experiments import plots
from scratchpipe_sim.policies import POLICIES
from scratchpipe_sim.registry import Registry
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.designs import (
    DESIGNS,
    baseline_design,
    config_designs,
    default_designs,
    design_order,
    with_default_designs,
)
from scratchpipe_sim.timing.designs.gpu_only import GpuOnly

SMALL = {
    "model": {"tables": {"count": 2, "rows": 300, "dim": 16}, "pooling": 2, "batch_size": 32,
              "num_batches": 6, "warmup_batches": 1},
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 100},
    "designs": ["gpu-only"],
}


@pytest.fixture
def test_design():
    """A copy of gpu-only registered at run time as "test-design", removed afterwards."""

    @DESIGNS.register("test-design")
    class TestDesign(GpuOnly):
        default = False  # GpuOnly is on by default; this copy is not
        order = 65  # between multi-gpu and uvm

    try:
        yield TestDesign
    finally:
        DESIGNS.unregister("test-design")


def test_a_design_registered_at_run_time_shows_everywhere(test_design, capsys, monkeypatch):
    assert test_design.name == "test-design"  # the decorator wrote the name
    cfg = load_config(SMALL)
    row, = simulate(cfg, ["test-design"])
    ref, = simulate(cfg, ["gpu-only"])
    assert row["design"] == "test-design"
    assert row["iter_ns_mean"] == ref["iter_ns_mean"]
    order = plots.DESIGN_ORDER
    assert order.index("multi-gpu") < order.index("test-design") < order.index("uvm")
    assert "test-design" not in default_designs()  # default is off unless the class says so
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping inside the name
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    assert "test-design" in capsys.readouterr().out


def test_what_plan_and_the_published_points_ask_of_a_design_is_its_class(test_design,
                                                                        monkeypatch):
    from scratchpipe_sim.experiments import capacity_search, published

    monkeypatch.setattr(test_design, "embedding_location", "TEST_LOCATION")
    monkeypatch.setattr(test_design, "lookahead_grid", (3, 7))
    monkeypatch.setattr(test_design, "scales_out", True)
    monkeypatch.setattr(test_design, "gpu_counts", classmethod(lambda cls, cfg: (2, 4)))
    cfg = load_config(SMALL)
    assert published.placement_designs()["TEST_LOCATION"] == "test-design"
    assert published.placement_designs()["DEVICE"] == "gpu-only"
    assert capacity_search.grid(cfg, "test-design", "lookahead") == (3, 7)
    assert capacity_search.grid(cfg, "test-design", "gpus") == (2, 4)
    assert capacity_search.grid(cfg, "gpu-only", "lookahead") == ()


def test_unregistered_design_is_gone(test_design):
    assert "test-design" in DESIGNS
    DESIGNS.unregister("test-design")
    assert "test-design" not in DESIGNS and "test-design" not in plots.DESIGN_ORDER
    DESIGNS.register("test-design")(test_design)  # for the fixture's clean-up


def test_design_metadata_derives_the_lists():
    # properties, not pinned lists: a new design file must not break this test
    order = design_order()
    assert sorted(order) == sorted(DESIGNS.names())
    keys = [(DESIGNS.get(n).order, n) for n in order]
    assert keys == sorted(keys)
    assert default_designs() == tuple(n for n in order if DESIGNS.get(n).default)
    # config.model's pipeline check takes unset designs to include scratchpipe
    assert "scratchpipe" in default_designs() and baseline_design() in default_designs()
    # a config that lists no designs runs the defaults, shown as a list by `config show`
    assert load_config({}).designs is None
    assert config_designs(load_config({})) == default_designs()
    assert with_default_designs(resolve({}))["designs"] == list(default_designs())
    assert baseline_design() == "hybrid"
    assert plots.DESIGN_ORDER == design_order()


def test_every_name_is_written_once():
    for reg in (DESIGNS, POLICIES):
        for name, cls in reg.items():
            assert cls.name == name


def test_plugins_are_discovered_from_their_package(tmp_path, monkeypatch):
    pkg = tmp_path / "plugpkg_registry_test"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from scratchpipe_sim.registry import Registry\n"
        "REG = Registry('thing', package='plugpkg_registry_test')\n")
    (pkg / "one.py").write_text(
        "from plugpkg_registry_test import REG\n\n"
        "@REG.register('one')\nclass One:\n    pass\n")
    (pkg / "_private.py").write_text("raise RuntimeError('underscore modules are skipped')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import plugpkg_registry_test as p

        assert "plugpkg_registry_test.one" not in sys.modules  # nothing imported yet
        assert p.REG.names() == ["one"]
        assert p.REG.get("one").name == "one"
        with p.REG.temporary("two") as register:
            register(type("Two", (), {}))
            assert list(p.REG) == ["one", "two"]
        assert list(p.REG) == ["one"]
    finally:
        for m in [m for m in sys.modules if m.startswith("plugpkg_registry_test")]:
            del sys.modules[m]


def test_registering_a_name_twice_fails():
    reg: Registry[type] = Registry("thing")
    reg.register("a")(type("A", (), {}))
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(type("B", (), {}))
