"""Measurement helpers that cpu/ (host micro-benchmarks) and cuda/ (GPU kernels) both use:
compiled host kernels (`host`), least-squares fits (`fitting`) and preset files
(`presets`). Nothing here needs a GPU; both measurement packages import it, never each
other."""
