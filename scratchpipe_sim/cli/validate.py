"""`scratchpipe-sim validate CONFIG`: the reference pipeline on the GPU vs the timing model.

Runs the config's workload through the ScratchPipe reference pipeline (numba-cuda) and
through `simulate` (design `scratchpipe`), then prints predicted vs measured per stage and
end to end with the error in %, and writes a CSV (and the measured stage means as JSON, so
`--measured` can redo the comparison — e.g. against another preset — without a GPU).
Without a GPU (and no --measured): one line, exit status 2.

`--cpu` (any machine): the CPU stages of hybrid and scratchpipe run for real on the config's
trace (real tables in DRAM) and are compared, stage by stage, with the timing model's price
of the same per-batch counts (see scratchpipe_sim/cpu/host_validation.py). `--rows N` scales every
table to N rows when the full size does not fit in memory.

`--cpu --against fbgemm` (any machine with the `[peers]` extra): FBGEMM's CPU TBE forward
and fused backward on the config's trace beside hybrid's predicted `cpu_gather` and
`cpu_update` (scratchpipe_sim/cpu/fbgemm_tbe.py); rows capped, with one line, when the tables
would not fit comfortably in memory. The host reference's time at calibration is read from
the raw samples calibrate wrote beside the config's hardware preset (PRESET.json).

`--published` (any machine, no CONFIG): published, measured FBGEMM TBE runs on named GPUs
(scratchpipe_sim/data/published_points.yaml) predicted with the matching design and hardware
preset, printed as predicted vs measured per phase (see
scratchpipe_sim/experiments/published.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchpipe_sim.cli._options import add_json, add_overrides, load_config_of
from scratchpipe_sim.config import load_config
from scratchpipe_sim.safety import jsonout

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = ("compare the timing model with the GPU reference pipeline (--cpu: the CPU "
        "stages run for real, --against fbgemm: FBGEMM's CPU TBE; --published: "
        "published FBGEMM GPU runs)")
ORDER = 110


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate", help=HELP,
        description="Run a config on the GPU (ScratchPipe reference pipeline) and in the "
                    "simulator; print predicted vs measured per stage and end to end.")
    p.add_argument("config", metavar="CONFIG", nargs="?", help="YAML config (not with "
                   "--published)")
    add_overrides(p, example="hardware.preset=configs/hardware/measured-h200.yaml")
    p.add_argument("--out", type=Path, metavar="CSV",
                   help="comparison CSV (default results/validate-<config name>.csv)")
    p.add_argument("--measured", type=Path, metavar="JSON",
                   help="compare with stage times saved by an earlier GPU run (no GPU)")
    p.add_argument("--cpu", action="store_true",
                   help="run the CPU stages for real (no GPU needed) and compare them")
    add_json(p, "(--cpu) a JSON list of {stage, predicted_ns, measured_ns, error_pct}; "
                "with --against: of {stage, predicted_ms, measured_ms, ratio, ...}")
    p.add_argument("--against", metavar="PEER",
                   help="--cpu: time a peer's CPU kernels instead of the simulator's own: "
                        "fbgemm (FBGEMM's CPU TBE forward and fused backward, beside hybrid's "
                        "cpu_gather and cpu_update; needs the [peers] extra)")
    p.add_argument("--rows", type=int, metavar="N",
                   help="--cpu: rows per table (scales model.tables.rows to fit memory)")
    p.add_argument("--batches", type=int, metavar="N",
                   help="--cpu: validate only the first N measured batches")
    p.add_argument("--reps", type=int, default=3, metavar="N",
                   help="--cpu: in-order passes over the batches; the median (or best) of N "
                        "per batch (default 3)")
    p.add_argument("--statistic", choices=("median", "best"), default="median",
                   help="--cpu: a batch's time over the passes (default median, as "
                        "calibrate --cpu)")
    p.add_argument("--published", action="store_true",
                   help="predict published, measured FBGEMM TBE runs (no GPU, no CONFIG) "
                        "and print predicted vs measured per phase")
    p.add_argument("--only", nargs="+", metavar="ID",
                   help="--published: only these points (e.g. T1.2 T1.10)")
    p.add_argument("--data", type=Path, metavar="FILE",
                   help="--published: the points file (default: the one shipped, "
                        "scratchpipe_sim/data/published_points.yaml)")
    p.set_defaults(func=handle)


def handle_published(args: argparse.Namespace) -> int:
    import sys

    from scratchpipe_sim.config import published_points
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.experiments import published, published_cluster

    if args.config is not None:
        raise UserError("--published takes no CONFIG (the points carry their configs)",
                        field="CONFIG")
    data = args.data or published_points.DATA_FILE
    points, whole, cluster = published.select_all(
        args.only, published_points.load_points(data), published_points.load_end_to_end(data),
        published_points.load_cluster_points(data))
    log = None if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    results = published.run_points(points, log=log)
    ends = published.run_end_to_end_points(whole, log=log)
    cluster_results = published_cluster.run_points(cluster, log=log)
    if args.json:
        print(jsonout.dumps(published.as_json(results) + [r.as_json() for r in ends]
                            + [r.as_json() for r in cluster_results], indent=1))
        return 0
    if points:
        print(f"validate --published: {len(points)} points, {published.TIMED_BATCHES} "
              f"batches each ({published.FILL_BATCHES} to fill the pipeline), TBE stages "
              "only")
        print(published.format_table(results))
    if whole:
        print(f"validate --published: {len(whole)} end-to-end points, "
              f"{published.TIMED_BATCHES} batches each, every stage")
        print(published.format_end_to_end(ends))
    if cluster:
        print(published_cluster.format_table(cluster_results))
    return 0


def handle_fbgemm(args: argparse.Namespace) -> int:
    """validate --cpu --against fbgemm (scratchpipe_sim/cpu/fbgemm_tbe.py)."""
    import os

    from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm

    fbgemm.import_fbgemm()  # the missing package first, before any trace is built
    overrides = list(args.overrides) + ["designs=[hybrid]"]
    if args.rows is not None:
        overrides.append(f"model.tables.rows={args.rows}")
    cfg = load_config(args.config, overrides)
    fbgemm.check_config(cfg)
    cap = None if args.rows is not None else fbgemm.capped_rows(cfg)
    if cap is not None:
        fbgemm.note(f"{cfg.model.table_count} tables x {max(cfg.model.rows_per_table)} rows "
                    f"do not fit comfortably in memory: capped to {cap} rows per table "
                    f"(--rows N to choose)")
        cfg = load_config(args.config, overrides + [f"model.tables.rows={cap}"])
    from scratchpipe_sim.config.loader import preset_file
    from scratchpipe_sim.cpu.host_reference import load_reference

    preset = preset_file(args.config, overrides)
    calibration, why = (load_reference(preset) if preset is not None else
                        (None, "the config's hardware is inline (no preset file)"))
    log = (lambda _s: None) if args.json else print
    rows = fbgemm.validate_fbgemm(cfg, reps=args.reps, max_batches=args.batches,
                                  statistic=args.statistic, log=log,
                                  calibration=calibration, why_none=why)
    if args.json:
        print(jsonout.dumps([r.as_json() for r in rows], indent=1))
        return 0
    hw, m = cfg.hardware, cfg.model
    print(f"validate --cpu {cfg.name or Path(args.config).stem} --against fbgemm: hardware "
          f"{hw.name or '(inline)'}, cpu.cores {hw.cpu.cores}, {m.table_count} x "
          f"{max(m.rows_per_table)} rows, optimizer {m.optimizer}, {rows[0].batches} batches, "
          f"{args.statistic} of {args.reps} passes; ms per batch; FBGEMM's weights on "
          f"{'huge pages' if fbgemm.huge_pages() else '4 KiB pages'} ({fbgemm.THP_ENV}="
          f"{os.environ.get(fbgemm.THP_ENV, 'unset')}); freed memory "
          f"{'kept mapped (mallopt)' if fbgemm.keep_freed_memory() else 'glibc as set'}")
    if hw.cpu.cores > (os.cpu_count() or 1):
        print(f"note: hardware.cpu.cores is {hw.cpu.cores} but this machine has "
              f"{os.cpu_count()} CPUs: FBGEMM ran on {os.cpu_count()} threads, the model "
              f"priced {hw.cpu.cores} cores (calibrate --cpu writes a preset for this machine)")
    print(fbgemm.format_table(rows))
    return 0


def handle_cpu(args: argparse.Namespace) -> int:

    from scratchpipe_sim.cpu.host_validation import cpu_designs, format_table, validate_cpu
    from scratchpipe_sim.errors import UserError

    for flag in ("rows", "batches", "reps"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise UserError(f"expected a positive number, got {v}", field=f"--{flag}")
    if args.against is not None:
        from scratchpipe_sim.cpu.fbgemm_tbe import check_against

        check_against(args.against)
        return handle_fbgemm(args)
    overrides = list(args.overrides)
    if args.rows is not None:
        overrides.append(f"model.tables.rows={args.rows}")
    # the policy kernel runs on one thread
    overrides.append("design_params.scratchpipe.plan_threads=1")
    cfg = load_config(args.config, overrides)
    cpu_designs(cfg)
    log = (lambda _s: None) if args.json else print
    results = validate_cpu(cfg, reps=args.reps, max_batches=args.batches, log=log,
                           statistic=args.statistic)
    if args.json:
        print(jsonout.dumps([r.as_json() for r in results], indent=1))
        return 0
    hw = cfg.hardware
    print(f"validate --cpu {cfg.name or Path(args.config).stem}: hardware "
          f"{hw.name or '(inline)'}, cpu.cores {hw.cpu.cores}, "
          f"{cfg.model.table_count} x {max(cfg.model.rows_per_table)} rows, "
          f"{results[0].batches} batches, {args.statistic} of {args.reps} passes; plan "
          "priced with plan_threads=1 (the policy kernel runs on one thread)")
    import numba

    if hw.cpu.cores > numba.config.NUMBA_NUM_THREADS:
        print(f"note: hardware.cpu.cores is {hw.cpu.cores} but this machine runs "
              f"{numba.config.NUMBA_NUM_THREADS} threads: the predictions price "
              f"{hw.cpu.cores} cores (calibrate --cpu writes a preset for this machine)")
    print(format_table(results))
    return 0


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.errors import UserError

    if args.published:
        if args.against is not None:
            raise UserError("only with --cpu (validate --cpu CONFIG --against fbgemm)",
                            field="--against")
        return handle_published(args)
    for flag in ("only", "data"):
        if getattr(args, flag) is not None:
            raise UserError("only with --published", field=f"--{flag}")
    if args.config is None:
        raise UserError("expected a CONFIG (or --published)", field="CONFIG")
    if args.against is not None and not args.cpu:
        raise UserError("only with --cpu (validate --cpu CONFIG --against fbgemm)",
                        field="--against")
    if args.cpu:
        return handle_cpu(args)
    from scratchpipe_sim.cuda.gpu_validation import (
        load_measured,
        measure_on_gpu,
        save_measured,
        workload_of,
    )
    from scratchpipe_sim.cuda.stage_errors import compare, format_table, write_csv
    from scratchpipe_sim.timing import build_trace, simulate

    cfg = load_config_of(args)
    workload_of(cfg)  # config errors first, GPU or not
    name = cfg.name or Path(args.config).stem
    out = args.out or Path("results") / f"validate-{name}.csv"
    if args.measured is not None:
        measured, meta = load_measured(args.measured)
        device = meta.get("device", "?")
        trace = build_trace(cfg)
    else:
        from scratchpipe_sim.cuda.runtime import gpu_status

        st = gpu_status()
        if not st.usable:
            raise UserError(f"needs an NVIDIA GPU: {st.reason}")
        device = st.reason
        trace = build_trace(cfg)
        measured = measure_on_gpu(cfg, trace)
        save_measured(out.with_suffix(".json"), measured,
                      {"device": device, "config": str(args.config),
                       "overrides": list(args.overrides)})
    predicted = simulate(cfg, ["scratchpipe"], trace=trace)[0]
    rows = compare(predicted, measured)
    if not rows:
        raise UserError("no stage both measured and predicted", source=str(args.measured))
    print(f"validate {name} on {device}: hardware preset "
          f"{cfg.hardware.name or '(inline)'}, {trace.num_batches} batches, "
          f"{cfg.model.warmup_batches} warm-up")
    print(format_table(rows))
    write_csv(out, rows, {"config": name, "device": device,
                          "hardware": cfg.hardware.name})
    print(f"wrote {out}")
    return 0
