"""Memory a pass over a trace must not keep: the pages of a memory-mapped `.sptrace` it has
read, and arrays too large to hold that it spills to a temporary file.

Why: a page of a file mapping, once read, stays in the process's resident set until the
kernel needs the memory, so a pass over a 20 GB trace would show a 20 GB peak RSS (and push
out everything else) although it needs one chunk at a time. `release` hands the pages of a
read-only shared mapping back (`madvise(MADV_DONTNEED)`: the data stays in the page cache,
a later read faults it back in); anything else (an in-memory array, a private or writable
mapping, a platform without `madvise`) is left alone, so it is always safe to call.
`spill_file` is where arrays of one entry per access go when they must not live in memory
(next uses of the offline policies, a slice's rebased offsets): an unnamed temporary file
in the user cache folder's `spill/`, deleted by the OS when closed (or the process ends),
its size checked against the free disk first. `trim_heap` hands back what a finished pass
freed but the C allocator kept (see there).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from scratchpipe_sim import cache_dir
from scratchpipe_sim.safety.memory_guard import check_disk

_PAGE = mmap.PAGESIZE
#: bytes released beyond each end of a range: a read fault maps the neighbouring pages
#: already in the page cache too (Linux's fault-around, 64 KiB by default), so pages just
#: outside the range read may be resident as well
_AROUND = 64 << 10
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
_LIBC: list = []  # the C library's madvise, loaded on first use ([None] where there is none)
_TRIM: list = []  # the C library's malloc_trim, the same way
#: bytes a spilled array's temporary file is allowed beyond its own size before the disk
#: check refuses (other writers share the disk)
SPILL_MARGIN_BYTES = 64 << 20


def _madvise():
    if not _LIBC:
        fn = None
        if sys.platform.startswith("linux") and _MADV_DONTNEED is not None:
            try:
                fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).madvise
                fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):
                fn = None
        _LIBC.append(fn)
    return _LIBC[0]


def trim_heap() -> None:
    """Return the C heap's free pages to the OS (glibc's `malloc_trim(0)`; nothing where
    there is none). Why: after a large array is freed, glibc raises its mmap threshold (up
    to 32 MiB), so a pass's chunk buffers below it (tables, outcomes, next uses: 4-16 MiB)
    come from the heap, and freed heap pages under a live object stay resident: 113 MiB of
    them after scratchpipe's replay of a 65.5M-access trace, under the next pass's own
    buffers (a worker's peak 260 MiB vs 232 MiB trimmed, issue 41). Called once a pass has
    finished (milliseconds), never inside one."""
    if not _TRIM:
        fn = None
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(ctypes.util.find_library("c") or None).malloc_trim
                fn.argtypes = (ctypes.c_size_t,)
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):  # not glibc (musl has none)
                fn = None
        _TRIM.append(fn)
    if _TRIM[0] is not None:
        _TRIM[0](0)


def read_only_mapping(arr: np.ndarray) -> bool:
    """Whether `arr` is (a view of) an `np.memmap` opened read-only (`mode="r"`: a shared,
    read-only file mapping, whose pages can be dropped and read back unchanged)."""
    a = arr
    while a is not None:
        if isinstance(a, np.memmap) and getattr(a, "mode", None) == "r":
            return not arr.flags.writeable
        a = getattr(a, "base", None)
        if isinstance(a, mmap.mmap):
            return False
    return False


def release(arr: np.ndarray, lo: int, hi: int) -> None:
    """Drop the resident pages of entries lo..hi-1 of a 1-D read-only memory-mapped array,
    and of up to `_AROUND` bytes on either side within the array (whole pages, rounded
    outwards: a neighbour's page is read back on its next use). An array-like with a
    `release_pages(lo, hi)` method (`bag_offsets.BagOffsets`) releases its own."""
    if hasattr(arr, "release_pages"):
        arr.release_pages(lo, hi)
        return
    if hi <= lo or not read_only_mapping(arr) or not arr.flags.c_contiguous:
        return
    fn = _madvise()
    if fn is None:
        return
    item = arr.itemsize
    base = arr.ctypes.data
    start = max(base, base + int(lo) * item - _AROUND)
    end = min(base + len(arr) * item, base + int(hi) * item + _AROUND)
    start -= start % _PAGE  # the mapping starts on a page boundary at or before the data
    end += -end % _PAGE  # and its last page is mapped whole
    if end > start:
        fn(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED)


def release_all(arr: np.ndarray) -> None:
    """`release` the whole array."""
    release(arr, 0, len(arr))


def spill_folder() -> Path:
    """The user cache folder's `spill/` (made on first use)."""
    folder = cache_dir() / "spill"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def spill_file(nbytes: int, what: str) -> BinaryIO:
    """An unnamed, unbuffered temporary file for `nbytes` bytes of `what` in
    `spill_folder()`, refused with one line when the disk has not that much free."""
    folder = spill_folder()
    check_disk(int(nbytes) + SPILL_MARGIN_BYTES, folder, what,
               "free disk space there, or point SCRATCHPIPE_CACHE_DIR at a larger disk",
               field="SCRATCHPIPE_CACHE_DIR")
    return tempfile.TemporaryFile(prefix="scratchpipe-spill-", dir=folder, buffering=0)


def write_at(f: BinaryIO, arr: np.ndarray, first: int) -> None:
    """Write `arr` (contiguous) at entry `first` of `f` (entries of arr's type)."""
    f.seek(int(first) * arr.itemsize)
    view = memoryview(np.ascontiguousarray(arr)).cast("B")
    while len(view):
        done = f.write(view)
        view = view[done:]


def read_at(f: BinaryIO, out: np.ndarray, first: int) -> np.ndarray:
    """Fill `out` (contiguous) from entry `first` of `f`; returns `out`."""
    f.seek(int(first) * out.itemsize)
    view = memoryview(out).cast("B")
    while len(view):
        got = f.readinto(view)
        if not got:
            raise OSError(f"a spill file ended early: {len(view)} bytes missing")
        view = view[got:]
    return out


def spilled_copy(arr: np.ndarray, shift: int, what: str, block: int = 1 << 20) -> np.ndarray:
    """`arr - shift` (int64) in a read-only mapping of a spill file, written `block` entries
    at a time: a copy of one entry per bag that never sits in memory whole."""
    n = len(arr)
    f = spill_file(n * 8, what)
    with f:
        for lo in range(0, n, block):
            part = np.asarray(arr[lo : lo + block], np.int64) - shift
            write_at(f, part, lo)
            release(arr, lo, lo + block)
        if n == 0:
            return np.zeros(0, np.int64)
        return np.memmap(f, dtype=np.int64, mode="r", shape=(n,))
