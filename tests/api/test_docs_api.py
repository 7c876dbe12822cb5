"""docs/api.md's Python examples run as written (issue 27): one namespace, in order, from
the repository root (the examples name configs/quickstart.yaml), temporary files under
pytest's tmp_path."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "api.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_every_python_example_of_docs_api_runs(tmp_path, monkeypatch, capsys):
    blocks = python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace: dict = {"__name__": "docs_api"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC}:block{i}", "exec"), namespace)  # noqa: S102
    assert not (ROOT / "results" / "tiny").exists()
    assert "speedup_vs_hybrid" in capsys.readouterr().out
