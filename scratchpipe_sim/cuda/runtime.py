"""Access to numba.cuda that works on a GPU, under the CUDA simulator, and on neither.

Why a module of its own: `NUMBA_ENABLE_CUDASIM` is read into `numba.core.config` when numba
is first imported (numba-cuda shares that config), so a test that sets the variable after
another module imported numba must also reload the config before `numba.cuda` is imported.
`use_simulator()` does both; everything else imports cuda through `cuda()`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any


def use_simulator() -> None:
    """Switch this process to the CUDA simulator; must run before numba.cuda is imported."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if "numba.cuda" in sys.modules and not _cuda_is_simulated(sys.modules["numba.cuda"]):
        raise RuntimeError("numba.cuda was imported before use_simulator() was called")
    import numba.core.config as config  # noqa: PLC0415  (numba itself is cheap and CPU-only)

    config.reload_config()


def _cuda_is_simulated(mod: Any) -> bool:
    # the simulator's `event` class lives in numba.cuda.simulator.api
    return getattr(getattr(mod, "event", None), "__module__", "").startswith(
        "numba.cuda.simulator")


def cuda() -> Any:
    """The numba.cuda module (imported on first use; raises ImportError without numba-cuda)."""
    from numba import cuda as _cuda  # noqa: PLC0415

    return _cuda


def is_simulator() -> bool:
    """True when numba.cuda runs kernels on the CPU simulator (no timing is available)."""
    return _cuda_is_simulated(cuda())


@dataclass(frozen=True)
class GpuStatus:
    """Whether real GPU measurements can be taken here, and if not, why (one line)."""

    usable: bool
    reason: str


def _driver_present() -> bool:
    """Cheap check for an NVIDIA driver, without importing numba.cuda."""
    import ctypes.util  # noqa: PLC0415
    import glob  # noqa: PLC0415

    return bool(ctypes.util.find_library("cuda") or glob.glob("/dev/nvidia[0-9]*")
                or os.path.exists("/usr/lib/wsl/lib/libcuda.so"))


def try_use_simulator() -> bool:
    """`use_simulator()` if numba.cuda is not imported yet; True when the simulator is on."""
    if "numba.cuda" not in sys.modules or is_simulator():
        use_simulator()
        return True
    return False


def gpu_status() -> GpuStatus:
    """A real GPU with timing; otherwise the reason in words (for a one-line CLI message).

    Without a driver it answers without importing numba.cuda, so a process that asks (a CLI
    test) can still switch to the simulator later.
    """
    if ("numba.cuda" not in sys.modules and os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in
            ("", "0") and not _driver_present()):
        return GpuStatus(False, "no NVIDIA driver (libcuda) on this machine")
    try:
        c = cuda()
    except Exception as e:  # noqa: BLE001  (missing numba-cuda or CUDA bindings)
        return GpuStatus(False, f"numba-cuda is not usable ({type(e).__name__}: {e}); "
                                "install the [cuda] extra on a machine with an NVIDIA GPU")
    if is_simulator():
        return GpuStatus(False, "running under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1), "
                                "which gives no timings")
    try:
        ok = bool(c.is_available())
    except Exception:  # noqa: BLE001
        ok = False
    if not ok:
        return GpuStatus(False, "no CUDA GPU is available on this machine")
    return GpuStatus(True, c.get_current_device().name.decode()
                     if isinstance(c.get_current_device().name, bytes)
                     else str(c.get_current_device().name))


class EventTimer:
    """CUDA-event timing on one stream; `elapsed_s()` is None where timing is not available.

    Uses the portable form (`cuda.event()` then `elapsed_time`): the simulator raises on
    `cuda.event(timing=True)` and returns -1.0 from `elapsed_time`, which we map to None so
    no caller can mistake a simulated run for a measurement.
    """

    def __init__(self, stream: Any = 0) -> None:
        c = cuda()
        self._stream = stream
        self._start = c.event()
        self._end = c.event()

    def start(self) -> EventTimer:
        self._start.record(self._stream)
        return self

    def stop(self) -> EventTimer:
        self._end.record(self._stream)
        return self

    def elapsed_s(self) -> float | None:
        self._end.synchronize()
        ms = self._start.elapsed_time(self._end)
        if ms is None or ms < 0:
            return None
        return float(ms) * 1e-3

    def __enter__(self) -> EventTimer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
