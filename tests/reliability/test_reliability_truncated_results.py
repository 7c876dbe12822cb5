"""A results table cut mid-row (a disk that filled, an interrupted copy) is refused by every
command that reads it -- report, compare, plot -- with one line naming the file, never a
report built from the damaged table (issue 42, item 4)."""

from __future__ import annotations

import copy

import pytest
import yaml
from cli_errors import one_line_error
from small_configs import TWO_SMALL_TABLES

from scratchpipe_sim.cli import main


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    d = copy.deepcopy(TWO_SMALL_TABLES) | {"hardware": {"preset": "a100-gen4"},
                                           "designs": ["hybrid", "lru-cache"]}
    cfg = tmp / "c.yaml"
    cfg.write_text(yaml.safe_dump(d))
    assert main(["run", str(cfg), "--quiet", "--no-cache", "--out", str(tmp / "res")]) == 0
    return tmp / "res"


def _damaged(run_folder, tmp_path, cut: str):
    import shutil

    out = tmp_path / "damaged"
    shutil.copytree(run_folder, out)
    raw = (out / "results.csv").read_bytes()
    if cut == "mid-row":  # the last row loses its second half and its newline
        last = raw.rstrip(b"\r\n").rfind(b"\n") + 1
        raw = raw[: last + (len(raw) - last) // 2]
    elif cut == "short-row":  # a row with fields missing, newline kept
        lines = raw.splitlines(keepends=True)
        lines[1] = b",".join(lines[1].split(b",")[:3]) + b"\r\n"
        raw = b"".join(lines)
    (out / "results.csv").write_bytes(raw)
    return out


@pytest.mark.parametrize("cut", ["mid-row", "short-row"])
@pytest.mark.parametrize("command", [["report"], ["compare"], ["plot"]])
def test_a_damaged_results_table_is_one_line(capsys, run_folder, tmp_path, cut,
                                             command) -> None:
    out = _damaged(run_folder, tmp_path, cut)
    one_line_error(capsys, [*command, str(out)], "results.csv", "results table")
    assert not (out / "report.html").exists()


def test_the_whole_table_still_reports(capsys, run_folder, tmp_path) -> None:
    out = _damaged(run_folder, tmp_path, "none")
    assert main(["compare", str(out)]) == 0
    assert "lru-cache" in capsys.readouterr().out
