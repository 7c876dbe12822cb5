"""`scratchpipe-sim torchrec-plan CONFIG`: TorchRec's planner with its own estimator and with
the simulator's, plans side by side.

The trace (`--trace PATH`, else the config's) gives each table's cache statistics
(`--stats FILE` reads them from `trace stats PATH --torchrec FILE` instead of replaying;
the file must be of that trace, checked by its checksum); TorchRec's
`EmbeddingShardingPlanner` then runs on the config's tables and hardware with
`--world-size` ranks, once as shipped and once with the simulator-backed estimator and the
statistics (scratchpipe_sim/experiments/torchrec_planner.py). Needs the `peers` extra and
torchrec 1.8.0; without them: one line, exit status 2.
"""

from __future__ import annotations

import argparse

from scratchpipe_sim.cli._options import add_json, add_overrides, load_config_of
from scratchpipe_sim.safety import jsonout

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = ("TorchRec's sharding planner with its estimator and with the simulator's, side by "
        "side (peers extra)")
ORDER = 81


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "torchrec-plan", help=HELP,
        description="Run TorchRec's EmbeddingShardingPlanner on the config's tables and "
                    "hardware twice (TorchRec's estimator; the simulator's estimator and "
                    "the trace's cache statistics) and print both plans, each priced by "
                    "both estimators.")
    p.add_argument("config", metavar="CONFIG", nargs="?",
                   help="YAML config (not with --published)")
    add_overrides(p, example="cache.load_factor=0.1")
    p.add_argument("--trace", metavar="PATH",
                   help="the trace whose statistics the planner uses (default: the "
                        "config's); its tables must be the config's")
    p.add_argument("--stats", metavar="FILE.json",
                   help="statistics written by `trace stats PATH --torchrec FILE` (of the "
                        "same trace) instead of replaying it")
    p.add_argument("--world-size", type=int, default=1, metavar="N",
                   help="GPUs (ranks) to plan for (default 1)")
    p.add_argument("--published", action="store_true",
                   help="no CONFIG: on each published H100 configuration (T1.x of "
                        "scratchpipe_sim/data/published_points.yaml), the compute kernel "
                        "each planner picks (among the measured kernels, and among all) "
                        "beside the one measured fastest")
    p.add_argument("--only", nargs="+", metavar="ID",
                   help="--published: only the configurations of these points (e.g. T1.5)")
    p.add_argument("--batches", type=int, default=None, metavar="N",
                   help="--published: batches of each configuration's ids the statistics "
                        "replay (half warm-up; default 10)")
    add_json(p, "one JSON object {world_size, torchrec, simulator, differences}; "
                "--published: a list, one object per configuration")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments import peers
    from scratchpipe_sim.experiments import torchrec_planner as tp
    from scratchpipe_sim.experiments import torchrec_stats as ts

    peers.import_torchrec("torchrec-plan")  # the missing package first, before any work
    if args.published:
        return handle_published(args)
    for flag in ("only", "batches"):
        if getattr(args, flag) is not None:
            raise UserError("only with --published", field=f"--{flag}")
    if args.config is None:
        raise UserError("expected a CONFIG (or --published)", field="CONFIG")
    cfg = load_config_of(args)
    tp.local_world(cfg, args.world_size)
    if args.trace is not None:
        from scratchpipe_sim.traces.io import open_trace

        trace = open_trace(args.trace)
    else:
        from scratchpipe_sim.timing import build_trace

        trace = build_trace(cfg)
    want = tuple(int(r) for r in cfg.model.rows_per_table)
    if tuple(int(r) for r in trace.table_rows) != want:
        raise UserError(f"the trace has {trace.num_tables} tables of rows "
                        f"{ts._rows_text(trace.table_rows)}; the config has {len(want)} of "
                        f"rows {ts._rows_text(want)}: expected the config's tables",
                        source=str(args.trace or cfg.source), field="--trace")
    if args.stats is not None:
        stats = ts.read_stats(args.stats)
        stats.check_rows(want, args.stats, "tables")
        stats.check_trace(trace, args.stats)
    else:
        stats = ts.trace_stats(trace)
    a, b = tp.plan_both(cfg, stats, args.world_size)
    diffs = tp.differences(a, b)
    if args.json:
        print(jsonout.dumps({"world_size": args.world_size, "torchrec": a.as_json(),
                             "simulator": b.as_json(), "differences": diffs}, indent=1))
        return 0
    print(f"torchrec-plan {cfg.name or args.config}: {cfg.model.table_count} tables, "
          f"{args.world_size} GPU(s) of {cfg.hardware.name or '(inline)'}; TorchRec "
          f"{peers.torchrec_version()}; iteration = the slowest rank's embedding "
          "fwd+bwd+prefetch+comms, ms")
    print(tp.format_plans(a, b))
    print("\n".join(diffs) if diffs else "both planners place every table the same way")
    return 0


def handle_published(args: argparse.Namespace) -> int:
    """`--published`: the kernel picks on the published configurations."""
    import sys

    from scratchpipe_sim.config import published_points
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments import published
    from scratchpipe_sim.experiments import torchrec_kernel_picks as kp

    if args.config is not None or args.overrides or args.trace or args.stats \
            or args.world_size != 1:
        raise UserError("--published takes no CONFIG, --set, --trace, --stats or "
                        "--world-size (each point carries its configuration, on one GPU)",
                        field="--published")
    batches = kp.DEFAULT_BATCHES if args.batches is None else args.batches
    if batches < 2:
        raise UserError(f"expected at least 2 batches (half warm the cache), got {batches}",
                        field="--batches")
    points = published.select(published_points.load_points(), args.only)
    rows = kp.picks(points, batches, log=lambda m: print(m, file=sys.stderr))
    if not rows:
        raise UserError("no T1.x point among those selected: expected e.g. --only T1.5",
                        field="--only")
    if args.json:
        print(jsonout.dumps([r.as_json() for r in rows], indent=1))
        return 0
    print(f"torchrec-plan --published: {len(rows)} configuration(s), one GPU, statistics "
          f"from {batches} batches of each configuration's ids")
    print(kp.format_picks(rows))
    return 0
