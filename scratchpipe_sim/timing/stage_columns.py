"""A design's stage times in `simulate`'s metrics row, read by name.

Why: a consumer that sums stages (the TBE phases of `validate --published`, the TorchRec
comparison, the published-shapes prediction, hybrid's stages beside FBGEMM's) names them;
a stage the design did not time must be an error, never a silent 0 (a renamed stage would
otherwise predict 0 ms). The phases a design's stages make up are the design's own data
(`Design.phase_stages`), so a new design needs no edit here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scratchpipe_sim.errors import closest

_PREFIX, _SUFFIX = "stage_", "_ns"


class StageNotTimed(LookupError):
    """A stage or a phase a consumer names that the design does not produce or declare."""

    def __str__(self) -> str:  # LookupError's would quote the message
        return str(self.args[0])


def stage_key(stage: str) -> str:
    """The metrics row's column of a stage's mean time per measured batch (ns)."""
    return f"{_PREFIX}{stage}{_SUFFIX}"


def timed_stages(row: Mapping[str, Any]) -> list[str]:
    """The stages a metrics row holds, in the order the design timed them."""
    return [k[len(_PREFIX):-len(_SUFFIX)] for k in row
            if k.startswith(_PREFIX) and k.endswith(_SUFFIX)]


def require_timed(design: str, stage: str, timed: Sequence[str]) -> None:
    """StageNotTimed unless `stage` is one of the stages `design` timed (`timed`: a
    metrics row's `timed_stages`, or a Machine's `stage_order`)."""
    if stage not in timed:
        raise StageNotTimed(f"design '{design}' timed no stage '{stage}'{closest(stage, timed)}"
                            f"; its stages: {', '.join(timed) or 'none'}")


def stage_ns(row: Mapping[str, Any], stage: str) -> float:
    """A stage's mean ns per measured batch; StageNotTimed when the design timed no such
    stage."""
    key = stage_key(stage)
    if key not in row:
        require_timed(str(row.get("design", "?")), stage, timed_stages(row))
    return float(row[key])


def phase_stages(design: str) -> Mapping[str, tuple[str, ...]]:
    """The design's declared phase -> stages (`Design.phase_stages`); StageNotTimed when it
    declares none."""
    from scratchpipe_sim.timing.designs import DESIGNS

    stages = DESIGNS.get(design).phase_stages
    if not stages:
        raise StageNotTimed(f"design '{design}' declares no phase_stages (its class attribute "
                            "phase -> stages), so its phases cannot be summed")
    return stages


def phases_ms(row: Mapping[str, Any], design: str | None = None) -> dict[str, float]:
    """Per phase the design declares: its stages' mean times summed, ms per batch (`design`:
    the row's own by default)."""
    name = str(row["design"]) if design is None else design
    return {phase: sum(stage_ns(row, s) for s in stages) / 1e6
            for phase, stages in phase_stages(name).items()}
