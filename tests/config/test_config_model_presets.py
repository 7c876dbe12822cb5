"""configs/models/: production model presets are internally consistent (closed forms)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

MODELS = Path(__file__).resolve().parents[2] / "configs" / "models"


def _load(name: str) -> dict:
    return yaml.safe_load((MODELS / f"{name}.yaml").read_text())


@pytest.mark.parametrize("name,interaction", [
    ("criteo-kaggle", "dot"), ("criteo-terabyte", "dot"), ("deeprecsys-rm1", "cat"),
    ("deeprecsys-rm2", "cat"), ("deeprecsys-rm3", "cat")])
def test_dlrm_shapes_add_up(name, interaction):
    m = _load(name)
    rows, dim = m["tables"]["rows"], m["tables"]["dim"]
    assert all(isinstance(r, int) and r > 0 for r in rows)
    assert m["tables"]["bytes_per_element"] == 4 and m["batch_size"] >= 1
    assert m["bottom_mlp"][-1] == dim  # both interactions need equal widths
    n = len(rows) + 1  # pooled tables + the bottom MLP output
    if interaction == "dot":  # DLRM: pairwise dots + bottom output
        assert m["top_mlp"][0] == n * (n - 1) // 2 + dim
    else:  # DeepRecSys's "cat": every vector side by side
        assert m["top_mlp"][0] == n * dim
    assert m["top_mlp"][-1] == 1
    assert "Use as" in (MODELS / f"{name}.yaml").read_text()  # says how, with sources above


def test_criteo_row_counts():
    tb, kg = _load("criteo-terabyte"), _load("criteo-kaggle")
    assert len(tb["tables"]["rows"]) == len(kg["tables"]["rows"]) == 26
    # MLPerf's --max-ind-range=40000000 tables: 187.8M rows, 96.1 GB at dim 128 fp32
    assert sum(tb["tables"]["rows"]) == 187_767_399 and max(tb["tables"]["rows"]) < 40_000_000
    assert sum(tb["tables"]["rows"]) * 128 * 4 == pytest.approx(96.1e9, rel=1e-3)
    assert sum(kg["tables"]["rows"]) == 33_762_577
    assert (min(tb["tables"]["rows"]), min(kg["tables"]["rows"])) == (3, 3)
    assert tb["pooling"] == kg["pooling"] == 1


@pytest.mark.parametrize("name,tables,rows,pooling,dim", [
    ("deeprecsys-rm1", 8, 4_000_000, 80, 32), ("deeprecsys-rm2", 32, 500_000, 120, 64),
    ("deeprecsys-rm3", 10, 2_000_000, 20, 32)])
def test_deeprecsys_tables_and_lookups(name, tables, rows, pooling, dim):
    """The authors' released configs (harvard-acc/DeepRecSys models/configs/dlrm_rmN.json)."""
    m = _load(name)
    assert m["tables"]["rows"] == [rows] * tables and m["pooling"] == pooling
    assert m["tables"]["dim"] == dim
