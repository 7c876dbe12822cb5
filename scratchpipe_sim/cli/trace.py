"""`scratchpipe-sim trace gen|stats`: make a synthetic trace; describe any trace's locality.

More `trace` subcommands plug in without editing this file: each module named in
`SUBCOMMAND_MODULES` (e.g. `scratchpipe_sim/cli/trace_convert.py`) that exists defines
`register(trace_subparsers)` and adds its own sub-subcommand with `set_defaults(func=...)`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from pathlib import Path
from typing import Any

from scratchpipe_sim.cli._options import add_json
from scratchpipe_sim.config.loader import YamlRefused, load_yaml_text
from scratchpipe_sim.config.schema import check_named
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety import jsonout
from scratchpipe_sim.traces import generators as gen
from scratchpipe_sim.traces import stats as st
from scratchpipe_sim.traces.io import formats, open_trace

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "generate traces and print locality statistics"
ORDER = 30


#: modules under scratchpipe_sim.cli that add `trace` sub-subcommands.
SUBCOMMAND_MODULES = ("trace_convert",)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("trace", help=HELP,
                              description="Generate synthetic traces; print statistics.")
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION",
                           parser_class=type(p))
    sub.required = True
    _register_gen(sub)
    _register_stats(sub)
    _register_fit(sub)
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(f"scratchpipe_sim.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"scratchpipe_sim.cli.{name}":
                continue
            raise
        module.register(sub)


# -- gen ------------------------------------------------------------------------------------
def _register_gen(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("gen", help="write a seeded synthetic trace (.sptrace)",
                       description="Write a seeded synthetic trace into a .sptrace folder, "
                                   "block by block (bounded memory).")
    g.add_argument("--distribution", default="zipf", metavar="NAME",
                   help=f"popularity: {', '.join(gen.DISTRIBUTIONS.names())} (default zipf)")
    g.add_argument("--alpha", type=float, help="zipf exponent (default 1.05)")
    g.add_argument("--no-permute", action="store_true",
                   help="zipf: keep rank r at id r-1 (default: ids randomly permuted)")
    g.add_argument("--hot-fraction", type=float, help="hotset: share of rows that are hot")
    g.add_argument("--hot-access-fraction", type=float,
                   help="hotset: share of accesses that go to the hot rows")
    g.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="any distribution parameter (repeatable); a list as KEY=1,2 or "
                        "KEY=[1,2]")
    g.add_argument("--from-fit", metavar="PARAMS.yaml",
                   help="the `burst` parameters written by `trace fit`: table count, rows, "
                        "pooling and batch size come from it unless --rows, --pooling or "
                        "--batch-size override them")
    g.add_argument("--rows", metavar="N[,N...]",
                   help="rows per table: one number (for every table) or one per table "
                        "(required unless --from-fit; with it, scales the tables up or down)")
    g.add_argument("--tables", type=int, metavar="T", help="number of tables (default: "
                   "the number of --rows values)")
    g.add_argument("--batch-size", type=int, metavar="B",
                   help="samples per mini-batch (required unless --from-fit)")
    g.add_argument("--preset", metavar="NAME|PATH.yaml",
                   help="a generator preset (configs/trace-gen/, e.g. criteo-terabyte-day: "
                        "a synthetic Criteo 1TB day): its rows, batch size, batches, pooling "
                        "and trace (distribution, parameters, reuse); flags override them")
    g.add_argument("--batches", type=int, metavar="N",
                   help="number of mini-batches to write (required unless --preset)")
    g.add_argument("--pooling", metavar="L[,L...]",
                   help="lookups per sample per table: one or one per table (default 1; "
                        "--from-fit: the fit's)")
    g.add_argument("--pooling-sigma", type=float, metavar="S",
                   help="bag lengths ~ trunc(N(pooling, S)), >= 0, drawn once per sample "
                        "slot (FBGEMM's sigma_L; default 0: fixed pooling; --from-fit: the "
                        "fit's)")
    g.add_argument("--reuse", type=float, default=0.0, metavar="F",
                   help="share of each batch's ids copied from the previous batch")
    g.add_argument("--seed", type=int, required=True, metavar="S",
                   help="random seed: the same arguments and seed give the same trace")
    g.add_argument("--out", required=True, metavar="PATH.sptrace",
                   help="output .sptrace folder (written atomically)")
    g.add_argument("--force", action="store_true", help="overwrite an existing output")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress lines (stderr)")
    g.set_defaults(func=handle_gen)


def _int_list(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"expected integers separated by commas, got '{text}'",
                        field=flag) from None


def _params(items: list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs, values read as YAML; a bare comma list (row_shares=0.3,0.7) is a
    list, like [0.3, 0.7]."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"expected KEY=VALUE, got '{item}'", field="--param")
        text = value.strip()
        if "," in text and not text.startswith(("[", "{", "'", '"')):
            text = f"[{text}]"
        try:
            out[key.strip()] = load_yaml_text(text, None, "--param") if text else value
        except YamlRefused:
            raise
        except UserError:
            raise UserError(f"cannot read the value of '{item}': expected a number, a word or "
                            "a list such as 0.3,0.7", field="--param") from None
    return out


def _check_out(out: Path, force: bool) -> None:
    """One line and exit 2, before any work, when OUT cannot be written."""
    if out.exists() and not force:
        raise UserError("already exists; pass --force to overwrite", source=str(out))
    parent = out.resolve().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent  # missing folders are made (as `trace convert` makes them)
    if not parent.is_dir():
        raise UserError(f"{parent} is not a folder: expected a path under a folder",
                        source=str(out), field="--out")
    if not os.access(parent, os.W_OK | os.X_OK) or (out.exists()
                                                    and not os.access(out, os.W_OK)):
        raise UserError("not writable: expected a path in a folder you can write to",
                        source=str(out), field="--out")


#: the keys of a `trace gen` preset (configs/trace-gen/*.yaml) and the flag each stands for
PRESET_KEYS = {"rows": "--rows", "batch_size": "--batch-size", "batches": "--batches",
               "pooling": "--pooling", "trace": "--distribution"}


def _apply_preset(args: argparse.Namespace) -> None:
    """Fill the flags left out from the preset (`trace: {preset: ...}` expanded as `run`
    does): rows, batch size, batches, pooling, distribution, its parameters and reuse."""
    from scratchpipe_sim.config.loader import _find_preset, expand_presets, read_yaml

    if args.from_fit:
        raise UserError("--preset and --from-fit both give the tables: expected one",
                        field="--preset")
    path = _find_preset("trace-gen", args.preset, None, None, "--preset")
    d = read_yaml(path, "preset file")
    src = str(path)
    if not isinstance(d, dict):
        raise UserError("expected a mapping of rows, batch_size, batches, pooling, trace",
                        source=src)
    for k in d:
        if k not in PRESET_KEYS:
            raise UserError(f"unknown key; expected one of {', '.join(PRESET_KEYS)}",
                            source=src, field=k)
    d = expand_presets(d, path.parent, src)

    def text(v: Any) -> str:
        return ",".join(str(x) for x in v) if isinstance(v, list) else str(v)

    if args.rows is None and "rows" in d:
        args.rows = text(d["rows"])
    if args.pooling is None and "pooling" in d:
        args.pooling = text(d["pooling"])
    for key in ("batch_size", "batches"):
        if getattr(args, key) is None and key in d:
            setattr(args, key, d[key])
    t = d.get("trace") or {}
    if args.distribution == "zipf" and "distribution" in t:  # the flag's default
        args.distribution = t["distribution"]
        preset_params = {k: v for k, v in (t.get("params") or {}).items()}
        args.param = [f"{k}={_yaml_flow(v)}" for k, v in preset_params.items()] + args.param
        if args.alpha is None and t.get("alpha") is not None:
            args.alpha = t["alpha"]
    if args.reuse == 0.0 and t.get("reuse"):
        args.reuse = t["reuse"]


def _yaml_flow(v: Any) -> str:
    return "[" + ",".join(str(x) for x in v) + "]" if isinstance(v, list) else str(v)


def handle_gen(args: argparse.Namespace) -> int:
    if args.preset:
        _apply_preset(args)
    if args.batches is None:
        raise UserError("required (or pass --preset NAME)", field="--batches")
    if args.from_fit:
        return _gen_from_fit(args)
    for flag, value in (("--rows", args.rows), ("--batch-size", args.batch_size)):
        if value is None:
            raise UserError("required (or pass --from-fit PARAMS.yaml)", field=flag)
    rows = _int_list(args.rows, "--rows")
    pooling = _int_list(args.pooling or "1", "--pooling")
    if args.tables is not None:
        if args.tables < 1:
            raise UserError(f"expected a positive number of tables, got {args.tables}",
                            field="--tables")
        check_named("tables", args.tables, "--tables", None)
        if len(rows) == 1:
            rows = rows * args.tables
        elif len(rows) != args.tables:
            raise UserError(f"{len(rows)} row counts for {args.tables} tables: expected one "
                            "or one per table", field="--rows")
    if len(pooling) == 1:
        pooling = pooling * len(rows)
    params = _params(args.param)
    for flag, key in (("alpha", "alpha"), ("hot_fraction", "hot_fraction"),
                      ("hot_access_fraction", "hot_access_fraction")):
        if getattr(args, flag) is not None:
            params[key] = getattr(args, flag)
    if args.no_permute:
        params["permute"] = False
    out = Path(args.out)
    _check_out(out, args.force)
    try:
        spec = gen.make_spec(args.distribution, rows, args.batch_size, args.batches, pooling,
                             args.seed, args.reuse, pooling_sigma=args.pooling_sigma or 0.0,
                             **params)
    except UserError as e:  # name the flag, not the API argument
        raise UserError(e.message, source=e.source, field=_flag(e.field)) from None
    return _write(spec, out, args.force, args.quiet)


def _gen_from_fit(args: argparse.Namespace) -> int:
    from scratchpipe_sim.traces import distribution_fit as ft

    for flag, given in (("--distribution", args.distribution != "zipf"),
                        ("--alpha", args.alpha is not None), ("--param", bool(args.param)),
                        ("--no-permute", args.no_permute), ("--tables", args.tables),
                        ("--hot-fraction", args.hot_fraction is not None),
                        ("--hot-access-fraction", args.hot_access_fraction is not None)):
        if given:
            raise UserError("--from-fit gives the distribution and its parameters: expected "
                            f"no {flag}", field=flag)
    f = ft.load_fit(args.from_fit)
    T = len(f.tables)
    rows = f.table_rows
    if args.rows is not None:
        rows = _int_list(args.rows, "--rows")
        if len(rows) == 1:
            rows = rows * T
        elif len(rows) != T:
            raise UserError(f"{len(rows)} row counts for the fit's {T} tables: expected one "
                            "or one per table", field="--rows")
    pooling = [t.pooling for t in f.tables]
    if args.pooling is not None:
        pooling = _int_list(args.pooling, "--pooling")
        pooling = pooling * T if len(pooling) == 1 else pooling
    sigma: Any = [t.pooling_sigma for t in f.tables]
    if args.pooling_sigma is not None:
        sigma = args.pooling_sigma
    out = Path(args.out)
    _check_out(out, args.force)
    try:
        spec = gen.make_spec("burst", rows, args.batch_size or f.batch_size, args.batches,
                             pooling, args.seed, args.reuse, pooling_sigma=sigma,
                             **f.params())
    except UserError as e:
        raise UserError(e.message, source=e.source, field=_flag(e.field)) from None
    return _write(spec, out, args.force, args.quiet)


def _write(spec: gen.GenSpec, out: Path, force: bool, quiet: bool = False) -> int:
    from scratchpipe_sim.experiments.progress import Progress

    t0 = time.monotonic()
    try:
        per_batch = gen.spec_disk_bytes(spec) / spec.num_batches
        with Progress(max(1, round(per_batch * spec.num_batches / 1e6)), "trace gen", "MB",
                      quiet=quiet) as bar:
            written = [0]

            def step(n: int) -> None:
                written[0] += n
                mb = round(written[0] * per_batch / 1e6) - bar.done
                bar.update(mb, note=_rate(written[0], spec, t0))

            gen.store_from_spec(spec, out, overwrite=force, progress=step)
    except UserError as e:  # a sampler's own check (e.g. calibrated's shares), by flag
        raise UserError(e.message, source=e.source, field=_flag(e.field)) from None
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}", source=str(out),
                        field="--out") from None
    accesses = spec.accesses_per_batch * spec.num_batches
    dt = max(time.monotonic() - t0, 1e-9)
    print(f"wrote {out}: {spec.distribution} {_fmt_params(spec.params)}, "
          f"{spec.num_tables} table(s), {sum(spec.table_rows)} rows, {spec.num_batches} "
          f"batches of {spec.batch_size}, {accesses} accesses, seed {spec.seed}; "
          f"{dt:.1f} s, {gen.spec_disk_bytes(spec) / 1e6 / dt:.0f} MB/s written")
    return 0


def _rate(done: int, spec: gen.GenSpec, t0: float) -> str:
    """The write rate and the time left after `done` batches."""
    dt = max(time.monotonic() - t0, 1e-9)
    per_batch = gen.spec_disk_bytes(spec) / spec.num_batches
    rate = done * per_batch / dt
    eta = (spec.num_batches - done) * per_batch / max(rate, 1e-9)
    return f"{rate / 1e6:.0f} MB/s, ETA {eta:.0f} s"


_FLAGS = {"num_batches": "--batches", "table_rows": "--rows"}
#: API arguments and distribution parameters that have a flag of their own in `trace gen`.
_OWN_FLAGS = ("alpha", "hot_fraction", "hot_access_fraction", "pooling", "pooling_sigma",
              "batch_size", "reuse", "seed", "tables", "distribution")


def _flag(field: str | None) -> str | None:
    if not field:
        return field
    base = field.split("[")[0]
    if base in _FLAGS:
        return _FLAGS[base]
    if base in _OWN_FLAGS:
        return "--" + base.replace("_", "-")
    return f"--param {field}"


def _fmt_params(params: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")" if params else ""


# -- stats ----------------------------------------------------------------------------------
def _register_stats(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("stats", help="accesses, unique rows, Meta-style locality histogram, "
                                     "LRU miss-ratio curve",
                       description="Print a trace's accesses, unique rows, the per-row "
                                   "access-count histogram in the buckets of Meta's "
                                   "locality_stats.txt, and the exact LRU miss-ratio curve.")
    s.add_argument("path", metavar="PATH", help=f"a trace ({', '.join(formats())})")
    s.add_argument("--batch-size", type=int, metavar="B",
                   help="mini-batch size for flat id streams (default 1)")
    s.add_argument("--rows", type=int, metavar="N",
                   help="table rows for flat id streams (default max id + 1)")
    s.add_argument("--format", dest="fmt", metavar="FMT", help="override format detection")
    add_json(s, "one JSON object")
    s.add_argument("--mrc", action=argparse.BooleanOptionalAction, default=True,
                   help="compute the LRU miss-ratio curve (default on; --no-mrc skips it)")
    s.add_argument("--capacities", metavar="C[,C...]",
                   help="curve capacities in rows or percent of rows, e.g. 1000,5%% "
                        "(default 1,2,5,10,20%% of rows)")
    s.add_argument("--meta-format", action="store_true",
                   help="print only the histogram, in locality_stats.txt's exact layout")
    s.add_argument("--torchrec", metavar="OUT.json",
                   help="write TorchRec cache statistics (per table: distinct ids per batch, "
                        "FBGEMM LRU miss-ratio curve, cacheability) for torchrec-plan --stats")
    s.add_argument("--torchrec-algorithm", choices=("lru", "lfu"), default="lru",
                   help="--torchrec: the FBGEMM cache replayed, lru (default) or lfu "
                        "(fbgemm-lfu; torchrec-plan then tells TorchRec CacheAlgorithm.LFU)")
    s.set_defaults(func=handle_stats)


def parse_capacities(text: str, total_rows: int) -> list[int]:
    caps = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            if item.endswith("%"):
                pct = float(item[:-1])
                if not pct > 0:
                    raise ValueError
                caps.append(max(1, int(round(pct / 100.0 * total_rows))))
            else:
                c = int(item)
                if c < 1:
                    raise ValueError
                caps.append(c)
        except ValueError:
            raise UserError(f"expected positive row counts or percentages, got '{item}'",
                            field="--capacities") from None
    if not caps:
        raise UserError("expected at least one capacity", field="--capacities")
    return caps


def _check_rows(trace, args: argparse.Namespace) -> None:
    """Statistics keep per-row arrays sized by the rows (--rows, or the largest id + 1):
    check their memory before computing."""
    from scratchpipe_sim.safety import memory_guard

    memory_guard.check_cache(trace.total_rows, trace.num_accesses, source=str(args.path),
                             field="--rows" if args.rows else "--trace")


def handle_stats(args: argparse.Namespace) -> int:
    trace = open_trace(args.path, batch_size=args.batch_size, num_rows=args.rows,
                       fmt=args.fmt)
    _check_rows(trace, args)
    caps = parse_capacities(args.capacities, trace.total_rows) if args.capacities else None
    if args.torchrec_algorithm != "lru" and not args.torchrec:
        raise UserError("only with --torchrec OUT.json", field="--torchrec-algorithm")
    if args.torchrec:
        from scratchpipe_sim.experiments import torchrec_stats as ts

        stats = ts.trace_stats(trace, algorithm=args.torchrec_algorithm)
        out = ts.write_stats(stats, args.torchrec)
        print(f"wrote {out}: TorchRec cache statistics of {trace.num_tables} tables "
              f"({stats.policy})")
        return 0
    summary = st.summarize(trace)
    if args.meta_format:
        print(st.format_locality_stats(summary.histogram), end="")
        return 0
    curve = st.lru_miss_ratio_curve(trace, caps) if args.mrc or caps else None
    if args.json:
        d = summary.to_dict()
        if curve is not None:
            d["lru_mrc"] = curve.points()
            d["cold_misses"] = curve.cold_misses
        print(jsonout.dumps(d))
        return 0
    print(report(summary, curve))
    return 0


def report(s: st.TraceSummary, curve: st.MissRatioCurve | None) -> str:
    rows = sum(s.table_rows)
    lines = [
        f"trace            {s.source}",
        f"tables           {len(s.table_rows)}  rows {rows}",
        f"batches          {s.num_batches}  (batch size {s.batch_size}, mean pooling "
        f"{s.mean_pooling:.3g})",
        f"accesses         {s.accesses}",
        f"distinct rows    {s.distinct_rows}  ({100.0 * s.distinct_rows / rows:.3g}% of rows, "
        f"{s.accesses / max(s.distinct_rows, 1):.3g} accesses per touched row)",
        f"unique per batch {s.mean_unique_per_batch:.1f}  (mean distinct rows of a batch; "
        "cache and run sum these as 'unique')",
    ]
    if len(s.table_rows) > 1:
        head = ("table", "rows", "accesses", "distinct rows")
        body = [(str(t), str(r), str(a), str(u)) for t, (r, a, u) in enumerate(zip(
            s.table_rows, s.accesses_per_table, s.distinct_rows_per_table, strict=True))]
        w = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
        fmt = "  ".join(f"{{:>{n}}}" for n in w)
        lines.append("per table        " + fmt.format(*head))
        lines.extend("                 " + fmt.format(*r) for r in body)
    h = s.histogram
    lines.append("histogram        accesses per row   share of rows   share of accesses"
                 "   (Meta locality_stats buckets)")
    for lab, rs, as_ in zip(st.BUCKET_LABELS, h.row_share, h.access_share, strict=True):
        lines.append(f"                 {lab:<18} {rs:>13.3f} {as_:>19.3f}")
    if curve is not None:
        lines.append("LRU miss ratio   capacity (rows)   % of rows   miss ratio   misses")
        for p in curve.points():
            pct = 100.0 * p["capacity"] / rows
            lines.append(f"                 {p['capacity']:>15} {pct:>11.3g}"
                         f" {p['miss_ratio']:>12.6f} {p['misses']:>8}")
        lines.append(f"cold misses      {curve.cold_misses}")
    return "\n".join(lines)


# -- fit ------------------------------------------------------------------------------------
def _register_fit(sub: argparse._SubParsersAction) -> None:
    f = sub.add_parser("fit", help="fit the `burst` generator (popularity + temporal bursts) "
                                   "to a trace",
                       description="Fit, per table, the `burst` generator's popularity "
                                   "exponent, popularity shift, repeat share and repeat-lag "
                                   "exponent to a trace's LRU and static miss curves; write "
                                   "them (with rows, pooling and batch size) as YAML for "
                                   "`trace gen --from-fit`, and check the fit over the whole "
                                   "trace.")
    f.add_argument("path", metavar="PATH", help=f"a trace ({', '.join(formats())})")
    f.add_argument("--out", required=True, metavar="PARAMS.yaml",
                   help="where to write the fitted parameters")
    f.add_argument("--preset", metavar="PRESET.yaml",
                   help="also write them as a trace preset (configs/traces/ format)")
    f.add_argument("--max-accesses", type=int, default=None, metavar="N",
                   help="fit each table on its first N accesses (default 131072)")
    f.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="generate a trace from the fit and compare LRU and static hit "
                        "ratios at 1-20%% of rows (default on)")
    f.add_argument("--batch-size", type=int, metavar="B",
                   help="mini-batch size for flat id streams (default 1)")
    f.add_argument("--rows", type=int, metavar="N",
                   help="table rows for flat id streams (default max id + 1)")
    f.add_argument("--format", dest="fmt", metavar="FMT", help="override format detection")
    f.add_argument("--force", action="store_true", help="overwrite existing outputs")
    f.set_defaults(func=handle_fit)


def handle_fit(args: argparse.Namespace) -> int:
    import dataclasses

    from scratchpipe_sim.policies.fit_check import check_fit
    from scratchpipe_sim.traces import distribution_fit as ft

    outs = [Path(args.out)] + ([Path(args.preset)] if args.preset else [])
    for o in outs:
        _check_out(o, args.force)
    if args.max_accesses is not None and args.max_accesses < 2:
        raise UserError(f"expected at least 2 accesses, got {args.max_accesses}",
                        field="--max-accesses")
    trace = open_trace(args.path, batch_size=args.batch_size, num_rows=args.rows,
                       fmt=args.fmt)
    _check_rows(trace, args)
    fit = ft.fit_trace(trace, args.max_accesses or ft.DEFAULT_MAX_ACCESSES)
    if args.check:
        fit = dataclasses.replace(fit, check=check_fit(trace, fit))
    try:
        ft.write_fit(fit, args.out)
        if args.preset:
            Path(args.preset).write_text(ft.preset_yaml(fit, Path(args.preset).stem))
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}", source=str(e.filename or args.out),
                        field="--out") from None
    print(f"wrote {args.out}: {len(fit.tables)} table(s), batch size {fit.batch_size}")
    w = len(str(len(fit.tables) - 1))
    for t, tf in enumerate(fit.tables):
        print(f"  table {t:>{w}}  rows {tf.rows}  pooling {tf.pooling}  alpha {tf.alpha:.4g}  "
              f"head_scale {tf.head_scale:.4g}  repeat_fraction {tf.repeat_fraction:.4g}  "
              f"lag_alpha {tf.lag_alpha:.4g}  (curve RMS error {tf.rms_error:.3g})")
    if fit.check:
        c = fit.check
        print("check            % of rows   LRU hit source  fitted   static hit source  "
              "fitted")
        for i, frac in enumerate(c["capacity_fraction"]):
            print(f"                 {100 * frac:>9.3g} {c['source_lru_hit'][i]:>15.4f} "
                  f"{c['fitted_lru_hit'][i]:>7.4f} {c['source_static_hit'][i]:>18.4f} "
                  f"{c['fitted_static_hit'][i]:>7.4f}")
        print(f"max LRU hit gap  {c['max_lru_gap']:.4f}")
    if args.preset:
        print(f"wrote {args.preset}: use as trace: {{preset: {args.preset}}}")
    return 0
