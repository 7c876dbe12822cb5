"""Point identity: a sha256 of canonical JSON, so equal configs hash equally everywhere.

Canonical = sorted keys, no whitespace, floats by `repr` (shortest round-trip), tuples as
lists. Two resolved configs that differ in any value (type included: 1 vs 1.0) get different
keys, which is what makes resume safe: a changed config can never match an old row.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return {"__float__": repr(value)}
        # keep 1.0 distinct from 1 (json writes both as-is) and make -0.0 == 0.0
        return value + 0.0
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return _normalize(value.item())
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def canonical_json(value: Any) -> str:
    """A deterministic JSON text of a plain config tree."""
    return json.dumps(_normalize(value), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)


def config_hash(value: Any, length: int = 16) -> str:
    """Hex sha256 of `canonical_json(value)`, truncated to `length` characters (64 bits)."""
    return hashlib.sha256(canonical_json(value).encode("ascii")).hexdigest()[:length]
