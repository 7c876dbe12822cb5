"""The Python API, for notebooks: a config in, a pandas DataFrame out.

    simulate(config, designs=None, overrides=None, sample=None, **dotted) -> DataFrame
                                                                            like `run`
    resolve(config, overrides=None, **dotted) -> dict                        like `config show`
    sweep(experiment, out=None, jobs=1, ...) -> DataFrame                    like `sweep`
    replay_time_ranges(trace, policy, capacity, ranges, ...) -> TimeRangeOutcome
                                                                  like `cache --ranges`

The CLI's `run` and `sweep` are built on the same steps (`check_run`, `run_trace`,
`run_designs`, `write_run`; `run_experiment`), so a notebook and the command line get the
same numbers and the same files. Overrides are dotted config keys with Python values, used
as given (`--set` parses its text as YAML first). Input mistakes raise `UserError`.

Every heavy import (numba, SimPy, pandas) happens inside a function: `import scratchpipe_sim`
stays cheap.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scratchpipe_sim import __version__
from scratchpipe_sim.errors import UserError, os_reason
from scratchpipe_sim.safety import jsonout

if TYPE_CHECKING:
    import pandas as pd

    from scratchpipe_sim.config import Config
    from scratchpipe_sim.experiments.spec import ExperimentSpec
    from scratchpipe_sim.experiments.sweep_runner import SweepSummary
    from scratchpipe_sim.traces.csr_trace import Trace

# re-exported: the run folder's files and versions, written once in experiments.run_folder
from scratchpipe_sim.experiments.run_folder import (  # noqa: E402, F401
    DEFAULT_RESULTS,
    RUN_CONFIG,
    RUN_CSV,
    RUN_JSON,
    RUN_METADATA,
    RUN_TRACE_SHA,
    VERSIONED,
    WALL_COLUMNS,
    versions,
)

ConfigInput = str | os.PathLike | Mapping[str, Any]
DesignProgress = Callable[[str, str, int, int], None]


def _values(overrides: Mapping[str, Any] | None, dotted: Mapping[str, Any]) -> dict[str, Any]:
    """`overrides={...}` and `**{"a.b": v}` as one mapping; a key in both is a mistake."""
    over = dict(overrides or {})
    for key in over:
        if not isinstance(key, str):
            raise UserError(f"expected dotted config keys (text), got {key!r}",
                            source="overrides")
    both = sorted(set(over) & set(dotted))
    if both:
        raise UserError("given both in overrides= and as a keyword argument; expected it "
                        "once", source="overrides", field=both[0])
    return {**over, **dotted}


def load(config: ConfigInput, overrides: Mapping[str, Any] | None = None,
         **dotted: Any) -> Config:
    """The validated, frozen `Config` of a YAML path or a dict, with overrides applied."""
    from scratchpipe_sim.config import load_config

    return load_config(config, values=_values(overrides, dotted))


def resolve(config: ConfigInput, overrides: Mapping[str, Any] | None = None,
            **dotted: Any) -> dict[str, Any]:
    """The fully resolved config as a plain dict (presets expanded, defaults filled): what
    `config show` prints and a results folder's resolved_config.yaml holds."""
    from scratchpipe_sim.timing.designs import with_default_designs

    cfg = load(config, overrides, **dotted)
    return with_default_designs(cfg.to_dict(), cfg.source)


# -- one config, every design: `run` -------------------------------------------------------

@dataclass(frozen=True)
class RunOutcome:
    """What one `run` produced: the rows `run --json` prints (one per design), the resolved
    config they ran with and the checksum of the trace they ran on."""
    rows: list[dict[str, Any]]
    resolved: dict[str, Any]
    trace_sha256: str


def _check_unique(names: Sequence[str], source: str | None, field_name: str) -> None:
    dup = sorted({n for n in names if list(names).count(n) > 1})
    if dup:
        raise UserError(f"design '{dup[0]}' given twice; expected each design once",
                        source=source, field=field_name)


def check_run(config: ConfigInput, designs: Sequence[str] | None = None, *,
              texts: Sequence[str] = (), values: Mapping[str, Any] | None = None,
              designs_field: str = "designs") -> tuple[Config, list[str]]:
    """Everything checkable before a trace is built: the config (with `--set` texts, then
    Python `values`), the design names (each once; `designs_field` names where they came
    from in messages) and a memory estimate. Returns the config and the designs to run."""
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.timing.runner import check_designs
    from scratchpipe_sim.timing.trace_setup import check_config_memory

    if isinstance(designs, str):
        raise UserError(f"expected a list of design names, got the text {designs!r}",
                        field=designs_field)
    if designs:
        _check_unique(list(designs), None, designs_field)
    cfg = load_config(config, texts, values)
    names = check_designs(cfg, list(designs) if designs else None)
    if not designs:
        _check_unique(names, cfg.source, "designs")
    check_config_memory(cfg, source=cfg.source)  # a trace file: checked once read
    return cfg, names


