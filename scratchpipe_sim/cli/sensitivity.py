"""`scratchpipe-sim sensitivity CONFIG|SWEEP.yaml`: how far each unmeasured constant moves
the results.

Varies every key of `hardware.ranges` one at a time (low, high) and jointly (Latin
hypercube, seeded), re-prices every design on the same policy counts, and prints per design
the speedup vs hybrid (nominal, min, max) with the parameters that move it most, and whether
the order of the designs ever changes.

On a CONFIG: `--out DIR` writes sensitivity.json and a tornado figure (tornado.png,
tornado.pdf).

On an experiment YAML (a top-level `sweep:`, as `sweep` takes): the same at every point of
the sweep (or those `--points` selects), `--jobs` points at a time, into a new folder
`--out DIR`: bands.csv and bands.json, one row per (point, design): the swept values,
nominal speedup (what `sweep` reports), min, max, the parameter that moves it most, how
often the design is overtaken and the point's order changes; `--plot` adds bands.png/.pdf
(nominal with min-max bars per design along the swept axis). A range key that the sweep
sets (fig2's hardware.pcie.duplex_h2d_GBps) is pinned at the point's value.
See scratchpipe_sim/experiments/sensitivity_analysis.py (one config) and bands.py (a sweep).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scratchpipe_sim.cli._options import add_config, add_json, add_overrides, load_config_of
from scratchpipe_sim.safety import jsonout

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "vary the unmeasured hardware constants (hardware.ranges)"
ORDER = 120


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sensitivity", help=HELP,
        description="Speedup range of every design over the plausible ranges of the "
                    "constants in hardware.ranges, one at a time and by Latin hypercube, "
                    "for one config or for every point of a sweep.")
    add_config(p, help="YAML config, or an experiment YAML (experiments/*.yaml: every point "
                       "of its sweep)")
    add_overrides(p, note="a config only")
    p.add_argument("--design", dest="designs", action="append", metavar="NAME",
                   help="only these designs (repeatable; hybrid is always priced)")
    p.add_argument("--samples", type=int, default=32, metavar="N",
                   help="Latin-hypercube samples (default 32; 0: one at a time only)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="seed of the Latin hypercube (default: the config's seed)")
    p.add_argument("--points", action="append", metavar="SELECTOR",
                   help="a sweep only: the points to analyse, by index as `sweep --dry-run` "
                   "lists them (3 | 0,4 | 10-14) or by swept values, all of which must hold "
                   "(cache.load_factor=0.05,trace.alpha=1.05; values read as YAML); "
                   "repeatable: the union (default: every point)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="J",
                   help="a sweep: points in parallel, one process each (default 1: one "
                        "point at a time, its varied configs priced on every core; a "
                        "single selected point: priced in J processes); a "
                        "config: processes pricing its varied configs (default: the cores "
                        "this process may use); the same result for every J")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="a config: write sensitivity.json and tornado.png / tornado.pdf "
                   "here; a sweep (required): a new folder for bands.csv and bands.json")
    p.add_argument("--plot", action="store_true",
                   help="a sweep only: also draw bands.png / bands.pdf into DIR")
    add_json(p, "the result as JSON")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments.bands import is_sweep_spec

    if args.samples < 0:
        raise UserError(f"expected samples >= 0, got {args.samples}", field="--samples")
    if is_sweep_spec(args.config):
        return _handle_sweep(args)
    for flag, given in (("--points", args.points), ("--plot", args.plot)):
        if given:
            raise UserError(f"{flag} applies to an experiment YAML (a sweep), not a config",
                            source=args.config, field=flag)
    return _handle_config(args)


def _handle_config(args: argparse.Namespace) -> int:
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments.sensitivity_analysis import (
        format_report,
        run_sensitivity,
        write_outputs,
    )
    from scratchpipe_sim.traces.forked import check_jobs, usable_cores

    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise UserError("exists and is not a folder: expected a folder for the outputs",
                        source=str(args.out), field="--out")
    cfg = load_config_of(args)

    def log(s: str) -> None:
        print(s, file=sys.stderr)

    res = run_sensitivity(cfg, args.designs, samples=args.samples, seed=args.seed,
                          log=None if args.json else log,
                          jobs=usable_cores() if args.jobs is None else check_jobs(args.jobs))
    if args.json:
        print(jsonout.dumps(res.to_json(), indent=1))
    else:
        print(f"sensitivity {cfg.name or Path(args.config).stem}: {len(res.params)} ranges "
              f"(hardware {cfg.hardware.name or 'inline'}), {args.samples} Latin-hypercube "
              f"samples, seed {res.seed}")
        print(format_report(res))
    if args.out is not None:
        for p in write_outputs(res, args.out):
            print(f"wrote {p}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _handle_sweep(args: argparse.Namespace) -> int:
    import shutil

    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments.bands import (
        format_bands,
        new_folder,
        run_bands,
        select_points,
        write_bands,
    )
    from scratchpipe_sim.experiments.spec import expand_points, load_experiment
    from scratchpipe_sim.traces.forked import check_jobs

    if args.overrides:
        raise UserError("--set applies to a config; an experiment sets its values under "
                        "base: and sweep:", source=args.config, field="--set")
    if args.out is None:
        raise UserError("expected --out DIR (a new folder for bands.csv and bands.json)",
                        source=args.config, field="--out")
    jobs = 1 if args.jobs is None else check_jobs(args.jobs)
    spec = load_experiment(args.config)
    # bad selectors and an existing --out fail before anything runs
    points = expand_points(spec)
    select_points(points, spec.axes, args.points or (), spec.source)
    out = new_folder(args.out)
    ok = False
    try:
        bands = run_bands(spec, args.points or (), args.designs, samples=args.samples,
                          seed=args.seed, jobs=jobs, points=points,
                          log=lambda s: print(s, file=sys.stderr))
        paths = write_bands(bands, out)
        if args.plot:
            from scratchpipe_sim.experiments.band_plots import write_band_figure

            paths += write_band_figure(bands.to_json(), out / "bands")
        ok = True
    finally:
        if not ok and not any(out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)  # ours, just made, empty
    if args.json:
        print(jsonout.dumps(bands.to_json()["rows"], indent=1))
    else:
        seed = "the config's" if args.seed is None else args.seed
        print(f"sensitivity {spec.name}: {len(bands.points)} point(s) x {len(bands.designs)} "
              f"designs, {args.samples} Latin-hypercube samples, seed {seed}; speedup vs "
              "hybrid; overtaken: runs in which a design at most as fast at nominal passes "
              "it")
        print(format_bands(bands))
    for p in paths:
        print(f"wrote {p}", file=sys.stderr if args.json else sys.stdout)
    if bands.failed:
        print(f"scratchpipe-sim sensitivity: {bands.failed} point(s) failed (status error "
              "in bands.csv)", file=sys.stderr)
        return 1
    return 0
