"""Compressed inputs read in pieces say what is damaged (issue 42, item 4): a `.csv.gz`
cut short or with a corrupted stream given to `trace convert` is one line naming the file,
and no trace (nor a temporary folder) is left behind. Criteo day files have their own cases
(tests/reliability/test_reliability_criteo_days.py)."""

from __future__ import annotations

import gzip

import pytest
from cli_errors import one_line_error


def _csv_gz(tmp_path, damage: str):
    rows = ["sample,table,id"] + [f"{i // 4},{i % 2},{(i * 7919) % 1000}" for i in range(60000)]
    gz = gzip.compress("\n".join(rows).encode())
    if damage == "truncated":
        gz = gz[: len(gz) // 2]
    else:  # a flipped byte in the deflate stream
        b = bytearray(gz)
        b[len(b) // 2] ^= 0xFF
        gz = bytes(b)
    path = tmp_path / "lookups.csv.gz"
    path.write_bytes(gz)
    return path


@pytest.mark.parametrize("damage", ["truncated", "corrupted"])
def test_a_damaged_csv_gz_is_one_line_and_leaves_nothing(tmp_path, capsys, damage) -> None:
    src = _csv_gz(tmp_path, damage)
    out = tmp_path / "out.sptrace"
    one_line_error(capsys, ["trace", "convert", str(src), str(out), "--batch-size", "8"],
                   "lookups.csv.gz", "compressed input")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lookups.csv.gz"]
