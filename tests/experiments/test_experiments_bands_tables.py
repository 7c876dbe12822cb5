"""The bands table's edges (experiments/bands.py): a file that is not a bands table is one
UserError whatever its `format` (another of this project's tables, none, not a mapping), and
the console table's cells render every value type a sweep point can hold."""

from __future__ import annotations

import json

import pytest

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments.bands import BANDS_FORMAT, _cell, load_bands


@pytest.mark.parametrize("data", [{"format": "scratchpipe-results"}, {"format": "zzz"},
                                  {"format": ""}, {}, {"format": None}, [BANDS_FORMAT]])
def test_only_a_bands_table_loads(tmp_path, data):
    f = tmp_path / "bands.json"
    f.write_text(json.dumps(data))
    with pytest.raises(UserError, match=f"not a {BANDS_FORMAT} table"):
        load_bands(f)
    f.write_text(json.dumps({"format": BANDS_FORMAT, "rows": []}))
    assert load_bands(tmp_path)["rows"] == []


def test_cells_render_every_value_type():
    assert [_cell(v) for v in (None, 0.25, 3, "lru", {}, {"a": 1}, [], [1, 2], True)] == [
        "-", "0.25", "3", "lru", "{}", "{..}", "{}", "{..}", "True"]
