"""Whether the peer packages' tests can run here: one check per peer, shared by its tests
(they skip with the reason returned; None: the peer loads)."""

from __future__ import annotations

import importlib.util


def fbgemm_reason() -> str | None:
    for mod in ("torch", "fbgemm_gpu"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (pip install -e '.[peers]')"
    try:
        import fbgemm_gpu.split_table_batched_embeddings_ops_training  # noqa: F401
    except Exception as e:  # a build that does not load against this torch
        return f"fbgemm_gpu does not import: {type(e).__name__}: {e}"
    return None
