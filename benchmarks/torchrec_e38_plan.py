"""Which of E3.8's tables TorchRec's own planner shards row-wise (issue 43).

torchrec_dlrm's dlrm_main.py plans its 26 tables (40M-row caps, dim 128) over 8 GPUs with
`EmbeddingShardingPlanner(storage_reservation=HeuristicalStorageReservation(percentage=
0.05))` and its embedding optimizer fused in backward. This runs the installed TorchRec's
planner (the `[peers]` extra: a newer TorchRec than the 0.3.2 of the published runs) on the
same tables, 8 ranks of 40 GiB, for E3.8's (local batch, optimizer) pairs and prints the
row-wise tables of each plan: the placement published_points.yaml's E3.8 points reproduce
with `hbm_capacity_GiB: 30.4`: torchrec v0.3.2's default HBM_CAP of 32 GiB
less the 5% (docs/validation.md, end-to-end points).

    python benchmarks/torchrec_e38_plan.py
"""

from __future__ import annotations

ROWS = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282,
        10, 2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108,
        36]
RUNS = ((256, "sgd"), (256, "adagrad"), (2048, "sgd"), (2048, "adagrad"))


def plan(batch: int, optimizer: str) -> dict[str, str]:
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.storage_reservations import (
        HeuristicalStorageReservation,
    )
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=128, num_embeddings=r,
                                 feature_names=[f"f{i}"]) for i, r in enumerate(ROWS)]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    opt = torch.optim.Adagrad if optimizer == "adagrad" else torch.optim.SGD
    apply_optimizer_in_backward(opt, ebc.parameters(), {"lr": 0.01})
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=8, local_world_size=8, compute_device="cuda",
                          hbm_cap=40 * 1024**3),
        batch_size=batch,
        storage_reservation=HeuristicalStorageReservation(percentage=0.05))
    out = planner.plan(ebc, [EmbeddingBagCollectionSharder()])
    (per_table,) = out.plan.values()
    return {name: p.sharding_type for name, p in per_table.items()}


def main() -> None:
    for batch, optimizer in RUNS:
        kinds = plan(batch, optimizer)
        rw = [f"{n} ({ROWS[int(n[1:])]:,} rows)" for n, k in kinds.items() if k == "row_wise"]
        others = sorted({k for k in kinds.values() if k != "row_wise"})
        print(f"local batch {batch}, {optimizer}: row-wise {', '.join(rw) or 'none'}; "
              f"the rest {', '.join(others)}")


if __name__ == "__main__":
    main()
