"""Embedding access traces: the in-memory CSR layout, the on-disk store, readers, generators."""

from scratchpipe_sim.traces.csr_trace import Batch, Chunk, Trace
from scratchpipe_sim.traces.store import TraceWriter, read_trace, write_trace

__all__ = ["Batch", "Chunk", "Trace", "TraceWriter", "read_trace", "write_trace"]
