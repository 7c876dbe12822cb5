"""The tables `run` prints and `report` draws as HTML: the comparison of the designs, the
resources' busy fractions and the mean stage times of a run's result rows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scratchpipe_sim.timing.designs import baseline_design
from scratchpipe_sim.timing.sampled_run import SPREAD_SUFFIX as SPREAD


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return str(v)
        if abs(v) >= 1e5:
            return f"{v:.4g}"
        return f"{v:.{digits}f}".rstrip("0").rstrip(".") if v else "0"
    return str(v)


def est(row: dict, key: str, digits: int, per: float = 1.0) -> str:
    """`row[key] / per` formatted, with "+-spread" when a sampled run gives `key_spread`."""
    v = row[key]
    text = fmt(v / per if v is not None and per != 1 else v, digits)
    spread = row.get(key + SPREAD)
    return text if spread is None else f"{text}+-{fmt(spread / per, digits)}"


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                             strict=True)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


#: what each column of the main table means (printed under it).
LEGEND = (
    "iter_us, p50_us, p99_us: time per training iteration (mean, median, 99th percentile), "
    "microseconds",
    "samples/s: training samples per second",
    "speedup_vs_hybrid: hybrid's mean iteration time / this design's (higher is faster)",
    "hit: fraction of embedding lookups served from GPU memory (gpu-only 1, hybrid 0)",
    "H2D_B/smp, D2H_B/smp: PCIe bytes per sample, host-to-device and device-to-host",
    "DRAM_MB_tot: MB the CPU's DRAM served, reads and writes together: embedding-row "
    "gathers and updates that miss the LLC, "
    "staging copies (collect, write-back), and the DMA of every PCIe copy when "
    "pcie.dma_loads_dram (so gpu-only's is its input indices only; the cache designs' is "
    "their misses, write-backs and their staging and DMA)",
    "HBM_MB_tot: MB the GPU's HBM served, reads and writes together: embedding gathers "
    "and updates that miss L2, cache probes and inserts, the copies landing in HBM "
    "(docs/experiments.md: every column, per design)",
    "DRAM_MB_tot, HBM_MB_tot: totals over the measured batches (not per sample)",
)


@dataclass(frozen=True)
class Table:
    """One of the tables `run` prints (the report draws the same ones as HTML): a title line
    above it, the header, the formatted cells and the legend lines under it."""
    title: str
    header: list[str]
    rows: list[list[str]]
    legend: list[str]


def run_tables(results: list[dict]) -> list[Table]:
    """The comparison, busy-fraction and stage-time tables of a run's result rows."""
    main = [[r["design"], est(r, "iter_ns_mean", 1, 1e3), est(r, "iter_ns_p50", 1, 1e3),
             est(r, "iter_ns_p99", 1, 1e3), est(r, "samples_per_s", 0),
             est(r, "speedup_vs_hybrid", 2), est(r, "hit_ratio", 3),
             est(r, "pcie_h2d_bytes_per_sample", 1), est(r, "pcie_d2h_bytes_per_sample", 1),
             est(r, "dram_bytes", 1, 1e6), est(r, "hbm_bytes", 1, 1e6)]
            for r in results]
    measured = {r.get("measured_batches") for r in results} - {None}
    legend = list(LEGEND)
    rates = {(r.get("sample_rate"), r.get("sample_salts")) for r in results} - {(None, None)}
    if rates:
        rate, salts = rates.pop()
        legend.append(f"sampled run (R = {fmt(rate, 4)}, {salts} salts): each figure the mean "
                      "over the salts, +- half their range (docs/sampling.md)")
    if len(measured) == 1:
        legend[-1] += f"; {measured.pop()} measured batches"
    base = baseline_design()
    if not any(r["design"] == base for r in results):
        legend[2] = (f"speedup_vs_hybrid: '-' because {base} did not run (add --design "
                     f"{base} for speedups)")
    tables = [Table("", ["design", "iter_us", "p50_us", "p99_us", "samples/s",
                         "speedup_vs_hybrid", "hit", "H2D_B/smp", "D2H_B/smp", "DRAM_MB_tot",
                         "HBM_MB_tot"], main, legend)]
    busy_keys = sorted({k for r in results for k in r
                        if k.startswith("busy_") and not k.endswith(SPREAD)})
    busy = [[r["design"]] + [est({k: 0.0, **r}, k, 3) for k in busy_keys] for r in results]
    tables.append(Table("busy fraction: share of the measured time each resource was serving "
                        "work (0 = idle, 1 = always busy)",
                        ["design"] + [k[5:] for k in busy_keys], busy, []))
    stages = []
    for r in results:
        for k in r:
            if k.startswith("stage_") and not k.endswith(SPREAD):
                stages.append([r["design"], k[6:-3], est(r, k, 2, 1e3)])
    tables.append(Table("mean stage time per batch (stages overlap in pipelined designs)",
                        ["design", "stage", "us"], stages, []))
    return tables


def render(results: list[dict]) -> str:
    out = []
    for t in run_tables(results):
        text = table(t.rows, t.header)
        if t.legend:
            text += "\n" + "\n".join(f"  {line}" for line in t.legend)
        out.append(f"{t.title}\n{text}" if t.title else text)
    return "\n\n".join(out)
