"""The files of a `run` results folder and the environment they record: what `run` writes
(`scratchpipe_sim.api.write_run`) and `report` reads back, written once here, below both."""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

from scratchpipe_sim import __version__

#: where results folders go when no --out / out= is given: results/<config or experiment>
DEFAULT_RESULTS = Path("results")
#: files of a `run` results folder (read back by `report`)
RUN_CSV = "results.csv"
RUN_JSON = "results.json"
RUN_CONFIG = "resolved_config.yaml"
RUN_TRACE_SHA = "trace.sha256"
RUN_METADATA = "metadata.json"
#: distributions whose versions a results folder records (read from installed metadata,
#: without importing them)
VERSIONED = ("numpy", "numba", "simpy", "pandas", "matplotlib", "pyyaml")
#: the wall-clock columns of a result row: measured, so they differ between two runs
WALL_COLUMNS = ("policy_wall_s", "simpy_wall_s")


def versions() -> dict[str, str]:
    """Python's and the main libraries' versions (without importing the libraries)."""
    found = installed_versions(VERSIONED)
    return {"scratchpipe_sim": __version__, "python": platform.python_version(),
            **{name: found[name] or "not installed" for name in VERSIONED}}


def _normalized(name: str) -> str:
    """A distribution name as a dist-info folder writes it (PEP 503, `-` as `_`)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def installed_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """The version of each distribution in `names` (None: not installed). The fast path
    reads it from the one `NAME-VERSION.dist-info` folder of the first `sys.path` entry
    that holds metadata of that name (the wheel spec's folder name: importlib.metadata
    finds the same folder, then parses its METADATA), listing each entry once; anything
    else (two such folders, an `.egg-info`, no folder at all) asks importlib.metadata,
    whose import alone (~12 ms) was most of a cached run's record of versions."""
    want = {_normalized(n): n for n in names}
    out: dict[str, str | None] = {}
    slow: list[str] = []
    for entry in sys.path:
        if len(out) + len(slow) == len(want):
            break
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        found: dict[str, list[str | None]] = {}  # None: metadata this path cannot read
        for d in listing:
            if d.endswith(".dist-info") and d.count("-") == 2:
                dist, version = d[:-len(".dist-info")].split("-")
            elif d.endswith(".egg-info"):
                dist, version = d.split("-")[0].removesuffix(".egg-info"), None
            else:
                continue
            key = _normalized(dist)
            if key in want and want[key] not in out and want[key] not in slow:
                found.setdefault(key, []).append(version)
        for key, versions in found.items():
            if len(versions) == 1 and versions[0] is not None:
                out[want[key]] = versions[0]
            else:
                slow.append(want[key])
    slow += [n for n in names if n not in out and n not in slow]
    if slow:
        from importlib import metadata  # noqa: PLC0415 (slow import, the exceptional path)

        for n in slow:
            try:
                out[n] = metadata.version(n)
            except metadata.PackageNotFoundError:
                out[n] = None
    return out
