"""The contract of a training-system design, and the `DESIGNS` registry.

A design is a SimPy process over the mini-batches of a `Workload` (per-batch counts from one
cache policy, or none): for every batch it yields stages built from the `Machine`'s
resources and calls `m.batch_done(b)` when batch b finished training. It prices work only
through the Machine's helpers (one place per kind of cost, shared by every design) — one
SimPy event per transfer or stage, never per access.

Adding a design is one file: `scratchpipe_sim/timing/designs/NAME.py` with a `Design`
subclass decorated `@DESIGNS.register("NAME")` (which also sets the class's `name`). The
registry imports every module of the package on first use. The class's metadata says where
it shows up: `default` (in a config's default `designs`), `order` (display order in tables
and plots) and `baseline` (the design speedups are measured against); `default_designs()`,
`design_order()` and `baseline_design()` derive the lists from it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import simpy

from scratchpipe_sim.config import Config
from scratchpipe_sim.config.schema import build, to_plain
from scratchpipe_sim.errors import UserError, closest
from scratchpipe_sim.policies.base import POLICIES
from scratchpipe_sim.registry import Registry
from scratchpipe_sim.timing.counts import Workload
from scratchpipe_sim.timing.machine import Machine

if TYPE_CHECKING:
    import numpy as np

    from scratchpipe_sim.traces.csr_trace import Trace


@dataclass(frozen=True)
class WorkloadKey:
    """Which counts a design needs: `policy` None = no cache (`where` host or device)."""

    policy: str | None
    capacity: int = 0
    params: tuple[tuple[str, Any], ...] = field(default=())
    where: str = "host"
    #: how the cache's state before the timed batches is made: "replay" (the policy runs
    #: over the last warm-up batches), "profile-prefix" (it profiles the whole warm-up
    #: prefix and starts the timed batches preloaded with its picks) or "profile-all" (it
    #: profiles every batch, timed ones included: an oracle)
    warm: str = "replay"
    #: the config key naming the policy (for error messages)
    policy_field: str = field(default="cache.policy", compare=False)
    #: the config key holding `params` (for error messages)
    params_field: str = field(default="cache.params", compare=False)


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

    def __init__(self, cfg: Config):
        self.cfg = cfg
        #: the typed `design_params.NAME` (defaults filled in)
        self.params: Any = design_params(cfg, self.name)
        m = cfg.model
        self.r = m.row_bytes  # bytes read per lookup (weights only)
        self.R = m.moved_row_bytes  # bytes per row moved or updated (weights + state)
        self.sample_out = m.sample_output_bytes  # a sample's embedding outputs, every table
        self.sample_out_rows = sum(m.output_rows_per_table)

    def columns(self, w: Workload) -> Columns:
        return Columns(w, self.r, self.R)

    def trace_columns(self, trace: Trace) -> dict[str, np.ndarray]:
        """Per-batch columns of its own from the timed batches of the trace, added to its
        Workload (the cluster's per-rank counts); {} (the default): none."""
        return {}

    @abstractmethod
    def workload_key(self) -> WorkloadKey:
        """The counts this design is priced from."""

    @abstractmethod
    def run(self, m: Machine, w: Workload) -> Generator:
        """SimPy process: train every batch of `w`, calling `m.batch_done(b)` as each ends."""


DESIGNS: Registry[type[Design]] = Registry("design", package="scratchpipe_sim.timing.designs")


def design_order() -> tuple[str, ...]:
    """Every registered design in display order (the class's `order`, then name)."""
    return tuple(sorted(DESIGNS.names(), key=lambda n: (DESIGNS.get(n).order, n)))


def default_designs() -> tuple[str, ...]:
    """The designs a config runs when it does not list them, in display order."""
    return tuple(n for n in design_order() if DESIGNS.get(n).default)


def config_designs(cfg: Config) -> tuple[str, ...]:
    """The designs `cfg` runs: its `designs`, else (null) `default_designs()`. Resolved here,
    not in config, because config sits below the design registry."""
    return tuple(cfg.designs) if cfg.designs is not None else default_designs()


def _build_params(params_cls: type | None, raw: Any, source: str | None, where: str,
                  owner: str) -> Any:
    """`raw` checked against a Params dataclass (one-line errors naming `where`)."""
    if params_cls is None:
        if raw:
            raise UserError(f"{owner} takes no parameters, got {', '.join(map(str, raw))}",
                            source=source, field=where)
        return None
    return build(params_cls, raw if raw is not None else {}, source, where)


def _params_of(cfg: Config, kind: str, name: str) -> Any:
    """One build per config and name (a frozen config's params never change)."""
    memo = cfg.__dict__.setdefault("_params_memo", {})
    if (kind, name) not in memo:
        if kind == "design":
            memo[kind, name] = _build_params(
                DESIGNS.get(name).Params, cfg.design_params.get(name), cfg.source,
                f"design_params.{name}", f"design '{name}'")
        else:
            memo[kind, name] = _build_params(
                POLICIES.get(name, source=cfg.source, field="cache.policy").Params,
                cfg.cache.params, cfg.source, "cache.params", f"policy '{name}'")
    return memo[kind, name]


def design_params(cfg: Config, name: str, cross_check: bool = True) -> Any:
    """The typed parameters of design `name` (`design_params.NAME`, defaults filled in).

    `cross_check` also runs the Params' own `check(source, where)` (checks across fields,
    e.g. scratchpipe's window against its pipeline): wanted where the design runs, not for
    a design a config sets parameters of but does not run."""
    obj = _params_of(cfg, "design", name)
    if cross_check and hasattr(obj, "check"):
        obj.check(cfg.source, f"design_params.{name}")
    return obj


def policy_params(cfg: Config) -> Any:
    """The typed parameters of `cache.policy` (`cache.params`, defaults filled in)."""
    return _params_of(cfg, "policy", cfg.cache.policy)


def params_tuple(params: Any) -> tuple[tuple[str, Any], ...]:
    """A Params dataclass as the (name, value) pairs a WorkloadKey (and so the replay
    cache's key) holds."""
    if params is None:
        return ()
    return tuple((f.name, getattr(params, f.name)) for f in dataclasses.fields(params))


def param_sections() -> list[tuple[str, type]]:
    """(dotted prefix, Params dataclass) of every design and policy that takes parameters,
    for `config describe`: `design_params.NAME`, then `cache.params` of each policy (as
    `cache.params[NAME]`)."""
    out = [(f"design_params.{n}", DESIGNS.get(n).Params) for n in design_order()
           if DESIGNS.get(n).Params is not None]
    out += [(f"cache.params[{n}]", POLICIES.get(n).Params) for n in POLICIES.names()
            if dataclasses.fields(POLICIES.get(n).Params)]
    return out


def check_params(cfg: Config) -> None:
    """Every `design_params` entry names a design and holds its parameters, and
    `cache.params` the policy's: one-line errors naming the file and the dotted key."""
    for name in config_designs(cfg):
        DESIGNS.get(name, source=cfg.source, field="designs")
    for name in cfg.design_params:
        if name not in DESIGNS:
            raise UserError(f"unknown design '{name}'{closest(name, DESIGNS.names())}; "
                            f"expected one of: {', '.join(DESIGNS.names())}",
                            source=cfg.source, field=f"design_params.{name}")
    runs = set(config_designs(cfg))
    for name in sorted(set(cfg.design_params) | runs):
        design_params(cfg, name, cross_check=name in runs)
    policy_params(cfg)


def with_default_designs(resolved: dict[str, Any],
                         source: str | None = None) -> dict[str, Any]:
    """A resolved config dict with `designs: null` replaced by the default designs and every
    design's and the policy's parameters filled in with their defaults, as `config show`, a
    run's resolved_config.yaml and a sweep point's hash show them."""
    if resolved.get("designs") is None:
        resolved["designs"] = list(default_designs())
    cfg = Config.from_dict(resolved, source=source)
    check_params(cfg)
    names = sorted(set(cfg.design_params) | set(cfg.designs or ()))
    resolved["design_params"] = {
        n: to_plain(design_params(cfg, n, cross_check=False)) for n in names
        if DESIGNS.get(n).Params}
    resolved.setdefault("cache", {})["params"] = to_plain(policy_params(cfg)) or {}
    return resolved


def baseline_design() -> str:
    """The design speedups are measured against (`baseline = True`; hybrid)."""
    names = [n for n in design_order() if DESIGNS.get(n).baseline]
    if len(names) != 1:
        raise RuntimeError(f"expected exactly one baseline design, got {names}")
    return names[0]


def fraction(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


class Columns:
    """Per-batch counts as Python lists (fast scalar access inside SimPy processes), plus
    the on-chip hit fractions and the row sizes the designs pass to the Machine's helpers.

    Row sizes per batch: `r` (bytes a lookup reads), `R` (bytes of an updated row with its
    state), `R_fill` (a filled or written-back row), `r_host` / `R_host` (unplaced lookups and
    rows). With one dim for every table they are the config's r and R; with several, the
    lookups' and updates' come from the trace batch by batch, the others from the policy's
    per-table totals (counts.policy_mix)."""

    def __init__(self, w: Workload, r: float, R: float):
        for name, arr in w.cols.items():
            setattr(self, name, arr.tolist())
        n = w.num_batches
        zero = [0.0] * n

        def frac(hits: str, whole: str) -> list[float]:
            if hits not in w.cols:
                return zero
            h, t = w.cols[hits], w.cols[whole]
            return [fraction(float(a), float(b)) for a, b in zip(h, t, strict=True)]

        def size(name: str, per: str | None, default: float) -> list[float]:
            if name not in w.cols:
                return [float(default)] * n
            if per is None:
                return [float(x) for x in w.cols[name]]
            return [float(a) / float(c) if c else float(default)
                    for a, c in zip(w.cols[name], w.cols[per], strict=True)]

        self.r = size("lookup_bytes", "accesses", r)
        self.R = size("unique_bytes", "unique", R)
        self.R_fill = size("fill_row_bytes", None, R)
        self.r_host = size("unplaced_lookup_bytes", None, r)
        self.R_host = size("unplaced_row_bytes", None, R)
        #: lookups / unique rows of each batch that hit in the GPU L2 or CPU LLC
        self.l2 = frac("l2_hits", "accesses")
        self.l2_update = frac("l2_update_hits", "unique")
        self.llc = frac("llc_hits", "accesses")
        self.llc_update = frac("llc_update_hits", "unique")


class InputCopies:
    """Each batch's indices and offsets cross PCIe before the GPU can use them. As in every
    real training pipeline (TorchRec's TrainPipelineSparseDist), batch b+1's copy is issued
    when batch b starts, so it overlaps batch b's work; `wait(b)` is what is left of it."""

    def __init__(self, m: Machine, c: Columns, n: int):
        self.m, self.c, self.n = m, c, n
        self._done: dict[int, simpy.Event | None] = {}

    def start(self, b: int) -> None:
        if b < self.n and b not in self._done:
            c = self.c
            self._done[b] = self.m.index_h2d(b, c.accesses[b], c.samples[b])

    def wait(self, b: int) -> Generator:
        """Yield until batch b's indices are on the GPU (stage `input_wait`), then issue
        batch b+1's copy."""
        self.start(b)
        yield from self.m.stage("input_wait", b, [self._done.pop(b)])
        self.start(b + 1)
