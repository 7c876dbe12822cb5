"""Chrome Trace Event JSON timelines (open in Perfetto / chrome://tracing).

One process per kind ("resources", "stages"), one thread per resource or stage track.
Concurrent transfers on a processor-sharing resource overlap in time, which complete ("X")
events on one thread cannot show, so overlapping spans go to numbered lanes
("pcie_h2d #1", ...) by greedy interval partitioning. Times are microseconds.

`write_timeline` writes exactly the text `json.dumps` would make of the events as dicts
(tests/timing/test_timing_timeline.py builds those and compares byte for byte), but renders
the complete ("X") events itself: a run writes ~1,000 of them per design, and building a
dict per event for json cost ~20 ms of a fully cached run.
"""

from __future__ import annotations

import heapq
import json
import math
from pathlib import Path

from scratchpipe_sim.safety.atomic_files import atomic_write
from scratchpipe_sim.timing.resources import Span


def _lanes(spans: list[Span]) -> list[int]:
    order = sorted(range(len(spans)), key=lambda i: (spans[i].start_ns, spans[i].end_ns))
    free: list[int] = []
    busy: list[tuple[float, int]] = []
    lane = [0] * len(spans)
    count = 0
    for i in order:
        s = spans[i]
        while busy and busy[0][0] <= s.start_ns:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            k = heapq.heappop(free)
        else:
            k = count
            count += 1
        lane[i] = k
        heapq.heappush(busy, (s.end_ns, k))
    return lane


def timeline_tracks(design: str, spans: list[Span]):
    """The document's events in order: ("M", metadata dict) or ("X", span, pid, tid)."""
    by_track: dict[str, list[Span]] = {}
    for s in spans:
        by_track.setdefault(s.track, []).append(s)
    yield "M", {"ph": "M", "name": "process_name", "pid": 1,
                "args": {"name": f"{design}: resources"}}
    yield "M", {"ph": "M", "name": "process_name", "pid": 2,
                "args": {"name": f"{design}: stages"}}
    tid = 0
    for track in sorted(by_track, key=lambda t: (t == "stages", t)):
        group = by_track[track]
        pid = 2 if track == "stages" else 1
        lanes = _lanes(group)
        base = tid
        for k in range(max(lanes) + 1):
            label = track if k == 0 else f"{track} #{k}"
            yield "M", {"ph": "M", "name": "thread_name", "pid": pid, "tid": base + k,
                        "args": {"name": label}}
        tid += max(lanes) + 1
        for s, k in zip(group, lanes, strict=True):
            yield "X", s, pid, base + k


def _number(x: float | int) -> str:
    """A number as `json.dumps` writes it (float repr; Infinity / NaN by name)."""
    if type(x) is int:
        return int.__repr__(x)
    if isinstance(x, float) and math.isfinite(x):
        return float.__repr__(x)
    return json.dumps(x)


def timeline_json(design: str, spans: list[Span]) -> str:
    """`json.dumps` of the timeline document, byte for byte, without a dict per event."""
    names: dict[str, str] = {}
    parts = []
    for kind, *rest in timeline_tracks(design, spans):
        if kind == "M":
            parts.append(json.dumps(rest[0]))
            continue
        s, pid, tid = rest
        name = names.get(s.name)
        if name is None:
            name = names[s.name] = json.dumps(s.name)
        parts.append(f'{{"ph": "X", "name": {name}, "pid": {pid}, "tid": {tid}, '
                     f'"ts": {_number(s.start_ns / 1e3)}, '
                     f'"dur": {_number((s.end_ns - s.start_ns) / 1e3)}, '
                     f'"args": {{"batch": {_number(s.batch)}, '
                     f'"bytes": {_number(s.nbytes)}}}}}')
    return (f'{{"traceEvents": [{", ".join(parts)}], "displayTimeUnit": "ns", '
            f'"otherData": {{"design": {json.dumps(design)}}}}}')


def write_timeline(path: Path, design: str, machine) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, timeline_json(design, machine.recorder.spans))
    return path
