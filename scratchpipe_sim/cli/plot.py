"""`scratchpipe-sim plot RESULTS --figure NAME`: a study figure as PNG and PDF."""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchpipe_sim.cli import COMMANDS


def register(sub: argparse._SubParsersAction) -> None:
    from scratchpipe_sim.experiments.figures import BUILTIN

    p = sub.add_parser("plot", help=COMMANDS["plot"],
                       description="Built-in figures: " + ", ".join(BUILTIN) +
                       "; an experiment may declare more under 'figures:'.")
    p.add_argument("results", help="a sweep's or a `run`'s results folder (or its "
                   "results.csv / results.parquet); a run folder is one point: its figure "
                   "is stage-breakdown; a `sensitivity --out` folder: its tornado (a "
                   "config's) or bands (a sweep's) figure")
    p.add_argument("--figure", "-f", action="append", dest="figures",
                   help="figure name (repeatable; default: the experiment's declared "
                   "figures)")
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
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments.plots import make_figure
    from scratchpipe_sim.experiments.results import load_results

    if args.dpi < 1:
        raise UserError(f"expected a positive resolution, got {args.dpi}", field="--dpi")
    target = Path(args.results)
    folder = target if target.is_dir() else target.parent
    if target.is_dir():
        marker = next((m for m in ANALYSES if (target / m).is_file()), None)
    else:
        marker = target.name if target.name in ANALYSES and target.is_file() else None
    if marker is not None:
        return _plot_analysis(args, folder, marker)
    res = load_results(args.results)
    if args.experiment:
        from scratchpipe_sim.experiments.spec import load_experiment

        res.manifest["figures"] = load_experiment(args.experiment).figures
    names = args.figures or list(res.figures)
    if not names:
        raise UserError("the experiment declares no figures: expected --figure NAME",
                        field="--figure")
    for name in names:
        _save(args, make_figure(res, name), _stem(args, folder, name, len(names)))
    return 0


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
    if name == "tornado":
        from scratchpipe_sim.experiments.sensitivity import load_sensitivity, tornado_figure

        fig = tornado_figure(load_sensitivity(folder))
    else:
        from scratchpipe_sim.experiments.band_plots import band_figure
        from scratchpipe_sim.experiments.bands import load_bands

        fig = band_figure(load_bands(folder))
    _save(args, fig, _stem(args, folder, name, 1))
    return 0
