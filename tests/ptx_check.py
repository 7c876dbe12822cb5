"""Typing and lowering numba-cuda kernels for a real GPU without one (NVVM + NVRTC, no
driver), in a subprocess without the simulator: what the simulator cannot catch. One copy
for every cuda test file."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest


def check_ptx(script: str) -> None:
    """Run `script` (exit 77: no CUDA compiler libraries -> skip; else it must print a last
    line ending in "ok") for compute capability 9.0 unless the caller's env names one."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.setdefault("NUMBA_FORCE_CUDA_CC", "9.0")
    homes = sorted(glob.glob("/usr/local/cuda*/nvvm"))
    if homes and "CUDA_HOME" not in env:
        env["CUDA_HOME"] = os.path.dirname(homes[-1])
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=env, timeout=300)
    if r.returncode == 77:
        pytest.skip(f"no CUDA compiler libraries: {r.stdout.strip()[:200]}")
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
