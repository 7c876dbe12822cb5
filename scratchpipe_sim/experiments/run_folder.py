"""The files of a `run` results folder and the environment they record: what `run` writes
(`scratchpipe_sim.api.write_run`) and `report` reads back, written once here, below both."""

from __future__ import annotations

import platform
from importlib import metadata
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
    out = {"scratchpipe_sim": __version__, "python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
