"""Stages shared by `lru-cache` and `lru-prefetch` (an FBGEMM-style on-demand cache), whose
forward and backward ScratchPipe and Bagpipe reuse.

fetch:    the cache's bookkeeping kernels (probe a tag set per lookup, per unique id and per
          fill; lru_cache_populate's two radix sorts over every lookup: `Machine.
          cache_populate_sorts`; with `record_miss_counter`, FBGEMM's miss counter
          first: `Machine.cache_miss_counter`), then
          evictions written back and misses filled (FBGEMM's lxu_cache_insert), streamed:
          fill = the F missed rows read in place from the UVM table (`Machine.uvm_read`, in
          random order: FBGEMM radix-sorts the missed ids by their hashed cache set, so the
          insert kernel visits host pages in no order) || written to HBM; write-back = W
          victims read from HBM || stored in place into host memory (`Machine.uvm_write`,
          in set order) — all concurrent.
forward:  HBM (or L2) gather of the cached accesses and the output rows || UVM reads of
          the uu distinct rows the cache could not place (conflict misses).
backward: sort + segment-reduce of all A gradient contributions, then the update of the
          unique cached rows in HBM || UVM read-modify-write of the unique unplaced rows.
Optimizer state (`state_in_uvm`): FBGEMM allocates a managed-caching table's state with
cacheable=False, so it stays in UVM: fills and write-backs move the weights alone and the
backward reads and writes every updated row's state in place over the link (published H100
points T1.3/T1.4: Adam's backward 11.0 ms against SGD's 0.79). `enforce_hbm` (and
ScratchPipe / Bagpipe, whose scratchpad holds the row with its state) keep it with the row:
R bytes move and are updated. Lookups read weights only (r bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scratchpipe_sim.policies.fbgemm import FbgemmParams
from scratchpipe_sim.timing.designs.base import Design
from scratchpipe_sim.timing.designs.design_inputs import Columns, WorkloadKey
from scratchpipe_sim.timing.designs.design_parameters import params_tuple, policy_params


@dataclass(frozen=True)
class FbgemmCacheParams:
    """The knobs of an FBGEMM managed cache (`design_params.lru-cache`, `.lru-prefetch`)."""

    enforce_hbm: bool = field(default=False, metadata={
        "help": "keep the optimizer state in HBM beside the cache (FBGEMM's enforce_hbm). "
                "false, FBGEMM's default: the state is allocated cacheable=False, stays in "
                "UVM, and every update reads and writes it in place over the link"})
    record_miss_counter: bool = field(default=False, metadata={
        "help": "FBGEMM's RecordCacheMetrics (record_cache_miss_counter=True): every "
                "prefetch probes the cache for all the batch's lookups once more and counts "
                "the unique misses with torch.unique (a 64-bit radix sort and a host sync). "
                "false, FBGEMM's default; the recsys-examples benchmark of the published "
                "caching points sets it"})


class CacheStages:
    def __init__(self, design: Design, c: Columns, state_in_uvm: bool = False):
        self.d = design
        self.c = c
        m = design.cfg.model
        #: share of a moved row that is optimizer state left in UVM (0: state with the row)
        self.uvm_state_share = (m.state_bytes / m.moved_row_bytes
                                if state_in_uvm and m.moved_row_bytes > 0 else 0.0)
        #: the host allocation of the state alone (every row's state)
        self.state_table_bytes = design.cfg.total_rows * m.state_bytes
        #: FBGEMM's cache sets (its default ways unless an fbgemm-* policy sets cache.params)
        ways = getattr(policy_params(design.cfg), "ways", FbgemmParams.ways)
        self.sets = max(1, math.ceil(design.cfg.capacity_rows() / ways))
        #: FBGEMM's record_cache_miss_counter: a second probe pass and torch.unique
        self.miss_counter = getattr(design.params, "record_miss_counter", False)

    def fetch(self, m, b):
        """One process: lookup kernels, then fills and write-backs streamed together."""
        c = self.c
        R = c.R_fill[b] * (1.0 - self.uvm_state_share)
        F, W = c.fills[b], c.writebacks[b]
        A = c.accesses[b]
        return m.seq(
            lambda: m.cache_miss_counter(b, A) if self.miss_counter else None,
            lambda: m.cache_lookup(b, A, c.unique[b], F),
            lambda: m.cache_populate_sorts(b, A, self.sets),
            lambda: m.all_of([
                m.uvm_read(b, F, R, "fill"),
                m.hbm.gather(F, R, b, "fill write"),
                m.hbm.gather(W, R, b, "victim read"),
                m.uvm_write(b, W, R, "writeback")]))

    def forward(self, m, b):
        c = self.c
        P, r = c.unplaced[b], c.r_host[b]
        hit_bytes = c.accesses[b] * c.r[b] - P * r
        return [m.gpu_forward(b, c.accesses[b] - P, c.samples[b], c.l2[b],
                              hit_bytes / (c.accesses[b] - P) if c.accesses[b] > P else r),
                m.uvm_read(b, c.unique_unplaced[b], r, "uvm gather", accesses=P)]

    def backward(self, m, b):
        c = self.c
        uu, R_host = c.unique_unplaced[b], c.R_host[b]
        share = self.uvm_state_share
        cached = c.unique[b] - uu
        state = c.R[b] * share  # state bytes of a cached row, kept in UVM

        def host():
            return [m.uvm_update(b, uu, R_host, "uvm update"),
                    m.uvm_update(b, cached, state, "uvm state",
                                 table_bytes=self.state_table_bytes) if state > 0 else None]

        return [m.gpu_backward(b, c.accesses[b], cached, c.l2_update[b], c.r[b],
                               c.R[b] * (1.0 - share), host=host)]


def cache_key(design: Design) -> WorkloadKey:
    cfg = design.cfg
    return WorkloadKey(cfg.cache.policy, cfg.capacity_rows(), params_tuple(policy_params(cfg)))
