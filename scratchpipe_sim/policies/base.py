"""The contract between the cache engine and a policy.

A policy is a small Python class that owns its state as numpy arrays and hands whole chunks
of mini-batches to a Numba `@njit` kernel: Python never runs per access.

Per chunk the kernel writes, for every access j, `outcome[j]`:

    HIT       the row was resident when the access was served
    MISS      it was not; the row was fetched and placed in the cache (a fill)
    UNPLACED  it was not, and the row was *not* placed (an FBGEMM conflict miss, a bypass,
              a static-cache miss): the access is served from host memory

and, for every mini-batch b of the chunk, `events[b, FILLS | EVICTIONS | WRITEBACKS]`
(added to: the engine hands them in zeroed). A policy that knows its batches' unique rows
(`counts_unique = True`) also sets `events[b, UNIQUE]` to that number, or to -1 for a batch
it cannot tell (the engine then counts them itself: one set probe per access), and
`events[b, UNIQUE_UNPLACED]` to the rows whose first access in the batch is UNPLACED.
A fill may serve several accesses of the same batch (the first is MISS, later ones HIT).
Every row touched in training is updated, so an evicted row is dirty: policies write back
every eviction unless they say otherwise.

Policies that need the future (`needs_next_use = True`) get `next_use`: for each access, the
global stream position of the next access to the same linearized id, or the largest value
of the array's type where there is none (int32 and `NO_NEXT_USE_32` below 2^31 - 1 accesses,
else int64 and `NO_NEXT_USE`): compare next uses with positions and with each other only.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from scratchpipe_sim.config.schema import check_named
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.registry import Registry
from scratchpipe_sim.traces.csr_trace import Chunk

HIT, MISS, UNPLACED = 0, 1, 2
FILLS, EVICTIONS, WRITEBACKS, UNIQUE, UNIQUE_UNPLACED = 0, 1, 2, 3, 4
NUM_EVENTS = 5
NO_NEXT_USE = np.iinfo(np.int64).max
NO_NEXT_USE_32 = np.iinfo(np.int32).max


@dataclass(frozen=True)
class NoParams:
    """The parameters of a policy that takes none."""


def param_defaults(params_cls: type) -> dict[str, Any]:
    """name -> default of a parameter dataclass (its one copy of each default)."""
    out = {}
    for f in dataclasses.fields(params_cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


class Policy(ABC):
    """One cache replacement policy over `num_rows` linearized ids and `capacity` rows."""

    name: ClassVar[str] = ""
    needs_next_use: ClassVar[bool] = False
    #: the kernel writes each batch's unique rows (or -1) in `events[:, UNIQUE]` and its
    #: unique unplaced rows in `events[:, UNIQUE_UNPLACED]`
    counts_unique: ClassVar[bool] = False
    #: the policy's parameters: a frozen dataclass beside its code whose field metadata
    #: (help, min/max/choices) is the config schema's; a run sets them as `cache.params`
    #: (or a design's own params) and `timing.designs.policy_params` checks them there
    Params: ClassVar[type] = NoParams
    #: parameter name -> default, derived from `Params`; unknown parameters are errors
    #: (see `check_params`)
    params: ClassVar[dict[str, Any]] = {}
    #: LRU's stack property: once C = min(capacity, rows) distinct rows have been touched,
    #: the cache holds the C most recent of them in recency order, whatever it held before,
    #: so a time range replayed from such an overlap is exact (`policies/time_ranges.py`)
    stack_property: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Params" in cls.__dict__ or "params" not in cls.__dict__:
            cls.params = param_defaults(cls.Params)

    def __init__(self, capacity: int, num_rows: int, **params: Any):
        if int(capacity) != capacity or capacity < 1:
            raise UserError(f"capacity must be a positive whole number of rows, got {capacity}",
                            field="capacity")
        if num_rows < 1:
            raise UserError(f"num_rows must be positive, got {num_rows}", field="num_rows")
        self.capacity = int(capacity)
        self.num_rows = int(num_rows)
        self.p = self.check_params(params)

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - set(cls.params))
        if unknown:
            known = ", ".join(sorted(cls.params)) or "none"
            raise UserError(f"policy '{cls.name}' takes no parameter '{unknown[0]}' "
                            f"(it takes: {known})", field=unknown[0])
        for key, value in params.items():  # a window or associativity within reason
            check_named(key, value, key, None)
        return {**cls.params, **params}

    def prepare(self, trace) -> None:  # noqa: B027 - optional hook
        """Called once with the whole trace before the first chunk (e.g. `static` profiles it)."""

    def range_tail_batches(self) -> int:
        """Batches past a batch that its outcomes depend on (a lookahead window): a time
        range is replayed that far past its last counted batch (`policies/time_ranges.py`)."""
        return 0

    def first_replayed_batch(self) -> int:
        """The batch the engine's replay starts at (after `prepare`): 0, or later for a policy
        to which the batches before change nothing a later batch sees (their counts stay 0)."""
        return 0

    @abstractmethod
    def process(self, chunk: Chunk, next_use: np.ndarray | None, outcome: np.ndarray,
                events: np.ndarray) -> None:
        """Run the chunk: fill `outcome` (len(chunk.ids)) and `events` (chunk batches x
        NUM_EVENTS).

        `next_use` is the slice for this chunk's accesses (global positions), or None.
        The engine writes every chunk's `ids` and `tables` into the same buffers
        (`Trace.iter_chunks(reuse_buffers=True)`): what a policy keeps of a chunk past this
        call it must copy (as scratchpipe's window does).
        """

    def finish(self) -> None:  # noqa: B027 - optional hook
        """Called after the last chunk (e.g. drain a pipeline)."""

    @abstractmethod
    def resident(self) -> np.ndarray:
        """Linearized ids currently cached (for invariants and tests)."""

    def extra_totals(self) -> dict[str, int]:
        """Policy-specific totals reported beside the standard counters."""
        return {}

    def batch_columns(self) -> dict[str, np.ndarray]:
        """Policy-specific per-batch int64 columns (length = the trace's batches), read after
        `finish()`: e.g. scratchpipe's refetch hazards, which the timing model enforces."""
        return {}


POLICIES: Registry[type[Policy]] = Registry("policy", package="scratchpipe_sim.policies")
