"""Timelines: the text `write_timeline` renders is, byte for byte, `json.dumps` of the event
dicts (the oracle), for every design's real spans and for the awkward values (integer and
non-finite numbers, names that need escaping)."""

from __future__ import annotations

import json

from small_configs import TWO_SMALL_TABLES

from scratchpipe_sim.config import load_config
from scratchpipe_sim.timing import runner, simulate
from scratchpipe_sim.timing.designs.design_registry import design_order
from scratchpipe_sim.timing.resources import Span
from scratchpipe_sim.timing.timeline import timeline_json, timeline_tracks, write_timeline


def _oracle(design: str, spans: list[Span]) -> str:
    """The document as dicts, through json.dumps (the timeline's lanes and order as made)."""
    events = []
    for kind, *rest in timeline_tracks(design, spans):
        if kind == "M":
            events.append(rest[0])
        else:
            s, pid, tid = rest
            events.append({"ph": "X", "name": s.name, "pid": pid, "tid": tid,
                           "ts": s.start_ns / 1e3, "dur": (s.end_ns - s.start_ns) / 1e3,
                           "args": {"batch": s.batch, "bytes": s.nbytes}})
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns",
                       "otherData": {"design": design}})


def test_every_designs_timeline_is_json_dumps_of_its_events(tmp_path, monkeypatch):
    seen = {}

    def checked(path, design, machine):  # the run's own writer, then the oracle beside it
        write_timeline(path, design, machine)
        assert path.read_text() == _oracle(design, machine.recorder.spans), design
        seen[design] = len(machine.recorder.spans)
        return path

    monkeypatch.setattr(runner, "write_timeline", checked)
    cfg = load_config({**TWO_SMALL_TABLES, "hardware": {"preset": "a100-gen4"}})
    simulate(cfg, list(design_order()), timeline_dir=tmp_path, replay_cache=False)
    assert set(seen) == set(design_order()) and sum(seen.values()) > 1000


def test_awkward_values_render_as_json_does():
    spans = [Span("pcie_h2d", "fills", 0.0, 1500.5, 0, 4096),
             Span("pcie_h2d", "fills", 10.0, 20.0, 1, 1e300),
             Span("stages", 'plan "q"\n\u00e9', 3.0, float("inf"), 2, float("nan")),
             Span("hbm", "x", -0.0, 1.0 / 3.0, 3, 0.0)]
    got = timeline_json("lru-cache \u2713", spans)
    assert got == _oracle("lru-cache \u2713", spans)
    assert json.loads(got)["traceEvents"][-1]["args"]["batch"] in (0, 1, 2, 3)
