"""`scratchpipe-sim trace convert` and `trace locality` (plugged into cli/trace.py).

convert: stream a production trace (Criteo TSV, one day or several, DLRM trace.log / uint64
binary, Meta dlrm_datasets, (sample, table, id) CSV/Parquet) into a `.sptrace` folder,
atomically; Criteo with progress on stderr (rate, ETA) and, before it starts, what the id
mapping will cost in memory.
locality: compare a trace's per-row access-count histogram with a Meta locality_stats.txt
and print the distance (max absolute per-bucket difference).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import re
import sys
import time
from pathlib import Path

import numpy as np

from scratchpipe_sim.cli._options import add_json
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety import jsonout
from scratchpipe_sim.safety.paths import input_file
from scratchpipe_sim.traces import convert as cv
from scratchpipe_sim.traces import criteo
from scratchpipe_sim.traces.criteo import MLPERF_ROWS

#: not a top-level command: a `trace` action (cli/trace.py's SUBCOMMAND_MODULES)
COMMAND = None


def register(sub: argparse._SubParsersAction) -> None:
    cv.load_converters()
    p = sub.add_parser("convert", help="convert a production trace into a .sptrace folder",
                       description="Stream IN (Criteo TSV, DLRM trace.log or uint64 binary, "
                                   "Meta dlrm_datasets .pt[.gz], (sample, table, id) CSV, TSV "
                                   "or Parquet) into the .sptrace folder OUT. Nothing is "
                                   "written under OUT unless the conversion completes.")
    p.add_argument("paths", nargs="+", metavar="IN [IN ...] OUT",
                   help="the production trace(s) to read (format by content or suffix; "
                        "Criteo: several day files or a quoted glob such as 'day_*.gz', "
                        "read in order into one trace), then the .sptrace folder to write "
                        "(nothing is left on failure)")
    p.add_argument("--format", dest="fmt", choices=cv.CONVERTERS.names(),
                   help="input format (default: Criteo by content, else by suffix)")
    ids = p.add_mutually_exclusive_group()
    ids.add_argument("--rows", metavar="N[,N...]",
                     help="ids modulo N (DLRM's max_ind_range): one N or one per table "
                          f"(Criteo default: {MLPERF_ROWS}, MLPerf's Criteo 1TB setting)")
    ids.add_argument("--dense-remap", action="store_true",
                     help="per table, ids renumbered 0.. in order of first appearance")
    p.add_argument("--batch-size", type=int, metavar="B",
                   help=f"samples per mini-batch (default {cv.DEFAULT_BATCH_SIZE}; Meta "
                        "files: the file's own batch)")
    p.add_argument("--skip-bad-lines", action="store_true",
                   help="skip and count malformed lines instead of stopping at the first")
    p.add_argument("--force", action="store_true", help="overwrite an existing OUT")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines and no note on the id mapping (stderr)")
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


def input_paths(items: list[str]) -> list[Path]:
    """The input files: each argument a path or, when no such file exists and it holds a
    glob pattern, its matches in natural order (day_2 before day_10)."""
    out: list[Path] = []
    for item in items:
        if not Path(item).exists() and glob.has_magic(item):
            matches = sorted(glob.glob(item), key=_natural)
            if not matches:
                raise UserError("no file matches this pattern", source=item, field="IN")
            out.extend(Path(m) for m in matches)
        else:
            out.append(Path(item))
    return out


def _natural(name: str) -> list:
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name)]


def handle_convert(args: argparse.Namespace) -> int:
    if len(args.paths) < 2:
        raise UserError("expected IN [IN ...] OUT: at least one input and the output folder",
                        field="OUT")
    srcs, out = input_paths(args.paths[:-1]), args.paths[-1]
    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"expected a positive batch size, got {args.batch_size}",
                        field="--batch-size")
    opts = cv.ConvertOptions(rows=_rows(args.rows), dense_remap=args.dense_remap,
                             batch_size=args.batch_size, skip_bad_lines=args.skip_bad_lines,
                             overwrite=args.force)
    for p in srcs:
        input_file(p, "input file")
    if Path(out).exists() and not args.force:  # before any note: one line, nothing done
        raise UserError("already exists; refusing to overwrite (pass --force)", source=out)
    fmt = args.fmt or cv.detect_format(srcs[0])
    if fmt != "criteo" or args.quiet:
        return _finish(cv.convert(srcs, out, fmt, opts))
    from scratchpipe_sim.experiments.progress import Progress

    note = criteo.plan_note(srcs, opts)
    if note:
        print(f"scratchpipe-sim trace convert: {note}", file=sys.stderr)
    total = criteo.input_bytes(srcs)
    with Progress(max(1, -(-total // _MB)), "trace convert", "MB") as bar:
        meter = _Meter(bar, total)
        result = cv.convert(srcs, out, fmt, dataclasses.replace(opts, progress=meter))
        meter.finish()
    print(f"{result.summary()}; {meter.rate_line()}")
    return 0


def _finish(result: cv.ConvertResult) -> int:
    print(result.summary())
    return 0


_MB = 1_000_000


class _Meter:
    """Feeds input bytes to a Progress bar in whole MB, with the rate and the ETA."""

    def __init__(self, bar, total_bytes: int):
        self.bar, self.total = bar, total_bytes
        self.done = self.shown = 0
        self.t0 = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        mb = self.done // _MB - self.shown
        if mb > 0:
            self.shown += mb
            rate = self.done / max(time.monotonic() - self.t0, 1e-9)
            eta = max(self.total - self.done, 0) / max(rate, 1e-9)
            self.bar.update(mb, note=f"{rate / _MB:.1f} MB/s, ETA {eta:.0f} s")

    def finish(self) -> None:
        rest = self.bar.total - self.bar.done
        if rest > 0:
            self.bar.update(rest)

    def rate_line(self) -> str:
        dt = max(time.monotonic() - self.t0, 1e-9)
        return f"{self.done / _MB:.1f} MB of input in {dt:.1f} s ({self.done / _MB / dt:.1f} MB/s)"


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
