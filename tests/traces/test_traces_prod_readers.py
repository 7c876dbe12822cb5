"""Production trace readers and `trace convert`: every format against a plain-Python oracle."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scratchpipe_sim.cli import main
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.convert import ConvertOptions, convert
from scratchpipe_sim.traces.io import open_trace
from scratchpipe_sim.traces.store import read_trace

SAMPLE = Path(__file__).resolve().parents[2] / "traces" / "criteo_sample.txt"


def batches_of(trace):
    """[[ [bag ids] per sample ] per table ] per batch, from the CSR layout."""
    out = []
    for k in range(trace.num_batches):
        b = trace.batch(k)
        per_table = []
        for t in range(trace.num_tables):
            idx, offs = b.table(t)
            per_table.append([list(map(int, idx[offs[i]:offs[i + 1]]))
                              for i in range(len(offs) - 1)])
        out.append(per_table)
    return out


# -- Criteo -----------------------------------------------------------------------------------
def criteo_oracle(lines, B, mapping):
    """Plain Python: split on tabs, int(hex, 16), mapping per column, batches table-major."""
    samples = []
    for line in lines:
        f = line.rstrip("\n").split("\t")
        assert len(f) == 40
        samples.append([None if x == "" else int(x, 16) for x in f[14:]])
    ids = [[None if v is None else mapping(c, v) for c, v in enumerate(s)] for s in samples]
    out = []
    for lo in range(0, len(ids), B):
        chunk = ids[lo:lo + B]
        out.append([[[] if s[c] is None else [s[c]] for s in chunk] for c in range(26)])
    return out


def test_criteo_sample_modulo_matches_oracle(tmp_path):
    lines = SAMPLE.read_text().splitlines()
    r = convert(SAMPLE, tmp_path / "o.sptrace", opts=ConvertOptions(rows=(97,), batch_size=5,
                                                                    block_bytes=300))
    t = read_trace(tmp_path / "o.sptrace")
    t.validate()
    assert batches_of(t) == criteo_oracle(lines, 5, lambda c, v: v % 97)
    assert list(t.table_rows) == [97] * 26
    assert r.records == 32 and r.skipped == 0 and t.num_batches == 7
    missing = sum(line.split("\t")[14:].count("") for line in lines)
    assert t.num_accesses == 32 * 26 - missing > 0


def test_criteo_dense_remap_first_appearance(tmp_path):
    lines = SAMPLE.read_text().splitlines()
    seen: dict[tuple[int, int], int] = {}
    counts = [0] * 26

    def dense(c, v):
        if (c, v) not in seen:
            seen[(c, v)] = counts[c]
            counts[c] += 1
        return seen[(c, v)]

    expected = criteo_oracle(lines, 8, dense)
    convert(SAMPLE, tmp_path / "d.sptrace",
            opts=ConvertOptions(dense_remap=True, batch_size=8, block_bytes=1000))
    t = read_trace(tmp_path / "d.sptrace")
    assert batches_of(t) == expected
    assert list(t.table_rows) == [max(1, c) for c in counts]


def test_criteo_gzip_and_mlperf_modulo_by_default(tmp_path, capsys):
    gz = tmp_path / "day_0.gz"
    gz.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    convert(gz, tmp_path / "r.sptrace", fmt="criteo", opts=ConvertOptions(rows=(13,),
                                                                          batch_size=32))
    t = read_trace(tmp_path / "r.sptrace")
    lines = SAMPLE.read_text().splitlines()
    assert batches_of(t) == criteo_oracle(lines, 32, lambda c, v: v % 13)
    rc = main(["trace", "convert", str(gz), str(tmp_path / "q.sptrace"), "--format", "criteo"])
    assert rc == 0  # no mapping named: MLPerf's modulo 40,000,000, said on stderr
    assert "ids modulo 40,000,000 per table" in capsys.readouterr().err
    assert list(read_trace(tmp_path / "q.sptrace").table_rows) == [40_000_000] * 26


def _bad_file(tmp_path):
    lines = SAMPLE.read_text().splitlines()
    bad = list(lines)
    f = bad[4].split("\t")
    f[20] = "zz12"  # C7 (field 21) not hex
    bad[4] = "\t".join(f)
    bad[9] = "\t".join(bad[9].split("\t")[:30])  # wrong field count
    p = tmp_path / "bad.tsv"
    p.write_text("\n".join(bad) + "\n")
    return p, lines


def test_criteo_bad_line_stops_with_file_line_field(tmp_path, capsys):
    p, _ = _bad_file(tmp_path)
    out = tmp_path / "x.sptrace"
    rc = main(["trace", "convert", str(p), str(out), "--rows", "100"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{p}:5: C7 (field 21): expected a hex categorical" in err
    assert not out.exists()
    assert not any(x.name.startswith("x.sptrace") for x in tmp_path.iterdir())


def test_criteo_skip_bad_lines_counts(tmp_path, capsys):
    p, lines = _bad_file(tmp_path)
    out = tmp_path / "s.sptrace"
    rc = main(["trace", "convert", str(p), str(out), "--rows", "100", "--batch-size", "4",
               "--skip-bad-lines"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "skipped 2 bad" in text and f"{p}:5: C7" in text
    good = [x for i, x in enumerate(lines) if i not in (4, 9)]
    t = read_trace(out)
    assert batches_of(t) == criteo_oracle(good, 4, lambda c, v: v % 100)
    assert t.meta["skipped"] == 2 and t.meta["records"] == 32


def test_criteo_field_count_message(tmp_path):
    p = tmp_path / "short.tsv"
    p.write_text("1\t2\t3\n")
    with pytest.raises(UserError, match=r"short.tsv:1: fields: expected 40 tab-separated "
                                        r"fields, got 3"):
        convert(p, tmp_path / "o.sptrace", fmt="criteo", opts=ConvertOptions(rows=(10,)))


@pytest.mark.parametrize("bad,field", [("x", "label"), ("1.5", "I1"), ("123456789", "C1")])
def test_criteo_field_errors(tmp_path, bad, field):
    f = SAMPLE.read_text().splitlines()[0].split("\t")
    pos = {"label": 0, "I1": 1, "C1": 14}[field]
    f[pos] = bad
    p = tmp_path / "one.tsv"
    p.write_text("\t".join(f) + "\n")
    with pytest.raises(UserError, match=rf"one.tsv:1: {field} \(field {pos + 1}\)"):
        convert(p, tmp_path / "o.sptrace", opts=ConvertOptions(dense_remap=True))


def test_criteo_open_trace_detects_by_content(tmp_path):
    t = open_trace(SAMPLE, batch_size=16, num_rows=50, fmt="criteo")
    assert t.num_tables == 26 and t.num_batches == 2
    assert batches_of(t) == criteo_oracle(SAMPLE.read_text().splitlines(), 16,
                                          lambda c, v: v % 50)
    tsv = tmp_path / "day_1.tsv"
    tsv.write_bytes(SAMPLE.read_bytes())
    dense = open_trace(tsv, batch_size=16)  # by suffix; no row count: dense remap
    assert dense.total_rows == len({(c, x.split("\t")[14 + c])
                                    for x in SAMPLE.read_text().splitlines()
                                    for c in range(26) if x.split("\t")[14 + c]})


# -- DLRM -------------------------------------------------------------------------------------
def test_dlrm_log_and_bin_match(tmp_path):
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 1000, size=103).astype(np.uint64)
    (tmp_path / "trace.log").write_text(", ".join(str(int(x)) for x in ids))
    ids.tofile(tmp_path / "trace.bin")
    for name in ("trace.log", "trace.bin"):
        out = tmp_path / (name + ".sptrace")
        rc = main(["trace", "convert", str(tmp_path / name), str(out), "--batch-size", "10"])
        assert rc == 0
        t = read_trace(out)
        assert np.array_equal(np.asarray(t.indices), ids.astype(np.int64))
        assert t.num_batches == 11 and t.table_rows[0] == int(ids.max()) + 1
        assert list(np.diff(t.batch_bounds)) == [10] * 10 + [3]
    out = tmp_path / "m.sptrace"
    convert(tmp_path / "trace.bin", out, opts=ConvertOptions(rows=(7,), batch_size=10,
                                                              block_bytes=64))
    assert np.array_equal(np.asarray(read_trace(out).indices), ids.astype(np.int64) % 7)


def test_dlrm_bin_bad_size(tmp_path):
    p = tmp_path / "t.bin"
    p.write_bytes(b"\x00" * 12)
    with pytest.raises(UserError, match="not a multiple of 8"):
        convert(p, tmp_path / "o.sptrace")


def test_dlrm_log_bad_token_names_line(tmp_path, capsys):
    p = tmp_path / "trace.log"
    p.write_text("1, 2, 3\n4, x5\n")
    rc = main(["trace", "convert", str(p), str(tmp_path / "o.sptrace")])
    assert rc == 2 and "line 2" in capsys.readouterr().err
    assert not (tmp_path / "o.sptrace").exists()


# -- CSV / Parquet ----------------------------------------------------------------------------
def tabular_oracle(rows, T, B):
    samples: dict[int, list] = {}
    for s, t, v in rows:
        samples.setdefault(s, []).append((t, v))
    order = sorted(samples)
    out = []
    for lo in range(0, len(order), B):
        chunk = order[lo:lo + B]
        out.append([[[v for tt, v in samples[s] if tt == t] for s in chunk] for t in range(T)])
    return out


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_tabular_matches_oracle(tmp_path, fmt):
    rng = np.random.default_rng(11)
    rows = []
    for s in sorted(rng.choice(500, size=60, replace=False)):
        for _ in range(int(rng.integers(1, 6))):
            rows.append((int(s), int(rng.integers(0, 4)), int(rng.integers(0, 300))))
    df = pd.DataFrame(rows, columns=["sample", "table", "id"])
    p = tmp_path / f"t.{fmt}"
    df.to_csv(p, index=False) if fmt == "csv" else df.to_parquet(p)
    out = tmp_path / "o.sptrace"
    convert(p, out, opts=ConvertOptions(batch_size=7, block_bytes=24 * 13))
    t = read_trace(out)
    t.validate()
    assert batches_of(t) == tabular_oracle(rows, 4, 7)
    assert list(t.table_rows) == [max(v for _, tt, v in rows if tt == k) + 1 for k in range(4)]


def test_tabular_errors(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("sample,tabel,id\n0,0,1\n")
    assert main(["trace", "convert", str(p), str(tmp_path / "o.sptrace")]) == 2
    assert "no column 'table' (did you mean 'tabel'?)" in capsys.readouterr().err
    p.write_text("sample,table,id\n0,0,1\n1,0,-4\n2,1,3\n")
    with pytest.raises(UserError, match=r"t.csv:3: id: expected a non-negative integer"):
        convert(p, tmp_path / "o.sptrace")
    r = convert(p, tmp_path / "o.sptrace", opts=ConvertOptions(skip_bad_lines=True))
    assert r.skipped == 1 and r.num_accesses == 2
    p.write_text("sample,table,id\n3,0,1\n1,0,2\n")
    with pytest.raises(UserError, match="non-decreasing"):
        convert(p, tmp_path / "o2.sptrace")


# -- Meta dlrm_datasets -----------------------------------------------------------------------
def test_meta_torch_file(tmp_path):
    torch = pytest.importorskip("torch")
    T, B = 3, 5
    rng = np.random.default_rng(2)
    lengths = torch.tensor(rng.integers(0, 4, size=(T, B)))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths.reshape(-1), 0)])
    indices = torch.tensor(rng.integers(0, 50, size=int(offsets[-1])))
    p = tmp_path / f"fbgemm_t{T}_bs{B}.pt.gz"
    with gzip.open(p, "wb") as f:
        torch.save((indices, offsets, lengths), f)
    out = tmp_path / "m.sptrace"
    assert main(["trace", "convert", str(p), str(out), "--batch-size", "2"]) == 0
    t = read_trace(out)
    ind, off = indices.numpy(), offsets.numpy()
    expected = []
    for s0 in range(0, B, 2):
        expected.append([[list(map(int, ind[off[tt * B + s]:off[tt * B + s + 1]]))
                          for s in range(s0, min(B, s0 + 2))] for tt in range(T)])
    assert batches_of(t) == expected
    for tt in range(T):
        seg = ind[off[tt * B]:off[(tt + 1) * B]]
        assert t.table_rows[tt] == (int(seg.max()) + 1 if len(seg) else 1)
    whole = open_trace(p)
    assert whole.num_batches == 1 and whole.batch_size == B
    # a broken layout is named
    bad = tmp_path / "fbgemm_t3_bs5_bad.pt"
    torch.save((indices, offsets[:-1], lengths), bad)
    with pytest.raises(UserError, match=r"offsets has 15 entries: expected T\*B\+1 = 16"):
        convert(bad, tmp_path / "b.sptrace")


def test_convert_refuses_existing_output_and_unknown_format(tmp_path, capsys):
    out = tmp_path / "o.sptrace"
    assert main(["trace", "convert", str(SAMPLE), str(out), "--dense-remap"]) == 0
    capsys.readouterr()
    assert main(["trace", "convert", str(SAMPLE), str(out), "--dense-remap"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["trace", "convert", str(SAMPLE), str(out), "--force", "--rows", "0"]) == 2
    assert "--rows" in capsys.readouterr().err
    odd = tmp_path / "ids.xyz"
    odd.write_text("1 2 3\n")
    assert main(["trace", "convert", str(odd), str(tmp_path / "q.sptrace")]) == 2
    assert "pass --format" in capsys.readouterr().err
