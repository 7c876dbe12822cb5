"""`scratchpipe-sim validate CONFIG`: the reference pipeline on the GPU vs the timing model.

Runs the config's workload through the ScratchPipe reference pipeline (numba-cuda) and
through `simulate` (design `scratchpipe`), then prints predicted vs measured per stage and
end to end with the error in %, and writes a CSV (and the measured stage means as JSON, so
`--measured` can redo the comparison — e.g. against another preset — without a GPU).
Without a GPU (and no --measured): one line, exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchpipe_sim.config import load_config


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate", help="compare the timing model with the GPU reference pipeline",
        description="Run a config on the GPU (ScratchPipe reference pipeline) and in the "
                    "simulator; print predicted vs measured per stage and end to end.")
    p.add_argument("config", metavar="CONFIG", help="YAML config")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a config value (repeatable), e.g. "
                   "--set hardware.preset=configs/hardware/measured-h200.yaml")
    p.add_argument("--out", type=Path, metavar="CSV",
                   help="comparison CSV (default results/validate-<config name>.csv)")
    p.add_argument("--measured", type=Path, metavar="JSON",
                   help="compare with stage times saved by an earlier GPU run (no GPU)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.cuda.compare import compare, format_table, write_csv
    from scratchpipe_sim.cuda.validation import (
        load_measured,
        measure_on_gpu,
        save_measured,
        workload_of,
    )
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.timing import build_trace, simulate

    cfg = load_config(args.config, args.overrides)
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
