"""FBGEMM's CPU TBE and the simulator compute the same thing (issue 25, first part's test).

The simulator's trace reader hands a batch as per-table ids with table-major bag offsets
(`Trace.batch`) or linearized over one store (`Trace.linear_batch`, what hybrid's CPU gather
`cpu.host_kernels.bag_pool` runs on). FBGEMM's `SplitTableBatchedEmbeddingBagsCodegen` on the CPU,
given the same weights and the batch's ids and offsets, must pool the same vectors: then a
comparison of their times (`validate --cpu --against fbgemm`, still to build) is of time
on the same work. Skips without fbgemm-gpu-cpu (the `peers` extra).
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from peer_packages import fbgemm_reason

pytestmark = pytest.mark.skipif(fbgemm_reason() is not None, reason=str(fbgemm_reason()))

CONFIG = """
name: fbgemm-same-work
seed: 3
hardware: {preset: a100-gen4}
model:
  tables: {count: 3, rows: [500, 800, 300], dim: 16}
  pooling: [5, 1, 3]
  batch_size: 64
  num_batches: 2
  warmup_batches: 0
trace: {distribution: zipf, alpha: 1.05}
designs: [hybrid]
"""


def test_fbgemm_cpu_tbe_pools_what_the_simulator_pools():
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
        EmbeddingLocation,
        PoolingMode,
    )
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.cpu.host_kernels import bag_pool
    from scratchpipe_sim.timing import build_trace

    cfg = load_config(yaml.safe_load(CONFIG))
    trace = build_trace(cfg, cache=False)
    rows, dim = list(trace.table_rows), 16
    tables = len(rows)
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(r, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in rows],
        optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1, pooling_mode=PoolingMode.SUM,
        weights_precision=SparseType.FP32)
    store = np.random.default_rng(0).standard_normal((sum(rows), dim)).astype(np.float32)
    first = trace.table_offsets
    for t, w in enumerate(tbe.split_embedding_weights()):
        w.copy_(torch.from_numpy(store[first[t]:first[t] + rows[t]]))
    for k in range(trace.num_batches):
        b = trace.batch(k)
        got = tbe(torch.from_numpy(np.asarray(b.indices, np.int64)),
                  torch.from_numpy(np.asarray(b.offsets, np.int64))).detach().numpy()
        ids, bag_ptr = trace.linear_batch(k)
        pooled = np.zeros((len(bag_ptr) - 1, dim), np.float32)
        bag_pool(store, dim, ids, bag_ptr, pooled)
        # the simulator's bags are table-major (t * B + sample); FBGEMM's output is
        # [B, tables x dim]
        want = pooled.reshape(tables, b.batch_size, dim).transpose(1, 0, 2).reshape(
            b.batch_size, tables * dim)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
