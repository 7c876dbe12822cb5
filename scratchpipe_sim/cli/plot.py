"""`scratchpipe-sim plot RESULTS --figure NAME`: a study figure as PNG and PDF."""

from __future__ import annotations

import argparse
from pathlib import Path

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "draw a figure from sweep results (PNG + PDF)"
ORDER = 60


def register(sub: argparse._SubParsersAction) -> None:
    from scratchpipe_sim.experiments.figures import BUILTIN

    p = sub.add_parser("plot", help=HELP,
                       description="Built-in figures: " + ", ".join(BUILTIN) +
                       "; an experiment may declare more under 'figures:'.")
    p.add_argument("results", help="a sweep's or a `run`'s results folder (or its "
                   "results.csv / results.parquet); a run folder is one point: its figure "
                   "is stage-breakdown; a `sensitivity --out` folder: its tornado (a "
                   "config's) or bands (a sweep's) figure")
    p.add_argument("--figure", "-f", action="append", dest="figures",
                   help="figure name (repeatable; default: the experiment's declared "
                   "figures). A folder holding both results and a sensitivity result: "
                   "the results' figures by default, --figure tornado (or bands) for the "
                   "sensitivity's; plot says which it drew")
    p.add_argument("--out", help="output stem (one figure) or folder (an existing one, a "
                   "trailing '/', or several figures); default: RESULTS/figures/NAME")
    p.add_argument("--format", action="append", dest="formats", choices=("png", "pdf", "svg"),
                   help="file formats (default: png and pdf)")
    p.add_argument("--dpi", type=int, default=110, metavar="N",
                   help="resolution of PNG output in dots per inch (default: 110)")
    p.add_argument("--experiment", help="take the declared figures from this experiment YAML "
                   "(default: those recorded in the results' manifest)")
    p.set_defaults(func=handle)


#: analysis folders `plot` also draws: the file that marks one -> its one figure
ANALYSES = {"sensitivity.json": "tornado", "bands.json": "bands"}


def handle(args: argparse.Namespace) -> int:
    """Draw what RESULTS holds: a run's or sweep's figures, a sensitivity result's one
    figure, or -- a folder holding both -- the results' figures unless --figure names the
    analysis's, saying which it drew (never one silently for the other)."""
    import sys

    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments.results_store import CSV_NAME, PARQUET_NAME
    from scratchpipe_sim.safety.paths import input_kind

    if args.dpi < 1:
        raise UserError(f"expected a positive resolution, got {args.dpi}", field="--dpi")
    target = Path(args.results)
    kind = input_kind(target, "results folder or file")  # a loop or a FIFO: one line
    folder = target if kind == "folder" else target.parent
    if kind == "folder":
        analyses = {ANALYSES[m]: m for m in ANALYSES if (target / m).is_file()}
        has_table = any((target / n).is_file() for n in (CSV_NAME, PARQUET_NAME))
    else:
        analyses = {ANALYSES[target.name]: target.name} if target.name in ANALYSES else {}
        has_table = not analyses
    if not has_table and analyses:
        marker = next(iter(analyses.values()))
        if args.figures and len(analyses) > 1:
            marker = analyses.get(args.figures[0], marker)
        return _plot_analysis(args, folder, marker)
    wanted = list(args.figures or [])
    chosen = [n for n in wanted if n in analyses]
    if chosen and args.experiment:
        raise UserError(f"--experiment declares a sweep's figures, not {chosen[0]}: expected "
                        "one or the other", source=str(folder), field="--experiment")
    rest = [n for n in wanted if n not in analyses]
    drawn = (_plot_results(args, folder, rest, len(wanted) or None)  # a bad name: first
             if rest or not wanted else [])
    for name in chosen:
        _save(args, _analysis_figure(folder, analyses[name]),
              _stem(args, folder, name, len(wanted)))
    if analyses and not wanted:
        others = ", ".join(f"{n} (from {m})" for n, m in analyses.items())
        print(f"plot: {target} also holds {others}; drew the results' "
              f"{', '.join(drawn)} (--figure {next(iter(analyses))} draws the other)",
              file=sys.stderr)
    return 0


def _plot_results(args: argparse.Namespace, folder: Path, names: list[str],
                  count: int | None) -> list[str]:
    """The results table's figures `names` (default: the declared ones); their names."""
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments.plots import make_figure
    from scratchpipe_sim.experiments.results import load_results

    res = load_results(args.results)
    if args.experiment:
        from scratchpipe_sim.experiments.spec import load_experiment

        res.manifest["figures"] = load_experiment(args.experiment).figures
    names = names or list(res.figures)
    if not names:
        raise UserError("the experiment declares no figures: expected --figure NAME",
                        field="--figure")
    for name in names:
        _save(args, make_figure(res, name), _stem(args, folder, name, count or len(names)))
    return names


def _stem(args: argparse.Namespace, folder: Path, name: str, count: int) -> Path:
    """Where figure `name` goes: --out as a stem (one figure) or a folder, else
    FOLDER/figures/NAME."""
    if args.out is None:
        return folder / "figures" / name
    if count > 1 or Path(args.out).is_dir() or args.out.endswith(("/", "\\")):
        return Path(args.out) / name
    return Path(args.out)


def _save(args: argparse.Namespace, fig, stem: Path) -> None:
    from scratchpipe_sim.errors import UserError, os_reason
    from scratchpipe_sim.experiments.plots import save_figure

    formats = tuple(args.formats or ("png", "pdf"))
    try:
        paths = save_figure(fig, stem, formats, args.dpi)
    except OSError as e:
        where = getattr(e, "filename", None) or stem
        raise UserError(f"cannot write the figure: {os_reason(e)}; expected a "
                        "writable path", source=str(where),
                        field="--out" if args.out else None) from None
    for path in paths:
        print(path)


def _plot_analysis(args: argparse.Namespace, folder: Path, marker: str) -> int:
    """A `sensitivity` folder: its tornado (CONFIG) or bands (SWEEP) figure, redrawn from
    the result file."""
    from scratchpipe_sim.errors import UserError

    name = ANALYSES[marker]
    if args.figures and args.figures != [name] or args.experiment:
        raise UserError(f"a sensitivity result has one figure, {name}: expected no "
                        "--figure / --experiment (or --figure " + name + ")",
                        source=str(folder), field="--figure")
    _save(args, _analysis_figure(folder, marker), _stem(args, folder, name, 1))
    return 0


def _analysis_figure(folder: Path, marker: str):
    """The one figure of the analysis result `marker` in `folder`."""
    if ANALYSES[marker] == "tornado":
        from scratchpipe_sim.experiments.sensitivity_analysis import (
            load_sensitivity,
            tornado_figure,
        )

        return tornado_figure(load_sensitivity(folder))
    from scratchpipe_sim.experiments.band_plots import band_figure
    from scratchpipe_sim.experiments.bands import load_bands

    return band_figure(load_bands(folder))
