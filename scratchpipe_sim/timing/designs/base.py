"""The contract of a training-system design: the `Design` base class and its class attributes.

A design is a SimPy process over the mini-batches of a `Workload` (per-batch counts from one
cache policy, or none): for every batch it yields stages built from the `Machine`'s
resources and calls `m.batch_done(b)` when batch b finished training. It prices work only
through the Machine's helpers (one place per kind of cost, shared by every design) — one
SimPy event per transfer or stage, never per access.

Adding a design is one file: `scratchpipe_sim/timing/designs/NAME.py` with a `Design`
subclass decorated `@DESIGNS.register("NAME")` (`design_registry.py`, which also sets the
class's `name`). The registry imports every module of the package on first use. The class's
metadata says where it shows up: `default` (in a config's default `designs`), `order`
(display order in tables and plots) and `baseline` (the design speedups are measured
against); `design_registry` derives the lists from it. What it is priced from is
`design_inputs.py`'s; its knobs are built by `design_parameters.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, ClassVar

from scratchpipe_sim.config import Config
from scratchpipe_sim.timing.counts import Workload
from scratchpipe_sim.timing.designs.design_inputs import Columns, WorkloadKey, check_policy
from scratchpipe_sim.timing.designs.design_parameters import design_params
from scratchpipe_sim.timing.input_pipeline import InputPipeline
from scratchpipe_sim.timing.machine import Machine

if TYPE_CHECKING:
    import numpy as np

    from scratchpipe_sim.traces.csr_trace import Trace


class Design(ABC):
    #: set by `@DESIGNS.register("NAME")`
    name: ClassVar[str] = ""
    #: one line for `--help` and docs
    summary: ClassVar[str] = ""
    #: run when a config does not list its `designs`
    default: ClassVar[bool] = False
    #: display position in tables and plots (ascending; ties by name)
    order: ClassVar[int] = 1000
    #: the design `speedup_vs_hybrid` is measured against (exactly one)
    baseline: ClassVar[bool] = False
    #: its own parameters: a frozen dataclass (field metadata as the config's), set as
    #: `design_params.NAME`; None: it takes none
    Params: ClassVar[type | None] = None
    #: the TBE phases its stages make up: phase -> the `m.stage` names summed into it (MLP
    #: and input copies left out), what published points and peers compare; empty: none
    phase_stages: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: the FBGEMM EmbeddingLocation a published GPU point that runs as this design names
    #: (`validate --published`'s `placement`); None: no published point runs it
    embedding_location: ClassVar[str | None] = None
    #: `plan` weighs it even when the config does not list it (an alternative a user would
    #: pick instead of a single-GPU cache)
    plan_alternative: ClassVar[bool] = False
    #: the lookaheads `plan`'s lookahead axis tries (`design_params.NAME.lookahead`; (): no
    #: such axis; narrowed by `lookaheads`), and what `plan` sets beside each
    lookahead_grid: ClassVar[tuple[int, ...]] = ()
    lookahead_settings: ClassVar[dict[str, Any]] = {}

    @classmethod
    def lookaheads(cls, cfg: Config) -> tuple[int, ...]:
        """The lookaheads `plan` tries for cfg (the grid; a design narrows it)."""
        return cls.lookahead_grid

    #: its GPU reads the batch's sparse ids, so the input pipeline copies them (and their
    #: offsets) with the dense features; False: they stay on the host (hybrid)
    inputs_carry_ids: ClassVar[bool] = True

    #: its GPU count is `design_params.NAME.gpus`: `plan` searches it (gpus axis, over
    #: `gpu_counts`)
    scales_out: ClassVar[bool] = False

    @classmethod
    def gpu_counts(cls, cfg: Config) -> tuple[int, ...]:
        """The GPU counts `plan`'s gpus axis tries; (): the design trains on one GPU."""
        return ()

    @classmethod
    def gpus_of(cls, cfg: Config) -> int:
        """The GPUs it trains on under cfg: what its cost per sample is priced at."""
        return 1

    @classmethod
    def check_config(cls, cfg: Config) -> None:
        """The checks of its inputs that cfg alone decides (no trace, no pricing), run where
        a config is loaded (`config show`, `run`, the start of a sweep or `sensitivity`,
        `design_parameters.check_inputs`) so a mistake is one line before anything is
        priced. The default: its cache policy's (`design_inputs.check_policy`: the policy's
        name, parameters and warm-up prefix), made on its workload key; a design whose
        construction places the tables (their sizes, which a trace file may give) or checks
        more overrides it."""
        check_policy(cls(cfg).workload_key(), cfg)

    @classmethod
    def check_placing(cls, cfg: Config, scalar_checks: Callable[[Config, Any], Any]) -> None:
        """`check_config` of a design whose construction places the tables on its GPUs'
        HBM: the construction whole where the config gives every table's size (a generated
        trace); with a trace file, whose tables may size the model, `scalar_checks(cfg,
        params)` (what needs no table), the rest when the trace is read."""
        if cfg.trace.path is None:
            cls(cfg)
        else:
            scalar_checks(cfg, design_params(cfg, cls.name))

    def __init__(self, cfg: Config):
        self.cfg = cfg
        #: the typed `design_params.NAME` (defaults filled in)
        self.params: Any = design_params(cfg, self.name)
        m = cfg.model
        self.r = m.row_bytes  # bytes read per lookup (weights only)
        self.R = m.moved_row_bytes  # bytes per row moved or updated (weights + state)
        self.sample_out = m.sample_output_bytes  # a sample's embedding outputs, every table
        self.sample_out_rows = sum(m.output_rows_per_table)

    def inputs(self, m: Machine, c: Columns, share: float = 1.0) -> InputPipeline:
        """The one input hook: the batches' loader and copy (`timing/input_pipeline.py`),
        started now and running `input_pipeline.prefetch_batches` ahead; the design yields
        from its `wait(b)` (or `host_wait(b)`) where batch b's work first needs its inputs.
        `share`: the part of each batch this GPU loads (a data-parallel rank's)."""
        return InputPipeline(m, c.samples, c.accesses, self.inputs_carry_ids, share)

    def columns(self, w: Workload) -> Columns:
        return Columns.of(w, self.r, self.R)

    def trace_columns(self, trace: Trace, replay_cache: bool = True) -> dict[str, np.ndarray]:
        """Per-batch columns of its own from the timed batches of the trace, added to its
        Workload (the cluster's per-rank counts); {} (the default): none. `replay_cache`:
        whether they may be read from and kept in the on-disk replay cache (`--no-cache`:
        False)."""
        return {}

    @abstractmethod
    def workload_key(self) -> WorkloadKey:
        """The counts this design is priced from."""

    @abstractmethod
    def run(self, m: Machine, w: Workload) -> Generator:
        """SimPy process: train every batch of `w`, calling `m.batch_done(b)` as each ends."""
