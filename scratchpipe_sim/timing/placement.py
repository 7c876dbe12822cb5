"""Where the embedding tables live on a node's GPUs: sharding and the GPUs that hold them.

Pure arithmetic on the config (no SimPy), so a design prices its collectives from it and a
cluster model can place tables the same way. Modes, as TorchRec's sharding types: table-wise
(whole tables, placed largest first on the GPU with the least lookup traffic that has room),
row-wise (every table split evenly over the N GPUs) or auto (table-wise; row-wise for a table
larger than one GPU's HBM). A table's HBM footprint is rows x R (weights + optimizer state).
Column-wise shards (TorchRec's CW: the embedding dim cut into equal slices, every row of its
slice on each shard) are sized by `column_block` and `column_shard_bytes`.
The caller names the config keys that set the GPU count and the mode (`where`): errors name
them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratchpipe_sim.config import Config
from scratchpipe_sim.config.model import gib
from scratchpipe_sim.errors import UserError

GiB = 1 << 30
#: TorchRec's narrowest column-wise shard by default, columns (MIN_CW_DIM in
#: torchrec/distributed/planner/constants.py; its planner's col_wise_shard_dim default)
MIN_CW_DIM = 128
#: a column shard's width must be a multiple of this (torchrec/distributed/sharding_plan.py
#: `_find_base_dim`: a block is a divisor of the dim with `i % 4 == 0`)
CW_ALIGN = 4


@dataclass(frozen=True)
class Sharding:
    """Where each table lives: `frac[g][t]` = fraction of table t's rows on GPU g."""

    gpus: int
    frac: tuple[tuple[float, ...], ...]
    row_wise: tuple[bool, ...]  # per table: split over every GPU

    def lookup_share(self, weights: tuple[float, ...]) -> float:
        """The largest GPU's share of the lookup traffic (weights: per-table lookup bytes)."""
        tot = sum(weights)
        return max(sum(f * w for f, w in zip(fr, weights, strict=True)) for fr in self.frac
                   ) / tot if tot else 1.0 / self.gpus

    def alltoall_bytes(self, B: float, r_t: tuple[float, ...]) -> tuple[float, float]:
        """(largest send, largest receive) of one pooled-vector all-to-all, bytes per GPU."""
        n = self.gpus
        if n == 1:
            return 0.0, 0.0
        k = (n - 1) / n
        sends, recvs = [], []
        for fr in self.frac:
            send = recv = 0.0
            for t, r in enumerate(r_t):
                if self.row_wise[t]:
                    send += B * r * k
                    recv += B * r * k
                elif fr[t] > 0:
                    send += B * r * k
                else:
                    recv += B / n * r
            sends.append(send)
            recvs.append(recv)
        return max(sends), max(recvs)


def table_bytes(cfg: Config) -> list[float]:
    """Each table's HBM footprint: rows x R (weights + optimizer state)."""
    m = cfg.model
    return [rows * R for rows, R in zip(m.rows_per_table, m.moved_row_bytes_per_table,
                                        strict=True)]


