"""Issue 13, first contact: bad or unusual input is one line and exit 2 (never a traceback,
never silently accepted); `run` and `cache` output says what its numbers are; every option
of the commands has help; `compare` and `plot` read a `run` folder."""

from __future__ import annotations

import argparse
import csv
import io
import json

import numpy as np
import pytest
import yaml
from cli_errors import one_line_error
from small_configs import SHORT_A100

from scratchpipe_sim.cli import build_parser, main
from scratchpipe_sim.config import load_config, resolve

SMALL = SHORT_A100


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(SMALL))
    return p


# -- config files ------------------------------------------------------------------------

def test_a_duplicate_yaml_key_is_an_error_naming_both_lines(tmp_path, capsys):
    p = tmp_path / "dup.yaml"
    p.write_text("seed: 1\nmodel:\n  pooling: 3\n  pooling: 4\n")
    one_line_error(capsys, ["config", "show", str(p)], str(p), "duplicate key 'pooling'",
             "first at line 3", "line 4")
    flow = tmp_path / "flow.yaml"
    flow.write_text("model: {pooling: 3, pooling: 4}\n")
    one_line_error(capsys, ["config", "show", str(flow)], "duplicate key 'pooling'")
    # merges (<<: *anchor) may be overridden: not a duplicate
    merge = tmp_path / "merge.yaml"
    merge.write_text("x: &t {count: 2, rows: 400}\nmodel:\n  tables:\n    <<: *t\n"
                     "    rows: 500\n")
    with pytest.raises(Exception, match="unknown key 'x'"):
        load_config(merge)


def test_a_duplicate_key_in_an_experiment_is_an_error(tmp_path, capsys):
    p = tmp_path / "exp.yaml"
    p.write_text("base: {seed: 1}\nsweep: {grid: {cache.load_factor: [0.1]}}\n"
                 "sweep: {grid: {cache.load_factor: [0.2]}}\n")
    one_line_error(capsys, ["sweep", str(p), "--dry-run"], "duplicate key 'sweep'")


def test_a_non_utf8_config_is_one_line(tmp_path, capsys):
    p = tmp_path / "latin1.yaml"
    p.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    one_line_error(capsys, ["run", str(p)], str(p), "not UTF-8 text (byte 0xe9 at offset 9)")
    one_line_error(capsys, ["config", "show", str(p)], "not UTF-8")


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_config_is_an_error_saying_what_is_expected(tmp_path, capsys, text):
    p = tmp_path / "empty.yaml"
    p.write_text(text)
    one_line_error(capsys, ["run", str(p), "--out", str(tmp_path / "o")], str(p),
             "empty config file: expected a YAML mapping")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("key, value", [
    ("hardware.pcie.h2d_GBps", ".inf"), ("hardware.pcie.d2h_GBps", "-.inf"),
    ("hardware.gpu.hbm_capacity_GiB", ".inf"), ("hardware.gpu.hbm_GBps", ".nan"),
    ("hardware.cpu.dram_GBps", "1.0e+999"), ("cache.capacity_rows", ".inf"),
    ("cache.load_factor", ".nan"),
])
def test_infinite_or_nan_sizes_and_rates_are_rejected(cfg_file, capsys, key, value):
    err = one_line_error(capsys, ["config", "show", str(cfg_file), "--set", f"{key}={value}"],
                   key)
    assert "finite" in err or "expected an integer" in err, err


