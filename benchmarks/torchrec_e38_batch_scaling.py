"""How E3.8's host-bound TorchRec iteration grows with the local batch: the model against
the torchrec_dlrm README's earlier SGD series on the same p4d.24xlarge (issue 43).

E3.8's published points cannot tell a batch-dependent cost from an Adagrad-dependent one
(both local-2048 points are Adagrad, the local-256 point SGD). The README's history has an
SGD series on the same 8 x A100 40GB instance type with the same model (dot, dense
512-256-128, over 1024-1024-512-256-1, dim 128, 26 tables of 91.10 GiB, `--shuffle_batches`):
facebookresearch/dlrm commit 2a0c0b8 (2022-04-28; local 2048: ~1,671,168 rec/s, local
8192: ~5,373,952 rec/s) and df137d8 (2022-06-06; local 256: ~284,615 rec/s). Their trainer
is an earlier TorchRec than E3.8's 0.3.2 (with PyTorch 1.11, whose matmuls ran TF32 by
default: `allow_tf32` turned off by default in 1.12), so the absolute times are not the
model's to match (its TorchRec op counts are fitted on 0.3.2's local-256 run); the ratios
between batches of one trainer are. This prices the same three batches with E3.8-sgd-256's
settings in `precision: tf32` (torchrec framework, per-tensor SGD, the loader on the
trainer's thread at 350 ns a sample:
`--shuffle_batches`' permutation and three gathers measured with numpy on this VM, ~290-370
ns a sample) and the 2022 table sizes, and prints predicted and published ms and their
ratios.

    python benchmarks/torchrec_e38_batch_scaling.py        # ~3 min on a 2-core VM
"""

from __future__ import annotations

import dataclasses

#: --num_embeddings_per_feature of the 2022 series (README at 2a0c0b8 and df137d8)
ROWS_2022 = (45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62, 29275261, 1572176,
             345138, 10, 2209, 11267, 128, 4, 974, 14, 48937457, 11316796, 40094537,
             452104, 12606, 104, 35)
#: (local batch, published records/s over 8 GPUs, source commit)
SERIES = ((256, 284_615, "df137d8"), (2048, 1_671_168, "2a0c0b8"),
          (8192, 5_373_952, "2a0c0b8"))
LOADER_NS_PER_SAMPLE = 350.0


def main() -> None:
    from scratchpipe_sim.config.published_points import load_end_to_end
    from scratchpipe_sim.experiments.published import run_end_to_end

    (base,) = [p for p in load_end_to_end() if p.id == "E3.8-sgd-256"]
    rows = []
    for batch, rec_s, commit in SERIES:
        model = dataclasses.replace(base.model, rows_per_table=ROWS_2022, batch_size=batch,
                                    precision="tf32")
        pipe = {**base.input_pipeline, "loader_ns_per_sample": LOADER_NS_PER_SAMPLE}
        point = dataclasses.replace(
            base, id=f"2022-sgd-{batch}", model=model, input_pipeline=pipe,
            measured=dataclasses.replace(base.measured, samples_per_s_per_gpu=rec_s / 8))
        r = run_end_to_end(point)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in r.breakdown_ms)
        rows.append((batch, r.predicted_ms, r.measured_ms, commit, parts))
        print(f"local {batch:5d}: predicted {r.predicted_ms:6.2f} ms, published "
              f"{r.measured_ms:6.2f} ms ({commit}); {parts}", flush=True)
    for (b0, p0, m0, *_), (b1, p1, m1, *_) in zip(rows, rows[1:], strict=False):
        print(f"{b1} / {b0}: predicted {p1 / p0:.2f}x (+{p1 - p0:.2f} ms), published "
              f"{m1 / m0:.2f}x (+{m1 - m0:.2f} ms)")


if __name__ == "__main__":
    main()