def column_block(dim: int, min_width: int) -> int:
    """TorchRec's column-wise block (sharding_plan.py `_find_base_dim`, used by
    `_calculate_cw_shard_sizes_and_offsets`): the smallest divisor of `dim` that is at least
    `min_width` and a multiple of 4; the whole dim when none is (one shard: table-wise).
    The divisors are found in pairs up to sqrt(dim): a prime dim of 10**8 is 10**4 steps,
    not the 10**8 (5 s a table) of trying every width."""
    divisors = set()
    for i in range(1, math.isqrt(dim) + 1):
        if dim % i == 0:
            divisors.update((i, dim // i))
    fits = [w for w in divisors if max(min_width, 1) <= w < dim and w % CW_ALIGN == 0]
    return min(fits, default=dim)


def column_shard_bytes(cfg: Config, t: int, k: int) -> float:
    """HBM of one of k column shards of table t: every row x (dim / k columns + the
    optimizer state of such a row). Element-wise state (adagrad, adam) splits with the
    columns; rowwise-adagrad's one fp32 per row does not: each shard is a table of its own
    in FBGEMM's TBE with its own per-row state, so the k shards hold k x rows x 4 B of it
    (k = 1: exactly `table_bytes`)."""
    m = cfg.model
    w = m.dims[t] // k
    return float(m.rows_per_table[t] * (w * m.tables.bytes_per_element + m._state(w)))


def shard(cfg: Config, n: int, mode: str, where: str) -> Sharding:
    """Place the tables on n GPUs by sharding `mode`; a UserError naming the table that
    cannot fit (and `where.gpus` / `where.sharding`, the keys that set n and mode)."""
    src = cfg.source
    if n < 1:
        raise UserError(f"expected at least 1 GPU, got {n}", source=src, field=f"{where}.gpus")
    hbm = cfg.hardware.gpu.hbm_capacity_GiB * GiB
    sizes = table_bytes(cfg)
    T = len(sizes)
    m = cfg.model
    load_w = [p * r for p, r in zip(m.poolings, m.row_bytes_per_table, strict=True)]
    row_wise = tuple(mode == "row-wise" or (mode == "auto" and s > hbm) for s in sizes)
    frac = [[0.0] * T for _ in range(n)]
    used = [0.0] * n
    load = [0.0] * n
    for t in range(T):
        if row_wise[t]:
            for g in range(n):
                frac[g][t] = 1.0 / n
                used[g] += sizes[t] / n
    full = [g for g in range(n) if used[g] > hbm]
    if full:
        need = sum(sizes[t] for t in range(T) if row_wise[t])
        raise UserError(f"the row-wise tables need {gib(need)} GiB, {gib(need / n)} "
                        f"GiB per GPU on {n} GPUs of {hbm / GiB:g} GiB: expected more GPUs",
                        source=src, field=f"{where}.gpus")
    for t in sorted((t for t in range(T) if not row_wise[t]), key=lambda t: (-sizes[t], t)):
        if sizes[t] > hbm:
            raise UserError(f"table {t} needs {gib(sizes[t])} GiB ({m.rows_per_table[t]} "
                            f"rows x {m.moved_row_bytes_per_table[t]} B) but one GPU holds "
                            f"{hbm / GiB:g} GiB: expected {where}.sharding row-wise or auto",
                            source=src, field=f"{where}.sharding")
        fits = [g for g in range(n) if used[g] + sizes[t] <= hbm]
        if not fits:
            raise UserError(f"table {t} ({gib(sizes[t])} GiB) fits on none of {n} GPUs "
                            f"of {hbm / GiB:g} GiB (the tables need "
                            f"{gib(sum(sizes))} GiB): expected more GPUs",
                            source=src, field=f"{where}.gpus")
        g = min(fits, key=lambda g: (load[g], used[g], g))
        frac[g][t] = 1.0
        used[g] += sizes[t]
        load[g] += load_w[t]
    return Sharding(n, tuple(tuple(f) for f in frac), row_wise)


def gpus_to_hold(cfg: Config, mode: str, where: str) -> int:
    """The fewest GPUs of one node whose HBM holds the tables under sharding `mode` (errors
    name `where.gpus` / `where.sharding`)."""
    per_node = cfg.hardware.interconnect.gpus_per_node
    hbm = cfg.hardware.gpu.hbm_capacity_GiB * GiB
    total = sum(table_bytes(cfg))
    for n in range(max(1, math.ceil(total / hbm)), per_node + 1):
        try:
            shard(cfg, n, mode, where)
            return n
        except UserError:
            continue
    try:
        shard(cfg, per_node, mode, where)
    except UserError as e:
        if e.field == f"{where}.sharding":  # one table alone cannot be placed: name it
            raise
    raise UserError(f"the tables need {gib(total)} GiB but "
                    f"hardware.interconnect.gpus_per_node = {per_node} GPUs of {hbm / GiB:g} "
                    "GiB hold less: expected a node that holds them (multi-gpu models one "
                    "node)", source=cfg.source, field=f"{where}.gpus")