def test_a_quoted_override_stays_a_string(cfg_file, capsys):
    assert resolve(cfg_file, ['name="22"'])["name"] == "22"
    assert resolve(cfg_file, ["name='22'"])["name"] == "22"
    assert main(["config", "show", str(cfg_file), "--set", 'name="22"', "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "22"
    # unquoted numbers are still numbers where the schema wants them
    assert resolve(cfg_file, ["model.pooling=7"])["model"]["pooling"] == 7


def test_a_repeated_design_is_an_error(cfg_file, tmp_path, capsys):
    one_line_error(capsys, ["run", str(cfg_file), "--design", "hybrid", "--design", "gpu-only",
                      "--design", "hybrid", "--out", str(tmp_path / "o")],
             "--design", "design 'hybrid' given twice")
    one_line_error(capsys, ["run", str(cfg_file), "--set", "designs=[hybrid, hybrid]", "--out",
                      str(tmp_path / "o")], str(cfg_file), "designs: design 'hybrid' given "
                                                           "twice")
    assert not (tmp_path / "o").exists()


# -- unwritable output, memory -----------------------------------------------------------

def test_run_out_that_cannot_be_written_is_one_line(cfg_file, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    one_line_error(capsys, ["run", str(cfg_file), "--out", str(tmp_path / "file" / "res"), "-q"],
             "--out", "cannot create the results folder", "is an existing file")


def test_plot_out_that_cannot_be_written_is_one_line(run_folder, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    one_line_error(capsys, ["plot", str(run_folder), "--out", str(tmp_path / "file" / "fig")],
             "--out", "cannot write the figure")


def test_rows_beyond_any_memory_are_one_line_before_allocating(cfg_file, tmp_path, capsys):
    # 10**30 rows with a small cache used to end in an OverflowError traceback
    one_line_error(capsys, ["run", str(cfg_file), "--set", "model.tables.rows=" + "1" + "0" * 30,
                      "--set", "cache.capacity_rows=100", "--design", "gpu-only",
                      "--out", str(tmp_path / "o")],
             "model.tables.rows", "needs about", "of memory", "expected fewer or smaller "
                                                             "tables")
    assert not (tmp_path / "o").exists()


def test_run_memory_estimate_against_the_available_memory(cfg_file, tmp_path, capsys,
                                                          monkeypatch):
    # per-row state of 800 rows (20 B each) + per-access arrays: more than 1 kB
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", "1000")
    one_line_error(capsys, ["run", str(cfg_file), "--design", "gpu-only", "-q",
                      "--out", str(tmp_path / "o")], "needs about", "1e+03 B available")
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", str(10**9))
    assert main(["run", str(cfg_file), "--design", "gpu-only", "-q", "--no-timeline",
                 "--out", str(tmp_path / "o")]) == 0


def test_cache_on_a_trace_with_one_huge_hashed_id_is_one_line(tmp_path, capsys):
    ids = np.arange(100, dtype=np.int64)
    ids[50] = 2**45  # one hashed id: per-row arrays would need 2**45 entries
    np.save(tmp_path / "ids.npy", ids)
    one_line_error(capsys, ["cache", "--trace", str(tmp_path / "ids.npy"), "--policy", "lru",
                      "--capacity", "100"], "ids.npy", "needs about", "TiB",
             "renumber sparse (hashed) ids densely")


# -- what the output says ----------------------------------------------------------------

def test_cache_warns_when_the_capacity_exceeds_the_rows_and_aligns_tables(tmp_path, capsys):
    ids = np.tile(np.arange(30, dtype=np.int64), 4)
    np.save(tmp_path / "ids.npy", ids)
    assert main(["cache", "--trace", str(tmp_path / "ids.npy"), "--policy", "lru",
                 "--capacity", "1000", "--batch-size", "10"]) == 0
    cap = capsys.readouterr()
    assert "warning: --capacity 1000 exceeds the trace's 30 rows" in cap.err
    lines = cap.out.splitlines()
    head = lines.index("per table") + 1
    block = lines[head:head + 3]
    assert block[0].split() == ["table", "accesses", "hits", "misses", "unplaced",
                                "hit_ratio"]
    assert block[2].split() == ["0", "120", "90", "30", "0", "0.750000"]
    # every column right-aligned to the same width
    assert len({len(x) for x in block}) == 1
    ends = [[i for i, c in enumerate(ln) if c != " " and (i + 1 == len(ln) or ln[i + 1] == " ")]
            for ln in (block[0], block[2])]
    assert ends[0] == ends[1]


def test_cache_format_flag_exists_where_the_error_suggests_it(tmp_path, capsys):
    p = tmp_path / "ids.weird"
    p.write_bytes(b"\x00\x01\x02\xff garbage")
    one_line_error(capsys, ["cache", "--trace", str(p), "--policy", "lru", "--capacity", "2"],
             "cannot tell the trace format", "pass the format explicitly")
    q = tmp_path / "ids.bin"
    with open(q, "wb") as f:
        np.save(f, np.array([1, 2, 3, 1], dtype=np.int64))
    assert main(["cache", "--trace", str(q), "--policy", "lru", "--capacity", "2",
                 "--format", "npy", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accesses"] == 4


@pytest.fixture
def run_folder(cfg_file, tmp_path):
    out = tmp_path / "res"
    assert main(["run", str(cfg_file), "--out", str(out), "-q", "--no-timeline"]) == 0
    return out


def test_run_table_names_its_baseline_units_and_totals(cfg_file, tmp_path, capsys):
    assert main(["run", str(cfg_file), "--out", str(tmp_path / "a"), "-q",
                 "--no-timeline"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert "speedup_vs_hybrid" in header and "DRAM_MB_tot" in header
    for words in ("hybrid's mean iteration time / this design's",
                  "hit: fraction of embedding lookups served from GPU memory",
                  "totals over the measured batches (not per sample); 6 measured batches",
                  "busy fraction: share of the measured time each resource was serving"):
        assert words in out, words
    assert main(["run", str(cfg_file), "--out", str(tmp_path / "b"), "-q", "--no-timeline",
                 "--design", "gpu-only"]) == 0
    out = capsys.readouterr().out
    assert "speedup_vs_hybrid: '-' because hybrid did not run" in out


def test_run_progress_lines_and_quiet(cfg_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_PROGRESS_S", "0")
    assert main(["run", str(cfg_file), "--out", str(tmp_path / "a"), "--no-timeline",
                 "--design", "hybrid", "--design", "gpu-only"]) == 0
    err = [ln.split(" [")[0] for ln in capsys.readouterr().err.splitlines()]
    assert err == ["run: 1/2 designs; hybrid done", "run: 2/2 designs; gpu-only done",
                   "run: 2/2 designs; gpu-only done"]
    assert main(["run", str(cfg_file), "--out", str(tmp_path / "b"), "--no-timeline",
                 "--design", "hybrid", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_compare_and_plot_read_a_run_folder(run_folder, tmp_path, capsys):
    capsys.readouterr()
    assert main(["compare", str(run_folder), "--format", "json"]) == 0
    c = json.loads(capsys.readouterr().out)
    rows = list(csv.DictReader(io.StringIO((run_folder / "results.csv").read_text())))
    t = {r["design"]: float(r["iter_ns_mean"]) for r in rows}
    assert c["common_points"] == 1
    assert c["geomean"]["scratchpipe"] == pytest.approx(t["hybrid"] / t["scratchpipe"])
    assert main(["plot", str(run_folder)]) == 0  # its default figure: the stage breakdown
    printed = capsys.readouterr().out.split()
    assert printed == [str(run_folder / "figures" / "stage-breakdown.png"),
                       str(run_folder / "figures" / "stage-breakdown.pdf")]
    one_line_error(capsys, ["plot", str(run_folder), "--figure", "speedup-vs-cache-size"],
             "a `run` folder is one point", "--figure stage-breakdown")


# -- help --------------------------------------------------------------------------------

OWNED = ("run", "cache", "sweep", "plot", "compare", "config show")


def _subparser(parser: argparse.ArgumentParser, path: str) -> argparse.ArgumentParser:
    for name in path.split():
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@pytest.mark.parametrize("path", OWNED)
def test_every_option_has_help(path):
    p = _subparser(build_parser(), path)
    assert p.description, path
    missing = [a.option_strings[0] if a.option_strings else a.dest for a in p._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
               and not (a.help or "").strip()]
    assert missing == [], f"{path}: no help for {missing}"


def test_sweep_jobs_help_states_its_default(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "default: 1" in " ".join(capsys.readouterr().out.split())
