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

from scratchpipe_sim.cli._options import add_config, add_json, add_overrides, load_config_of
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
    add_config(p)
    add_overrides(p, example="cache.load_factor=0.1")
    p.add_argument("--trace", metavar="PATH",
                   help="the trace whose statistics the planner uses (default: the "
                        "config's); its tables must be the config's")
    p.add_argument("--stats", metavar="FILE.json",
                   help="statistics written by `trace stats PATH --torchrec FILE` (of the "
                        "same trace) instead of replaying it")
    p.add_argument("--world-size", type=int, default=1, metavar="N",
                   help="GPUs (ranks) to plan for (default 1)")
    add_json(p, "one JSON object {world_size, torchrec, simulator, differences}")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments import peers
    from scratchpipe_sim.experiments import torchrec_planner as tp
    from scratchpipe_sim.experiments import torchrec_stats as ts

    peers.import_torchrec("torchrec-plan")  # the missing package first, before any work
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
