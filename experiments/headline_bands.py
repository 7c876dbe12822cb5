"""The band of every headline number of docs/results.md, from `sensitivity SWEEP.yaml` folders.

Why a script: a headline is often not one design's speedup at one point but a ratio of two
designs (scratchpipe over lru-prefetch) or a geometric mean over points. Every point of a
bands run uses the same seed, hence the same parameter draws (run i is the same hardware at
every point: common random numbers), so a ratio or a geometric mean can be taken run by run
and its band is the min and max over the runs.

    for f in experiments/fig*.yaml; do
        scratchpipe-sim sensitivity "$f" --samples 32 --seed 1 --jobs 2 \\
            --out BANDS/$(basename "$f" .yaml) --plot
    done
    python experiments/headline_bands.py BANDS
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from scratchpipe_sim.experiments.bands import load_bands


def runs(sens: dict) -> list[dict[str, float]]:
    """Speedup over the baseline of every design in every run, in a fixed order: nominal,
    each one-at-a-time end (in parameter order), each Latin-hypercube sample."""
    out = [sens["nominal"]]
    for p in sens["params"]:
        oat = sens["one_at_a_time"][p["key"]]
        out += [oat["low"], oat["high"]]
    lhs = sens["lhs"]["speedup"]
    n = len(next(iter(lhs.values()), []))
    out += [{d: lhs[d][i] for d in lhs} for i in range(n)]
    return out


def points(folder: Path) -> list[tuple[dict, list[dict[str, float]]]]:
    """(swept values, runs) of every point that ran."""
    data = load_bands(folder)
    return [(p["values"], runs(p["sensitivity"])) for p in data["points"]
            if p["error"] is None]


def band(values: list[float]) -> str:
    """nominal [min-max] (the first value is the nominal run's)."""
    return f"{values[0]:.2f} [{min(values):.2f}-{max(values):.2f}]"


def ratio(rs: list[dict[str, float]], a: str, b: str) -> list[float]:
    return [r[a] / r[b] for r in rs]


def geomean_runs(pts: list[list[dict[str, float]]], design: str, over: str | None = None
                 ) -> list[float]:
    """Per run, the geometric mean over points of design's speedup (or of design / over)."""
    n = min(len(rs) for rs in pts)
    return [math.exp(sum(math.log(rs[i][design] / (rs[i][over] if over else 1.0))
                         for rs in pts) / len(pts)) for i in range(n)]


def fig1(root: Path) -> None:
    pts = points(root / "fig1_cache_size")
    print("## fig1: speedup over hybrid at Zipf 1.05, nominal [min-max]")
    for values, rs in pts:
        if values.get("trace.alpha") == 1.05 and values["cache.load_factor"] in (0.05, 0.1, 0.2):
            cells = ", ".join(f"{d} {band([r[d] for r in rs])}" for d in
                              ("lru-cache", "lru-prefetch", "scratchpipe", "bagpipe",
                               "gpu-only") if d in rs[0])
            print(f"- {values['cache.load_factor']:.0%}: {cells}")
    zipf = [rs for values, rs in pts if values.get("trace.distribution") == "zipf"
            and all(d in rs[0] for d in ("scratchpipe", "lru-prefetch", "lru-cache"))]
    print(f"## fig1: geometric means over the {len(zipf)} Zipf points where every design ran")
    for d in ("static-cache", "lru-cache", "lru-prefetch", "scratchpipe", "bagpipe", "gpu-only"):
        print(f"- {d} over hybrid: {band(geomean_runs(zipf, d))}")
    for other in ("lru-cache", "lru-prefetch", "bagpipe"):
        g = geomean_runs(zipf, "scratchpipe", other)
        ahead = sum(1 for v in g if v > 1.0)
        print(f"- scratchpipe over {other}: {band(g)}; ahead in {ahead} of {len(g)} runs")


def fig2(root: Path) -> None:
    print("## fig2: share of gpu-only's throughput (Zipf 1.05)")
    for values, rs in points(root / "fig2_gpu_memory_speed"):
        if values.get("trace.alpha") == 1.05:
            cells = ", ".join(f"{d} {band(ratio(rs, d, 'gpu-only'))}"
                              for d in ("scratchpipe", "lru-prefetch", "bagpipe"))
            print(f"- {values['hardware.pcie.h2d_GBps']:g} GB/s: {cells}")


def fig3(root: Path) -> None:
    print("## fig3: scratchpipe over hybrid by window (queue depth 2)")
    for values, rs in points(root / "fig3_lookahead_queue"):
        qd = "design_params.scratchpipe.queue_depth"
        if values.get(qd, 2) == 2:
            label = ", ".join(f"{k}={v}" for k, v in values.items() if k != qd)
            print(f"- {label}: {band([r['scratchpipe'] for r in rs])}")


def per_point(root: Path, name: str, title: str, designs: tuple[str, ...]) -> None:
    print(f"## {title}")
    for values, rs in points(root / name):
        label = ", ".join(f"{k}={v}" for k, v in values.items())
        cells = ", ".join(f"{d} {band([r[d] for r in rs])}" for d in designs if d in rs[0])
        print(f"- {label}: {cells}")


def fig6(root: Path) -> None:
    print("## fig6: scratchpipe over lru-prefetch, lru-prefetch over lru-cache")
    for values, rs in points(root / "fig6_lookahead_vs_past"):
        if "scratchpipe" not in rs[0]:
            continue
        label = ", ".join(f"{k}={v}" for k, v in values.items())
        sp = ratio(rs, "scratchpipe", "lru-prefetch")
        print(f"- {label}: {band(sp)} (ahead in {sum(v > 1 for v in sp)} of {len(sp)}); "
              f"prefetch over lru-cache {band(ratio(rs, 'lru-prefetch', 'lru-cache'))}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0])
    fig1(root)
    fig2(root)
    fig3(root)
    per_point(root, "fig4_hardware", "fig4: speedup over hybrid by hardware",
              ("lru-cache", "lru-prefetch", "scratchpipe", "bagpipe", "gpu-only"))
    per_point(root, "fig5_stage_breakdown", "fig5: speedup over hybrid",
              ("static-cache", "lru-cache", "lru-prefetch", "scratchpipe", "gpu-only"))
    fig6(root)
    per_point(root, "fig7_cost", "fig7: speedup over hybrid on DGX presets",
              ("lru-prefetch", "scratchpipe", "bagpipe", "multi-gpu", "gpu-only"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
