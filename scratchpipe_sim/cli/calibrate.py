"""`scratchpipe-sim calibrate`: measure this machine and write a hardware preset.

On a GPU: PCIe H2D/D2H time vs size (least-squares latency + bandwidth), both directions at
once, HBM and CPU DRAM streaming and random-row gather bandwidth by row size (uniform and hot
set), GEMM throughput and kernel launch cost. The preset (hardware schema, loads with
`hardware: {preset: PATH}`) and the raw samples (JSON) are written; `--from-json` rebuilds a
preset from saved samples without a GPU. Without a GPU: one line, exit status 2.

`--cpu` (any machine): compiled micro-benchmarks of the host only (streaming copy, embedding-
bag gather + pool by row size and thread count, gradient aggregation + optimizer apply, the
scratchpipe planner kernel); writes a preset with the measured `cpu:` keys, each commented
with how it was measured, over `--base` (`preset: BASE`) when given. See scratchpipe_sim/cpu.
`--kernel fbgemm` times the mix (the per-core hit and miss rates) on FBGEMM's CPU TBE
forward instead of the simulator's gather, and FBGEMM's backward per optimizer (SGD,
Adagrad, rowwise Adagrad) with its forward at shapes that separate their terms: the preset
then carries `cpu.update` (hybrid's update with FBGEMM's structure, timing/cpu_update_cost.py)
and `cpu.forward` (its forward's call, table and bag costs), for `validate --cpu --against
fbgemm`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from scratchpipe_sim.config import load_config
from scratchpipe_sim.config.hardware import HardwareConfig
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety.paths import plain_name

#: this subcommand's one-line help and its place in `--help` (cli/__init__.py)
HELP = "measure PCIe, HBM, DRAM and GEMM speed; write a hardware preset"
ORDER = 100


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate", help=HELP,
        description="Microbenchmark this machine's GPU and host and write a hardware preset "
                    "in the timing model's schema (needs an NVIDIA GPU and numba-cuda).")
    p.add_argument("--out", type=Path, metavar="YAML",
                   help="preset to write (default configs/hardware/measured-<NAME>.yaml)")
    p.add_argument("--name", help="preset name (default: derived from the GPU's name)")
    p.add_argument("--base", metavar="PRESET",
                   help="preset whose values fill the keys not measured (default: the "
                        "schema defaults)")
    p.add_argument("--from-json", type=Path, metavar="JSON",
                   help="build the preset from samples saved by an earlier run (no GPU)")
    p.add_argument("--quick", action="store_true",
                   help="fewer repetitions and smaller buffers (about 4x faster, noisier)")
    p.add_argument("--cpu", action="store_true",
                   help="measure the host CPU only (no GPU needed) and write its cpu: keys")
    p.add_argument("--threads", metavar="N[,N...]",
                   help="--cpu: thread counts to measure (default: 1 and every Numba thread)")
    p.add_argument("--statistic", choices=("median", "best"), default="median",
                   help="--cpu: what each point reports over its repetitions (default median: "
                        "the estimator validate --cpu uses; see docs/validation.md)")
    p.add_argument("--kernel", choices=("numba", "fbgemm"), default="numba",
                   help="--cpu: whose gather + pool the mix times, which fits the per-core "
                        "rates: the simulator's (numba, default) or FBGEMM's CPU TBE forward "
                        "(fbgemm; needs the [peers] extra), which also fits cpu.update and "
                        "cpu.forward on FBGEMM's backward and forward per optimizer")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # tests only
    p.set_defaults(func=handle)


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    s = re.sub(r"^nvidia-", "", s)
    return s or "gpu"


def base_hardware(name: str | None) -> HardwareConfig:
    if name is None:
        return HardwareConfig()
    return _load_hardware({"preset": name})


def _load_hardware(hw: dict) -> HardwareConfig:
    """A hardware section on its own (design: hybrid, so no cache or pipeline settings of
    the defaults can reject it)."""
    return load_config({"hardware": hw, "designs": ["hybrid"]}).hardware


def _threads(text: str | None) -> list[int]:
    import numba as nb

    if text is None:
        return sorted({1, nb.config.NUMBA_NUM_THREADS})
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"expected thread counts like 1,2,4, got {text!r}",
                        field="--threads") from None
    if not out:
        raise UserError("expected at least one thread count", field="--threads")
    avail = nb.config.NUMBA_NUM_THREADS
    bad = [t for t in out if not 1 <= t <= avail]
    if bad:
        raise UserError(f"{bad[0]} threads: expected 1..{avail} (this machine's Numba "
                        "threads; NUMBA_NUM_THREADS raises the limit)", field="--threads")
    return out


def _base_ref(name: str | None) -> str | None:
    """How the written preset names its base: a preset name as is, a file by absolute path
    (the preset may be written elsewhere)."""
    if name is None:
        return None
    p = Path(name)
    return str(p.resolve()) if p.suffix in (".yaml", ".yml") and p.exists() else name


def handle_cpu(args: argparse.Namespace) -> int:
    from scratchpipe_sim.cpu import host_bench as bench
    from scratchpipe_sim.cpu.host_preset_fit import (
        NOISY_WARNING,
        cpu_preset_yaml,
        fit_cpu,
        llc_from_sysfs,
    )
    from scratchpipe_sim.measure.presets import check_writable, write_preset

    if args.from_json is not None:
        raise UserError("--from-json rebuilds a GPU preset; --cpu measures this host",
                        field="--from-json")
    base = base_hardware(args.base)  # a missing base preset fails before measuring
    name = plain_name(args.name or "measured-cpu", None, "--name", "preset name")
    out = args.out or Path("configs/hardware") / f"{name}.yaml"
    check_writable(out)
    threads = _threads(args.threads)
    sizes = bench.TINY if args.tiny else bench.QUICK if args.quick else bench.CpuBenchSizes()
    if args.kernel == "fbgemm":
        from scratchpipe_sim.cpu import fbgemm_tbe as fbgemm

        fbgemm.import_fbgemm()  # the missing package: one line, before measuring
        meas = bench.measure_all(threads, sizes, statistic=args.statistic,
                                 mix_pool=("fbgemm", fbgemm.mix_pool),
                                 update=fbgemm.measure_update)
    else:
        meas = bench.measure_all(threads, sizes, statistic=args.statistic)
    cal = fit_cpu(meas, base.cpu, llc_from_sysfs())
    write_preset(out, cpu_preset_yaml(cal, meas, name, _base_ref(args.base)))
    write_preset(out.with_suffix(".json"), meas.to_json())
    _load_hardware({"preset": str(out.resolve())})  # it must load as it is
    for key, value in cal.values.items():
        print(f"cpu.{key} = {value}    # {cal.how[key]}")
    for c in cal.checks:
        print(f"check: {c}")
    print(f"noise: {meas.statistic} of {meas.reps}; worst spread "
          f"{meas.worst_spread * 100:.0f}%")
    print(f"wrote {out} (raw samples: {out.with_suffix('.json')})")
    if cal.noisy:  # written anyway: the warning names the curves, here and in the preset
        print(f"calibrate --cpu: {NOISY_WARNING}: {'; '.join(cal.noisy)}", file=sys.stderr)
    return 0


def handle(args: argparse.Namespace) -> int:
    from scratchpipe_sim.cuda.gpu_preset_fit import Measurements, build_preset, preset_yaml
    from scratchpipe_sim.measure.presets import write_preset

    if args.cpu:
        return handle_cpu(args)
    if args.kernel != "numba":
        raise UserError("only with --cpu (the host's gather kernel)", field="--kernel")

    base = base_hardware(args.base)
    if args.from_json is not None:
        from scratchpipe_sim.safety.paths import input_file

        try:
            text = input_file(args.from_json, "JSON file", "--from-json").read_text(
                encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read: {e}", source=str(args.from_json)) from None
        try:
            meas = Measurements.from_json(text)
        except (ValueError, TypeError) as e:
            raise UserError(f"not a calibrate measurement file: {e}",
                            source=str(args.from_json)) from None
        json_out = None
    else:
        from scratchpipe_sim.cuda.runtime import gpu_status

        st = gpu_status()
        if not st.usable:
            raise UserError(f"needs an NVIDIA GPU: {st.reason}")
        from scratchpipe_sim.cuda import gpu_bench as bench

        sizes = bench.BenchSizes()
        if args.quick:
            sizes = bench.BenchSizes(reps=3, hbm_copy_bytes=1 << 28, hbm_table_bytes=1 << 29,
                                     gather_rows=1 << 19, dram_copy_bytes=1 << 28,
                                     dram_table_bytes=1 << 29, gemm_n=1024, launches=100)
        meas = bench.measure_all(sizes)
        json_out = True
    name = plain_name(args.name or f"measured-{_slug(meas.device)}", None, "--name",
                      "preset name")
    out = args.out or Path("configs/hardware") / f"{name}.yaml"
    cal = build_preset(meas, base, name)
    write_preset(out, preset_yaml(cal, meas, args.base or "schema defaults"))
    if json_out:
        write_preset(out.with_suffix(".json"), meas.to_json())
    _load_hardware({"preset": str(out.resolve())})  # it must load as it is
    for label, f in (("h2d", cal.h2d), ("d2h", cal.d2h)):
        if f is not None:
            print(f"{label}: latency {f.latency_ns:.0f} ns, {f.GBps:.2f} GB/s (R^2 {f.r2:.4f})")
            for nbytes, t, pred, err in f.residuals:
                print(f"  {int(nbytes):>10} B  measured {t * 1e6:9.1f} us  "
                      f"fit {pred * 1e6:9.1f} us  error {err:+6.1f}%")
    print(f"measured: {', '.join(cal.measured_keys) or '(nothing)'}")
    print(f"wrote {out}")
    return 0
