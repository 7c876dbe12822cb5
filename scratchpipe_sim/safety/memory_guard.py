"""Estimate host memory before allocating it, so a too-large input is one line, not a
MemoryError or OverflowError traceback minutes later.

Why an estimate is enough: the big allocations are per-row state arrays sized by the total
number of rows (unique-row stamps, the policy's per-row arrays, next-use tables) and
per-access arrays sized by the trace; both counts are known before anything is allocated.
The constants below are the bytes those arrays take per row and per access at their peak
(each constant's comment lists its arrays); the check refuses inputs whose estimate exceeds
the memory available now, and says what to change.

    SCRATCHPIPE_MEMORY_BYTES   caps the memory the check assumes available (bytes; tests use
                               it, and it lets a user keep a run below a budget)
"""

from __future__ import annotations

import os
from pathlib import Path

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.safety.limits import env_number

#: peak per-row state of a `run` (bytes a row of `model.tables.rows`, summed over the
#: tables), the worst design's: arrays of one entry a row that are alive together, read from
#: the code (tests/safety/test_memory_guard_per_row.py measures them):
#:
#:   bagpipe        20 = its policy's `expiry` (int32, 4) and `stamp` (int64, 8), made
#:                  with the policy, + the engine's unique-row set (`engine.SeenSet`) as a
#:                  stamp a row (int64, 8) where a batch is comparable to the table (else
#:                  per batch), made lazily once a chunk has an UNPLACED outcome; before
#:                  it, 12 + the next-use pass's `last` (int32, 4; 4 B + 1 bit past 2^31 - 1
#:                  accesses), freed before the set exists: 16
#:   static-cache   12 = the row states (int32, 4; the profile's int32 counts freed first)
#:                  + the set (8)
#:   lru-cache /    8-12 = cache.policy's per-row array (lru, lfu, belady: none; fbgemm-lfu
#:   lru-prefetch   counts, int32, 4) + the set (8); belady's next-use pass (4) before it
#:   scratchpipe    8 = the set (its slots' state is per slot; the next-use pass's 4 B and
#:                  the window fit check's int32 a row are freed before it)
#:   cluster        its rank caches' policy, as lru-cache's or scratchpipe's
#:   hybrid, gpu-only, uvm, multi-gpu: 0.25 (first touches and unique rows: a bit a row
#:                  each, `engine.row_bits`)
#:
#: Per-slot state (a cache's maps and queues) scales with the capacity, not the rows, and
#: is not in it. Range: 20 for the designs above; a policy with more per-row state raises
#: it (the test recomputes the worst from what the engine allocates).
RUN_BYTES_PER_ROW = 20
#: `cache`: the same arrays for one policy alone (the breakdown above): the worst, bagpipe's
#: `expiry` + `stamp` (12) + the engine's unique-row set as a stamp a row (8); belady's
#: next-use pass (4) is freed before the set exists, the others' per-row arrays are 0-4.
CACHE_BYTES_PER_ROW = 20
#: per access of a trace held in memory (a generated one): the id (int64 at most: a
#: generated trace or a store holds uint32 when every table fits), its table (int32) and
#: one int64 working array at most (its next use: int32 below 2^31 - 1 accesses; or the
#: generator's draw). A trace memory-mapped from a `.sptrace` costs none of it: every pass
#: reads it a chunk at a time and hands the chunk's pages back (`traces/_pages.py`).
BYTES_PER_ACCESS = 20
#: per access of the chunk a pass holds: the linearized id (int64), its table (int32), the
#: policy's outcome (uint8), the chunk's next uses (int64 at most) and scratchpipe's slot of
#: each access (int64), rounded up
CHUNK_BYTES_PER_ACCESS = 32
#: bytes of one chunk's buffers (32 MiB): the fixed budget every pass over a trace works in,
#: whatever the trace's length (a chunk still holds one whole batch at least). Why this
#: small: with 4M-access chunks (128 MiB) a trace shorter than one chunk (the 4.1M-lookup 1x
#: trace of `benchmarks/bench_trace_scale.py`) sized the buffers of every pass to itself, so
#: a longer one peaked higher, each of `run --jobs 2`'s two workers ~12 MiB, and the tree's
#: Pss grew 1.166x from 1x to 16x; at 1M accesses a chunk is 12 of those batches at every
#: length, and each worker's buffers are a quarter (tree Pss_Anon 271 -> 150 MiB at 16x,
#: CPU seconds unchanged: docs/performance.md, issue 41). Range: a few batches' accesses
#: (per-chunk costs are microseconds) up to the memory a user grants a worker.
CHUNK_BUDGET_BYTES = 32 << 20
#: accesses in one chunk of a pass over a trace (`traces/csr_trace.DEFAULT_CHUNK_ACCESSES`;
#: $SCRATCHPIPE_CHUNK_ACCESSES overrides it)
CHUNK_ACCESSES = CHUNK_BUDGET_BYTES // CHUNK_BYTES_PER_ACCESS
#: next uses kept in memory at most (`policies/engine.py`: more are written to a temporary
#: file and read back a chunk at a time)
NEXT_USE_MEMORY_BYTES = 1 << 26
ENV = "SCRATCHPIPE_MEMORY_BYTES"


