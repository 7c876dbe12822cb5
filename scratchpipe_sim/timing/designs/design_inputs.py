"""What a design is priced from: the `WorkloadKey` it asks `Replays` for, and the per-batch
columns of the counts it gets back (`Columns`), read inside its SimPy process."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from scratchpipe_sim.timing.counts import Where, Workload


class Warm(str, enum.Enum):
    """How a cache's state before the timed batches is made. A str enum, so its value is
    the same text wherever it is written."""

    #: the policy runs over the last warm-up batches
    REPLAY = "replay"
    #: it profiles the whole warm-up prefix and starts the timed batches preloaded with its
    #: picks
    PROFILE_PREFIX = "profile-prefix"
    #: it profiles every batch, timed ones included (an oracle)
    PROFILE_ALL = "profile-all"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class WorkloadKey:
    """Which counts a design needs: `policy` None = no cache (`where` host or device)."""

    policy: str | None
    capacity: int = 0
    params: tuple[tuple[str, Any], ...] = field(default=())
    where: Where = Where.HOST
    #: how the cache's state before the timed batches is made (`Warm`)
    warm: Warm = Warm.REPLAY
    #: the config key naming the policy (for error messages)
    policy_field: str = field(default="cache.policy", compare=False)
    #: the config key holding `params` (for error messages)
    params_field: str = field(default="cache.params", compare=False)

    def __post_init__(self) -> None:
        # a plain string would compare equal to a member yet be no member: refuse it
        for name, kind in (("where", Where), ("warm", Warm)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"WorkloadKey.{name}: expected a {kind.__name__} "
                                f"({', '.join(k.name for k in kind)}), got {value!r}")


def fraction(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


class Columns:
    """Per-batch counts as Python lists (fast scalar access inside SimPy processes), plus
    the on-chip hit fractions and the row sizes the designs pass to the Machine's helpers.

    Row sizes per batch: `r` (bytes a lookup reads), `R` (bytes of an updated row with its
    state), `R_fill` (a filled or written-back row), `r_host` / `R_host` (unplaced lookups and
    rows). With one dim for every table they are the config's r and R; with several, the
    lookups' and updates' come from the trace batch by batch, the others from the policy's
    per-table totals (counts.policy_mix)."""

    def __init__(self, w: Workload, r: float, R: float):
        for name, arr in w.cols.items():
            setattr(self, name, arr.tolist())
        n = w.num_batches
        zero = [0.0] * n

        def frac(hits: str, whole: str) -> list[float]:
            if hits not in w.cols:
                return zero
            h, t = w.cols[hits], w.cols[whole]
            return [fraction(float(a), float(b)) for a, b in zip(h, t, strict=True)]

        def size(name: str, per: str | None, default: float) -> list[float]:
            if name not in w.cols:
                return [float(default)] * n
            if per is None:
                return [float(x) for x in w.cols[name]]
            return [float(a) / float(c) if c else float(default)
                    for a, c in zip(w.cols[name], w.cols[per], strict=True)]

        self.r = size("lookup_bytes", "accesses", r)
        self.R = size("unique_bytes", "unique", R)
        self.R_fill = size("fill_row_bytes", None, R)
        self.r_host = size("unplaced_lookup_bytes", None, r)
        self.R_host = size("unplaced_row_bytes", None, R)
        #: lookups / unique rows of each batch that hit in the GPU L2 or CPU LLC
        self.l2 = frac("l2_hits", "accesses")
        self.l2_update = frac("l2_update_hits", "unique")
        self.llc = frac("llc_hits", "accesses")
        self.llc_update = frac("llc_update_hits", "unique")
