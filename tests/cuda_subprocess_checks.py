"""What the cuda tests check in a subprocess, one copy for every cuda test file: kernels
typed and lowered for a real GPU without one (NVVM + NVRTC, no driver: what the simulator
cannot catch), and a measuring command's one-line refusal where no GPU is usable."""

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


def refuses_without_gpu(module: str, args: list[str], out) -> None:
    """`python -m scratchpipe_sim.cuda.MODULE --out OUT ARGS` with and without the simulator
    exits 2 with one line saying no GPU is usable and writes nothing (skips where a real GPU
    is usable and the command runs)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    for sim in ("", "1"):
        if sim:
            env["NUMBA_ENABLE_CUDASIM"] = sim
        r = subprocess.run([sys.executable, "-m", f"scratchpipe_sim.cuda.{module}",
                            "--out", str(out), *args],
                           capture_output=True, text=True, env=env, timeout=120)
        if not sim and r.returncode == 0:
            pytest.skip("a GPU is usable here")
        assert r.returncode == 2, r.stderr
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
        assert "no usable GPU" in r.stderr
        assert not out.exists()
