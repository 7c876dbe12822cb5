"""Hybrid's update priced with the structure of FBGEMM's CPU backward, per optimizer (and
its forward's costs beyond the rows' gathers: `forward_overhead_ns`).

FBGEMM's `split_embedding_backward_codegen_{optimizer}_cpu` (fbgemm_gpu/codegen/training/
backward/embedding_backward_split_cpu_template.cpp) does, per table:

    csr2csc      copy every lookup's (row, bag) pair, radix-sort them by row
                 (fbgemm::radix_sort_parallel, 8-bit digits: 3 passes for 2^17-2^24 rows)
                 and scan the sorted keys for segment starts: per lookup, at::parallel_for
                 and OpenMP over every thread
    walk         per unique row (segment): reset a D-float buffer, add each of its
                 lookups' grad_output rows into it (per lookup element), then the
                 optimizer's update of the row and its state in place (per row, per row
                 element; a bag's grad_output row is read first by one of its lookups:
                 per bag element). SGD and exact Adagrad run the template's generic loop,
                 serial
                 over the unique rows whatever the threads ("no fbgemm"); rowwise Adagrad
                 in fp32 runs the JIT'd SpMDM + fused SparseAdaGrad kernels, at::parallel_for
                 over blocks of 64 unique rows

so a batch of n lookups over U unique rows of D floats, on T tables, costs

    sort_ns = n x ns_per_lookup                                          (every core)
    walk_ns = ns_per_call + T x ns_per_table + n x D x ns_per_lookup_element
              + U x (ns_per_row + doublings x ns_per_row_doubling)
              + U x D x ns_per_row_element
              + bags x D x ns_per_bag_element                (one core, or every: parallel)

    doublings = log2(a table's bytes / TABLE_BYTES_REF), at least 0 (the mean table's)

with the terms of the config's optimizer (`hardware.cpu.update`), fitted on FBGEMM's own
backward by `calibrate --cpu --kernel fbgemm` (one thread). Why these terms and not a cost
per lookup and per row alone: the walk's per-element work makes the update grow with D at
fixed counts, and SGD's scalar loop and rowwise Adagrad's JIT'd one differ per element, not
per row (docs/validation.md: rowwise Adagrad's backward runs 1.7-1.8x faster than SGD's).
Why a unique row's cost grows with its table's bytes (`table_doublings`): its first touch
translates an address the TLB does not hold, and the walk's own entries fall out of the
caches more often the more memory the rows span (on this project's VM, guest and host page
tables both: a nested walk). The walk runs table by table, so the span is one table's, not
the call's. Measured, one thread, huge pages, 40,960 lookups of dim 64 each on its own
row: rowwise Adagrad 2.95 / 3.55 / 4.19 / 4.79 ms on one table of 32 MiB / 128 MiB / 512
MiB / 2 GiB (linear in log2 of the bytes: ~6 ns a row a doubling once the per-lookup part
is off), SGD (16,384 lookups) 2.03 / 2.29 / 2.74 ms at 32 MiB / 128 MiB / 1 GiB (+7 ns);
with every row used 8 times the same sweep moved less than the noise (lookups do not pay
it: their rows are the unique rows'); 327,680 lookups over ~108k rows at dim 64 took 17.4
ms on one 2 GiB table, 13.5 ms on 8 tables of 256 MiB (2 GiB in all, load 7).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratchpipe_sim.config.hardware import ForwardTerms, UpdateTerms


@dataclass(frozen=True)
class UpdateCost:
    """Core-ns of one batch's update, by the part of FBGEMM's backward that does it."""

    sort_ns: float  # csr2csc: on every core
    walk_ns: float  # the per-row walk and the optimizer: one core unless `parallel`
    parallel: bool

    @property
    def total_ns(self) -> float:
        return self.sort_ns + self.walk_ns


#: a table's bytes at which `ns_per_row` alone prices a unique row (no doubling): the
#: calibration's smallest size shape (one table of 2^17 rows of dim 64 at its full sizes)
TABLE_BYTES_REF = 32 * 2**20


def table_doublings(table_bytes: float) -> float:
    """log2(table_bytes / TABLE_BYTES_REF), at least 0: how many times a table's weights
    double the reference's bytes. 0 for 0 (not known: an older calibration's points). Why:
    module docstring."""
    if table_bytes <= TABLE_BYTES_REF:
        return 0.0
    return math.log2(table_bytes / TABLE_BYTES_REF)


def update_cost(terms: UpdateTerms, lookups: float, unique_rows: float, dim: float,
                tables: int, bags: float, table_bytes: float = 0.0) -> UpdateCost:
    """The update of `lookups` lookups in `bags` bags over `unique_rows` unique rows of `dim`
    floats on `tables` tables of `table_bytes` bytes each (their mean), priced by `terms`
    (module docstring)."""
    walk = (terms.ns_per_call + tables * terms.ns_per_table
            + lookups * dim * terms.ns_per_lookup_element
            + unique_rows * (terms.ns_per_row
                             + table_doublings(table_bytes) * terms.ns_per_row_doubling)
            + unique_rows * dim * terms.ns_per_row_element
            + bags * dim * terms.ns_per_bag_element)
    return UpdateCost(lookups * terms.ns_per_lookup, walk, terms.parallel)


def grad_output_offchip(bags: float, dim: float, unique_rows: float, row_bytes: float,
                        llc_bytes: float, bytes_per_element: float = 4.0) -> float:
    """Share of the bags' grad_output rows the walk reads from DRAM: 1 - llc / (grad_output
    + the walk's rows), at least 0.

    Why: the walk reads a bag's grad_output row (dim floats of the [B, total_D] gradient,
    in the sorted rows' order: random over the bags) while it reads and writes every
    unique row; both streams share the LLC, so once grad_output (bags x dim floats) and the
    rows (unique_rows x row_bytes) exceed it, that share of the bags' rows come from DRAM.
    The fitted per-bag-element term prices an on-chip read (the calibration's gradients
    are <= 8 MiB); a config's 16 MiB one misses. Measured (one thread, SGD, 8 tables x
    1024 bags x dim 128 at pooling 1: 4 MiB of gradient): 41 ns a bag more with the
    gradient evicted before the backward than just written."""
    grad = bags * dim * bytes_per_element
    if grad <= 0:
        return 0.0
    return max(0.0, 1.0 - llc_bytes / (grad + unique_rows * row_bytes))


#: the term names in the order `design_row` lays them out (a fit's columns)
TERM_NAMES = ("ns_per_call", "ns_per_table", "ns_per_lookup", "ns_per_lookup_element",
              "ns_per_row", "ns_per_row_element", "ns_per_bag_element", "ns_per_row_doubling")


def design_row(lookups: float, unique_rows: float, dim: float, tables: int, bags: float,
               table_bytes: float = 0.0) -> tuple[float, ...]:
    """The multipliers of TERM_NAMES for one batch: update_cost's total is their dot
    product with the terms (what the calibration's least squares fits)."""
    return (1.0, float(tables), lookups, lookups * dim, unique_rows, unique_rows * dim,
            bags * dim, unique_rows * table_doublings(table_bytes))


#: the forward fit's terms (FBGEMM's forward alone, rows used once: every row a miss),
#: in the order `forward_row` lays them out; ForwardTerms keeps the call's and
#: bags', the per-lookup ones are FBGEMM's own miss cost (a check of the mix's rates)
FORWARD_TERM_NAMES = ("ns_per_call", "ns_per_lookup", "ns_per_lookup_element",
                      "ns_per_bag", "ns_per_bag_element",
                      "ns_per_strided_bag", "ns_per_strided_bag_element")


def strided_bags(bags: float, tables: int) -> float:
    """Bags whose output row FBGEMM's forward writes at a stride: all of them when one call
    holds more than one table, else none.

    Why (embedding_forward_split_cpu.cpp, split_embedding_forward_cpu_kernel): the output is
    one [B, total_D] array and, inside at::parallel_for over the bags, the kernel loops
    over the tables, each writing its D floats of every bag's output row, total_D floats
    after the previous bag's. With one table those rows follow each other (a sequential
    stream the core's prefetchers run ahead of); with T tables every pass writes D-float
    runs T x D floats apart, each run's lines written by a different pass. Measured
    (one thread, huge pages, rows all misses, 32,768 pooling-1 lookups): 8 tables x 4096
    bags 1.08 / 2.29 / 3.65 ms at dim 16 / 64 / 128 against 0.78 / 1.75 / 2.93 ms for one
    table x 32,768 bags: 9 / 17 / 22 ns a bag more, about 6 ns + 0.13 ns a float."""
    return float(bags) if tables > 1 else 0.0


def forward_row(lookups: float, bags: float, dim: float, tables: int = 1
                ) -> tuple[float, ...]:
    """The multipliers of FORWARD_TERM_NAMES for one forward call of `tables` tables. No
    term per table: the forward's per-table work (a cached JIT kernel looked up and called
    once per table and block of bags) is not told apart from the call's by this host's
    measurements (fitted, it took 35-117 us a table, which priced 8-table batches 20-40%
    too dear); what a table adds that is measurable is the strided output
    (`strided_bags`)."""
    s = strided_bags(bags, tables)
    return (1.0, lookups, lookups * dim, bags, bags * dim, s, s * dim)


def forward_overhead_ns(terms: ForwardTerms, lookups: float, bags: float, dim: float,
                        tables: int = 1) -> float:
    """Core-ns of FBGEMM's forward beyond the rows' gathers: per call; per bag beyond the
    one bag per `rates_pooling` lookups the per-core rates already carry
    (embedding_forward_split_cpu.cpp: per table, the JIT'd SpMDM kernel over blocks of
    bags, each bag's output row of `dim` floats written); and, when the call holds more
    than one table, per bag whose output run is written at a stride (`strided_bags`: the
    mix that fitted the rates ran one table, so none of its bags were). A pooling above
    the rates' adds nothing for bags (the rates' share is not taken back)."""
    extra_bags = max(0.0, bags - lookups / terms.rates_pooling)
    s = strided_bags(bags, tables)
    return (terms.ns_per_call + extra_bags * (terms.ns_per_bag + dim * terms.ns_per_bag_element)
            + s * (terms.ns_per_strided_bag + dim * terms.ns_per_strided_bag_element))
