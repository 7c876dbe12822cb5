"""`scratchpipe-sim docs`: check or regenerate the numbers README.md and docs/*.md quote.

`--check` (the default) recomputes every marked number from the committed snapshot
(docs/data/) and lists the stale ones (exit 1); `--update` rewrites them; `--collect`
refreshes the snapshot from a study's results, bands and published-points folders;
`--rerun` runs the whole study (every sweep, its bands, `validate --published`), collects
and updates: the one command after a model change (experiments/doc_numbers.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "check or regenerate the numbers the docs quote from the committed results"
ORDER = 140
#: the sensitivity settings of the study's bands (docs/results.md)
BAND_SAMPLES = 32
BAND_SEED = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("docs", help=HELP, description=__doc__.split("\n\n")[1])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="list every marked number its results no longer give, exit 1 "
                      "if any (the default)")
    mode.add_argument("--update", action="store_true",
                      help="rewrite every marked number from the snapshot")
    mode.add_argument("--rerun", action="store_true",
                      help="run every experiments/fig*.yaml sweep and its bands "
                      f"(sensitivity --samples {BAND_SAMPLES} --seed {BAND_SEED}) and "
                      "validate --published into --out, then --collect and --update")
    p.add_argument("--collect", action="store_true",
                   help="first copy --results / --bands / --published into docs/data/")
    p.add_argument("--results", type=Path, metavar="DIR",
                   help="--collect: a folder of sweep results folders (results/)")
    p.add_argument("--bands", type=Path, metavar="DIR",
                   help="--collect: a folder of `sensitivity SWEEP --out` folders (bands/)")
    p.add_argument("--published", type=Path, metavar="FILE",
                   help="--collect: a `validate --published --json` output")
    p.add_argument("--out", type=Path, default=Path("results") / "study", metavar="DIR",
                   help="--rerun: where the study goes (default: results/study; an existing "
                   "folder is refused unless --resume)")
    p.add_argument("--resume", action="store_true",
                   help="--rerun: keep the rows an interrupted rerun left in --out")
    p.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="--rerun: points in parallel (default: 1)")
    p.add_argument("--root", type=Path, default=Path("."), metavar="DIR",
                   help="the repository root (default: the current folder)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments import doc_numbers

    root = args.root
    if not (root / "docs").is_dir():
        raise UserError("expected the repository root (a folder holding docs/)",
                        source=str(root), field="--root")
    data = root / doc_numbers.DATA_DIR
    if args.rerun:
        _rerun(args, root)
        args.collect, args.update = True, True
        args.results, args.bands = args.out / "results", args.out / "bands"
        args.published = args.out / "published.json"
    given = [f for f in ("results", "bands", "published") if getattr(args, f) is not None]
    if args.collect != bool(given):
        raise UserError("--collect takes --results, --bands and/or --published (and they "
                        "only go with --collect)", field="--collect")
    if args.collect:
        for path in doc_numbers.collect(data, args.results, args.bands, args.published):
            print(f"docs: wrote {path}", file=sys.stderr)
    if args.update:
        changed = doc_numbers.update(root)
        for s in changed:
            print(s.describe(root))
        print(f"docs: {len(changed)} of {doc_numbers.count_markers(root)} marked numbers "
              "rewritten", file=sys.stderr)
        return 0
    stale = doc_numbers.check(root)
    for s in stale:
        print(s.describe(root))
    print(f"docs: {len(stale)} of {doc_numbers.count_markers(root)} marked numbers stale"
          + ("; `scratchpipe-sim docs --update` rewrites them" if stale else ""),
          file=sys.stderr)
    return 1 if stale else 0


def _rerun(args: argparse.Namespace, root: Path) -> None:
    """Every study sweep, its bands and the published points, into --out (a fresh folder:
    a sweep resumes from the rows it finds, which a model change leaves stale)."""
    import contextlib
    import io
    import shutil

    from scratchpipe_sim.cli import main
    from scratchpipe_sim.errors import UserError

    if args.out.exists() and not args.resume:
        raise UserError("exists: a sweep would keep its rows from before a model change; "
                        "expected a new folder (or --resume after an interrupted rerun)",
                        source=str(args.out), field="--out")
    jobs = ["--jobs", str(args.jobs)]
    for exp in sorted((root / "experiments").glob("fig*.yaml")):
        bands = args.out / "bands" / exp.stem
        if bands.exists() and not (bands / "bands.json").is_file():
            shutil.rmtree(bands)  # an interrupted rerun's (this command's own folder)
        steps = ((False, ["sweep", str(exp), "-q", "--out",
                          str(args.out / "results" / exp.stem)]),
                 (True, ["sensitivity", str(exp), "--samples", str(BAND_SAMPLES), "--seed",
                         str(BAND_SEED), "--out", str(bands)]))
        for is_bands, argv in steps:
            if is_bands and bands.exists():
                continue  # finished before --resume (sensitivity does not resume a folder)
            print(f"docs --rerun: scratchpipe-sim {' '.join(argv + jobs)}", file=sys.stderr)
            if main(argv + jobs) != 0:
                raise UserError(f"`scratchpipe-sim {' '.join(argv)}` failed", field="--rerun")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["validate", "--published", "--json"])
    if rc != 0:
        raise UserError("`scratchpipe-sim validate --published` failed", field="--rerun")
    (args.out / "published.json").write_text(out.getvalue(), encoding="utf-8")
