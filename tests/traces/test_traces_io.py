"""Readers: .npy / text / trace.log / .sptrace round trips, detection, and every bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scratchpipe_sim.cli import main
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.generators import generate_trace
from scratchpipe_sim.traces.io import detect_format, open_trace
from scratchpipe_sim.traces.readers import parse_id_text
from scratchpipe_sim.traces.store import write_trace

TRACES = Path(__file__).resolve().parents[2] / "traces"
IDS = np.array([3, 0, 7, 7, 2, 9, 3, 3, 1, 0, 12], np.int64)


def write_all(tmp: Path, ids=IDS) -> dict[str, Path]:
    np.save(tmp / "a.npy", ids)
    (tmp / "a.txt").write_text("\n".join(map(str, ids)) + "\n")
    (tmp / "trace.log").write_text(", ".join(map(str, ids)))
    return {"npy": tmp / "a.npy", "text": tmp / "a.txt", "dlrm-log": tmp / "trace.log"}


@pytest.mark.parametrize("fmt", ["npy", "text", "dlrm-log"])
def test_flat_readers_round_trip_and_cut_batches(tmp_path, fmt):
    path = write_all(tmp_path)[fmt]
    t = open_trace(path, batch_size=4)
    assert t.linear_ids().tolist() == IDS.tolist()
    assert t.table_rows.tolist() == [13]  # max id + 1
    assert t.batch_bounds.tolist() == [0, 4, 8, 11]
    assert t.batch_size == 4 and t.meta["reader"] == fmt
    one = open_trace(path, num_rows=20)
    assert one.batch_size == 1 and one.num_batches == len(IDS)
    assert one.table_rows.tolist() == [20]


def test_npy_is_memory_mapped(tmp_path):
    np.save(tmp_path / "big.npy", np.arange(1000, dtype=np.int64))
    t = open_trace(tmp_path / "big.npy", batch_size=100)
    assert not t.indices.flags.owndata  # a view of the mapped file, not a copy
    np.save(tmp_path / "u32.npy", np.arange(10, dtype=np.uint32))
    assert open_trace(tmp_path / "u32.npy").linear_ids().tolist() == list(range(10))


def test_detection_by_suffix_and_by_content(tmp_path):
    paths = write_all(tmp_path)
    assert {k: detect_format(p) for k, p in paths.items()} == {
        "npy": "npy", "text": "text", "dlrm-log": "dlrm-log"}
    (tmp_path / "noext").write_text("1, 2, 3")
    (tmp_path / "noext2").write_text("1\n2\n3\n")
    assert detect_format(tmp_path / "noext") == "dlrm-log"
    assert detect_format(tmp_path / "noext2") == "text"
    (tmp_path / "blob").write_bytes(bytes(range(256)))
    with pytest.raises(UserError, match="cannot tell the trace format"):
        detect_format(tmp_path / "blob")
    # an explicit format wins over the suffix
    (tmp_path / "ids.dat").write_text("4 5 6")
    assert open_trace(tmp_path / "ids.dat", fmt="text").linear_ids().tolist() == [4, 5, 6]


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 1 << 20])
def test_text_blocks_never_split_an_id(tmp_path, block):
    rng = np.random.default_rng(block)
    ids = rng.integers(0, 10**12, 300)
    text = ""
    for i, x in enumerate(ids):  # mixed separators: newlines, commas, tabs, blank lines
        text += str(x) + ["\n", ", ", "\t", "\n\n", ","][i % 5]
    (tmp_path / "m.txt").write_text(text)
    assert parse_id_text(tmp_path / "m.txt", block_bytes=block).tolist() == ids.tolist()


def test_store_keeps_its_batches_and_rebatches_only_flat_traces(tmp_path):
    flat = open_trace(write_all(tmp_path)["npy"], batch_size=2)
    write_trace(flat, tmp_path / "flat.sptrace")
    t = open_trace(tmp_path / "flat.sptrace")
    assert isinstance(t.indices, np.memmap) and t.batch_size == 2
    r = open_trace(tmp_path / "flat.sptrace", batch_size=5)
    assert r.batch_bounds.tolist() == [0, 5, 10, 11]
    assert r.linear_ids().tolist() == IDS.tolist()
    pooled = generate_trace("uniform", [10, 20], 4, 3, [2, 1], seed=1)
    write_trace(pooled, tmp_path / "pooled.sptrace")
    with pytest.raises(UserError, match="batches are fixed") as e:
        open_trace(tmp_path / "pooled.sptrace", batch_size=1)
    assert e.value.field == "batch_size"
    assert open_trace(tmp_path / "pooled.sptrace", batch_size=4).num_batches == 3


def test_tiny_committed_traces_agree():
    ids = [open_trace(TRACES / n).linear_ids().tolist()
           for n in ("ids_small.npy", "ids_small.txt", "trace_small.log")]
    assert ids[0] == ids[1] == ids[2] and len(ids[0]) == 2000
    z = open_trace(TRACES / "zipf_small.sptrace")
    assert z.num_tables == 2 and z.num_accesses == 3840
    g = z.meta["generator"]
    again = generate_trace(g["distribution"], g["table_rows"], g["batch_size"],
                           g["num_batches"], g["pooling"], g["seed"], g["reuse"], **g["params"])
    assert z.linear_ids().tolist() == again.linear_ids().tolist()


# -- bad input, through the CLI: exit 2, one line naming the file ----------------------------
def bad_inputs(tmp: Path) -> dict[str, tuple[Path, list[str], str]]:
    np.save(tmp / "float.npy", np.array([1.0, 2.5]))
    np.save(tmp / "neg.npy", np.array([1, -4, 2]))
    np.save(tmp / "empty.npy", np.zeros(0, np.int64))
    np.save(tmp / "twod.npy", np.zeros((2, 2), np.int64))
    (tmp / "neg.txt").write_text("1\n-3\n")
    (tmp / "float.txt").write_text("1\n2.5\n")
    (tmp / "header.txt").write_text("id\n1\n2\n")
    (tmp / "empty.txt").write_text("\n\n")
    (tmp / "dash.log").write_text("1, 2-3, 4")
    (tmp / "big.npy").write_bytes(b"")
    (tmp / "lone.txt").write_text("1\n-\n2\n")
    (tmp / "huge.txt").write_text("1\n2\n99999999999999999999\n")
    np.save(tmp / "range.npy", np.array([1, 2, 30]))
    (tmp / "afolder").mkdir()
    return {
        "missing": (tmp / "nope.npy", [], "no such file"),
        "float npy": (tmp / "float.npy", [], "expected integer row ids, got dtype float64"),
        "negative npy": (tmp / "neg.npy", [], "negative row id -4 at position 1"),
        "empty npy": (tmp / "empty.npy", [], "empty"),
        "2-D npy": (tmp / "twod.npy", [], "1-D"),
        "truncated npy": (tmp / "big.npy", [], "not a readable .npy"),
        "negative text": (tmp / "neg.txt", [], "negative row id -3"),
        "float text": (tmp / "float.txt", [], "line 2: unexpected character '.'"),
        "header text": (tmp / "header.txt", [], "line 1: unexpected character 'i'"),
        "empty text": (tmp / "empty.txt", [], "empty"),
        "malformed log": (tmp / "dash.log", [], "malformed number"),
        "lone minus": (tmp / "lone.txt", [], "line 2: malformed number"),
        "overflow": (tmp / "huge.txt", [], "line 3: number too large"),
        "id >= rows": (tmp / "range.npy", ["--rows", "10"], "id 30 at position 2 is out of "
                                                            "range: expected 0 <= id < 10"),
        "plain folder": (tmp / "afolder", [], "expected manifest.json"),
        "bad batch size": (tmp / "neg.npy", ["--batch-size", "0"], "batch size must be >= 1"),
    }


CASES = ["missing", "float npy", "negative npy", "empty npy", "2-D npy", "truncated npy",
         "negative text", "float text", "header text", "empty text", "malformed log",
         "lone minus", "overflow",
         "id >= rows", "plain folder", "bad batch size"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_exits_2_with_one_line_naming_the_file(tmp_path, capsys, case):
    path, extra, expected = bad_inputs(tmp_path)[case]
    assert main(["trace", "stats", str(path), *extra]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert str(path) in lines[0] and expected in lines[0]
    assert "Traceback" not in out.err


def test_formats_sharing_a_suffix_are_told_apart_by_sniffing(tmp_path, monkeypatch):
    from scratchpipe_sim.registry import Registry
    from scratchpipe_sim.traces import io

    reg = Registry("trace format")
    for name, spec in io.READERS.items():
        reg.register(name)(spec)
    monkeypatch.setattr(io, "READERS", reg)

    @io.register_reader("tsv-demo", suffixes=(".txt",), sniff=lambda p: b"\t" in p.read_bytes())
    def read_demo(path, batch_size, num_rows):
        ids = np.array([len(line) for line in path.read_text().splitlines()])
        return io.flat_trace(ids, path, batch_size, num_rows, "tsv-demo")

    (tmp_path / "a.txt").write_text("1\n2\n")
    (tmp_path / "b.txt").write_text("x\ty\nzz\tw\n")
    order = [name for name, _ in io.READERS.items()]
    text_first = order.index("text") < order.index("tsv-demo")
    assert text_first
    # "text" sniffs a.txt, not b.txt: the demo format wins b.txt by content
    assert io.detect_format(tmp_path / "a.txt") == "text"
    assert io.detect_format(tmp_path / "b.txt") == "tsv-demo"
    assert open_trace(tmp_path / "b.txt").linear_ids().tolist() == [3, 4]
