"""Bad `design_params.cluster.pipeline` / `microbatches` input: one line naming the key,
exit 2, before anything is priced (from the YAML file and from --set alike)."""

from __future__ import annotations

import pytest
import yaml
from cli_errors import one_line_error
from small_configs import off_chip

from scratchpipe_sim.config import deep_merge

BASE = {
    "hardware": deep_merge(off_chip("dgx-h100-cluster"), {"cluster": {"nodes": 2}}),
    "model": {"tables": {"count": 4, "rows": 500, "dim": 32}, "pooling": 4, "batch_size": 64,
              "num_batches": 4, "warmup_batches": 1, "bottom_mlp": [13, 64, 16],
              "interaction": "cat", "top_mlp": None},
    "designs": ["cluster"],
    "seed": 5,
}
KEY = "design_params.cluster"


@pytest.mark.parametrize("params,field,words", [
    ({"pipeline": "gpipe"}, "pipeline", ("gpipe",)),
    ({"pipeline": "nestpipe", "microbatches": 0}, "microbatches", ()),
    ({"pipeline": "nestpipe", "microbatches": -2}, "microbatches", ()),
    ({"pipeline": "nestpipe", "microbatches": 1.5}, "microbatches", ()),
    ({"pipeline": "nestpipe", "microbatches": 3}, "microbatches", ("does not divide",)),
    ({"pipeline": "nestpipe", "microbatches": 8}, "microbatches", ("does not divide",)),
    ({"pipeline": "sparse-dist", "microbatches": 2}, "microbatches", ("nestpipe",)),
    ({"microbatches": 2}, "microbatches", ("nestpipe",)),
])
def test_bad_pipeline_input_is_one_line_naming_the_key(tmp_path, capsys, params, field,
                                                        words):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(deep_merge(BASE, {"design_params": {"cluster": params}})))
    one_line_error(capsys, ["run", str(path), "-q", "--no-timeline", "--out",
                            str(tmp_path / "o")], f"{KEY}.{field}", *words)


@pytest.mark.parametrize("sets,field", [
    (["pipeline=unknown"], "pipeline"),
    (["pipeline=nestpipe", "microbatches=0"], "microbatches"),
    (["pipeline=nestpipe", "microbatches=5"], "microbatches"),
])
def test_bad_pipeline_sets_exit_2_naming_the_key(tmp_path, capsys, sets, field):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    argv = ["run", str(path), "--design", "cluster", "-q", "--no-timeline", "--out",
            str(tmp_path / "o")]
    for s in sets:
        argv += ["--set", f"{KEY}.{s}"]
    one_line_error(capsys, argv, f"{KEY}.{field}")
