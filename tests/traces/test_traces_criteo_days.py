"""Criteo 1TB day files into one trace (issue 41): several days equal their concatenation,
the default modulo mapping equals a plain-Python oracle, bounded blocks change nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from criteo_days import day_lines, write_day

from scratchpipe_sim.cli import main
from scratchpipe_sim.traces import criteo
from scratchpipe_sim.traces.convert import ConvertOptions, convert
from scratchpipe_sim.traces.store import read_trace


def arrays(path: Path) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, int]:
    t = read_trace(path)
    return (list(t.table_rows), np.array(t.indices), np.array(t.offsets),
            np.array(t.batch_bounds), t.batch_size)


def same(a: Path, b: Path) -> None:
    x, y = arrays(a), arrays(b)
    assert x[0] == y[0] and x[4] == y[4]
    for u, v in zip(x[1:4], y[1:4], strict=True):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("mapping", [{"rows": (1000,)}, {"dense_remap": True}])
def test_several_days_equal_their_concatenation(tmp_path, mapping):
    days = [day_lines(n, seed) for n, seed in ((37, 1), (50, 2), (13, 3))]
    paths = [write_day(tmp_path / f"day_{i}", d, gz=i == 1) for i, d in enumerate(days)]
    cat = write_day(tmp_path / "all", [x for d in days for x in d])
    # batches of 8 straddle the day boundaries; blocks of 700 bytes cut lines mid-way
    opts = ConvertOptions(batch_size=8, block_bytes=700, **mapping)
    r = convert(paths, tmp_path / "days.sptrace", opts=opts)
    convert(cat, tmp_path / "cat.sptrace", opts=opts)
    same(tmp_path / "days.sptrace", tmp_path / "cat.sptrace")
    assert r.records == 100 and r.num_batches == 13
    meta = read_trace(tmp_path / "days.sptrace").meta
    assert meta["source_files"] == [str(p) for p in paths]


def test_default_modulo_equals_a_plain_python_oracle(tmp_path):
    lines = day_lines(60, 7, vocab=10**6)
    p = write_day(tmp_path / "day_5.gz", lines, gz=True)
    r = convert(p, tmp_path / "m.sptrace", opts=ConvertOptions(batch_size=16))
    t = read_trace(tmp_path / "m.sptrace")
    assert list(t.table_rows) == [40_000_000] * 26 and r.extra["id_mapping"] == "modulo"
    # oracle: per batch, table-major, one id per present categorical, hex mod 40 M
    want: list[int] = []
    for lo in range(0, len(lines), 16):
        rows = [x.split("\t")[14:] for x in lines[lo:lo + 16]]
        for c in range(26):
            want += [int(r[c], 16) % 40_000_000 for r in rows if r[c] != ""]
    assert [int(x) for x in t.indices] == want
    assert max(want) >= 2**25  # the hashes are spread: the modulo is exercised


def test_bounded_blocks_give_the_trace_of_one_block(tmp_path):
    p = write_day(tmp_path / "day_0", day_lines(80, 4))
    convert(p, tmp_path / "a.sptrace", opts=ConvertOptions(rows=(97,), block_bytes=1 << 20))
    convert(p, tmp_path / "b.sptrace", opts=ConvertOptions(rows=(97,), block_bytes=257))
    same(tmp_path / "a.sptrace", tmp_path / "b.sptrace")


def test_progress_counts_every_input_byte(tmp_path):
    paths = [write_day(tmp_path / "day_0", day_lines(40, 1)),
             write_day(tmp_path / "day_1.gz", day_lines(40, 2), gz=True)]
    seen: list[int] = []
    convert(paths, tmp_path / "p.sptrace",
            opts=ConvertOptions(rows=(10,), block_bytes=512, progress=seen.append))
    assert sum(seen) == criteo.input_bytes(paths) and len(seen) > 2


def test_the_dictionary_estimate_is_said_before_starting(tmp_path):
    p = write_day(tmp_path / "day_0", day_lines(200, 3))
    n = criteo.estimate_lines([p])
    assert n == 200  # the whole file fits the sample: exact
    note = criteo.plan_note([p], ConvertOptions(dense_remap=True))
    assert "~200 lines" in note and "100 bytes each" in note and "0.5 MiB" in note
    assert "40,000,000" in criteo.plan_note([p], ConvertOptions())
    assert criteo.plan_note([p], ConvertOptions(rows=(5,))) is None


def test_cli_days_by_glob_in_natural_order(tmp_path, capsys):
    days = {i: day_lines(9, i) for i in (2, 10, 1)}
    for i, d in days.items():
        write_day(tmp_path / f"day_{i}", d)
    cat = write_day(tmp_path / "cat", days[1] + days[2] + days[10])
    out = tmp_path / "g.sptrace"
    assert main(["trace", "convert", str(tmp_path / "day_*"), str(out), "--rows", "50",
                 "--batch-size", "4"]) == 0
    cap = capsys.readouterr()
    assert "27 lines read" in cap.out and "MB/s" in cap.out
    convert(cat, tmp_path / "c.sptrace", opts=ConvertOptions(rows=(50,), batch_size=4))
    same(out, tmp_path / "c.sptrace")
    assert read_trace(out).meta["source_files"] == [str(tmp_path / f"day_{i}")
                                                    for i in (1, 2, 10)]
    assert main(["trace", "convert", str(tmp_path / "day_1"), str(tmp_path / "q.sptrace"),
                 "--quiet"]) == 0
    assert capsys.readouterr().err == ""
