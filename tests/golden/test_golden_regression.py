"""Golden regression: the quickstart's results and every study sweep's table (a documented
subset of fig1's and fig6's points) equal the checked-in tests/golden/*.json, counts exactly
and times to 1e-9 relative. A model change regenerates them in one command
(`python tests/golden/regenerate.py`) and the diff is reviewed; see that file's docstring.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).parent / "regenerate.py"
_SPEC = importlib.util.spec_from_file_location("golden_regenerate", _PATH)
golden = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(golden)


@pytest.mark.parametrize("case", golden.cases())
def test_results_equal_golden(case: str) -> None:
    # the runs are --no-cache: no replay or trace cache is read or written
    diff = golden.check(case)
    assert not diff, (f"{case}: {len(diff)} value(s) differ from tests/golden/{case}.json "
                      f"(a model change? rerun `{golden.REGENERATE}` and review the diff):\n"
                      + "\n".join(diff[:30]))


def test_every_golden_file_is_a_case() -> None:
    """A stale golden file (a renamed or removed sweep) is not silently kept."""
    files = {p.stem for p in Path(__file__).parent.glob("*.json")}
    assert files == set(golden.cases())


def test_differences_are_exact_for_counts_and_relative_for_floats() -> None:
    d = golden.differences
    assert d({"n": 3}, {"n": 3}) == []
    assert d({"n": 3}, {"n": 4}) and d({"n": 3}, {"n": 3.0})
    assert d({"t": 1.0}, {"t": 1.0 + 1e-12}) == []
    assert d({"t": 1.0}, {"t": 1.0 + 1e-8})
    assert d({"t": None}, {"t": 0.0}) and d([1], [1, 2]) and d({"a": 1}, {"a": 1, "b": 2})
