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
                   "is stage-breakdown")
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


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.errors import UserError, os_reason
    from scratchpipe_sim.experiments.plots import make_figure, save_figure
    from scratchpipe_sim.experiments.results import load_results

    res = load_results(args.results)
    if args.experiment:
        from scratchpipe_sim.experiments.spec import load_experiment

        res.manifest["figures"] = load_experiment(args.experiment).figures
    names = args.figures or list(res.figures)
    if not names:
        raise UserError("the experiment declares no figures: expected --figure NAME",
                        field="--figure")
    if args.dpi < 1:
        raise UserError(f"expected a positive resolution, got {args.dpi}", field="--dpi")
    folder = Path(args.results) if Path(args.results).is_dir() else Path(args.results).parent
    formats = tuple(args.formats or ("png", "pdf"))
    for name in names:
        fig = make_figure(res, name)
        if args.out is None:
            stem = folder / "figures" / name
        elif len(names) > 1 or Path(args.out).is_dir() or args.out.endswith(("/", "\\")):
            stem = Path(args.out) / name
        else:
            stem = Path(args.out)
        try:
            paths = save_figure(fig, stem, formats, args.dpi)
        except OSError as e:
            where = getattr(e, "filename", None) or stem
            raise UserError(f"cannot write the figure: {os_reason(e)}; expected a "
                            "writable path", source=str(where),
                            field="--out" if args.out else None) from None
        for path in paths:
            print(path)
    return 0