def run_trace(cfg: Config, replay_cache: bool = True, jobs: int = 1) -> Trace:
    """The config's trace (generated or read; from the trace cache unless `replay_cache` is
    False; a generated one drawn by `jobs` processes), refused when simulating it would not
    fit in memory."""
    from scratchpipe_sim.timing import build_trace
    from scratchpipe_sim.timing.trace_setup import check_trace_memory

    trace = build_trace(cfg, cache=replay_cache, jobs=jobs)
    check_trace_memory(cfg, trace, source=cfg.source)
    return trace


def run_designs(cfg: Config, names: Sequence[str], trace: Trace, *,
                timeline_dir: Path | None = None, replay_cache: bool = True,
                progress: DesignProgress | None = None, jobs: int = 1,
                ranges: int | None = None, executor: str = "process",
                scheduler: str | None = None) -> RunOutcome:
    """Every design of `names` on `trace` (timelines into `timeline_dir` when given; the
    independent replays in `jobs` processes, identical results). `ranges=K`: each lru
    replay as K time ranges run by `executor` (`process`: `jobs` forked processes; `dask`:
    the cluster at `scheduler`), the same counts (docs/performance.md, "Time ranges").
    A sampled run (trace.sample_rate < 1) runs its salts as tasks of `executor` the same
    way (docs/sampling.md), the same numbers."""
    from scratchpipe_sim.timing import simulate as simulate_designs

    setting = salts = None
    if ranges is not None or cfg.trace.sample_rate < 1:
        from scratchpipe_sim.experiments.range_tasks import range_mapper
    if ranges is not None:
        from scratchpipe_sim.policies.time_ranges import RangeSetting, split_batches

        split_batches(1, ranges)  # checked (named as --ranges) before anything runs
        setting = RangeSetting(ranges, range_mapper(executor, jobs, scheduler))
    elif cfg.trace.sample_rate < 1:
        salts = range_mapper(executor, jobs, scheduler)
    rows = simulate_designs(cfg, list(names), timeline_dir=timeline_dir, trace=trace,
                            progress=progress, replay_cache=replay_cache, jobs=jobs,
                            checksum=True, ranges=setting, salt_mapper=salts)
    from scratchpipe_sim.timing.designs import with_default_designs

    # its designs' inputs were checked before they ran
    return RunOutcome(rows, with_default_designs(cfg.to_dict(), cfg.source, inputs=False),
                      trace.checksum())


