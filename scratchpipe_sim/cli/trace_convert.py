"""`scratchpipe-sim trace convert` and `trace locality` (plugged into cli/trace.py).

convert: stream a production trace (Criteo TSV, DLRM trace.log / uint64 binary, Meta
dlrm_datasets, (sample, table, id) CSV/Parquet) into a `.sptrace` folder, atomically.
locality: compare a trace's per-row access-count histogram with a Meta locality_stats.txt
and print the distance (max absolute per-bucket difference).
"""

from __future__ import annotations

import argparse

import numpy as np

from scratchpipe_sim.cli._options import add_json
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety import jsonout
from scratchpipe_sim.traces import convert as cv

#: not a top-level command: a `trace` action (cli/trace.py's SUBCOMMAND_MODULES)
COMMAND = None


def register(sub: argparse._SubParsersAction) -> None:
    cv.load_converters()
    p = sub.add_parser("convert", help="convert a production trace into a .sptrace folder",
                       description="Stream IN (Criteo TSV, DLRM trace.log or uint64 binary, "
                                   "Meta dlrm_datasets .pt[.gz], (sample, table, id) CSV, TSV "
                                   "or Parquet) into the .sptrace folder OUT. Nothing is "
                                   "written under OUT unless the conversion completes.")
    p.add_argument("input", metavar="IN",
                   help="the production trace to read (format by content or suffix)")
    p.add_argument("output", metavar="OUT",
                   help="the .sptrace folder to write (nothing is left on failure)")
    p.add_argument("--format", dest="fmt", choices=cv.CONVERTERS.names(),
                   help="input format (default: Criteo by content, else by suffix)")
    ids = p.add_mutually_exclusive_group()
    ids.add_argument("--rows", metavar="N[,N...]",
                     help="ids modulo N (DLRM's max_ind_range): one N or one per table")
    ids.add_argument("--dense-remap", action="store_true",
                     help="per table, ids renumbered 0.. in order of first appearance")
    p.add_argument("--batch-size", type=int, metavar="B",
                   help=f"samples per mini-batch (default {cv.DEFAULT_BATCH_SIZE}; Meta "
                        "files: the file's own batch)")
    p.add_argument("--skip-bad-lines", action="store_true",
                   help="skip and count malformed lines instead of stopping at the first")
    p.add_argument("--force", action="store_true", help="overwrite an existing OUT")
    p.set_defaults(func=handle_convert)

    q = sub.add_parser("locality", help="distance of a trace's locality histogram from a "
                                        "Meta locality_stats.txt",
                       description="Print the trace's per-row access-count histogram next "
                                   "to a target locality_stats.txt and the distance (max "
                                   "absolute difference per bucket, rows and accesses).")
    q.add_argument("path", metavar="TRACE")
    q.add_argument("--target", required=True, metavar="FILE", help="a locality_stats.txt")
    q.add_argument("--block", default="mean",
                   help="which block of the target: mean (default), an index or a file name")
    q.add_argument("--format", dest="fmt", metavar="FMT", help="override format detection")
    q.add_argument("--batch-size", type=int, metavar="B", help="for flat id streams")
    q.add_argument("--rows", type=int, metavar="N", help="for flat id streams")
    q.add_argument("--max-distance", type=float, metavar="D",
                   help="exit with status 1 when the distance exceeds D")
    add_json(q, "one JSON object")
    q.set_defaults(func=handle_locality)


def _rows(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        rows = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"expected integers separated by commas, got '{text}'",
                        field="--rows") from None
    if not rows or any(r < 1 for r in rows):
        raise UserError(f"expected positive row counts, got '{text}'", field="--rows")
    return rows


def handle_convert(args: argparse.Namespace) -> int:
    opts = cv.ConvertOptions(rows=_rows(args.rows), dense_remap=args.dense_remap,
                             batch_size=args.batch_size, skip_bad_lines=args.skip_bad_lines,
                             overwrite=args.force)
    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"expected a positive batch size, got {args.batch_size}",
                        field="--batch-size")
    result = cv.convert(args.input, args.output, args.fmt, opts)
    print(result.summary())
    return 0


def handle_locality(args: argparse.Namespace) -> int:
    from scratchpipe_sim.traces.calibrated import load_target
    from scratchpipe_sim.traces.io import open_trace
    from scratchpipe_sim.traces.stats import BUCKET_LABELS, access_histogram

    target = load_target(args.target, args.block)
    trace = open_trace(args.path, batch_size=args.batch_size, num_rows=args.rows,
                       fmt=args.fmt)
    h = access_histogram(trace)
    rs, as_ = np.asarray(h.row_share), np.asarray(h.access_share)
    d_rows = float(np.abs(rs - target.row_share).max())
    d_acc = float(np.abs(as_ - target.access_share).max())
    dist = max(d_rows, d_acc)
    if args.json:
        print(jsonout.dumps({"trace": str(args.path), "target": target.name,
                          "accesses": int(h.num_indices), "distinct_rows": int(h.num_unique),
                          "buckets": list(BUCKET_LABELS), "row_share": rs.tolist(),
                          "target_row_share": target.row_share.tolist(),
                          "access_share": as_.tolist(),
                          "target_access_share": target.access_share.tolist(),
                          "distance_rows": d_rows, "distance_accesses": d_acc,
                          "distance": dist}))
    else:
        print(f"trace {args.path}: {int(h.num_indices)} accesses, {int(h.num_unique)} distinct "
              f"rows; target {target.name}")
        print(f"{'bucket':<16} {'rows':>7} {'target':>7} {'accesses':>9} {'target':>7}")
        for i, lab in enumerate(BUCKET_LABELS):
            print(f"{lab:<16} {rs[i]:>7.4f} {target.row_share[i]:>7.4f} {as_[i]:>9.4f} "
                  f"{target.access_share[i]:>7.4f}")
        print(f"distance {dist:.4f} (rows {d_rows:.4f}, accesses {d_acc:.4f})")
    if args.max_distance is not None and dist > args.max_distance:
        return 1
    return 0
