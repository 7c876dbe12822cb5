"""What a design is priced from: the `WorkloadKey` it asks `Replays` for, and the per-batch
columns of the counts it gets back (`Columns`), read inside its SimPy process."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.engine import COUNTERS
from scratchpipe_sim.timing.counts import Where, Workload

if TYPE_CHECKING:
    from scratchpipe_sim.config import Config


class Warm(str, enum.Enum):
    """How a cache's state before the timed batches is made. A str enum, so its value is
    the same text wherever it is written."""

    #: the policy runs over the last warm-up batches
    REPLAY = "replay"
    #: it profiles the whole warm-up prefix and starts the timed batches preloaded with its
    #: picks
    PROFILE_PREFIX = "profile-prefix"
    #: it profiles every batch, timed ones included (an oracle)
    PROFILE_ALL = "profile-all"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class WorkloadKey:
    """Which counts a design needs: `policy` None = no cache (`where` host or device)."""

    policy: str | None
    capacity: int = 0
    params: tuple[tuple[str, Any], ...] = field(default=())
    where: Where = Where.HOST
    #: how the cache's state before the timed batches is made (`Warm`)
    warm: Warm = Warm.REPLAY
    #: whether the design reads the on-chip (GPU L2 / CPU LLC) hits of the trace's lookup
    #: stream; False: no on-chip walk is made for it (the cluster prices each rank's lookups
    #: with no L2 hits, its stream being not the global trace)
    onchip: bool = True
    #: the config key naming the policy (for error messages)
    policy_field: str = field(default="cache.policy", compare=False)
    #: the config key holding `params` (for error messages)
    params_field: str = field(default="cache.params", compare=False)

    def __post_init__(self) -> None:
        # a plain string would compare equal to a member yet be no member: refuse it
        for name, kind in (("where", Where), ("warm", Warm)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"WorkloadKey.{name}: expected a {kind.__name__} "
                                f"({', '.join(k.name for k in kind)}), got {value!r}")


def policy_error(e: UserError, key: WorkloadKey, cfg: Config) -> UserError:
    """A policy's UserError (its fields are its own: `capacity`, `policy`, a parameter's
    name) as the config key that sets it: `key.policy_field`, `key.params_field.NAME`."""
    name = e.field
    if name in (None, "capacity"):
        name = "cache.capacity_rows"
    elif name == "policy":
        name = key.policy_field
    elif not name.startswith(("cache.", "design_params.", "--")):  # "--": a flag's
        name = f"{key.params_field}.{name}"
    return UserError(e.message, source=cfg.source, field=name)


def check_prefix(key: WorkloadKey, prefix: int, cfg: Config) -> None:
    """A policy that picks its rows from the warm-up prefix (`Warm.PROFILE_PREFIX`) needs
    one: `prefix` warm-up batches."""
    if key.policy is not None and key.warm is Warm.PROFILE_PREFIX and prefix == 0:
        raise UserError(f"{key.policy} picks its rows from the warm-up prefix: "
                        "expected cache.warmup_batches >= 1 (or profile every batch, "
                        f"as an oracle: see {key.params_field})",
                        source=cfg.source, field="cache.warmup_batches")


def check_policy(key: WorkloadKey, cfg: Config) -> None:
    """What the config alone decides of `key`'s cache policy: its name, its parameters and
    their combination (static's skip_batches needs preload), checked by the policy's own
    constructor on a cache of one row (no table-sized state), and with a fixed
    `cache.warmup_batches` the prefix a profile needs (`check_prefix`; `auto`: the trace
    decides). One line naming the config key, as the replay would say it."""
    if key.policy is None:
        return
    from scratchpipe_sim.policies import POLICIES  # noqa: PLC0415 (the registry's imports)

    try:
        POLICIES.get(key.policy, field="policy")(1, 1, **dict(key.params))
    except UserError as e:
        raise policy_error(e, key, cfg) from None
    wb = cfg.cache.warmup_batches
    if wb != "auto":
        check_prefix(key, int(wb), cfg)


def fraction(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


class MissingColumn(LookupError):
    """A design asked for a per-batch column its counts do not hold (a renamed column, or a
    policy that does not make it): a bug, never a column of zeros."""


#: the count columns every Workload holds (the engine's counters, and samples per batch),
#: each a declared field of `Columns`
COUNT_COLUMNS = (*COUNTERS, "samples")


@dataclass(frozen=True)
class Columns:
    """Per-batch counts as Python lists (fast scalar access inside SimPy processes), plus
    the on-chip hit fractions and the row sizes the designs pass to the Machine's helpers.

    Every field is declared, so a renamed column fails when the columns are made (or when a
    design reads it), never as 0. Columns beyond them (a policy's own `batch_columns()`,
    e.g. scratchpipe's `refetch_d{d}`) are read through `column(name)`, which raises
    `MissingColumn` when the counts do not hold it. Build with `Columns.of`.

    Row sizes per batch: `r` (bytes a lookup reads), `R` (bytes of an updated row with its
    state), `R_fill` (a filled or written-back row), `r_host` / `R_host` (unplaced lookups and
    rows). With one dim for every table they are the config's r and R; with several, the
    lookups' and updates' come from the trace batch by batch, the others from the policy's
    per-table totals (counts.policy_mix)."""

    # the engine's counters (`policies.engine.COUNTERS`) and samples per batch
    accesses: list[int]
    unique: list[int]
    hits: list[int]
    misses: list[int]
    fills: list[int]
    evictions: list[int]
    writebacks: list[int]
    unplaced: list[int]
    unique_unplaced: list[int]
    samples: list[int]
    # row sizes (bytes) per batch
    r: list[float]
    R: list[float]
    R_fill: list[float]
    r_host: list[float]
    R_host: list[float]
    #: lookups / unique rows of each batch that hit in the GPU L2 or CPU LLC
    l2: list[float]
    l2_update: list[float]
    llc: list[float]
    llc_update: list[float]
    #: every other column of the counts, by name (read through `column`)
    extra: dict[str, list[int]]

    @classmethod
    def of(cls, w: Workload, r: float, R: float) -> Columns:
        """The columns of `w`, with `r` and `R` the row sizes where `w` holds none."""
        missing = [name for name in COUNT_COLUMNS if name not in w.cols]
        if missing:
            raise MissingColumn(f"the counts of {w.policy!r} hold no {', '.join(missing)} "
                                f"column (they hold: {', '.join(sorted(w.cols))})")
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

        return cls(
            **{name: w.cols[name].tolist() for name in COUNT_COLUMNS},
            r=size("lookup_bytes", "accesses", r),
            R=size("unique_bytes", "unique", R),
            R_fill=size("fill_row_bytes", None, R),
            r_host=size("unplaced_lookup_bytes", None, r),
            R_host=size("unplaced_row_bytes", None, R),
            l2=frac("l2_hits", "accesses"),
            l2_update=frac("l2_update_hits", "unique"),
            llc=frac("llc_hits", "accesses"),
            llc_update=frac("llc_update_hits", "unique"),
            extra={name: col.tolist() for name, col in w.cols.items()
                   if name not in COUNT_COLUMNS})

    def column(self, name: str) -> list[int]:
        """A column beyond the declared fields (a policy's `batch_columns()`), by name;
        `MissingColumn` when the counts do not hold it."""
        try:
            return self.extra[name]
        except KeyError:
            raise MissingColumn(f"no per-batch column {name!r}; the counts hold: "
                                f"{', '.join(sorted(self.extra)) or 'none beyond the declared'}"
                                ) from None
