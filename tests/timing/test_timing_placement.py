"""Placement is pure: `timing/placement.py` imports no SimPy (a cluster model reuses it), and
its table-wise packing is the closed form for equal tables."""

from __future__ import annotations

import ast
from pathlib import Path

from small_configs import off_chip

from scratchpipe_sim.config import load_config
from scratchpipe_sim.timing import placement


def test_placement_imports_no_simulation_library():
    tree = ast.parse(Path(placement.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {n for n in names if n.split(".")[0] == "simpy"}
    assert not {n for n in names if n.startswith("scratchpipe_sim.timing")}


def test_equal_tables_table_wise_go_round_robin_by_lookup_load():
    cfg = load_config({"hardware": off_chip("dgx-a100"),
                       "model": {"tables": {"count": 6, "rows": 1000, "dim": 16}}})
    s = placement.shard(cfg, 3, "table-wise", "x")
    # equal tables: each lands on the least loaded GPU, lowest index first
    assert s.frac == tuple(tuple(1.0 if t % 3 == g else 0.0 for t in range(6))
                           for g in range(3))
    assert s.lookup_share((1.0,) * 6) == 2 / 6 and not any(s.row_wise)
