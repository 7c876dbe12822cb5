"""The one JSON writer of results: `--json` output and result files are strict JSON.

Why: Python's json writes NaN and Infinity, which no strict parser reads (jq, JavaScript,
pandas with the default engine). Inputs are bounded so that no result should be infinite
(config.schema.NAME_BOUNDS), and where a ratio is undefined (a speedup with no baseline,
a hit ratio of no accesses) the value is written as null: `dumps` maps every non-finite
float to null and then writes with allow_nan=False, so a NaN can never reach the output.

`canonical_json` is the project's one canonical-JSON text for hashing: sweep point keys
(`experiments.hashing.config_hash`) and the replay / trace cache keys
(`traces.disk_cache`, `strict=True`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np


def finite(value: Any) -> Any:
    """`value` with every non-finite float (NaN, +-inf, numpy's too) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """json.dumps of `value` with non-finite floats as null (never NaN or Infinity)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def _canonical_tree(value: Any, strict: bool) -> Any:
    """`value` as plain JSON types (see `canonical_json`)."""
    if isinstance(value, dict):
        return {str(k): _canonical_tree(v, strict) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical_tree(v, strict) for v in value]
    if isinstance(value, float):
        if strict:
            return value  # exactly as JSON writes it (and reads it back)
        if math.isnan(value) or math.isinf(value):
            return {"__float__": repr(value)}
        # keep 1.0 distinct from 1 (json writes both as-is) and make -0.0 == 0.0
        return value + 0.0
    if (isinstance(value, np.generic) if strict
            else hasattr(value, "item") and callable(value.item)):  # a numpy scalar
        return _canonical_tree(value.item(), strict)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if not strict:
        return str(value)
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"strict JSON key holds a {type(value).__name__}: {value!r}")


def canonical_json(value: Any, *, strict: bool = False) -> str:
    """A deterministic JSON text of a plain tree: sorted keys, no whitespace, ASCII, tuples
    as lists, numpy scalars as Python's, dict keys as text. Two trees that differ in any
    value (type included: 1 vs 1.0) get different texts.

    Lenient (default; sweep point keys): any other object is written as its `str`; floats
    are normalized (-0.0 as 0.0, NaN and infinities as {"__float__": repr}).
    `strict=True` (cache keys): only paths (as text) besides plain types and numpy
    scalars, anything else raises TypeError (a key with no stable name is not cached);
    floats exactly as JSON writes them (-0.0, NaN), so a key read back is equal."""
    return json.dumps(_canonical_tree(value, strict), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=strict)


def canonical_sha256(value: Any, *, strict: bool = False) -> str:
    """Hex sha256 of `canonical_json(value, strict=strict)`."""
    return hashlib.sha256(canonical_json(value, strict=strict).encode("ascii")).hexdigest()
