"""`scratchpipe-sim cache`: run one cache policy over one trace and print its counters.

Why a separate command from `run`: it isolates the replacement policy from the timing
model, so hit ratios can be compared with libCacheSim or FBGEMM's own stats directly.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from scratchpipe_sim.cli._options import add_json, add_ranges
from scratchpipe_sim.config.loader import parse_yaml_value
from scratchpipe_sim.config.schema import check_named
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies import POLICIES
from scratchpipe_sim.policies.engine import CacheResult, run_cache
from scratchpipe_sim.safety import jsonout, memory_guard
from scratchpipe_sim.traces.io import formats, open_trace

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "run one cache policy over a trace (hits, misses, evictions)"
ORDER = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cache", help=HELP,
        description="Run one cache policy over a trace; one cache serves all tables over "
                    "linearized ids (table offset + row), as FBGEMM does.")
    p.add_argument("--trace", required=True, metavar="PATH",
                   help=".sptrace folder, .npy id array, text or trace.log file")
    p.add_argument("--policy", required=True, metavar="NAME",
                   help=f"one of: {', '.join(POLICIES.names())}")
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--capacity", type=int, metavar="ROWS", help="cache size in rows")
    size.add_argument("--load-factor", type=float, metavar="F",
                      help="FBGEMM cache_load_factor: capacity = ceil(F * total rows)")
    p.add_argument("--format", dest="fmt", metavar="NAME", choices=formats(),
                   help="trace format when the name and content do not tell: "
                        f"{', '.join(formats())}")
    p.add_argument("--batch-size", type=int, metavar="B",
                   help="mini-batch size for flat id streams (default 1)")
    p.add_argument("--lookahead", type=int, metavar="W",
                   help="scratchpipe: mini-batches of lookahead (its `lookahead` parameter)")
    p.add_argument("--ways", type=int, metavar="K",
                   help="fbgemm-*: associativity (their `ways` parameter)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a policy parameter (repeatable), e.g. profile_fraction=0.1")
    add_ranges(p, "replay the policy")
    p.add_argument("--overlap", type=int, default=None, metavar="N",
                   help="with --ranges: batches replayed before each range (default: grown "
                        "until they touch --capacity distinct rows, the proof for lru)")
    p.add_argument("--check", action="store_true",
                   help="with --ranges: also replay the whole trace and compare every "
                        "per-batch column, range by range (exit 1 if a proven range differs)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="with --ranges: processes (or Dask workers of a local cluster) "
                        "(default: the cores this process may use)")
    add_json(p, "one JSON object")
    p.set_defaults(func=handle)


def parse_params(items: list[str]) -> dict[str, Any]:
    """`key=value` strings -> dict; values read as YAML scalars (1, 0.5, true, text)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"expected KEY=VALUE, got '{item}'", field="--param")
        if key in out:
            raise UserError(f"parameter '{key}' given twice; expected each once",
                            field="--param")
        out[key] = parse_yaml_value(value, "--param", key) if value.strip() else value
    return out


def handle(args: argparse.Namespace) -> int:
    cls = POLICIES.get(args.policy, field="--policy")
    if args.capacity is not None and args.capacity < 1:
        raise UserError(f"expected a positive number of rows, got {args.capacity}",
                        field="--capacity")
    if args.load_factor is not None and not 0 < args.load_factor <= 1:
        raise UserError(f"expected a fraction of the table rows in (0, 1], got "
                        f"{args.load_factor}", field="--load-factor")
    params = parse_params(args.param)
    for flag, key in (("lookahead", "lookahead"), ("ways", "ways")):
        value = getattr(args, flag)
        if value is not None:
            if key not in cls.params:
                raise UserError(f"policy '{args.policy}' takes no --{flag} (it takes: "
                                f"{', '.join(sorted(cls.params)) or 'no parameters'})",
                                field=f"--{flag}")
            check_named(key, value, f"--{flag}", None)
            params[key] = value
    cls.check_params(params)
    trace = open_trace(args.trace, batch_size=args.batch_size, fmt=args.fmt)
    rows = trace.total_rows
    # per-row state is sized by the largest id: refuse a sparse (hashed) id space up front
    memory_guard.check_cache(rows, trace.num_accesses, source=str(args.trace))
    capacity = (args.capacity if args.capacity is not None
                else max(1, math.ceil(args.load_factor * rows)))
    if capacity > rows:
        print(f"scratchpipe-sim cache: warning: --capacity {capacity} exceeds the trace's "
              f"{rows} rows: every row fits, only first-touch misses remain",
              file=sys.stderr)
    if args.ranges is not None:
        return ranged(args, trace, capacity, params)
    for flag in ("overlap", "check"):
        if getattr(args, flag) not in (None, False):
            raise UserError(f"--{flag} needs --ranges K", field=f"--{flag}")
    result = run_cache(trace, args.policy, capacity, **params)
    if args.json:
        print(jsonout.dumps(to_json(result, trace)))
    else:
        print(report(result, trace))
    return 0