def result_records(outcome: RunOutcome) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns and rows of a run's results.csv: the result keys (in first-seen order),
    then the resolved config as `cfg.<dotted key>` columns (lists and mappings as JSON)."""
    from scratchpipe_sim.config import flatten

    flat_cfg = {f"cfg.{k}": (json.dumps(v) if isinstance(v, (list, dict)) else v)
                for k, v in flatten(outcome.resolved).items()}
    keys: list[str] = []
    for r in outcome.rows:
        keys += [k for k in r if k not in keys]
    return keys + list(flat_cfg), [{**r, **flat_cfg} for r in outcome.rows]


def write_run(out: Path, outcome: RunOutcome, config_arg: str,
              overrides: Sequence[str]) -> None:
    """A run's results folder: results.csv, results.json, resolved_config.yaml,
    trace.sha256 and metadata.json (what ran: config argument, overrides, versions, time).
    Each file is written whole or not at all, results.csv (what `report`, `plot` and
    `compare` read) last; when one cannot be written (a full disk) those already written are
    removed, so the folder never holds a partial result, and the OSError names the file."""
    import csv
    import io

    from scratchpipe_sim.config import dump_yaml
    from scratchpipe_sim.safety.atomic_files import atomic_write

    columns, records = result_records(outcome)
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=columns)
    w.writeheader()
    for r in records:
        w.writerow(r)
    found = versions()
    meta = {"config": config_arg, "overrides": list(overrides),
            "trace_sha256": outcome.trace_sha256, "scratchpipe_sim": __version__,
            "python": found["python"], "designs": [r["design"] for r in outcome.rows],
            "versions": found, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                            time.gmtime())}
    files = {RUN_METADATA: jsonout.dumps(meta, indent=1),
             RUN_CONFIG: dump_yaml(outcome.resolved),
             RUN_TRACE_SHA: outcome.trace_sha256 + "\n",
             RUN_JSON: jsonout.dumps(outcome.rows, indent=1),
             RUN_CSV: table.getvalue()}
    written: list[Path] = []
    try:
        for name, text in files.items():
            written.append(atomic_write(out / name, text))
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise


def fresh_dir(path: Path) -> Path:
    """`path` if it does not exist, else the first free `path-1`, `path-2`, ..."""
    if not path.exists():
        return path
    k = 1
    while (cand := path.with_name(f"{path.name}-{k}")).exists():
        k += 1
    return cand


def make_results_dir(path: Path) -> Path:
    """A fresh results folder (a numbered sibling when `path` exists: results are never
    overwritten); an unwritable place is a UserError before anything is simulated."""
    out = fresh_dir(path)
    try:
        out.mkdir(parents=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot create the results folder: {os_reason(e)}; expected a "
                        "writable folder path", source=str(out), field="--out") from None
    return out


def frame(outcome: RunOutcome) -> pd.DataFrame:
    """A run as a DataFrame: results.csv's columns and rows, the resolved config in
    `.attrs["config"]` and the trace checksum in `.attrs["trace_sha256"]`."""
    import pandas as pd

    columns, records = result_records(outcome)
    df = pd.DataFrame.from_records(records, columns=columns)
    df.attrs["config"] = outcome.resolved
    df.attrs["trace_sha256"] = outcome.trace_sha256
    return df


def sample_values(sample: float | None, salts: int | None) -> dict[str, Any]:
    """`sample=` / `salts=` (`run --sample R --salts N`) as the config keys they set,
    trace.sample_rate and trace.sample_salts (checked, and named, as those keys)."""
    values: dict[str, Any] = {}
    if sample is not None:
        values["trace.sample_rate"] = sample
    if salts is not None:
        values["trace.sample_salts"] = salts
    return values


def simulate(config: ConfigInput, designs: Sequence[str] | None = None,
             overrides: Mapping[str, Any] | None = None, *, replay_cache: bool = True,
             jobs: int = 1, sample: float | None = None, salts: int | None = None,
             ranges: int | None = None, executor: str = "process",
             scheduler: str | None = None, **dotted: Any) -> pd.DataFrame:
    """Run `designs` (default: the config's) on the config's trace, as `run` does.

    `config`: a YAML path or a dict (as a YAML file would hold it). Overrides are dotted
    keys with Python values: `overrides={"model.batch_size": 4096}`, or the same as keyword
    arguments, `**{"hardware.preset": "h200-gen5"}` (a top-level key plainly: `seed=3`).
    Returns one row per design with results.csv's columns; `.attrs["config"]` holds the
    resolved config. Writes nothing (timelines and the results folder are the CLI's).
    `jobs`: processes for the independent cache replays (`run --jobs`; same results).
    `sample=R` (`salts=N`): a sampled run (`run --sample R`, docs/sampling.md): each figure
    the mean over N hash salts, with `<figure>_spread` = half their range.
    `ranges=K` (`run --ranges K`): each lru replay as K time ranges, each its own task
    (`executor` "process" or "dask" with `scheduler`), the same numbers; a sampled run's
    salts are tasks of `executor` the same way."""
    values = _values(overrides, dotted)
    for key, v in sample_values(sample, salts).items():
        if key in values:
            raise UserError("given both as sample=/salts= and as a config key; expected it "
                            "once", source="overrides", field=key)
        values[key] = v
    cfg, names = check_run(config, designs, values=values)
    trace = run_trace(cfg, replay_cache, jobs)
    return frame(run_designs(cfg, names, trace, replay_cache=replay_cache, jobs=jobs,
                             ranges=ranges, executor=executor, scheduler=scheduler))


@dataclass(frozen=True)
class TimeRangeOutcome:
    """A replay made as time ranges (`replay`: the stitched columns and each range's
    proof), and with `check=True` its comparison with the full replay (`check`)."""

    replay: Any  # policies.time_ranges.RangeReplay
    check: Any | None  # policies.time_ranges.RangeCheck
    ranges_wall_s: float
    full_wall_s: float | None


def replay_time_ranges(trace: Trace | str | os.PathLike, policy: str, capacity: int,
                       ranges: int, overlap: int | None = None, *, check: bool = False,
                       executor: str = "process", jobs: int = 1,
                       scheduler: str | None = None, **params: Any) -> TimeRangeOutcome:
    """`policy` over `trace` (a Trace or a trace file) as `ranges` time ranges, each
    replayed from `overlap` batches before it (None: grown until it touches `capacity`
    distinct rows, which proves an lru range exact), each range a task of `executor`.
    `check=True` also makes the full replay and compares every per-batch column."""
    from scratchpipe_sim.experiments.range_tasks import range_mapper
    from scratchpipe_sim.policies.engine import make_policy, replay_columns
    from scratchpipe_sim.policies.time_ranges import compare_full, replay_ranges
    from scratchpipe_sim.traces.csr_trace import Trace as TraceClass

    if not isinstance(trace, TraceClass):
        from scratchpipe_sim.traces.io import open_trace

        trace = open_trace(trace)
    mapper = range_mapper(executor, jobs, scheduler)
    t0 = time.perf_counter()
    result = replay_ranges(trace, policy, capacity, ranges, overlap, mapper, **params)
    ranges_s = time.perf_counter() - t0
    if not check:
        return TimeRangeOutcome(result, None, ranges_s, None)
    t0 = time.perf_counter()
    full, _ = replay_columns(trace, make_policy(policy, capacity, trace.total_rows, **params))
    full_s = time.perf_counter() - t0
    return TimeRangeOutcome(result, compare_full(result, full), ranges_s, full_s)


# -- an experiment file: `sweep` -----------------------------------------------------------

@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs (not what it computes: every option gives the same table)."""
    jobs: int = 1
    executor: str | None = None    # local | process | dask; None: local for 1 job, else process
    scheduler: str | None = None   # a Dask scheduler address
    retry_failed: bool = False
    replay_cache: bool = True
    quiet: bool = False

    def __post_init__(self) -> None:
        if self.scheduler and self.executor not in (None, "dask"):
            raise UserError("--scheduler needs --executor dask", field="--scheduler")

    @property
    def chosen_executor(self) -> str | None:
        """dask when a scheduler is named, else as given (None: run_sweep's default)."""
        return self.executor or ("dask" if self.scheduler else None)


def run_experiment(experiment: str | os.PathLike | ExperimentSpec,
                   out: str | os.PathLike | None = None,
                   options: SweepOptions | None = None) -> SweepSummary:
    """Run every unfinished point of an experiment into `out` (default results/NAME):
    resumable, one sweep per folder. Returns the summary `sweep` prints."""
    from scratchpipe_sim.experiments.spec import ExperimentSpec, load_experiment
    from scratchpipe_sim.experiments.sweep_runner import run_sweep

    options = options or SweepOptions()
    spec = experiment if isinstance(experiment, ExperimentSpec) else \
        load_experiment(experiment)
    folder = Path(out) if out is not None else DEFAULT_RESULTS / spec.name
    return run_sweep(spec, folder, jobs=options.jobs, executor=options.chosen_executor,
                     scheduler=options.scheduler, quiet=options.quiet,
                     retry_failed=options.retry_failed, replay_cache=options.replay_cache)


def sweep(experiment: str | os.PathLike, out: str | os.PathLike | None = None,
          jobs: int = 1, *, executor: str | None = None, scheduler: str | None = None,
          retry_failed: bool = False, replay_cache: bool = True,
          quiet: bool = False) -> pd.DataFrame:
    """Run an experiment file as `scratchpipe-sim sweep` does (resumable: a rerun on the same
    `out` skips finished points) and return its results table (results.csv as a DataFrame,
    one row per point and design; `status` says ok / infeasible / error). `.attrs` holds
    the summary (`ran`, `skipped`, `errors`, ...) and the folder (`out`)."""
    from scratchpipe_sim.experiments.results import load_results

    summary = run_experiment(experiment, out, SweepOptions(
        jobs=jobs, executor=executor, scheduler=scheduler, retry_failed=retry_failed,
        replay_cache=replay_cache, quiet=quiet))
    df = load_results(summary.out).frame
    df.attrs["out"] = str(summary.out)
    df.attrs["summary"] = summary_dict(summary)
    return df


def summary_dict(summary: SweepSummary) -> dict[str, Any]:
    """A sweep's summary as plain data (what `sweep --json` prints)."""
    return {"name": summary.name, "out": str(summary.out), "points": summary.points,
            "designs": summary.designs, "ran": summary.ran, "skipped": summary.skipped,
            "failed": summary.failed, "infeasible": summary.infeasible,
            "errors": [{"index": i, "values": v, "design": d, "error": r}
                       for i, v, d, r in summary.errors]}
