"""Dotted-key access to plain nested dicts (`cache.capacity_rows`), for sweep axes.

One implementation serves `--set` overrides and sweep axes: it lives in
`scratchpipe_sim.config.loader` (the config layer, below experiments); this module names it
for the experiment code, so both agree on errors (UserError naming the key) and copying
(values and merged mappings are deep copies).
"""

from __future__ import annotations

from scratchpipe_sim.config.loader import (
    deep_merge,
    get_dotted,
    has_dotted,
    leaf_keys,
    set_dotted,
)

#: the sweep code's name for `set_dotted`.
put_dotted = set_dotted

__all__ = ["deep_merge", "get_dotted", "has_dotted", "leaf_keys", "put_dotted", "set_dotted"]
