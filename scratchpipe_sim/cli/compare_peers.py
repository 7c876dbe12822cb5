"""`scratchpipe-sim compare-peers CONFIG`: TorchRec's planner estimates beside the simulator.

TorchRec's `EmbeddingPerfEstimator` / `EmbeddingStorageEstimator` price the config's tables
for the compute kernels fused, fused_uvm and fused_uvm_caching on a topology built from the
hardware preset; the simulator runs gpu-only, uvm and lru-cache on the same config. With
`--published ID` (no CONFIG) a published, measured point is the config and its measurement
is printed beside both (scratchpipe_sim/experiments/peers.py). Needs the `peers` extra and
torchrec 1.8.0; without them: one line, exit status 2.
"""

from __future__ import annotations

import argparse

from scratchpipe_sim.cli._options import add_json, add_overrides, load_config_of
from scratchpipe_sim.safety import jsonout

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = ("TorchRec's planner estimates beside gpu-only, uvm and lru-cache "
        "(peers extra)")
ORDER = 80


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare-peers", help=HELP,
        description="TorchRec's planner estimates (forward / backward / storage for fused, "
                    "fused_uvm, fused_uvm_caching) beside gpu-only, uvm and lru-cache; TBE "
                    "stages only, ms per batch.")
    p.add_argument("config", metavar="CONFIG", nargs="?",
                   help="YAML config (not with --published)")
    add_overrides(p, example="cache.load_factor=0.1")
    p.add_argument("--published", metavar="ID",
                   help="a published point (e.g. T1.2) as the config, with its measurement")
    add_json(p, "a JSON list of {design, kernel, phase, torchrec_ms, simulated_ms, ratio, "
                "...}")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:

    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments import peers

    peers.import_torchrec()  # the missing package first, before any simulation
    if args.published is not None:
        if args.config is not None or args.overrides:
            raise UserError("--published takes no CONFIG and no --set (the point carries "
                            "its config)", field="--published")
        rows = peers.compare_published(args.published)
        title = f"compare-peers --published {args.published}"
    else:
        if args.config is None:
            raise UserError("expected a CONFIG (or --published ID)", field="CONFIG")
        cfg = load_config_of(args)
        rows = peers.compare(cfg)
        title = (f"compare-peers {cfg.name or args.config}: hardware "
                 f"{cfg.hardware.name or '(inline)'}")
    if args.json:
        print(jsonout.dumps([r.as_json() for r in rows], indent=1))
        return 0
    print(f"{title}; TorchRec {peers.torchrec_version()} planner, 1 rank, TABLE_WISE; TBE "
          "compute only, ms per batch")
    print(peers.format_table(rows))
    print("sim/trc = simulated / torchrec (> 1: the simulator is slower); hbm_GB, ddr_GB: "
          "TorchRec's storage estimate")
    return 0
