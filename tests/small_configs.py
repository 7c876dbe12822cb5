"""Config fragments several test files share (one copy each, not a dict per file)."""

from __future__ import annotations

#: two 4,000-row tables, 12 small batches, scratchpipe's fused three-group pipeline at W = 3:
#: a run of every design in well under a second (no hardware: each file picks its preset)
TWO_SMALL_TABLES = {
    "model": {
        "tables": {"count": 2, "rows": 4000, "dim": 32},
        "pooling": 4,
        "batch_size": 64,
        "num_batches": 12,
        "warmup_batches": 3,
        "bottom_mlp": [13, 16],
        "top_mlp": [8, 1],
    },
    "trace": {"distribution": "zipf", "alpha": 1.05},
    "cache": {"capacity_rows": 1200},
    "design_params": {
        "scratchpipe": {
            "lookahead": 3,
            "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]],
        }
    },
    "seed": 5,
}
