"""Point identity: a sha256 of canonical JSON, so equal configs hash equally everywhere.

Canonical (`safety.jsonout.canonical_json`, the project's one canonical-JSON text) = sorted
keys, no whitespace, floats by `repr` (shortest round-trip), tuples as lists. Two resolved
configs that differ in any value (type included: 1 vs 1.0) get different keys, which is
what makes resume safe: a changed config can never match an old row.
"""

from __future__ import annotations

from typing import Any

from scratchpipe_sim.safety.jsonout import canonical_json, canonical_sha256

__all__ = ["canonical_json", "config_hash"]


def config_hash(value: Any, length: int = 16) -> str:
    """Hex sha256 of `canonical_json(value)`, truncated to `length` characters (64 bits)."""
    return canonical_sha256(value)[:length]
