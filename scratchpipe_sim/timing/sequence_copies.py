"""TorchRec's copies of the unpooled (sequence) rows around the output and gradient
all-to-alls of a row-wise sharded EmbeddingCollection: pure closed forms, no SimPy (the
`cluster` design prices them on its rank's HBM, `design_params.cluster.sequence_copies`).

Why: a pooled table sends one vector per sample, an unpooled one a row per id (~1 GB per
rank and direction at dynamicemb's benchmark size, E3.13), and TorchRec does not hand the
all-to-all's buffers to the lookup and the model as they are: each side of the exchange
copies every row it sends or receives, once or more. Read in TorchRec (v1.1, 2025-04,
the version dynamicemb's benchmark ran against):

    forward
      permute    All2All_Seq_Req.forward: fbgemm permute_2D_sparse_data reorders the looked-up
                 rows by (feature, source rank) before all_to_all_single (comm_ops.py): reads
                 and writes the rows the rank looked up (Lb)
      unbucket   SequenceEmbeddingsAwaitable: index_select by unbucketize_permute_tensor back
                 into the order of the rank's own ids (dist_data.py): reads and writes the
                 rows it received (S)
      expand     with use_index_dedup, construct_jagged_tensors' index_select by the reverse
                 indices of jagged_unique_indices, one row per original id
                 (modules/utils.py): reads the S distinct rows, writes the full rows (F)
    backward
      split      torch.split's backward (construct_jagged_tensors cut the rows per feature)
                 is a cat: reads and writes F
      expand'    with dedup, index_select's backward: zeros(S), then index_add_ of the F
                 gradient rows into it: S + F + 2S
      unbucket'  index_select's backward: zeros(S), then index_add_ of S rows: S + S + 2S
      permute'   All2All_Seq_Req.backward: permute_2D_sparse_data of the received gradients,
                 2Lb
      divide     GRADIENT_DIVISION (default True, comm_ops.py): div_ by the world size, 2Lb

How the bytes are counted: a copy reads its source and writes its destination, once per
row; an index_select reads each distinct source row once (a repeated row hits L2, as
`Machine.uvm_read` prices duplicate ids); an index_add_ into zeros writes the zeros, reads
its source and reads and writes each destination row once (the atomics of repeated rows
resolve in L2). With dedup the ids are deduplicated first (ShardedEmbeddingCollection.
_dedup_indices: fbgemm jagged_unique_indices, a sort of the rank's own ids, priced by the
design as a radix sort). Without dedup S = F (and Lb is the rank's lookups, F on average):
6 Lb + 8 F; with it S = F x (ids sent / ids before dedup): 6 Lb + 10 S + 4 F, so the
copies grow with the ids before dedup, and dedup with no duplicate to remove is slower
(the expand, its backward and the sort are added for nothing).

Each copy is an elementwise kernel streaming through HBM: priced at hbm_GBps x
gpu.stream_efficiency, the dense elementwise kernels' rate (timing/dense_compute.py). The
index_add_'s atomics are priced as plain reads and writes (their conflicts, on the rows of
tables smaller than a rank's batch, stay in L2). Pooled outputs are left out: TorchRec's
pooled all-to-all copies B x T x D per rank (All2All_Pooled_Wait's split and cat), not a
row per id, and the sharding's pooled dists differ (reduce-scatter for row-wise).

Sources: github.com/pytorch/torchrec, torchrec/distributed/comm_ops.py (All2All_Seq_Req,
All2All_Seq_Req_Wait, GRADIENT_DIVISION), torchrec/distributed/dist_data.py
(SequenceEmbeddingsAwaitable), torchrec/distributed/embedding.py (_dedup_indices),
torchrec/modules/utils.py (construct_jagged_tensors).
"""

from __future__ import annotations

from dataclasses import dataclass

#: HBM passes (a read or a write of the rows) of each copy, by the rows it moves: the
#: rows the rank looked up (Lb), received (S), and its own ids' full rows (F); module doc.
#: Forward: permute 2 Lb, unbucket 2 S; backward: split 2 F, unbucket' 4 S, permute' and
#: divide 2 Lb each
FORWARD_PASSES = {"looked": 2, "received": 2, "full": 0}
BACKWARD_PASSES = {"looked": 4, "received": 4, "full": 2}
#: with dedup, the expand (S read, F written) and its backward (zeros(S), F read, S read
#: and written by index_add_)
DEDUP_FORWARD_PASSES = {"looked": 0, "received": 1, "full": 1}
DEDUP_BACKWARD_PASSES = {"looked": 0, "received": 3, "full": 1}
#: mode choices of `design_params.cluster.sequence_copies`
MODES = ("torchrec", "none")


@dataclass(frozen=True)
class SequenceCopies:
    """One rank's copies of unpooled rows in one batch: HBM bytes before the lookup's
    output leaves (forward) and before its backward (backward), and the ids its dedup
    sorts (0 without dedup)."""

    forward_bytes: float
    backward_bytes: float
    dedup_ids: float

    @property
    def total_bytes(self) -> float:
        return self.forward_bytes + self.backward_bytes


def _bytes(passes: dict[str, int], looked: float, received: float, full: float) -> float:
    return passes["looked"] * looked + passes["received"] * received + passes["full"] * full


def sequence_copies(looked_bytes: float, full_bytes: float, dedup_scale: float,
                    own_ids: float, dedup: bool) -> SequenceCopies:
    """The copies of one rank (module doc): `looked_bytes` (Lb) the unpooled rows it looked
    up, `full_bytes` (F) its own samples' unpooled rows, one per id, `dedup_scale` the ids
    sent over the ids before dedup (S = F x dedup_scale; 1 without dedup), `own_ids` its
    own samples' unpooled ids (what dedup sorts)."""
    if dedup:
        received = full_bytes * dedup_scale
        fwd = _bytes(FORWARD_PASSES, looked_bytes, received, full_bytes) + _bytes(
            DEDUP_FORWARD_PASSES, looked_bytes, received, full_bytes)
        bwd = _bytes(BACKWARD_PASSES, looked_bytes, received, full_bytes) + _bytes(
            DEDUP_BACKWARD_PASSES, looked_bytes, received, full_bytes)
        return SequenceCopies(fwd, bwd, own_ids)
    return SequenceCopies(_bytes(FORWARD_PASSES, looked_bytes, full_bytes, full_bytes),
                          _bytes(BACKWARD_PASSES, looked_bytes, full_bytes, full_bytes), 0.0)