def available_bytes() -> int | None:
    """Memory this process can use now: $SCRATCHPIPE_MEMORY_BYTES, else Linux's
    MemAvailable, else physical memory; None when nothing says."""
    if os.environ.get(ENV, "").strip():
        return int(env_number(ENV, 0, minimum=0))
    meminfo = Path("/proc/meminfo")
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def human(n: int | float) -> str:
    """Bytes as a short string (B, KiB, ..., EiB, then powers of ten of EiB)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} EiB"


def estimate(rows: int, accesses: int, bytes_per_row: int) -> int:
    """Peak bytes of per-row state and per-access arrays (exact Python ints: 10**30 rows is
    a number here, not an overflow)."""
    return int(rows) * bytes_per_row + int(accesses) * BYTES_PER_ACCESS


def check(need: int, what: str, advice: str, *, source: str | None = None,
          field: str | None = None, available: int | None = None) -> None:
    """Raise a UserError when `need` bytes exceed the memory available (`advice`: what to
    change)."""
    have = available_bytes() if available is None else available
    if have is None or need <= have:
        return
    raise UserError(f"{what} needs about {human(need)} of memory, more than the "
                    f"{human(have)} available; {advice}", source=source, field=field)


def streaming_bytes(accesses: int) -> int:
    """What the passes over a memory-mapped trace of `accesses` keep beside per-row state:
    one chunk's arrays and the next uses held in memory (both bounded, whatever the
    trace's length)."""
    a = int(accesses)
    return min(a, CHUNK_ACCESSES) * CHUNK_BYTES_PER_ACCESS + min(a * 8, NEXT_USE_MEMORY_BYTES)


def check_run(rows: int, accesses: int, *, source: str | None = None,
              field: str = "model.tables.rows", mapped: bool = False) -> None:
    """`run` / a sweep point: every design keeps per-row state for all rows; a trace held
    in memory costs `BYTES_PER_ACCESS` a lookup, one memory-mapped from a `.sptrace`
    (`mapped`) only its chunk buffers (`streaming_bytes`)."""
    if mapped:
        need = int(rows) * RUN_BYTES_PER_ROW + streaming_bytes(accesses)
        lookups = f"memory-mapped, chunk buffers {human(streaming_bytes(accesses))}"
    else:
        need = estimate(rows, accesses, RUN_BYTES_PER_ROW)
        lookups = human(int(accesses) * BYTES_PER_ACCESS)
    check(need,
          f"simulating {rows} rows ({accesses} lookups: {lookups}, per-row state "
          f"{human(int(rows) * RUN_BYTES_PER_ROW)})",
          "expected fewer or smaller tables (model.tables.count x model.tables.rows) or "
          "fewer lookups (model.num_batches, model.batch_size, model.pooling); for a trace "
          "file with sparse (hashed) ids, renumber them densely (`scratchpipe-sim trace "
          "convert IN OUT --dense-remap`)", source=source, field=field)


def jobs_within_memory(rows: int, accesses: int, jobs: int, *,
                       available: int | None = None, mapped: bool = False) -> int:
    """How many of `jobs` concurrent replays of one run fit in memory. A trace in memory
    (per-access arrays) is shared by the forked workers, each keeps its own per-row state
    (`RUN_BYTES_PER_ROW`): the bound is accesses x BYTES_PER_ACCESS + jobs x rows x
    RUN_BYTES_PER_ROW. A memory-mapped trace (`mapped`) costs nothing shared; each worker
    keeps per-row state and its own chunk buffers (`streaming_bytes`). At least 1 (the
    serial run is what `check_run` admits)."""
    have = available_bytes() if available is None else available
    per_job = int(rows) * RUN_BYTES_PER_ROW + (streaming_bytes(accesses) if mapped else 0)
    if have is None or per_job == 0:
        return max(1, int(jobs))
    shared = 0 if mapped else int(accesses) * BYTES_PER_ACCESS
    fit = (have - shared) // per_job
    return int(max(1, min(int(jobs), fit)))


def check_cache(rows: int, accesses: int, *, source: str | None = None,
                field: str = "--trace") -> None:
    """`cache`: the policy and the engine keep per-row arrays sized by the largest id."""
    check(estimate(rows, accesses, CACHE_BYTES_PER_ROW),
          f"replaying a trace with ids up to {max(int(rows) - 1, 0)} ({rows} rows of "
          "per-row state)",
          "renumber sparse (hashed) ids densely to 0..distinct-1 (`scratchpipe-sim trace "
          "convert IN OUT --dense-remap` for a dataset file; numpy.unique(ids, "
          "return_inverse=True) for an id array) or use a smaller trace", source=source,
          field=field)


#: trace generation, per bag of one batch: its drawn length and two working copies (int64).
GEN_BYTES_PER_BAG = 24
#: trace generation, per access of an RNG block: the id, its offset and the sampler's draws.
GEN_BYTES_PER_ACCESS = 40


def check_generator(tables: int, batch_size: int, accesses_per_batch: int, block_accesses: int,
                    *, source: str | None = None, field: str = "batch_size") -> None:
    """A generated trace is written block by block (at least one batch a block): refuse a
    batch whose bags and ids alone exceed the memory available."""
    need = (int(tables) * int(batch_size) * GEN_BYTES_PER_BAG
            + max(int(accesses_per_batch), int(block_accesses)) * GEN_BYTES_PER_ACCESS)
    check(need, f"generating batches of {batch_size} samples x {tables} table(s) "
          f"({accesses_per_batch} ids a batch)",
          "expected a smaller batch size, pooling or fewer tables", source=source, field=field)


def check_disk(need: int, folder: str | os.PathLike, what: str, advice: str, *,
               source: str | None = None, field: str | None = None) -> None:
    """Refuse writing about `need` bytes into `folder` when its file system has less free
    space (a 10**14-batch trace would otherwise run for days and fill the disk)."""
    import shutil  # noqa: PLC0415

    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # the write reports what is wrong with the folder
    if need > free:
        raise UserError(f"{what} needs about {human(need)} on disk, more than the "
                        f"{human(free)} free in {folder}; {advice}", source=source,
                        field=field)
