"""The 'did you mean' hint of an unknown name: a choice the name begins first (`h100` is
`h100-gen5`, not `dgx-h100`), then one holding it, then the closest spelling."""

from __future__ import annotations

from cli_errors import one_line_error

from scratchpipe_sim.errors import closest

PRESETS = ["a100-gen4", "dgx-a100", "dgx-h100", "h100-gen5", "h100-gen5-cxl", "h200-gen5"]


def test_a_prefix_wins_over_a_closer_spelling() -> None:
    assert closest("h100", PRESETS) == " (did you mean 'h100-gen5'?)"
    assert closest("H200", PRESETS) == " (did you mean 'h200-gen5'?)"


def test_a_held_name_then_difflib_then_nothing() -> None:
    assert closest("a100", ["dgx-a100", "h100-gen5"]) == " (did you mean 'dgx-a100'?)"
    assert closest("lru-cach", ["lru-cache", "scratchpipe"]) == " (did you mean 'lru-cache'?)"
    assert closest("zzzz", PRESETS) == ""
    assert closest("", PRESETS) == ""


def test_the_cli_suggests_the_prefix(capsys, tmp_path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("seed: 1\n")
    one_line_error(capsys, ["config", "show", str(cfg), "--set", "hardware.preset=h100"],
                   "hardware.preset", "did you mean 'h100-gen5'")
