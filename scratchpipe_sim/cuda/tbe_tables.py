"""Where a published shape's table lives: device memory (`DEVICE`) or host memory the GPU
reads in place (`MANAGED`).

`MANAGED` is FBGEMM's `new_managed_tensor`: cudaMallocManaged, then cudaMemAdvise
PreferredLocation = CPU and AccessedBy = this GPU, so the table stays in host memory and the
GPU reads it in place over PCIe. numba-cuda allocates managed memory but exposes no advise,
so the advice goes to libcuda through ctypes; where that fails the table is mapped pinned
host memory (`cuda.mapped_array`), the same mechanism (the GPU reads host memory in place,
no migration). The JSON says which one ran.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from scratchpipe_sim.cuda.runtime import cuda, is_simulator
from scratchpipe_sim.cuda.tbe_kernels import fill_pattern

_CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3
_CU_MEM_ADVISE_SET_ACCESSED_BY = 5
_CU_DEVICE_CPU = -1


def _advise_host_resident(ptr: int, nbytes: int, device: int) -> str | None:
    """FBGEMM's advice for a MANAGED table via libcuda (None when it worked, else why not).

    cuMemAdvise's first ABI (CUdevice, -1 = CPU) is still exported by every driver; the _v2
    form and cuda-bindings' signature differ between CUDA 12 and 13, so ctypes is steadier.
    """
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuMemAdvise
    except (OSError, AttributeError) as e:
        return f"libcuda's cuMemAdvise not found ({e})"
    fn.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    for advice, dev in ((_CU_MEM_ADVISE_SET_PREFERRED_LOCATION, _CU_DEVICE_CPU),
                        (_CU_MEM_ADVISE_SET_ACCESSED_BY, device)):
        rc = fn(ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes), advice, dev)
        if rc != 0:
            return f"cuMemAdvise(advice {advice}, device {dev}) returned CUresult {rc}"
    return None

def _host_fill(a: np.ndarray, value: float, threads: int = 16) -> None:
    """Fill a host-resident table from several threads (numpy releases the GIL in copyto):
    the first touch places its pages in host memory, as FBGEMM's host initialisation does."""
    flat = a.reshape(-1)
    step = -(-len(flat) // threads)
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda k: np.copyto(flat[k:k + step], np.float32(value)),
                    range(0, len(flat), step)))

def allocate_table(rows: int, dim: int, placement: str, alloc: str = "managed",
                   value: float = 0.01) -> tuple[Any, str]:
    """A (rows, dim) fp32 table filled with `value`, and how it was placed (words for JSON).

    DEVICE: device memory, filled by a kernel. MANAGED: managed memory advised host-resident
    (alloc="managed"; mapped pinned host memory when the advice fails) or mapped pinned host
    memory directly (alloc="mapped"), filled by the host so its pages start in host memory.
    """
    c = cuda()
    if placement == "DEVICE":
        t = c.device_array((rows, dim), np.float32)
        fill_pattern(t, 0.0, value)
        return t, "device memory (cuda.device_array)"
    if placement != "MANAGED":
        raise ValueError(f"unknown placement {placement!r}")
    if alloc not in ("managed", "mapped"):
        raise ValueError(f"unknown MANAGED allocation {alloc!r}")
    if is_simulator():  # no driver to advise, and the simulator has no managed_array
        t = c.mapped_array((rows, dim), np.float32)
        fill_pattern(t, 0.0, value)
        return t, f"CUDA simulator: a mapped array stands for {alloc} memory (no PCIe)"
    why = "mapped pinned host memory requested (--managed-alloc mapped)"
    if alloc == "managed":
        t = c.managed_array((rows, dim), np.float32)
        why = _advise_host_resident(t.ctypes.data, t.nbytes, c.get_current_device().id)
        if why is None:
            _host_fill(t, value)
            return t, ("managed memory (cudaMallocManaged) with cudaMemAdvise "
                       "PreferredLocation=CPU and AccessedBy=GPU (FBGEMM's new_managed_tensor), "
                       "filled on the host: the GPU reads it in place over PCIe")
        del t
        release_gpu_memory()  # the unadvised managed table, before the mapped one
    t = c.mapped_array((rows, dim), np.float32)
    _host_fill(t, value)
    return t, ("mapped pinned host memory (cuda.mapped_array): the GPU reads it in place over "
               f"PCIe, as a host-resident managed table; because: {why}")

def release_gpu_memory() -> None:
    """Free the placement's tables now (numba defers frees), before the next one allocates."""
    import gc  # noqa: PLC0415

    gc.collect()
    if not is_simulator():
        cuda().current_context().deallocations.clear()
