"""The one JSON writer of results: `--json` output and result files are strict JSON.

Why: Python's json writes NaN and Infinity, which no strict parser reads (jq, JavaScript,
pandas with the default engine). Inputs are bounded so that no result should be infinite
(config.schema.NAME_BOUNDS), and where a ratio is undefined (a speedup with no baseline,
a hit ratio of no accesses) the value is written as null: `dumps` maps every non-finite
float to null and then writes with allow_nan=False, so a NaN can never reach the output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


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
