"""First contact, smaller (issue 42, item 7): `trace gen` makes its output's folders as
`trace convert` does; a `.sptrace` folder follows the umask (not mkdtemp's 0700); a bad
trace file's error names `trace.path` beside the file and line."""

from __future__ import annotations

import os
import stat

import yaml
from cli_errors import one_line_error

from scratchpipe_sim.cli import main

GEN = ["trace", "gen", "--distribution", "zipf", "--alpha", "1.05", "--rows", "500",
       "--batch-size", "16", "--batches", "3", "--pooling", "2", "--seed", "1", "--quiet"]


def test_trace_gen_makes_missing_folders(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*GEN, "--out", "out/deeper/zipf.sptrace"]) == 0
    assert (tmp_path / "out" / "deeper" / "zipf.sptrace" / "manifest.json").is_file()


def test_trace_gen_under_a_file_is_one_line(tmp_path, capsys) -> None:
    (tmp_path / "afile").write_text("x")
    one_line_error(capsys, [*GEN, "--out", str(tmp_path / "afile" / "x.sptrace")],
                   "--out", "is not a folder")


def test_a_trace_folder_follows_the_umask(tmp_path, capsys) -> None:
    old = os.umask(0o002)
    try:
        assert main([*GEN, "--out", str(tmp_path / "t.sptrace")]) == 0
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "t.sptrace").stat().st_mode)
    assert mode == 0o775, oct(mode)


def test_a_bad_trace_file_names_trace_path(tmp_path, capsys) -> None:
    (tmp_path / "bad.txt").write_text("garbage\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "seed": 1, "trace": {"path": "bad.txt"}, "cache": {"load_factor": 0.2},
        "model": {"tables": {"count": 2, "rows": 100, "dim": 16}, "pooling": 2,
                  "batch_size": 8, "num_batches": 4, "warmup_batches": 1,
                  "bottom_mlp": [13, 16], "top_mlp": [19, 1]}}))
    one_line_error(capsys, ["run", str(cfg), "--quiet"], "bad.txt", "trace.path", "line 1")
