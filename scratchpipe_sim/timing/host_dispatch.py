"""The host side of one training iteration: the ops the trainer's CPU thread issues, priced
per op (Python + dispatcher + autograd + launch), and the host syncs that stop it running
ahead of the GPU. Pure functions, no SimPy: `Machine.mlp` (the one hook every design's
iteration passes through) makes the iteration end no earlier than its host issue.

Why: eager PyTorch issues every kernel from one CPU thread, asynchronously, so a batch
takes max(GPU work, host issue work) (Lin et al., arXiv 2201.07821: per-batch time =
kernel time + device idle time from CPU-side overhead on the critical path). At small
batch the host is the bottleneck: TorchRec's DLRM on 8 x A100 runs 10 ms per iteration at
local batch 256 where its GPU work is ~0.7 ms (E3.8).

Ops are counted from the model's structure (`model.framework`):

    eager              a ScratchPipe-style trainer as built (eager PyTorch dense part,
                       fused FBGEMM-style embedding kernels): inputs to the GPU, per MLP
                       layer forward (linear, activation) and backward (activation, data and
                       weight gradients, bias), the interaction's ops, the loss, the fused
                       embedding forward and backward, the foreach optimizer's kernels
    eager-per-table    as eager, but an nn.EmbeddingBag per table (dlrm_s_pytorch, FAMBench):
                       per table its input copies, forward, backward, and a per-tensor
                       optimizer step (torch.optim cannot foreach sparse gradients) for
                       every parameter tensor, zero_grad included
    torchrec           as eager, plus TorchRec's per-feature KeyedJaggedTensor handling
                       (permute, split, lengths/offsets, KeyedTensor regroup) and its
                       input-dist splits exchange: one host sync per iteration, pipelined
                       (TrainPipelineSparseDist: the next batch's input dist overlaps)
    torchrec-unpipelined  the same ops called in-line (model(batch); loss.backward()): the
                       splits sync waits for the previous iteration's last kernel, so the
                       host's issue up to the first embedding kernel (inputs, KJT work, the
                       sync) is in series with the GPU (dynamicemb's benchmark, E3.13)
    hugectr            graph-launched C++ (HugeCTR's MLPerf runs): no Python on the path, 0
    none               no host issue on the path (the memory system alone), 0: the default,
                       so the study's designs are compared on their memory systems
                       (docs/timing.md, host dispatch, says why)

`model.cuda_graphs: true` issues the dense work (MLPs, interaction, loss, optimizer) as one
graph launch: one op. `model.optimizer_foreach: false` steps the dense optimizer one
parameter tensor at a time (PyTorch <= 1.13's torch.optim default: `foreach=None` meant
False), STEP_OPS + ZERO_GRAD_OPS host ops per dense tensor instead of FOREACH_OPS.

A design adds the ops its trainer issues beyond the model's (`DESIGN_OPS`), where the
framework's code shows them: FBGEMM's software cache (lru-cache, lru-prefetch) calls
linearize_cache_indices, lru_cache_populate and lxu_cache_lookup from Python every
iteration (`SplitTableBatchedEmbeddingBagsCodegen._prefetch`); a prefetch on its own
stream (TorchRec's TrainPipelinePrefetch) adds the record_stream of the cache locations
and the forward stream's wait. Designs without a public trainer to count from (scratchpipe,
bagpipe, hybrid, static-cache) add none, and say so (docs/timing.md, host dispatch).

`input_pipeline.loader_in_trainer: true` (PyTorch DataLoader num_workers=0) builds each
batch on the trainer's thread before it issues the iteration: `loader_ns` of host time per
iteration, in series with the ops (`trainer_loader_ns`).
"""

from __future__ import annotations

from dataclasses import dataclass

from scratchpipe_sim.config.hardware import CpuConfig
from scratchpipe_sim.config.inputs import InputPipelineConfig
from scratchpipe_sim.config.model import ModelConfig

