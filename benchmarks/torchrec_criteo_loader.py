"""The host cost of TorchRec's in-memory Criteo loader as torchrec_dlrm (E3.8) runs it:
`InMemoryBinaryCriteoIterDataPipe` through `DataLoader(batch_size=None)` with no workers
(the trainer's own thread), rank 0 of 8, at local batch 256, 2048 and 16384, on synthetic
npy days of 2M rows (13 fp32 dense, 26 int32 sparse hashed by E3.8's table sizes, 1
label). Needs the `[peers]` extra (torchrec); pin_memory is off (no CUDA on a CPU host).

    python benchmarks/torchrec_criteo_loader.py [--dir /tmp/criteo-npy]

Prints ns per sample (min over 5 passes of up to 60 batches: 15 at 16384): the figure behind
published_points.yaml's E3.8 `input_pipeline.loader_ns_per_sample`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

ROWS = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282,
        10, 2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108,
        36]
SAMPLES = 2_000_000
BATCHES, PASSES = 60, 5


def write_day(d: Path) -> list[str]:
    paths = [str(d / f"day_0_{k}.npy") for k in ("dense", "sparse", "labels")]
    if not all(Path(p).exists() for p in paths):
        rng = np.random.default_rng(0)
        np.save(paths[0], rng.random((SAMPLES, 13), dtype=np.float32))
        np.save(paths[1], rng.integers(0, 2**31 - 1, (SAMPLES, 26), dtype=np.int32))
        np.save(paths[2], rng.integers(0, 2, (SAMPLES, 1), dtype=np.int32))
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/criteo-npy")
    d = Path(ap.parse_args().dir)
    d.mkdir(parents=True, exist_ok=True)
    import torch
    import torchrec.datasets.criteo as criteo
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    criteo._get_path_manager = lambda key: None  # local npy files: no iopath needed
    dense, sparse, labels = write_day(d)
    for batch in (256, 2048, 16384):
        pipe = criteo.InMemoryBinaryCriteoIterDataPipe(
            "train", [dense], [sparse], [labels], batch_size=batch, rank=0, world_size=8,
            hashes=ROWS)
        loader = DataLoader(pipe, batch_size=None, pin_memory=False, collate_fn=lambda x: x)
        best = float("inf")
        for _ in range(PASSES):
            t, k = time.perf_counter(), 0
            for k, _b in enumerate(loader, 1):  # noqa: B007 (k: the batches built)
                if k == BATCHES:
                    break
            best = min(best, (time.perf_counter() - t) / k)
        print(f"local batch {batch}: {best * 1e3:.3f} ms a batch, "
              f"{best / batch * 1e9:.0f} ns a sample")


if __name__ == "__main__":
    main()
