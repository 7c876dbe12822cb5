"""scratchpipe_sim: a simulator of hybrid CPU-GPU DLRM training with GPU embedding caches."""

__version__ = "0.1.0"