#: ops of one nn.Linear + activation layer: forward addmm and the activation; backward the
#: activation's backward and addmm's three (data gradient mm, weight gradient mm, bias sum)
OPS_PER_LAYER = 6
#: DLRM's dot interaction (torchrec / dlrm_s_pytorch): forward cat, view, bmm, transpose,
#: tril index, cat with the dense vector; backward one per forward op
DOT_OPS = 12
#: cat interaction: the concatenation and its split
CAT_OPS = 2
#: a dcn-v2 cross layer x0 * (V(U x) + b) + x: forward mm, addmm, mul, add; backward two per
#: forward op
DCN_OPS_PER_LAYER = 12
#: the loss: sigmoid + BCE forward, their backward, and loss.backward()'s own call
LOSS_OPS = 5
#: a fused embedding (FBGEMM TBE, a design's lookup kernels) per iteration: forward, backward
#: (its optimizer fused in); and the batch's ids, offsets and dense features copied in
FUSED_EMBEDDING_OPS = 2
INPUT_OPS = 3
#: per table of an nn.EmbeddingBag model: indices and offsets copied, forward, backward
#: (embedding_bag_backward and the sparse gradient's construction)
PER_TABLE_OPS = 5
#: a per-tensor optimizer step's ops (torch.optim's _single_tensor_* functions, PyTorch
#: 1.12-1.13 torch/optim/{sgd,adagrad,adam}.py): sgd add_ (no momentum); adagrad step_t += 1,
#: addcmul_, sqrt, add_ (eps), addcdiv_; adam step_t += 1, exp_avg mul_ + add_, exp_avg_sq
#: mul_ + addcmul_, sqrt, div, add_ (eps), addcdiv_ (rowwise-adagrad's dense tensors take
#: plain Adagrad); zero_grad adds one per tensor
STEP_OPS = {"sgd": 1, "adagrad": 5, "rowwise-adagrad": 5, "adam": 9}
ZERO_GRAD_OPS = 1
#: foreach (multi-tensor) optimizer: one op per kernel, zero_grad included
#: (dense_compute.OPTIMIZER_KERNELS counts the same kernels on the GPU)
FOREACH_OPS = {"sgd": 2, "adagrad": 4, "rowwise-adagrad": 4, "adam": 6}
#: TorchRec's sharded training step per sparse feature: set by fit on E3.8-sgd-256
#: (docs/timing.md, host dispatch): the KJT permute / split / lengths-offsets / to_dict /
#: KeyedTensor regroup work TorchRec's Python does per key, in op-equivalents of host_op_ns
TORCHREC_OPS_PER_FEATURE = 11
#: TorchRec's fixed per-iteration ops: the input dist (lengths and values all-to-alls, its
#: awaitables), the output dist's all-to-all forward and backward, DDP's all-reduce
#: buckets, TrainPipelineSparseDist's stream switches
TORCHREC_FIXED_OPS = 12
#: host syncs per iteration: TorchRec's input-dist splits exchange (lengths to the host)
TORCHREC_SYNCS = 1
#: TorchRec's ShardedEmbeddingBagCollection builds one input dist, lookup and output dist
#: per sharding type (torchrec v0.3.2 distributed/embeddingbag.py, `_create_input_dist`,
#: `_create_lookups`, `_create_output_dist`): each type beyond the first adds its own
#: KJTAllToAll (the splits tensors and their stack, the splits all-to-all, the lengths and
#: values all-to-alls, the recat: 6 ops; dist_data.py), its TBE's forward and backward (2),
#: its output dist forward and backward with their waits (4), and its splits `.tolist()`
TORCHREC_GROUP_OPS = 12
TORCHREC_GROUP_SYNCS = 1
#: a row-wise group bucketizes its ids (block_bucketize_sparse_features: 1 op) and the
#: bucketized KeyedJaggedTensor carries no length_per_key, so `dist_splits` computes it on
#: the host (`.tolist()` of the lengths: a sync; rw_sharding.py, dist_data.py v0.3.2)
ROW_WISE_OPS = 1
ROW_WISE_SYNCS = 1
#: TorchRec's frameworks; the parts issued before the first embedding kernel (the batch's
#: load on the trainer's thread, `loader_ns`, comes before them)
TORCHRECS = ("torchrec", "torchrec-unpipelined")
PRE_PARTS = ("inputs", "torchrec", "cache")
#: a design's own host ops per iteration, by design name (module docstring): FBGEMM
#: split_table_batched_embeddings_ops_training.py `_prefetch` (linearize_cache_indices,
#: lru_cache_populate, lxu_cache_lookup; before the lookup kernel: part "cache"); `prefetch`
#: with a forward stream adds record_stream, and the pipeline's wait_stream (part
#: "prefetch": issued a batch ahead, not before this batch's lookup)
DESIGN_OPS: dict[str, tuple[tuple[str, int], ...]] = {
    "lru-cache": (("cache", 3),),
    "lru-prefetch": (("prefetch", 5),),
}
#: frameworks with nothing on the host's path
NO_HOST = ("hugectr", "none")


@dataclass(frozen=True)
class HostCost:
    """One iteration's host issue work: its ops by part and its syncs."""

    #: (part, ops) in issue order
    ops: tuple[tuple[str, int], ...]
    syncs: int
    host_op_ns: float
    sync_ns: float

    #: the sync waits for the previous iteration's GPU work (unpipelined)
    drains: bool = False
    #: the trainer's thread building the batch (DataLoader num_workers=0), ns
    loader_ns: float = 0.0

    @property
    def op_count(self) -> int:
        return sum(n for _, n in self.ops)

    @property
    def pre_ns(self) -> float:
        """Host time before the GPU's first embedding kernel of the iteration: the inputs,
        the TorchRec KJT work and the syncs."""
        pre = sum(n for part, n in self.ops if part in PRE_PARTS)
        return self.loader_ns + pre * self.host_op_ns + self.syncs * self.sync_ns

    @property
    def total_ns(self) -> float:
        """Host time to issue the iteration: loader_ns + ops x host_op_ns + syncs x
        sync_ns."""
        return self.loader_ns + self.op_count * self.host_op_ns + self.syncs * self.sync_ns


