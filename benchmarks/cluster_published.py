"""The cluster design against published multi-node points: MLPerf Training v3.0 DLRM-DCNv2
on 1 and 8 DGX H100 (HugeCTR), and the ratio 8 -> 64 GPUs.

    python benchmarks/cluster_published.py [--set KEY=VALUE ...] [--batches N]

Published (mlcommons/training_results_v3.0, NVIDIA dgxh100_ngc23.04_merlin_hugectr and
dgxh100_n8_ngc23.04_merlin_hugectr, dlrm_dcnv2/result_0.txt, "tracked_stats" throughput):
1 x DGX H100 (8 GPUs, global batch 55,296): 12,769,089 samples/s; 8 x DGX H100 (64 GPUs,
global batch 135,168): 37,789,978 samples/s. Roles: the 1-node point is the fit (the knob
named by --set, e.g. hardware.gpu.tflops), the 8-node point and the ratio are the check.
Prints one markdown row per point (docs/validation.md's cluster table).
"""

from __future__ import annotations

import argparse

from scratchpipe_sim.config import load_config
from scratchpipe_sim.timing import simulate

#: (nodes, global batch, published samples/s, role)
POINTS = ((1, 55_296, 12_769_089.255954092, "fit"),
          (8, 135_168, 37_789_978.31928131, "check"))


def config(nodes: int, batch: int, batches: int, sets: list[str]):
    return load_config({
        "name": f"mlperf-dcnv2-{nodes}n", "seed": 1,
        "hardware": {"preset": "dgx-h100-cluster", "cluster": {"nodes": nodes}},
        "model": {"preset": "mlperf-dlrm-dcnv2", "batch_size": batch,
                  "num_batches": batches, "warmup_batches": 1},
        "trace": {"preset": "uniform"}, "cache": {"capacity_rows": 1000},
        "designs": ["cluster"]}, sets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--batches", type=int, default=3)
    args = ap.parse_args()
    rates = []
    print("| point | GPUs | global batch | published samples/s | model samples/s | "
          "model / published | role | exchange share |")
    print("|---|---|---|---|---|---|---|---|")
    for nodes, batch, published, role in POINTS:
        row = simulate(config(nodes, batch, args.batches, args.sets), ["cluster"])[0]
        sps = row["samples_per_s"]
        rates.append((sps, published))
        point = "E3.6" if nodes == 1 else "E3.7"
        print(f"| {point} | {row['gpus']} | {batch:,} | {published / 1e6:.2f} M | "
              f"{sps / 1e6:.2f} M | {sps / published:.2f} | {role} | "
              f"{row['exchange_share']:.2f} |")
        stages = {k[6:-3]: round(v / 1e6, 3) for k, v in row.items()
                  if k.startswith("stage_") and k.endswith("_ns")}
        print(f"<!-- {point} stages ms: {stages} -->")
    (m1, p1), (m8, p8) = rates
    print(f"\nratio 8 -> 64 GPUs: model {m8 / m1:.2f}x, published {p8 / p1:.2f}x "
          f"(model / published {m8 / m1 / (p8 / p1):.2f})")


if __name__ == "__main__":
    main()
