"""The versions a results folder records: the dist-info fast path gives exactly what
importlib.metadata gives (the oracle), for every installed distribution, and falls back to
it where the folder names are ambiguous."""

from __future__ import annotations

import sys
from importlib import metadata

from scratchpipe_sim.experiments import run_folder as rf


def _oracle(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_fast_versions_equal_importlib_metadata_for_every_installed_distribution():
    names = sorted({d.metadata["Name"] for d in metadata.distributions()
                    if d.metadata["Name"]})
    assert len(names) >= 5  # numpy, simpy, pyyaml, pytest, scratchpipe-sim at least
    names += ["no-such-distribution-here", "PyYAML", "simpy"]
    got = rf.installed_versions(tuple(names))
    assert got == {n: _oracle(n) for n in names}
    recorded = rf.versions()
    assert {k: recorded[k] for k in rf.VERSIONED} == {
        n: _oracle(n) or "not installed" for n in rf.VERSIONED}


def test_two_dist_info_folders_of_one_name_ask_importlib_metadata(tmp_path, monkeypatch):
    for version in ("1.0", "2.0"):
        d = tmp_path / f"twice_here-{version}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: twice-here\n"
                                    f"Version: {version}\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    want = _oracle("twice-here")
    assert want in ("1.0", "2.0")
    assert rf.installed_versions(("twice-here",)) == {"twice-here": want}


def test_an_egg_info_beside_the_name_asks_importlib_metadata(tmp_path, monkeypatch):
    egg = tmp_path / "eggy_pkg-3.0-py3.11.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: eggy-pkg\nVersion: 3.0\n")
    later = tmp_path / "later"
    dist = later / "eggy_pkg-4.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: eggy-pkg\nVersion: 4.0\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(later), *sys.path])
    assert _oracle("eggy-pkg") == "3.0"
    assert rf.installed_versions(("eggy-pkg",)) == {"eggy-pkg": "3.0"}
