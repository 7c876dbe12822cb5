"""DLRM's own trace files (facebookresearch/dlrm `dlrm_data_pytorch.py`).

* `trace.log` — one line of ", "-separated integer ids (`write_trace_to_file`, text mode).
  Reading it for simulation is `readers.py`'s `dlrm-log`; this module converts it streamed.
* raw binary — the same ids as native uint64 (`np.array(trace).astype(np.uint64).tofile`),
  little-endian on every machine DLRM runs on; read here by memory map.

Both are one flat stream of one table, pooling 1: converted into mini-batches of
`batch_size` ids. Without `--rows`/`--dense-remap` the table has `max id + 1` rows, found by
a first pass so the store can pick its id width.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.convert import (
    ConvertOptions,
    ConvertResult,
    IdMap,
    WholeBatches,
    finish,
    flat_batches,
    open_input,
    open_writer,
    register_converter,
)
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.io import flat_trace, register_reader
from scratchpipe_sim.traces.readers import _last_separator, _parse_block

_INT64_MAX = np.iinfo(np.int64).max


def iter_log_ids(path: Path, block_bytes: int) -> Iterator[np.ndarray]:
    """int64 id blocks of a text trace (ids split by commas/whitespace), bounded memory."""
    src = str(path)
    carry = b""
    line = 1
    with open_input(path) as f:
        while True:
            data = f.read(block_bytes)
            block = carry + data
            if not block:
                return
            if data:
                cut = _last_separator(block)
                if cut < 0:
                    carry = block
                    continue
                block, carry = block[: cut + 1], block[cut + 1:]
            else:
                carry = b""
            ids = _parse_block(block, src, line)
            line += block.count(b"\n")
            if len(ids) and ids.min() < 0:
                raise UserError(f"near line {line}: negative id {int(ids.min())}: expected "
                                "ids >= 0", source=src, field="indices")
            yield ids
            if not data:
                return


def iter_bin_ids(path: Path, block_bytes: int) -> Iterator[np.ndarray]:
    """int64 id blocks of a raw uint64 file (memory-mapped, never read whole)."""
    src = str(path)
    size = path.stat().st_size
    if size % 8:
        raise UserError(f"size {size} bytes is not a multiple of 8: expected raw uint64 ids",
                        source=src)
    if size == 0:
        return
    ids = np.memmap(path, dtype="<u8", mode="r")
    step = max(1, block_bytes // 8)
    for lo in range(0, len(ids), step):
        block = np.asarray(ids[lo: lo + step])
        if block.max() > _INT64_MAX:
            at = lo + int(np.argmax(block > _INT64_MAX))
            raise UserError(f"id {int(block.max())} at position {at} does not fit in int64: "
                            "pass --rows N to hash ids modulo N", source=src, field="indices")
        yield block.astype(np.int64)


def convert_flat(src: Path, out: Path, opts: ConvertOptions, fmt: str,
                 blocks: Callable[[], Iterator[np.ndarray]]) -> ConvertResult:
    """Any flat id stream -> one table, pooling 1, batches of `batch_size` ids."""
    idmap = IdMap(1, opts, str(src))
    limit = 1 << 32
    if idmap.mode == "raw":  # first pass: the row count fixes the id width
        top = -1
        for b in blocks():
            if len(b):
                top = max(top, int(b.max()))
        limit = max(top + 1, 1)
    B = opts.batch()
    result = ConvertResult(out, fmt, [], 0, 0, extra={"record_name": "ids"})
    writer = open_writer(out, idmap, B, {"reader": fmt, "source_file": str(src), "pooling": 1},
                         opts, raw_limit=limit)
    try:
        batches = WholeBatches(writer, B, result, flat_batches)
        for b in blocks():
            result.records += len(b)
            batches.add(idmap.map(b, np.zeros(len(b), np.int64)))
        batches.flush()
    except BaseException:
        writer.abort()
        raise
    return finish(writer, idmap, result)


@register_converter("dlrm-log", suffixes=(".log",))
def convert_dlrm_log(src: Path, out: Path, opts: ConvertOptions) -> ConvertResult:
    return convert_flat(src, out, opts, "dlrm-log",
                        lambda: iter_log_ids(src, opts.block_bytes))


@register_converter("dlrm-bin", suffixes=(".bin",))
def convert_dlrm_bin(src: Path, out: Path, opts: ConvertOptions) -> ConvertResult:
    return convert_flat(src, out, opts, "dlrm-bin",
                        lambda: iter_bin_ids(src, opts.block_bytes))


@register_reader("dlrm-bin", suffixes=(".bin",),
                 help="DLRM binary trace: raw little-endian uint64 row ids")
def read_dlrm_bin(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    parts = list(iter_bin_ids(path, 1 << 26))
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return flat_trace(ids, path, batch_size, num_rows, "dlrm-bin")
