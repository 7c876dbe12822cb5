"""The documented limits on what an input may ask for, and the one reader of numeric
environment settings.

Why limits: a hostile or mistyped input (a YAML alias bomb, a 10**12-point sweep grid, a
window of 10**11 batches) must be refused in a second with one line, not after minutes of
silence or a MemoryError. Each limit is far above what a real config needs and can be
raised by its environment variable (docs/architecture.md lists them):

    SCRATCHPIPE_MAX_YAML_DEPTH     levels of nesting in a YAML file or --set value (100)
    SCRATCHPIPE_MAX_YAML_NODES     nodes of a YAML document once aliases are expanded
                                   (100,000)
    SCRATCHPIPE_MAX_SWEEP_POINTS   points of one sweep (grid x zip) (10,000)
    SCRATCHPIPE_MAX_FIGURE_PIXELS  pixels of one figure (width x height x dpi^2) (10**8)
    SCRATCHPIPE_MAX_CLUSTER_RANKS  GPUs of a cluster: hardware.cluster.nodes x
                                   interconnect.gpus_per_node (131,072; the cluster design's
                                   per-rank streams take ~10 s there, and grow linearly)
    SCRATCHPIPE_MAX_WORLD_SIZE     GPUs `torchrec-plan --world-size` plans for (1,024;
                                   TorchRec's planner took 75 s and 0.5 GB at 512 here, over
                                   100 s at 100,000, and 12 GB and growing at 10**9)

Every numeric environment value (these, SCRATCHPIPE_MEMORY_BYTES, ...) is read by
`env_number`: text, `inf`, `nan` and values below the floor are one-line errors naming the
variable.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from scratchpipe_sim.errors import UserError


@dataclass(frozen=True)
class Limit:
    """An upper bound with its default and the environment variable that raises it."""

    env: str
    default: int
    what: str

    def value(self) -> int:
        return int(env_number(self.env, self.default, minimum=1))

    def advice(self) -> str:
        """What the limit is and how to raise it, for error messages."""
        return f"the limit is {self.value():,} {self.what}; raise it with ${self.env}"


YAML_DEPTH = Limit("SCRATCHPIPE_MAX_YAML_DEPTH", 100, "levels of nesting")
YAML_NODES = Limit("SCRATCHPIPE_MAX_YAML_NODES", 100_000, "YAML nodes after alias expansion")
SWEEP_POINTS = Limit("SCRATCHPIPE_MAX_SWEEP_POINTS", 10_000, "points per sweep")
FIGURE_PIXELS = Limit("SCRATCHPIPE_MAX_FIGURE_PIXELS", 10**8, "pixels per figure")
CLUSTER_RANKS = Limit("SCRATCHPIPE_MAX_CLUSTER_RANKS", 1 << 17, "GPUs per cluster")
WORLD_SIZE = Limit("SCRATCHPIPE_MAX_WORLD_SIZE", 1024, "GPUs per TorchRec plan")


def env_number(name: str, default: float, *, minimum: float = 0.0,
               integer: bool = True) -> float:
    """The environment variable `name` as a finite number >= `minimum` (`default` when unset
    or empty). Accepts 1e9-style text for integers when the value is whole."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    kind = "a whole number" if integer else "a number"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < minimum or (integer and value != int(value)):
        raise UserError(f"expected {kind} >= {minimum:g}, got {raw!r}", source="environment",
                        field=name)
    return int(value) if integer else value
