"""The `input_pipeline:` section: what getting a batch's inputs to the GPU costs.

Every training step first needs its batch: a data loader's workers read, decode and collate
it on the host cores, then the dense features, labels and (for the designs whose GPU reads
them) the sparse ids and offsets cross PCIe. Real trainers overlap both with training
(PyTorch's DataLoader keeps `num_workers x prefetch_factor` batches in flight; TorchRec's
TrainPipelineSparseDist copies batch i+1 while batch i trains), so a batch waits for its
inputs only when the pipeline fell behind. `timing/input_pipeline.py` prices it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scratchpipe_sim.config.hardware import doc

#: the MLPerf DLRM binary Criteo sample: label, 13 dense, 26 sparse, 4 bytes each
#: (https://github.com/mlcommons/training/tree/master/recommendation_v2 ; torchrec's npy
#: preprocessing writes the same 160 bytes)
MLPERF_SAMPLE_BYTES = 160


@dataclass(frozen=True)
class InputPipelineConfig:
    inputs_on_gpu: bool = field(default=False, metadata={
        "help": "the batches are already resident on the GPU (a benchmark that reuses "
                "generated inputs, e.g. pytorch/benchmark's torchrec DLRM): no loader, no "
                "copy; false: every batch is loaded on the host and copied over PCIe"})
    loader_ns_per_sample: float = field(default=200.0, metadata=doc(
        "core-ns per sample", "20-5000",
        "assumption: 20 ns ~ copying MLPerf's 160-byte binary sample out of a memory-mapped "
        "file (~8 GB/s per core); 5000 ns ~ a Python per-sample Criteo TSV decode") | {
        "help": "the data loader's host cost per sample (read, decode, collate), on one "
                "CPU core", "min": 0})
    loader_ns_per_id: float = field(default=2.0, metadata=doc(
        "core-ns per id", "0.5-50",
        "assumption: an int64 copied into the batch's id tensor and counted into its "
        "lengths/offsets (KeyedJaggedTensor), ~1-2 ns vectorised; 50 ns per id in Python") | {
        "help": "the data loader's host cost per sparse id of the batch, on one CPU core",
        "min": 0})
    loader_in_trainer: bool = field(default=False, metadata={
        "help": "the trainer's own thread builds each batch (PyTorch DataLoader "
                "num_workers=0, as TorchRec's DLRM example passes none): the load is in "
                "series with the host's issue work of the iteration (timing/host_dispatch.py), "
                "loader_workers is not used; false: worker processes load ahead"})
    loader_workers: int = field(default=4, metadata=doc(
        "workers", "1-16",
        "assumption: PyTorch DataLoader num_workers as DLRM training scripts set it "
        "(each worker builds whole batches on one core)") | {
        "help": "data-loader worker processes, each loading one batch at a time on one CPU "
                "core (sharing hardware.cpu.cores with the designs' CPU work)",
        "min": 1, "max": 4096})
    prefetch_batches: int = field(default=8, metadata=doc(
        "batches", "0-64",
        "PyTorch DataLoader: num_workers x prefetch_factor (default 2) batches in flight "
        "(https://pytorch.org/docs/stable/data.html); 4 workers x 2") | {
        "help": "batches the loader may have in flight beyond the one being consumed (0: "
                "a batch is loaded only when the trainer asks for it, nothing overlaps)",
        "min": 0, "max": 4096})
    dense_features: int | None = field(default=None, metadata=doc(
        "features per sample", "13 (Criteo)",
        "null: model.bottom_mlp's input width (DLRM's bottom MLP reads the dense features)") | {
        "help": "dense features per sample copied to the GPU (null: model.bottom_mlp[0])",
        "min": 0})
    dense_bytes: int = field(default=4, metadata=doc(
        "bytes", "2-4",
        "fp32 dense features (MLPerf binary Criteo, torchrec npy)") | {
        "help": "bytes per dense feature as copied (4: fp32, 2: fp16/bf16)", "min": 1,
        "max": 8})
    label_bytes: int = field(default=4, metadata=doc(
        "bytes", "1-4",
        "MLPerf binary Criteo: one 4-byte label per sample") | {
        "help": "bytes of a sample's label copied to the GPU", "min": 0, "max": 8})
