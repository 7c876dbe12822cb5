"""The one visual language of every figure: a colour and a marker per design, a colour per
stage, plain log-axis ticks, the smallest text size.

Every figure `plot` and `report` draw (the line figures, the stage figure, the bands and the
tornado) takes a design's look from `design_style`, so a design is the same colour and
marker everywhere, whatever else the figure holds (the look follows the design registry's
display order, never the designs a table happens to list). Colours are Okabe & Ito's
palette, told apart with the common colour-vision deficiencies, then two more of Paul Tol's
for a ninth and tenth design; every design also has its own marker, so grey print works.
Stages are coloured by the resource that runs them (CPU orange, PCIe blue, GPU green,
NVLink purple, waits grey), one shade per stage, and every stage is labelled in words too.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from scratchpipe_sim.timing.designs import design_order

#: Okabe & Ito (2008): orange, sky blue, bluish green, vermillion, blue, reddish purple,
#: yellow, black.
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7", "#F0E442",
             "#000000")
#: past Okabe-Ito's eight: Paul Tol's wine and teal, then a grey.
DESIGN_COLORS = (*OKABE_ITO, "#882255", "#44AA99", "#999999")
DESIGN_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">")
#: the smallest text size on any figure (points): notes, ticks and legends never go below it
MIN_FONT_PT = 8.0


@dataclass(frozen=True)
class Style:
    """How one design is drawn in every figure."""
    color: str
    marker: str


def design_style(design: str) -> Style:
    """A design's colour and marker: by its place in the registry's display order; a name the
    registry does not know (an old table) gets a fixed slot from a hash of its name."""
    order = list(design_order())
    i = order.index(design) if design in order else len(order) + zlib.crc32(
        design.encode()) % len(DESIGN_COLORS)
    return Style(DESIGN_COLORS[i % len(DESIGN_COLORS)], DESIGN_MARKERS[i % len(DESIGN_MARKERS)])


def design_color(design: str, known: object = None) -> str:
    """A design's colour (`known` is ignored: the colour never depends on the table)."""
    del known
    return design_style(design).color


#: stage name -> colour: one shade per stage, the hue of the resource that runs it.
STAGE_COLORS = {
    # CPU (host cores and DRAM): oranges / vermillions
    "cpu_gather": "#E69F00", "cpu_update": "#D55E00", "plan": "#F5C26B",
    "collect": "#B35806", "oracle": "#FDB863",
    # PCIe transfers: blues
    "h2d_pooled": "#0072B2", "d2h_grads": "#56B4E9", "fetch": "#2166AC",
    "prefetch": "#4393C3", "exchange": "#92C5DE",
    # GPU (HBM, kernels, MLP): greens
    "gpu_gather": "#009E73", "gpu_update": "#1B7837", "forward": "#5AAE61",
    "backward": "#00441B", "mlp": "#A6DBA0", "train": "#66BD63", "insert": "#44AA99",
    "emb_forward": "#5AAE61", "emb_backward": "#00441B",
    # NVLink collectives: purples
    "output_dist": "#762A83", "grad_dist": "#C2A5CF", "input_dist": "#9970AB",
    # waiting on another stage: greys
    "input_wait": "#BBBBBB", "prefetch_wait": "#888888", "refetch_wait": "#666666",
    "oracle_wait": "#999999", "loader_wait": "#AAAAAA",
}
UNKNOWN_STAGE_COLORS = ("#CC79A7", "#882255", "#AA4499", "#DDCC77")


def stage_color(stage: str) -> str:
    """A stage's colour in every figure (a stage not listed: a fixed one from its name)."""
    if stage in STAGE_COLORS:
        return STAGE_COLORS[stage]
    return UNKNOWN_STAGE_COLORS[zlib.crc32(stage.encode()) % len(UNKNOWN_STAGE_COLORS)]


def plain_log_ticks(axis) -> None:
    """A log axis labelled 1, 2, 5, 10, 20, 50 ... (never 10^0, 10^1)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: PLC0415

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())