def _dense_param_tensors(model: ModelConfig) -> int:
    """Dense parameter tensors: a weight and a bias per MLP layer, dcn-v2's U, V, bias."""
    n = 2 * (len(model.bottom_layers) - 1 + len(model.top_layers) - 1)
    return n + (3 * model.dcn_layers if model.interaction == "dcn-v2" else 0)


def interaction_ops(model: ModelConfig) -> int:
    if model.interaction == "dot":
        return DOT_OPS
    if model.interaction == "dcn-v2":
        return CAT_OPS + DCN_OPS_PER_LAYER * model.dcn_layers
    return CAT_OPS


def host_ops(model: ModelConfig, design: str = "",
             sharding_types: frozenset[str] = frozenset()) -> tuple[tuple[str, int], ...]:
    """The ops the trainer's thread issues per iteration, by part (module docstring), with
    `design`'s own (DESIGN_OPS) after the inputs; under TorchRec, the sharding groups of
    `sharding_types` ("table-wise", "row-wise": what a sharded design placed) beyond the
    first and a row-wise group's bucketize (part "torchrec")."""
    fw = model.framework
    if fw in NO_HOST:
        return ()
    layers = len(model.bottom_layers) - 1 + len(model.top_layers) - 1
    dense = OPS_PER_LAYER * layers + interaction_ops(model) + LOSS_OPS
    tables = model.table_count
    per_tensor = STEP_OPS[model.optimizer] + ZERO_GRAD_OPS
    if fw == "eager-per-table":
        embedding = PER_TABLE_OPS * tables
        optim = per_tensor * (_dense_param_tensors(model) + tables)
        inputs = INPUT_OPS - 1  # the dense features and labels; ids and offsets per table
    else:
        embedding = FUSED_EMBEDDING_OPS
        # the embeddings' optimizer is fused into their backward: only dense tensors step
        optim = (FOREACH_OPS[model.optimizer] if model.optimizer_foreach
                 else per_tensor * _dense_param_tensors(model))
        inputs = INPUT_OPS
    if model.cuda_graphs:
        dense, optim = 1, 0
    out = [("inputs", inputs), *DESIGN_OPS.get(design, ())]
    if fw in TORCHRECS:
        groups = (TORCHREC_GROUP_OPS * max(len(sharding_types) - 1, 0)
                  + ROW_WISE_OPS * _bucketizes(sharding_types))
        out.append(("torchrec",
                    TORCHREC_FIXED_OPS + TORCHREC_OPS_PER_FEATURE * tables + groups))
    return tuple(out + [("embedding", embedding), ("dense", dense), ("optimizer", optim)])


def _bucketizes(sharding_types: frozenset[str]) -> bool:
    """A row-wise group (row-wise or table-row-wise) bucketizes its ids by row range."""
    return bool(sharding_types & {"row-wise", "table-row-wise"})


def host_syncs(model: ModelConfig, sharding_types: frozenset[str] = frozenset()) -> int:
    """Host syncs per iteration: TorchRec's splits exchange, one more per extra sharding
    group and one for a row-wise group's length_per_key."""
    if model.framework not in TORCHRECS:
        return 0
    return (TORCHREC_SYNCS + TORCHREC_GROUP_SYNCS * max(len(sharding_types) - 1, 0)
            + ROW_WISE_SYNCS * _bucketizes(sharding_types))


def trainer_loader_ns(p: InputPipelineConfig, model: ModelConfig, samples: float) -> float:
    """The trainer's thread building a batch of `samples` samples (their ids: samples x
    the lookups of a sample over the tables) when the loader runs in the trainer
    (input_pipeline.loader_in_trainer), else 0: the same core-ns a worker would spend
    (`input_pipeline.loader_core_ns`), now on the issue path."""
    if not p.loader_in_trainer:
        return 0.0
    ids = samples * sum(model.poolings)
    return samples * p.loader_ns_per_sample + ids * p.loader_ns_per_id


def host_iteration(model: ModelConfig, cpu: CpuConfig, loader_ns: float = 0.0,
                   design: str = "", sharding_types: frozenset[str] = frozenset()
                   ) -> HostCost:
    """One iteration's host issue work under model.framework for `design` (placed with
    `sharding_types`), priced with hardware.cpu's host_op_ns and host_sync_ns;
    `loader_ns`: the trainer's thread building the batch (`trainer_loader_ns`)."""
    return HostCost(host_ops(model, design, sharding_types),
                    host_syncs(model, sharding_types), cpu.host_op_ns, cpu.host_sync_ns,
                    drains=model.framework == "torchrec-unpipelined", loader_ns=loader_ns)
