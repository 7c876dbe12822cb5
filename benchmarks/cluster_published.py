"""The cluster design against the published multi-node MLPerf points, stage by stage:
MLPerf Training v3.0 DLRM-DCNv2 on 1 and 8 DGX H100 (HugeCTR), and the ratio 8 -> 64 GPUs.

    python benchmarks/cluster_published.py [--set KEY=VALUE ...] [--batches N]

The points and their configs are `validate --published`'s (E3.6 and E3.7, both checks:
the `cluster_points` of scratchpipe_sim/data/published_points.yaml, HugeCTR's hybrid
placement, the dense work in fp16); `--set` overrides them (e.g. design_params.cluster.sharding=
row-wise to see another placement). Prints one markdown row per point with its stages
(docs/validation.md's cluster section).
"""

from __future__ import annotations

import argparse

from scratchpipe_sim.config import deep_merge, load_config
from scratchpipe_sim.config.published_points import load_cluster_points
from scratchpipe_sim.timing import simulate

IDS = ("E3.6", "E3.7")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--batches", type=int, default=3)
    args = ap.parse_args()
    points = {p.id: p for p in load_cluster_points()}
    rates = []
    print("| point | GPUs | global batch | published samples/s | model samples/s | "
          "model / published | role | exchange share |")
    print("|---|---|---|---|---|---|---|---|")
    for pid in IDS:
        p = points[pid]
        cfg = load_config(deep_merge(p.config, {
            "name": f"published-{pid}", "seed": 1, "designs": ["cluster"],
            "model": {"num_batches": args.batches, "warmup_batches": 1},
            "cache": {"capacity_rows": 1000}}), args.sets)
        row = simulate(cfg, ["cluster"])[0]
        sps = row["samples_per_s"]
        rates.append((sps, p.measured))
        print(f"| {pid} | {row['gpus']} | {cfg.model.batch_size:,} | {p.measured / 1e6:.2f} M "
              f"| {sps / 1e6:.2f} M | {sps / p.measured:.2f} | {p.role} | "
              f"{row['exchange_share']:.2f} |")
        stages = {k[6:-3]: round(v / 1e6, 3) for k, v in row.items()
                  if k.startswith("stage_") and k.endswith("_ns")}
        print(f"<!-- {pid} stages ms: {stages} -->")
    (m1, p1), (m8, p8) = rates
    print(f"\nratio 8 -> 64 GPUs: model {m8 / m1:.2f}x, published {p8 / p1:.2f}x "
          f"(model / published {m8 / m1 / (p8 / p1):.2f})")


if __name__ == "__main__":
    main()
