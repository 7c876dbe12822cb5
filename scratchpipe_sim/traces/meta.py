"""Meta's `dlrm_datasets` embedding-lookup files (github.com/facebookresearch/dlrm_datasets).

Each file (`fbgemm_t856_bs65536.pt`, optionally gzipped) is a `torch.save` of the tuple
`(indices, offsets, lengths)` for one batch of B samples over T tables: `offsets` has
T*B+1 entries, table-major (table t is `offsets[B*t : B*(t+1)+1]`, FBGEMM's layout), and
`lengths` is the (T, B) pooling-factor matrix. T and B come from `lengths`'s shape, or
else from the `tN_bsM` file name.

Needs torch (the optional extra `scratchpipe_sim[torch]`; a CPU build is enough). The tensors
are loaded with `weights_only=True` (no arbitrary pickled code). torch.save is not a
streamable format, so the file is read whole; the output is written one mini-batch at a
time (`--batch-size` re-cuts the B samples; default: one batch of B).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.convert import (
    ConvertOptions,
    ConvertResult,
    IdMap,
    finish,
    open_input,
    open_writer,
    register_converter,
)
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.io import register_reader

_NAME = re.compile(r"t(\d+)_bs(\d+)")


def load_meta(path: Path) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(indices int64, offsets int64, T, B) of a dlrm_datasets file, checked."""
    src = str(path)
    try:
        import torch
    except ImportError:
        raise UserError("reading Meta dlrm_datasets files needs torch: "
                        "pip install 'scratchpipe_sim[torch]' (a CPU build is enough)",
                        source=src) from None
    try:
        with open_input(path) as f:
            obj = torch.load(f, map_location="cpu", weights_only=True)
    except UserError:
        raise
    except Exception as e:  # torch raises many kinds on a bad file
        raise UserError(f"not a readable torch.save file ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''})", source=src) from None
    if not isinstance(obj, (tuple, list)) or len(obj) not in (2, 3) or not all(
            isinstance(x, torch.Tensor) for x in obj):
        raise UserError("expected a tuple (indices, offsets, lengths) of tensors",
                        source=src)
    indices = obj[0].reshape(-1).to(torch.int64).numpy()
    offsets = obj[1].reshape(-1).to(torch.int64).numpy()
    lengths = obj[2].to(torch.int64).numpy() if len(obj) == 3 else None
    if lengths is not None and lengths.ndim == 2:
        T, B = lengths.shape
    else:
        m = _NAME.search(path.name)
        if not m:
            raise UserError("cannot tell tables and batch size: expected 2-D lengths (T, B) "
                            "or a file name with tN_bsM", source=src, field="lengths")
        T, B = int(m.group(1)), int(m.group(2))
    if len(offsets) != T * B + 1:
        raise UserError(f"offsets has {len(offsets)} entries: expected T*B+1 = {T * B + 1} "
                        f"(T={T}, B={B})", source=src, field="offsets")
    if offsets[0] != 0 or offsets[-1] != len(indices) or np.any(np.diff(offsets) < 0):
        raise UserError(f"offsets must rise from 0 to len(indices) = {len(indices)}",
                        source=src, field="offsets")
    if lengths is not None and not np.array_equal(lengths.reshape(-1), np.diff(offsets)):
        raise UserError("lengths do not match the differences of offsets", source=src,
                        field="lengths")
    if len(indices) and indices.min() < 0:
        raise UserError(f"negative id {int(indices.min())}: expected ids >= 0", source=src,
                        field="indices")
    return indices, offsets, int(T), int(B)


def _batches(indices, offsets, T, B, b):
    """Yield (raw ids, table of each id, offsets, bounds) for samples cut into batches of b."""
    for s0 in range(0, B, b):
        s1 = min(B, s0 + b)
        idx, tab, lens = [], [], []
        for t in range(T):
            o = offsets[t * B + s0: t * B + s1 + 1]
            idx.append(indices[o[0]: o[-1]])
            tab.append(np.full(o[-1] - o[0], t, np.int64))
            lens.append(np.diff(o))
        lengths = np.concatenate(lens)
        offs = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        yield (np.concatenate(idx), np.concatenate(tab), offs,
               np.array([0, T * (s1 - s0)], np.int64))


@register_converter("meta", suffixes=(".pt", ".pt.gz"))
def convert_meta(src: Path, out: Path, opts: ConvertOptions) -> ConvertResult:
    indices, offsets, T, B = load_meta(src)
    idmap = IdMap(T, opts, str(src))
    b = opts.batch(default=B)
    limit = max(int(indices.max()) + 1, 1) if len(indices) else 1
    result = ConvertResult(out, "meta", [], 0, 0, records=B,
                           extra={"record_name": "samples"})
    meta = {"reader": "meta", "source_file": str(src), "source_batch_size": B}
    writer = open_writer(out, idmap, b, meta, opts, raw_limit=limit)
    try:
        for raw, tables, offs, bounds in _batches(indices, offsets, T, B, b):
            writer.append_batches(idmap.map(raw, tables), offs, bounds)
            result.num_batches += 1
            result.num_accesses += len(raw)
    except BaseException:
        writer.abort()
        raise
    return finish(writer, idmap, result)


@register_reader("meta", suffixes=(".pt", ".pt.gz"),
                 help="Meta dlrm_datasets torch.save (indices, offsets, lengths); needs torch")
def read_meta(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    indices, offsets, T, B = load_meta(path)
    b = batch_size or B
    opts = ConvertOptions(rows=(num_rows,) if num_rows else None)
    idmap = IdMap(T, opts, str(path))
    idx, offs, bounds = [], [np.zeros(1, np.int64)], [0]
    base = 0
    for raw, tables, o, bd in _batches(indices, offsets, T, B, b):
        idx.append(idmap.map(raw, tables))
        offs.append(o[1:] + base)
        base += len(raw)
        bounds.append(bounds[-1] + int(bd[-1]))
    return Trace(np.asarray(idmap.table_rows(), np.int64), np.concatenate(idx),
                 np.concatenate(offs), np.asarray(bounds, np.int64), b,
                 {"reader": "meta", "source_batch_size": B}, str(path))
