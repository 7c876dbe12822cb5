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


def torchrec_reason() -> str | None:
    """TorchRec's planner (torch, fbgemm-gpu-cpu, then torchrec 1.8.0 installed --no-deps)."""
    for mod in ("torch", "fbgemm_gpu", "torchrec"):
        if importlib.util.find_spec(mod) is None:
            return (f"{mod} is not installed (pip install -e '.[peers]' then "
                    "pip install --no-deps torchrec==1.8.0)")
    try:
        import torchrec.distributed.planner.shard_estimators  # noqa: F401
    except Exception as e:  # a broken install (e.g. a torch it cannot load against)
        return f"torchrec's planner does not import: {type(e).__name__}: {e}"
    return None
