"""Peak RSS of each pass of a run, in the forked worker that makes it (issue 41).

Each worker's peak (VmHWM) is reset before a pass (`/proc/self/clear_refs` 5) and read
after it, so a line is that pass's own peak above the worker's RSS at its start: what its
per-row and per-slot arrays cost. The run is `bench_trace_scale.py --day`'s (six designs,
the first N batches of a synthetic Criteo day), in this process, `--jobs 2`. Linux only.

    python benchmarks/bench_pass_rss.py d16.sptrace 16
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_trace_scale as bench  # noqa: E402

from scratchpipe_sim.cli import main as cli_main  # noqa: E402
from scratchpipe_sim.timing import replay_passes  # noqa: E402


def status_mib() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process, MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) // 1024
    return out


_timed_pass = replay_passes._timed_pass


def _probed(replays, trace_pass):
    before = status_mib()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    t = time.process_time()
    got = _timed_pass(replays, trace_pass)
    after = status_mib()
    print(f"pid {os.getpid()}  {str(trace_pass)[:56]:56s}  RSS before {before['VmRSS']:5d}  "
          f"peak {after['VmHWM']:5d} (+{after['VmHWM'] - before['VmRSS']:5d})  after "
          f"{after['VmRSS']:5d} MiB  CPU {time.process_time() - t:6.2f} s", flush=True)
    return got


def main(argv: list[str]) -> int:
    trace, batches = Path(argv[0]).resolve(), int(argv[1])
    replay_passes._timed_pass = _probed
    with tempfile.TemporaryDirectory(prefix="bench-pass-rss-") as tmp:
        cfg = Path(tmp) / "day.yaml"
        bench.day_config(cfg, trace, batches)
        rc = cli_main(["run", str(cfg), "--no-cache", "--no-timeline", "--out",
                       str(Path(tmp) / "out"), "--jobs", "2", "--quiet"])
    print(f"parent: {status_mib()} MiB")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
