"""A `.sptrace` folder in format version 1 (int64 offsets.bin), written as that version's
writer did: the fixture for "old traces still read" (store.py writes version 2)."""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import numpy as np

from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.store import index_dtype_for


def write_v1(trace: Trace, path: Path) -> Path:
    path.mkdir(parents=True)
    files = {"indices.bin": np.asarray(trace.indices).astype(index_dtype_for(trace.table_rows)),
             "offsets.bin": np.asarray(trace.offsets, "<i8"),
             "batch_bounds.bin": np.asarray(trace.batch_bounds, "<i8")}
    h, crc = hashlib.sha256(), {}
    for name, arr in files.items():
        data = arr.tobytes()
        (path / name).write_bytes(data)
        h.update(data)
        crc[name] = zlib.crc32(data)
    manifest = {"format": "scratchpipe-trace", "version": 1,
                "table_rows": [int(x) for x in trace.table_rows],
                "batch_size": int(trace.batch_size), "num_batches": trace.num_batches,
                "num_bags": len(trace.offsets) - 1, "num_indices": trace.num_accesses,
                "index_dtype": files["indices.bin"].dtype.str, "sha256": h.hexdigest(),
                "crc32": crc, "meta": dict(trace.meta)}
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return path
