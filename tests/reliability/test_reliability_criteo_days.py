"""Issue 41's bad input for production-scale traces: a truncated .gz day, a malformed line
deep in a day, a non-hex categorical, the disk filling while a trace is written. Each is
one line, exit 2, and nothing is left under OUT (or beside it) that a later run would read."""

from __future__ import annotations

import errno
import gzip
from pathlib import Path

from cli_errors import one_line_error
from criteo_days import day_lines, write_day

from scratchpipe_sim.traces import store


def nothing_left(folder: Path, name: str) -> None:
    assert not any(p.name.startswith(name) for p in folder.iterdir()), list(folder.iterdir())


def test_a_truncated_gz_day(tmp_path, capsys):
    data = gzip.compress(("\n".join(day_lines(3000, 1)) + "\n").encode())
    day = tmp_path / "day_3.gz"
    day.write_bytes(data[: len(data) * 2 // 3])
    one_line_error(capsys, ["trace", "convert", str(day), str(tmp_path / "o.sptrace"), "-q"],
                   str(day), "gzip file truncated", "expected a complete .gz file")
    nothing_left(tmp_path, "o.sptrace")


def test_a_malformed_line_deep_in_the_second_day(tmp_path, capsys):
    first = write_day(tmp_path / "day_0", day_lines(500, 1))
    lines = day_lines(4000, 2)
    fields = lines[3456].split("\t")
    lines[3456] = "\t".join(fields[:25])  # line 3457: 25 fields
    second = write_day(tmp_path / "day_1", lines)
    one_line_error(capsys, ["trace", "convert", str(first), str(second),
                            str(tmp_path / "o.sptrace"), "--rows", "1000"],
                   f"{second}:3457: fields: expected 40 tab-separated fields, got 25")
    nothing_left(tmp_path, "o.sptrace")


def test_a_non_hex_categorical_deep_in_a_gz_day(tmp_path, capsys):
    lines = day_lines(5000, 3)
    fields = lines[4999].split("\t")
    fields[39] = "12g4"  # C26, the last field of the last line
    lines[4999] = "\t".join(fields)
    day = write_day(tmp_path / "day_9.gz", lines, gz=True)
    one_line_error(capsys, ["trace", "convert", str(day), str(tmp_path / "o.sptrace"), "-q"],
                   f"{day}:5000: C26 (field 40): expected a hex categorical")
    nothing_left(tmp_path, "o.sptrace")


class _FullDisk:
    """A file whose writes fail with ENOSPC once `room` bytes were written."""

    def __init__(self, path, mode, room: list[int]):
        self.f = open(path, mode)  # noqa: SIM115
        self.room = room

    def write(self, b) -> int:
        n = len(memoryview(b).cast("B"))
        if n > self.room[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room[0] -= n
        return self.f.write(b)

    def close(self) -> None:
        self.f.close()


def full_disk(monkeypatch, room: int) -> None:
    budget = [room]
    monkeypatch.setattr(store, "open", lambda p, m: _FullDisk(p, m, budget), raising=False)


def test_the_disk_filling_during_convert(tmp_path, capsys, monkeypatch):
    day = write_day(tmp_path / "day_0", day_lines(2000, 4))
    full_disk(monkeypatch, 20_000)
    out = tmp_path / "o.sptrace"
    one_line_error(capsys, ["trace", "convert", str(day), str(out), "--rows", "100",
                            "--batch-size", "64"],
                   str(out), "No space left on device", "nothing was published")
    nothing_left(tmp_path, "o.sptrace")


def test_the_disk_filling_during_gen(tmp_path, capsys, monkeypatch):
    full_disk(monkeypatch, 100_000)
    out = tmp_path / "g.sptrace"
    one_line_error(capsys, ["trace", "gen", "--rows", "1000", "--batch-size", "256",
                            "--batches", "50", "--pooling", "4", "--seed", "1",
                            "--out", str(out)],
                   str(out), "No space left on device")
    nothing_left(tmp_path, "g.sptrace")