def to_json(result: CacheResult, trace) -> dict[str, Any]:
    d = result.to_dict()
    d.update(trace=str(trace.source), batch_size=int(trace.batch_size),
             num_tables=int(trace.num_tables))
    return d


def report(r: CacheResult, trace) -> str:
    pct = 100.0 * r.capacity / r.num_rows
    lines = [
        f"trace        {trace.source}: {trace.num_tables} table(s), {r.num_rows} rows, "
        f"{trace.num_batches} batches (batch size {trace.batch_size})",
        f"policy       {r.policy}, capacity {r.capacity} rows ({pct:.3g}% of rows)",
        f"accesses     {r.accesses}",
        f"unique       {r.unique}  (distinct rows per batch, summed)",
        f"hits         {r.hits}",
        f"misses       {r.misses}  (fills {r.fills}, unplaced {r.unplaced})",
        f"evictions    {r.evictions}",
        f"write-backs  {r.writebacks}",
    ]
    lines += [f"{k:<12} {v}" for k, v in r.extra.items()]
    lines += [
        f"hit ratio    {r.hit_ratio:.6f}",
        f"wall time    {r.wall_s:.3f} s",
        f"accesses/s   {r.accesses_per_s / 1e6:.2f} M",
        "per table",
    ]
    head = ["table", "accesses", "hits", "misses", "unplaced", "hit_ratio"]
    body = [[str(t["table"]), str(t["accesses"]), str(t["hits"]), str(t["misses"]),
             str(t["unplaced"]), f"{t['hits'] / t['accesses'] if t['accesses'] else 0.0:.6f}"]
            for t in r.per_table]
    widths = [max(len(c) for c in col) for col in zip(head, *body, strict=True)]
    for cells in [head, ["-" * w for w in widths], *body]:
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))
    return "\n".join(lines)


def ranged(args: argparse.Namespace, trace, capacity: int, params: dict[str, Any]) -> int:
    """`cache --ranges K`: the replay as time ranges, each range's proof (and, `--check`,
    its comparison with the full replay); exit 1 when a proven range differs."""
    from scratchpipe_sim.api import replay_time_ranges  # noqa: PLC0415
    from scratchpipe_sim.traces.forked import check_jobs, usable_cores  # noqa: PLC0415

    jobs = usable_cores() if args.jobs is None else check_jobs(args.jobs)
    out = replay_time_ranges(trace, args.policy, capacity, args.ranges, args.overlap,
                             check=args.check, executor=args.executor, jobs=jobs,
                             scheduler=args.scheduler, **params)
    rep, chk = out.replay, out.check
    acc = int(rep.cols["accesses"].sum())
    hits = int(rep.cols["hits"].sum())
    ranges = []
    for i, r in enumerate(rep.ranges):
        d = {"range": r.index, "first_batch": r.lo, "last_batch": r.hi - 1,
             "overlap_batches": r.overlap_batches, "overlap_rows": r.overlap_rows,
             "capacity": r.target or None, "proven": r.proven}
        if chk is not None:
            d.update(equal=chk.equal[i], max_abs_diff=chk.max_abs_diff[i])
        ranges.append(d)
    summary = {"trace": str(trace.source), "policy": args.policy, "capacity": capacity,
               "ranges": ranges, "proven": rep.proven, "accesses": acc, "hits": hits,
               "hit_ratio": hits / acc if acc else 0.0, "ranges_wall_s": out.ranges_wall_s,
               "executor": args.executor, "jobs": jobs}
    if chk is not None:
        summary.update(full_hit_ratio=chk.hit_ratio_full, all_equal=chk.all_equal,
                       full_wall_s=out.full_wall_s)
    if args.json:
        print(jsonout.dumps(summary))
    else:
        lines = [f"trace        {trace.source}: {trace.num_batches} batches",
                 f"policy       {args.policy}, capacity {capacity} rows, "
                 f"{len(rep.ranges)} time ranges ({args.executor}, {jobs} jobs)"]
        for i, r in enumerate(rep.ranges):
            line = r.describe()
            if chk is not None:
                line += ("; equal to the full replay" if chk.equal[i] else
                         f"; differs from the full replay (largest |difference| "
                         f"{chk.max_abs_diff[i]})")
            lines.append(line)
        lines.append(f"hit ratio    {summary['hit_ratio']:.6f} (ranges, "
                     f"{out.ranges_wall_s:.3f} s)")
        if chk is not None:
            lines.append(f"full replay  {chk.hit_ratio_full:.6f} ({out.full_wall_s:.3f} s)")
        print("\n".join(lines))
    bad = chk is not None and any(r.proven and not e
                                  for r, e in zip(rep.ranges, chk.equal, strict=True))
    return 1 if bad else 0
