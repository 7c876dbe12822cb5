"""Stages shared by `lru-cache` and `lru-prefetch` (an FBGEMM-style on-demand cache).

fetch:    the cache's bookkeeping kernels (probe a tag set per unique id and per fill), then
          evictions written back and misses filled (FBGEMM's lxu_cache_insert), streamed:
          fill = {CPU DRAM gather || H2D || HBM write} of F rows; write-back = {HBM read ||
          D2H || CPU DRAM write} of W rows — all concurrent (one streaming kernel that pulls
          rows from pinned host memory, so its DRAM gather is the DMA's host side).
forward:  HBM (or L2) gather of the cached accesses || UVM reads of the P unplaced
          (conflict-miss) accesses: CPU DRAM gather || H2D at pcie.uvm_efficiency.
backward: sort + segment-reduce of all A gradient contributions and the update of the
          unique cached rows in HBM || UVM read-modify-write in host memory of the unique
          unplaced rows (H2D and D2H at uvm_efficiency, DRAM 2 rows each).
Rows carry their optimizer state whenever they move or are updated (R bytes); lookups read
weights only (r bytes).
"""

from __future__ import annotations

from scratchpipe_sim.timing.designs.base import Columns, Design, WorkloadKey


class CacheStages:
    def __init__(self, design: Design, c: Columns):
        self.d = design
        self.c = c

    def fetch(self, m, b):
        """One process: lookup kernels, then fills and write-backs streamed together."""
        c = self.c
        R = c.R_fill[b]
        F, W = c.fills[b], c.writebacks[b]
        return m.seq(
            lambda: m.cache_lookup(b, c.unique[b], F),
            lambda: m.all_of([
                m.dram.gather(F, R, b, "fill read"), m.pcie.h2d(F * R, b, "fill", dma=False),
                m.hbm.gather(F, R, b, "fill write"),
                m.hbm.gather(W, R, b, "victim read"),
                m.pcie.d2h(W * R, b, "writeback", dma=False),
                m.dram.gather(W, R, b, "writeback write")]))

    def forward(self, m, b):
        c = self.c
        P, r = c.unplaced[b], c.r_host[b]
        hit_bytes = c.accesses[b] * c.r[b] - P * r
        return [m.gpu_forward(b, c.accesses[b] - P, c.l2[b],
                              hit_bytes / (c.accesses[b] - P) if c.accesses[b] > P else r),
                m.dram.gather(P, r, b, "uvm gather"), m.pcie.h2d(P * r, b, "uvm", uvm=True)]

    def backward(self, m, b):
        c = self.c
        uu, R = c.unique_unplaced[b], c.R_host[b]
        return [m.gpu_backward(b, c.accesses[b], c.unique[b] - uu, c.l2_update[b], c.r[b],
                               c.R[b]),
                m.dram.gather(2 * uu, R, b, "uvm update"),
                m.pcie.h2d(uu * R, b, "uvm update", uvm=True),
                m.pcie.d2h(uu * R, b, "uvm update", uvm=True)]


def cache_key(design: Design) -> WorkloadKey:
    cfg = design.cfg
    params = ()
    if cfg.cache.ways is not None and cfg.cache.policy.startswith("fbgemm"):
        params = (("ways", cfg.cache.ways),)
    return WorkloadKey(cfg.cache.policy, cfg.capacity_rows(), params)
