"""Chrome Trace Event JSON timelines (open in Perfetto / chrome://tracing).

One process per kind ("resources", "stages"), one thread per resource or stage track.
Concurrent transfers on a processor-sharing resource overlap in time, which complete ("X")
events on one thread cannot show, so overlapping spans go to numbered lanes
("pcie_h2d #1", ...) by greedy interval partitioning. Times are microseconds.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path

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


def timeline_events(design: str, spans: list[Span]) -> list[dict]:
    by_track: dict[str, list[Span]] = {}
    for s in spans:
        by_track.setdefault(s.track, []).append(s)
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"{design}: resources"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": f"{design}: stages"}},
    ]
    tid = 0
    for track in sorted(by_track, key=lambda t: (t == "stages", t)):
        group = by_track[track]
        pid = 2 if track == "stages" else 1
        lanes = _lanes(group)
        base = tid
        for k in range(max(lanes) + 1):
            label = track if k == 0 else f"{track} #{k}"
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": base + k,
                           "args": {"name": label}})
        tid += max(lanes) + 1
        for s, k in zip(group, lanes, strict=True):
            events.append({"ph": "X", "name": s.name, "pid": pid, "tid": base + k,
                           "ts": s.start_ns / 1e3, "dur": (s.end_ns - s.start_ns) / 1e3,
                           "args": {"batch": s.batch, "bytes": s.nbytes}})
    return events


def write_timeline(path: Path, design: str, machine) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"traceEvents": timeline_events(design, machine.recorder.spans),
           "displayTimeUnit": "ns", "otherData": {"design": design}}
    path.write_text(json.dumps(doc))
    return path
