"""Issue 28, hostile and corrupt input: every case exits 2 with one line on stderr naming
the file and/or key and what was expected (or 0 with finite output), never a traceback, in
bounded time and memory. Cases that could hang or allocate without bound run as a
subprocess under an address-space limit, with a timeout as the hang detector."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from small_configs import SHORT_A100

from scratchpipe_sim.cli import main

SMALL = SHORT_A100
#: address-space limit of a subprocess case: a case that tries to allocate its way out dies
#: with a MemoryError (a traceback, so the test fails) instead of swapping the machine.
AS_LIMIT_BYTES = 8 << 30
#: a hang detector, not a timing assertion: every case finishes in seconds.
HANG_S = 120


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(SMALL))
    return p


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT_BYTES, AS_LIMIT_BYTES))


def run_cli(argv: list[str], cwd: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
    """`scratchpipe-sim ARGV` in a subprocess (memory-limited, with a hang detector)."""
    return subprocess.run([sys.executable, "-m", "scratchpipe_sim", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=HANG_S,
                          preexec_fn=_limit_memory, env={**os.environ, **(env or {})})


def refused(argv: list[str], *words: str, cwd: Path, env: dict[str, str] | None = None,
            subprocess_: bool = False, capsys=None) -> str:
    """Run the CLI; assert exit 2 and one line on stderr holding every word."""
    if subprocess_:
        p = run_cli(argv, cwd, env)
        code, err = p.returncode, p.stderr.strip()
    else:
        assert capsys is not None
        old = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        try:
            code = main(argv)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        err = capsys.readouterr().err.strip()
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    assert len(err.splitlines()) == 1, err[-2000:]
    for w in words:
        assert w in err, (w, err)
    return err


# -- 1. YAML that expands without bound ---------------------------------------------------

def _bomb(levels: int = 9, width: int = 10) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + f"\nmodel: {{pooling: *a{levels - 1}}}\n"


YAML_CASES = {
    "alias-bomb": (_bomb(), "aliases expand to more than"),
    "alias-fan-out": ("a: &a [" + ", ".join(["1"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 1000)
                      + "]\n", "aliases expand to more than"),
    "deep-flow-list": ("model: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    "deep-flow-map": ("model: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
                      "nested too deeply"),
    "deep-block-map": ("".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "1\n",
                       "nested too deeply"),
    "deep-by-aliases": ("a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n"
                                                  for i in range(1, 200)),
                        "aliases nest too deeply"),
    "recursive-alias": ("a: &a [1, *a]\n", "refers to the node that contains it"),
}


@pytest.mark.parametrize("name", sorted(YAML_CASES))
@pytest.mark.parametrize("command", ["config-show", "run", "sweep"])
def test_yaml_that_expands_without_bound_is_one_line(tmp_path, capsys, name, command):
    text, words = YAML_CASES[name]
    p = tmp_path / f"{name}.yaml"
    if command == "sweep":
        text = text.replace("model:", "base:", 1) if "model:" in text else text
        text += "sweep: {grid: {seed: [1, 2]}}\n"
    p.write_text(text)
    argv = {"config-show": ["config", "show", str(p)],
            "run": ["run", str(p), "--out", str(tmp_path / "o"), "-q"],
            "sweep": ["sweep", str(p), "--dry-run"]}[command]
    # the bomb in a memory-limited subprocess; the rest in-process (the same loader)
    refused(argv, str(p), "YAML refused", words, cwd=tmp_path, capsys=capsys,
            subprocess_=name == "alias-bomb")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value, words", [
    ("[" * 500 + "]" * 500, "nested too deeply"),
    ("{a: " * 300 + "1" + "}" * 300, "nested too deeply"),
    ("&a [1, *a]", "refers to the node that contains it"),
])
def test_set_values_go_through_the_same_loader(cfg, tmp_path, capsys, value, words):
    refused(["config", "show", str(cfg), "--set", f"model.pooling={value}"], "--set",
            "model.pooling", words, cwd=tmp_path, capsys=capsys)


def test_the_yaml_limits_can_be_raised(tmp_path, capsys):
    p = tmp_path / "deep.yaml"
    p.write_text("model: " + "[" * 150 + "]" * 150 + "\n")
    refused(["config", "show", str(p)], "SCRATCHPIPE_MAX_YAML_DEPTH", cwd=tmp_path,
            capsys=capsys)
    # raised, the file is read and the schema names what is wrong with it
    refused(["config", "show", str(p)], "model: expected a mapping", cwd=tmp_path,
            env={"SCRATCHPIPE_MAX_YAML_DEPTH": "1000"}, capsys=capsys)


@pytest.mark.parametrize("written, value", [("1e-3", 1e-3), ("1e300", 1e300), ("2E+2", 200.0),
                                            ("-1.5e1", -15.0), ("1.0e-3", 1e-3)])
def test_exponent_floats_are_numbers_everywhere(cfg, written, value):
    from scratchpipe_sim.config.loader import load_yaml_text, parse_yaml_value

    assert parse_yaml_value(written) == value
    assert load_yaml_text(f"x: {written}\n", None) == {"x": value}
    assert isinstance(parse_yaml_value("1e3x"), str)


# -- 3. huge sweep grids are counted before anything is expanded --------------------------

def _exp(tmp_path: Path, sweep: dict | str, name: str = "exp") -> Path:
    p = tmp_path / f"{name}.yaml"
    sweep_text = sweep if isinstance(sweep, str) else json.dumps(sweep)
    p.write_text(f"base: {json.dumps(SMALL)}\nsweep: {sweep_text}\n")
    return p


@pytest.mark.parametrize(
    "sweep, count",
    [
        ({"grid": {f"model.k{i}": list(range(10)) for i in range(6)}}, "1,000,000 points"),
        ({"grid": {f"model.k{i}": list(range(100)) for i in range(40)}}, "points ("),
        (
            {
                "grid": {"seed": list(range(200))},
                "zip": [{"design_params.scratchpipe.lookahead": list(range(1, 201))}],
            },
            "40,000 points (200 x 200)",
        ),
        (
            {
                "zip": [
                    {"seed": list(range(150))},
                    {"design_params.scratchpipe.lookahead": list(range(1, 151))},
                ]
            },
            "22,500 points",
        ),
    ],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_huge_sweep_is_refused_with_its_count(tmp_path, capsys, sweep, count, dry_run):
    exp = _exp(tmp_path, sweep)
    argv = ["sweep", str(exp), "--out", str(tmp_path / "o"), "-q"]
    refused(argv + (["--dry-run"] if dry_run else []), str(exp), "sweep", count,
            "SCRATCHPIPE_MAX_SWEEP_POINTS", cwd=tmp_path, capsys=capsys)
    assert not (tmp_path / "o").exists()


def test_the_sweep_limit_can_be_raised_and_dry_run_streams(tmp_path, capsys):
    exp = _exp(tmp_path, {"grid": {"seed": list(range(30))}})
    refused(["sweep", str(exp), "--dry-run"], "30 points", cwd=tmp_path,
            env={"SCRATCHPIPE_MAX_SWEEP_POINTS": "20"}, capsys=capsys)
    assert main(["sweep", str(exp), "--dry-run"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 30


@pytest.mark.parametrize("value", ["0", "-3", "inf", "nan", "many", "1.5"])
def test_a_bad_limit_setting_is_one_line(tmp_path, capsys, value):
    exp = _exp(tmp_path, {"grid": {"seed": [1, 2]}})
    refused(["sweep", str(exp), "--dry-run"], "environment", "SCRATCHPIPE_MAX_SWEEP_POINTS",
            "expected a whole number >= 1", cwd=tmp_path,
            env={"SCRATCHPIPE_MAX_SWEEP_POINTS": value}, capsys=capsys)


# -- 5. empty sweep parts are refused alike -----------------------------------------------

@pytest.mark.parametrize("sweep, field", [
    ("{grid: {}}", "sweep.grid"),
    ("{zip: {}}", "sweep.zip"),
    ("{zip: []}", "sweep.zip"),
    ("{zip: [{}]}", "sweep.zip[0]"),
    ("{grid: {seed: [1, 2]}, zip: []}", "sweep.zip"),
    ("{grid: {seed: []}}", "sweep.grid.seed"),
    ("{zip: {seed: [], design_params.scratchpipe.lookahead: []}}", "sweep.zip.seed"),
    ("{grid: null}", "sweep.grid"),
    ("{}", "sweep"),
])
def test_empty_sweep_parts_are_refused_alike(tmp_path, capsys, sweep, field):
    exp = _exp(tmp_path, sweep)
    for extra in (["--dry-run"], ["--out", str(tmp_path / "o"), "-q"]):
        refused(["sweep", str(exp), *extra], str(exp), f"{field}: ", "expected",
                cwd=tmp_path, capsys=capsys)
    assert not (tmp_path / "o").exists()


# -- 6. corrupt .sptrace folders ----------------------------------------------------------

@pytest.fixture
def sptrace(tmp_path: Path) -> Path:
    from scratchpipe_sim.traces.csr_trace import Trace
    from scratchpipe_sim.traces.store import write_trace

    ids = np.arange(64, dtype=np.int64) % 13
    return write_trace(Trace.single_table(ids, 13, 8), tmp_path / "t.sptrace")


def _edit_manifest(p: Path, **changes) -> None:
    m = json.loads((p / "manifest.json").read_text())
    for k, v in changes.items():
        if v is _DROP:
            m.pop(k)
        else:
            m[k] = v
    (p / "manifest.json").write_text(json.dumps(m))


def _edit_array(p: Path, name: str, index: int, value: int, dtype: str = "<i8") -> None:
    a = np.fromfile(p / name, dtype)
    a[index] = value
    a.tofile(p / name)


def _as_v1(p: Path) -> None:
    """The fixture's trace as a format-version-1 store (int64 offsets.bin)."""
    from sptrace_v1 import write_v1

    from scratchpipe_sim.traces.store import read_trace

    t = read_trace(p)
    t = type(t)(t.table_rows, np.array(t.indices), np.array(t.offsets),
                np.array(t.batch_bounds), t.batch_size)
    shutil.rmtree(p)
    write_v1(t, p)


def _as_pooled(p: Path) -> None:
    """64 bags of 1 and 2 ids (96 ids) over 13 rows: a u32-marks store."""
    from scratchpipe_sim.traces.csr_trace import Trace
    from scratchpipe_sim.traces.store import write_trace

    lens = [np.array([1, 2] * 4)] * 8
    ids = [[np.arange(12) % 13]] * 8
    shutil.rmtree(p)
    write_trace(Trace.from_batches(ids, [13], [[x] for x in lens]), p)
    assert (p / "offsets_u32.bin").exists()


_DROP = object()
SPTRACE_CASES = {
    "missing table_rows": (lambda p: _edit_manifest(p, table_rows=_DROP),
                           "manifest.json.table_rows", "missing"),
    "missing num_indices": (lambda p: _edit_manifest(p, num_indices=_DROP),
                            "manifest.json.num_indices", "missing"),
    "missing sha256": (lambda p: _edit_manifest(p, sha256=_DROP), "manifest.json.sha256",
                       "missing"),
    "float ids": (lambda p: _edit_manifest(p, index_dtype="<f8"), "manifest.json.index_dtype",
                  "an integer dtype"),
    "garbage dtype": (lambda p: _edit_manifest(p, index_dtype="[('a', 'O')]"),
                      "manifest.json.index_dtype", "an integer dtype"),
    "count as text": (lambda p: _edit_manifest(p, num_bags="64"), "manifest.json.num_bags",
                      "an integer >= 0"),
    "negative count": (lambda p: _edit_manifest(p, num_batches=-1),
                       "manifest.json.num_batches", "an integer >= 0"),
    "huge count": (lambda p: _edit_manifest(p, num_indices=10**30),
                   "manifest.json.num_indices", "an integer >= 0"),
    "rows as text": (lambda p: _edit_manifest(p, table_rows=["13"]), "manifest.json.table_rows",
                     "row counts >= 1"),
    "zero batch size": (lambda p: _edit_manifest(p, batch_size=0), "manifest.json.batch_size",
                        "an integer >= 1"),
    "other version": (lambda p: _edit_manifest(p, version=99), "version 99", "version 1"),
    "not an object": (lambda p: (p / "manifest.json").write_text("[1, 2]"),
                      "manifest.json holds list", "an object"),
    "not JSON": (lambda p: (p / "manifest.json").write_text("{oops"), "not valid JSON", ""),
    "deep JSON": (lambda p: (p / "manifest.json").write_text("[" * 100_000 + "]" * 100_000),
                  "not valid JSON", ""),
    "not UTF-8": (lambda p: (p / "manifest.json").write_bytes(b'{"a": "\xff"}'),
                  "not valid JSON", ""),
    "v1 offsets past the data": (lambda p: (_as_v1(p),
                                            _edit_array(p, "offsets.bin", -1, 10**12)),
                                 "offsets.bin", "expected 0 to 64"),
    "v1 offsets decrease": (lambda p: (_as_v1(p), _edit_array(p, "offsets.bin", 5, 60)),
                            "offsets.bin", "decreases at entry 6"),
    "u32 offsets past the data": (lambda p: (_as_pooled(p), _edit_array(
        p, "offsets_u32.bin", -1, 10**9, "<u4")), "offsets_u32.bin", "expected 0 to 96"),
    "u32 offsets decrease": (lambda p: (_as_pooled(p), _edit_array(
        p, "offsets_u32.bin", 5, 0, "<u4")), "offsets_u32.bin", "decreases at entry 5"),
    "mark moved": (lambda p: (_as_pooled(p), _edit_array(p, "offset_marks.bin", 0, 7)),
                   "offsets_u32.bin", "runs from 7"),
    "truncated marks": (lambda p: (_as_pooled(p), (p / "offset_marks.bin").write_bytes(b"")),
                        "offset_marks.bin", "truncated"),
    "wrong bag length": (lambda p: _edit_manifest(p, offsets={"encoding": "constant",
                                                              "bag_length": 2}),
                         "manifest.json.offsets", "bag length times num_bags"),
    "unknown encoding": (lambda p: _edit_manifest(p, offsets={"encoding": "zip"}),
                         "manifest.json.offsets", "an encoding"),
    "bounds past the bags": (lambda p: _edit_array(p, "batch_bounds.bin", -1, 10**9),
                             "batch_bounds.bin", "expected 0 to 64"),
    "bounds decrease": (lambda p: _edit_array(p, "batch_bounds.bin", 1, 100),
                        "batch_bounds.bin", "decreases"),
    "truncated ids": (lambda p: (p / "indices.bin").write_bytes(b"\0" * 10), "indices.bin",
                      "truncated"),
    "manifest is a FIFO": (lambda p: ((p / "manifest.json").unlink(),
                                      os.mkfifo(p / "manifest.json")),
                           "expected manifest.json", ""),
}


@pytest.mark.parametrize("case", sorted(SPTRACE_CASES))
def test_a_corrupt_sptrace_is_one_line_naming_it(sptrace, tmp_path, case):
    corrupt, *words = SPTRACE_CASES[case]
    corrupt(sptrace)
    # a subprocess: a trusted bad offset would kill the process with SIGBUS/SIGSEGV
    for argv in (["trace", "stats", str(sptrace)],
                 ["cache", "--trace", str(sptrace), "--policy", "lru", "--capacity", "4"]):
        refused(argv, str(sptrace), *[w for w in words if w], cwd=tmp_path, subprocess_=True)


# -- 7. numbers beyond int64 in text traces -----------------------------------------------

INT64_CASES = {
    "ids.txt": ("1\n2\n99999999999999999999999\n", "line 3", "too large for int64"),
    "ids.log": ("1, 2, 3, 18446744073709551616\n", "line 1", "too large for int64"),
    "neg.txt": ("1\n-99999999999999999999999\n", "line 2", "too large for int64"),
    "t.csv": ("sample,table,id\n0,0,1\n0,0,9223372036854775808\n", "t.csv:3",
              "below 2**63, got '9223372036854775808'"),
    "t.tsv": ("sample\ttable\tid\n0\t0\t1\n0\t0\t-99999999999999999999999\n", "t.tsv:3",
              "below 2**63"),
    "e.csv": ("sample,table,id\n0,0,1\n1e30,0,1\n", "e.csv:3", "sample: expected a "
                                                                 "non-negative integer"),
}


@pytest.mark.parametrize("name", sorted(INT64_CASES))
@pytest.mark.parametrize("command", ["stats", "convert"])
def test_numbers_beyond_int64_name_the_file_and_line(tmp_path, capsys, name, command):
    text, *words = INT64_CASES[name]
    p = tmp_path / name
    p.write_text(text)
    argv = (["trace", "stats", str(p)] if command == "stats"
            else ["trace", "convert", str(p), str(tmp_path / "o.sptrace")])
    if command == "convert" and name.endswith((".txt",)):
        argv += ["--format", "dlrm-log"]
    err = refused(argv, str(p), *words, cwd=tmp_path, capsys=capsys)
    assert "-922337" not in err  # never wrapped around to a negative number
    assert not (tmp_path / "o.sptrace").exists()


def test_a_ratings_log_with_an_id_beyond_int64_is_one_line(tmp_path, capsys):
    p = tmp_path / "r.dat"
    p.write_text("1 2 5 10\n1 99999999999999999999999 5 11\n")
    refused(["trace", "convert", str(p), str(tmp_path / "o.sptrace"), "--format", "ratings"],
            "r.dat:2: item", "below 2**63", cwd=tmp_path, capsys=capsys)


# -- 8. a forced --format on a path of the wrong kind -------------------------------------

@pytest.mark.parametrize("fmt", ["csv", "tsv", "dlrm-bin", "npy", "text", "parquet", "criteo"])
def test_a_forced_file_format_on_a_folder_is_one_line(tmp_path, capsys, fmt):
    d = tmp_path / "folder.csv"
    d.mkdir()
    refused(["trace", "stats", str(d), "--format", fmt], str(d), "a folder",
            f"format {fmt} expects a file", cwd=tmp_path, capsys=capsys)
    refused(["cache", "--trace", str(d), "--format", fmt, "--policy", "lru",
             "--capacity", "2"], str(d), "a folder", cwd=tmp_path, capsys=capsys)


def test_forced_formats_of_the_wrong_kind_are_one_line(tmp_path, capsys, sptrace):
    ids = tmp_path / "ids.npy"
    np.save(ids, np.arange(10))
    refused(["trace", "stats", str(ids), "--format", "sptrace"], str(ids),
            "format sptrace expects a .sptrace folder", cwd=tmp_path, capsys=capsys)
    refused(["trace", "stats", str(sptrace), "--format", "csv"], str(sptrace),
            "format csv expects a file", cwd=tmp_path, capsys=capsys)
    refused(["trace", "convert", str(sptrace), str(tmp_path / "o.sptrace"), "--format",
             "csv"], str(sptrace), "a folder: expected an input file", cwd=tmp_path,
            capsys=capsys)
    plain = tmp_path / "plain"
    plain.mkdir()
    refused(["trace", "stats", str(plain), "--format", "sptrace"], str(plain),
            "expected manifest.json", cwd=tmp_path, capsys=capsys)


# -- 9. non-regular files -----------------------------------------------------------------

def _fifo(tmp_path: Path, name: str) -> Path:
    p = tmp_path / name
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("argv, name", [
    (["trace", "stats", "{p}"], "ids.txt"),
    (["trace", "stats", "{p}"], "noext"),
    (["trace", "stats", "{p}", "--format", "text"], "x"),
    (["cache", "--trace", "{p}", "--policy", "lru", "--capacity", "2"], "ids.npy"),
    (["trace", "convert", "{p}", "{tmp}/o.sptrace"], "t.csv"),
    (["trace", "fit", "{p}", "--out", "{tmp}/fit.yaml"], "ids.txt"),
    (["config", "show", "{p}"], "c.yaml"),
    (["run", "{p}", "--out", "{tmp}/o", "-q"], "c.yaml"),
    (["sweep", "{p}", "--dry-run"], "e.yaml"),
])
def test_a_fifo_is_refused_before_it_is_opened(tmp_path, argv, name):
    p = _fifo(tmp_path, name)
    argv = [a.format(p=p, tmp=tmp_path) for a in argv]
    refused(argv, str(p), "FIFO", "not a regular file", cwd=tmp_path, subprocess_=True)


@pytest.mark.parametrize("argv", [
    ["trace", "stats", "/dev/zero"],
    ["trace", "stats", "/dev/null", "--format", "text"],
    ["cache", "--trace", "/dev/zero", "--format", "dlrm-bin", "--policy", "lru",
     "--capacity", "2"],
    ["config", "show", "/dev/zero"],
])
def test_a_device_is_refused_before_it_is_read(tmp_path, argv):
    refused(argv, "/dev/", "character device", cwd=tmp_path, subprocess_=True)


def test_symlink_loops_and_broken_links_say_so(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    refused(["trace", "stats", str(tmp_path / "a")], "a symlink loop", cwd=tmp_path,
            capsys=capsys)
    refused(["config", "show", str(tmp_path / "a")], "a symlink loop", cwd=tmp_path,
            capsys=capsys)
    refused(["config", "show", str(tmp_path / "dangling.yaml")], "a broken symlink",
            cwd=tmp_path, capsys=capsys)


# -- 4. absurd values: refused by their unit's physical range; JSON is always strict ------

@pytest.mark.parametrize("key, value, unit", [
    ("hardware.pcie.h2d_GBps", "1e-300", "GB/s"),
    ("hardware.gpu.hbm_GBps", "1.0e-300", "GB/s"),
    ("hardware.cpu.dram_GBps", "1e300", "GB/s"),
    ("hardware.gpu.tflops", "1e-300", "TFLOP/s"),
    ("hardware.clock_GHz", "1e-300", "GHz"),
    ("hardware.pcie.latency_ns", "1e300", "ns"),
    ("hardware.cpu.plan_ns_per_id", "1e300", "ns"),
    ("hardware.gpu.hbm_capacity_GiB", "1e300", "GiB"),
    ("hardware.ranges", "{pcie.h2d_GBps: [1e-300, 10]}", "GB/s"),
    ("hardware.cpu.core_llc_GBps", "[[64, 1e-300], [256, 10]]", "GB/s"),
    ("design_params.scratchpipe.lookahead", "100000000000", "batches of lookahead"),
    ("design_params.scratchpipe.queue_depth", "10000000", "batches"),
])
def test_physically_absurd_values_are_refused(cfg, tmp_path, capsys, key, value, unit):
    refused(["run", str(cfg), "--set", f"{key}={value}", "--json", "-q", "--out",
             str(tmp_path / "o")], str(cfg), key, "expected", unit, cwd=tmp_path,
            capsys=capsys)
    assert not (tmp_path / "o").exists()


def _strict(text: str):
    def no_constant(name: str):
        raise AssertionError(f"non-JSON constant {name} in the output")
    return json.loads(text, parse_constant=no_constant)


def test_run_json_is_strict_and_finite_at_the_edges_of_the_ranges(cfg, tmp_path, capsys):
    assert main(["run", str(cfg), "--json", "-q", "--no-timeline", "--out", str(tmp_path / "o"),
                 "--set", "hardware.pcie.h2d_GBps=1e-3", "--set", "hardware.gpu.tflops=1e-6",
                 "--set", "hardware.cpu.dram_GBps=1e6"]) == 0
    rows = _strict(capsys.readouterr().out)
    assert rows and all(v is None or np.isfinite(v) for r in rows for v in r.values()
                        if isinstance(v, float))
    _strict((tmp_path / "o" / "results.json").read_text())


def test_the_json_writer_never_writes_nan_or_infinity():
    from scratchpipe_sim.safety.jsonout import dumps

    text = dumps({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5],
                  "c": np.float64("nan"), "d": (np.float64(2.0), "x")})
    assert _strict(text) == {"a": None, "b": [None, None, 1.5], "c": None, "d": [2.0, "x"]}


@pytest.mark.parametrize("argv, flag", [
    (["--policy", "scratchpipe", "--lookahead", "100000000000"], "--lookahead"),
    (["--policy", "fbgemm-lru", "--ways", "100000000000"], "--ways"),
    (["--policy", "scratchpipe", "--param", "lookahead=10000000"], "lookahead"),
])
def test_cache_windows_and_ways_have_a_documented_maximum(tmp_path, capsys, argv, flag):
    ids = tmp_path / "ids.npy"
    np.save(ids, np.arange(100) % 17)
    refused(["cache", "--trace", str(ids), "--capacity", "10", *argv], flag, "expected 1 to 4,096",
            cwd=tmp_path, capsys=capsys)


# -- 2. huge sizes are checked before anything is allocated -------------------------------

GEN = ["trace", "gen", "--seed", "1", "--rows", "100", "--batch-size", "10", "--batches", "10"]
BIG = "100000000000"


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


@pytest.mark.parametrize("flag, value, words", [
    ("--batch-size", BIG, ("--batch-size", "of memory")),
    ("--pooling", BIG, ("--pooling", "of memory")),
    ("--pooling-sigma", "1e12", ("--pooling-sigma", "of memory")),
    ("--tables", BIG, ("--tables", "expected 1 to 1,048,576 tables")),
    ("--batches", "100000000000000", ("--batches", "on disk")),
])
def test_trace_gen_sizes_are_checked_before_allocating(tmp_path, flag, value, words):
    out = tmp_path / "g.sptrace"
    # a subprocess under an address-space limit: an unchecked size dies with MemoryError
    refused(_with(GEN, flag, value) + ["--out", str(out)], *words, cwd=tmp_path,
            subprocess_=True)
    assert not out.exists() and not list(tmp_path.glob("g.sptrace.*"))


@pytest.mark.parametrize("key, value, blamed", [
    ("model.batch_size", BIG, "model.batch_size"),
    ("model.pooling", BIG, "model.pooling"),
    ("model.num_batches", BIG, "model.num_batches"),
    ("model.tables.rows", "1" + "0" * 20, "model.tables.rows"),
    ("model.tables.count", BIG, "expected 1 to 1,048,576 tables"),
    ("design_params.scratchpipe.lookahead", BIG, "batches of lookahead"),
])
def test_run_sizes_name_the_key_that_is_too_big(cfg, tmp_path, key, value, blamed):
    refused(["run", str(cfg), "--set", f"{key}={value}", "--out", str(tmp_path / "o"), "-q"],
            str(cfg), key, blamed, cwd=tmp_path, subprocess_=True)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, flag", [
    (["trace", "stats", "{ids}", "--rows", "1" + "0" * 15], "--rows"),
    (["trace", "fit", "{ids}", "--rows", "1" + "0" * 15, "--out", "{tmp}/f.yaml"], "--rows"),
    (["cache", "--trace", "{big}", "--policy", "lru", "--capacity", "10"], "--trace"),
])
def test_trace_stats_fit_and_cache_check_their_per_row_state(tmp_path, argv, flag):
    np.save(tmp_path / "ids.npy", np.arange(100) % 17)
    big = np.arange(100, dtype=np.int64)
    big[3] = 2**50
    np.save(tmp_path / "big.npy", big)
    argv = [a.format(ids=tmp_path / "ids.npy", big=tmp_path / "big.npy", tmp=tmp_path)
            for a in argv]
    refused(argv, flag, "of memory", cwd=tmp_path, subprocess_=True)


@pytest.fixture
def run_folder(cfg, tmp_path):
    out = tmp_path / "res"
    assert main(["run", str(cfg), "--out", str(out), "-q", "--no-timeline"]) == 0
    return out


@pytest.mark.parametrize("dpi", ["1000000", "1" + "0" * 25])
def test_plot_resolution_is_bounded(run_folder, tmp_path, capsys, dpi):
    refused(["plot", str(run_folder), "--dpi", dpi], "--dpi", "pixels",
            "SCRATCHPIPE_MAX_FIGURE_PIXELS", cwd=tmp_path, capsys=capsys)
    assert not (run_folder / "figures").exists()


# -- 11. numeric environment settings are validated ---------------------------------------

@pytest.mark.parametrize("var", ["SCRATCHPIPE_MEMORY_BYTES", "SCRATCHPIPE_PROGRESS_S",
                                 "SCRATCHPIPE_REPLAY_CACHE_MAX_BYTES"])
@pytest.mark.parametrize("value", ["inf", "-5", "nan", "lots", "1e400"])
def test_bad_environment_numbers_are_one_line(cfg, tmp_path, capsys, var, value):
    refused(["run", str(cfg), "--design", "lru-cache", "--out", str(tmp_path / "o"),
             "--no-timeline"], "environment", var, "expected", cwd=tmp_path,
            env={var: value, "SCRATCHPIPE_CACHE_DIR": str(tmp_path / "cache")}, capsys=capsys)


def test_environment_numbers_may_use_exponents(cfg, tmp_path, capsys):
    assert main(["run", str(cfg), "--design", "gpu-only", "-q", "--no-timeline", "--out",
                 str(tmp_path / "o")]) == 0
    os.environ["SCRATCHPIPE_MEMORY_BYTES"] = "1e3"
    try:
        refused(["run", str(cfg), "--design", "gpu-only", "-q", "--out",
                 str(tmp_path / "p")], "1e+03 B available", cwd=tmp_path, capsys=capsys)
    finally:
        del os.environ["SCRATCHPIPE_MEMORY_BYTES"]


# -- 10. OS errors on output paths --------------------------------------------------------

LONG = "x" * 300  # beyond the 255-byte name limit of common file systems


@pytest.mark.parametrize("argv", [
    ["run", "{cfg}", "--out", "{tmp}/" + LONG, "-q", "--no-timeline"],
    ["trace", "gen", "--seed", "1", "--rows", "10", "--batch-size", "4", "--batches", "2",
     "--out", "{tmp}/" + LONG + ".sptrace"],
    ["trace", "convert", "{log}", "{tmp}/" + LONG + ".sptrace"],
    ["trace", "fit", "{log}", "--out", "{tmp}/" + LONG + ".yaml"],
    ["plot", "{run}", "--out", "{tmp}/" + LONG],
    ["sensitivity", "{cfg}", "--out", "{tmp}/" + LONG],
])
def test_a_name_too_long_is_one_line(cfg, run_folder, tmp_path, capsys, argv):
    log = tmp_path / "ids.log"
    log.write_text(", ".join(str(i % 7) for i in range(200)) + "\n")
    argv = [a.format(cfg=cfg, tmp=tmp_path, log=log, run=run_folder) for a in argv]
    refused(argv, "name in the path is too long", cwd=tmp_path, capsys=capsys)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("xxx")]


@pytest.mark.parametrize("where, text", [
    ("experiment", 'name: "a\\0b"\nbase: {seed: 1}\nsweep: {grid: {seed: [1, 2]}}\n'),
    ("config", 'name: "a\\0b"\nseed: 1\n'),
    ("set", None),
])
def test_a_nul_byte_in_a_name_is_one_line(cfg, tmp_path, capsys, where, text):
    if where == "set":
        argv = ["run", str(cfg), "--set", 'name="r\\0s"', "-q"]
    else:
        p = tmp_path / f"{where}.yaml"
        p.write_text(text)
        argv = ["sweep", str(p), "-q"] if where == "experiment" else ["run", str(p), "-q"]
    refused(argv, "name", "without NUL bytes", cwd=tmp_path, capsys=capsys)


# -- 13. concurrent writers of one trace --------------------------------------------------

def _trace(n: int = 40):
    from scratchpipe_sim.traces.csr_trace import Trace

    return Trace.single_table(np.arange(n, dtype=np.int64) % 9, 9, 4)


@pytest.mark.parametrize("overwrite", [False, True])
def test_the_loser_of_two_trace_writers_leaves_nothing_behind(tmp_path, overwrite):
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.traces.io import open_trace
    from scratchpipe_sim.traces.store import TraceWriter

    out = tmp_path / "t.sptrace"
    a = TraceWriter(out, [9], 4, overwrite=overwrite)
    b = TraceWriter(out, [9], 4, overwrite=overwrite)
    a.append_trace(_trace(40))
    b.append_trace(_trace(80))
    a.close()
    if overwrite:
        b.close()  # --force: the last writer wins, whole
        assert open_trace(out).num_accesses == 80
    else:
        with pytest.raises(UserError, match="written by another process meanwhile"):
            b.close()
        assert open_trace(out).num_accesses == 40  # the winner's trace is kept, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.sptrace"]


def test_a_failed_write_leaves_no_temporary_folder(tmp_path):
    from scratchpipe_sim.traces.store import TraceWriter

    with pytest.raises(RuntimeError), TraceWriter(tmp_path / "t.sptrace", [9], 4) as w:
        w.append_trace(_trace())
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_concurrent_trace_gen_processes_leave_one_whole_trace(tmp_path):
    out = tmp_path / "g.sptrace"
    argv = [sys.executable, "-m", "scratchpipe_sim", "trace", "gen", "--seed", "1", "--rows",
            "1000", "--batch-size", "64", "--batches", "200", "--out", str(out), "--force"]
    procs = [subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=HANG_S)
        assert p.returncode in (0, 2), err
        assert "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.sptrace"]
    from scratchpipe_sim.traces.io import open_trace

    assert open_trace(out).num_accesses == 64 * 200


# -- 12. results files from elsewhere -----------------------------------------------------

def _edit_csv(path: Path, column: str, value: str) -> None:
    import csv

    rows = list(csv.DictReader(path.open()))
    rows[0][column] = value
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("argv, words", [
    (["compare", "{run}"], ("iter_ns_mean", "expected a number")),
    (["plot", "{run}"], ("iter_ns_mean", "expected a number")),
    (["compare", "{ok}", "--metric", "design"], ("--metric", "not a time column")),
    (["compare", "{ok}", "--metric", "policy"], ("--metric", "not a time column")),
])
def test_a_results_table_from_elsewhere_is_one_line(run_folder, tmp_path, capsys, argv,
                                                    words):
    import shutil

    ok = tmp_path / "ok"
    shutil.copytree(run_folder, ok)
    _edit_csv(run_folder / "results.csv", "iter_ns_mean", "fast")
    argv = [a.format(run=run_folder, ok=ok) for a in argv]
    refused(argv, *words, cwd=tmp_path, capsys=capsys)


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.update(version=99), "version"),
    (lambda m: m.pop("columns"), "columns"),
    (lambda m: m.update(designs=5), "designs"),
    (lambda m: m.update(axes="seed"), "axes"),
])
def test_a_sweep_manifest_from_another_version_is_one_line(tmp_path, capsys, edit, field):
    exp = tmp_path / "sw.yaml"
    exp.write_text(f"base: {json.dumps(SMALL)}\nsweep: {{grid: {{seed: [1, 2]}}}}\n"
                   "designs: [gpu-only]\nmetrics: [iter_ns_mean]\n")
    out = tmp_path / "o"
    assert main(["sweep", str(exp), "--out", str(out), "-q"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    edit(m)
    (out / "manifest.json").write_text(json.dumps(m))
    before = (out / "results.csv").read_text()
    for argv in (["sweep", str(exp), "--out", str(out), "-q"], ["compare", str(out)]):
        refused(argv, "manifest.json", field, cwd=tmp_path, capsys=capsys)
    assert (out / "results.csv").read_text() == before  # no earlier result is lost


# -- 14. calibrate --cpu on a busy host ---------------------------------------------------
# The measurements are injected (no timed test): each busy-host curve is one the fit could
# not use; calibrate re-measures what it measures itself (tests/cpu/test_cpu_calibrate.py) and
# writes what it still cannot trust with a warning -- exit 0, finite values, never a
# traceback.

def _busy(kind: str):
    from cpu_fakes import synthetic

    m = synthetic()
    if kind == "stream":  # the stream read got slower with size... and then faster
        m.stream = [s._replace(seconds=5e-3 - i * 1e-3) for i, s in enumerate(m.stream)]
        m.noisy = ["stream read at 10,000,000, 40,000,000 B (5000, 4000 us)"]
    elif kind == "gather":  # every gather curve flat
        m.gather = [g._replace(seconds=1e-3) for g in m.gather]
        m.noisy = ["gather 64 B on 2 thread(s) at 100,000, 1,000,000 B (1000, 1000 us)"]
    elif kind == "everything":  # every size curve flat or falling
        m.stream = [s._replace(seconds=1e-3) for s in m.stream]
        m.copy = [s._replace(seconds=2e-3) for s in m.stream]
        m.gather = [g._replace(seconds=1e-3) for g in m.gather]
        m.gather_one = [g._replace(seconds=2e-3 / g.nbytes) for g in m.gather_one]
        m.scaling = [s._replace(seconds=1e-3) for s in m.scaling]
    m.remeasured = 9
    return m


@pytest.mark.parametrize("kind, named", [
    ("stream", "stream read"), ("gather", "gather 64 B"), ("everything", "gather 512 B"),
])
def test_a_busy_hosts_curves_are_written_with_a_warning(tmp_path, capsys, monkeypatch, kind,
                                                        named):
    import math

    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.cpu import host_bench as bench

    monkeypatch.setattr(bench, "measure_all", lambda threads, sizes, statistic: _busy(kind))
    out = tmp_path / "busy.yaml"
    assert main(["calibrate", "--cpu", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "WARNING: noisy" in err and named in err
    assert "# WARNING: noisy" in out.read_text() and f"# noisy: {named}" in out.read_text()
    cpu = load_config({"hardware": {"preset": str(out)}, "designs": ["hybrid"]}).hardware.cpu
    assert all(math.isfinite(v) and v > 0 for v in (cpu.dram_GBps, cpu.core_dram_GBps)
               if isinstance(v, float))
    assert all(0 < y <= 1 for _, y in cpu.gather_efficiency)


# -- first contact: YAML 1.2 numbers, one key one name, plot's figure -------------------

@pytest.mark.parametrize("written, value", [
    ("1e-3", 1e-3), ("1E5", 1e5), ("-2.5e+3", -2500.0), ("1e300", 1e300), (".5", 0.5),
    ("+1.5E-2", 0.015),
])
def test_yaml_12_floats_are_numbers_in_files_and_set(cfg, tmp_path, capsys, written, value):
    from scratchpipe_sim.config.loader import load_yaml_text, parse_yaml_value

    assert parse_yaml_value(written) == value and isinstance(parse_yaml_value(written), float)
    assert load_yaml_text(f"x: {written}\ny: [{written}]\n", None) == {"x": value,
                                                                       "y": [value]}
    # on the command line: a number, so the schema's range check speaks, not "got a str"
    code = main(["config", "show", str(cfg), "--set", f"hardware.prices.gpu_usd_per_hour="
                 f"{written}"])
    err = capsys.readouterr().err
    assert "(str)" not in err and "Traceback" not in err
    # a number: shown, or refused by the key's physical range (negative, 1e300), by name
    assert code == 0 or (code == 2 and "hardware.prices.gpu_usd_per_hour" in err
                         and len(err.strip().splitlines()) == 1)
    assert code == 0 or value < 0 or value > 1e6


@pytest.mark.parametrize("written", ["1e", "e5", "1.2.3", "1e3x", "0x1p3", "1e5e5", "v1.2"])
def test_text_that_only_looks_like_a_number_stays_text(cfg, capsys, written):
    from scratchpipe_sim.config.loader import load_yaml_text, parse_yaml_value

    assert parse_yaml_value(written) == written
    assert load_yaml_text(f"x: {written}\n", None) == {"x": written}
    assert main(["config", "show", str(cfg), "--set", f"name={written}"]) == 0
    assert f"name: {written}" in capsys.readouterr().out


def test_exponent_floats_in_a_config_file_run(tmp_path, capsys):
    text = yaml.safe_dump(SMALL).replace("alpha: 1.1", "alpha: 11e-1")
    p = tmp_path / "exp.yaml"
    p.write_text(text.replace("hardware:\n  preset: a100-gen4",
                              "hardware:\n  preset: a100-gen4\n  cpu: {dram_GBps: 1.5e2}"))
    assert main(["config", "show", str(p)]) == 0
    out = capsys.readouterr().out
    assert "dram_GBps: 150.0" in out and "alpha: 1.1" in out


@pytest.mark.parametrize("command", ["config-show", "run", "sweep"])
def test_a_key_has_one_name_in_config_show_run_and_sweep(cfg, tmp_path, capsys, command):
    argv = {"config-show": ["config", "show", str(cfg), "--set", "trace.seed=-1"],
            "run": ["run", str(cfg), "--set", "trace.seed=-1", "--out",
                    str(tmp_path / "o"), "-q"],
            "sweep": ["sweep", "{exp}", "--dry-run"]}[command]
    if command == "sweep":
        exp = tmp_path / "sw.yaml"
        exp.write_text(f"base: {json.dumps(SMALL)}\nsweep: {{grid: {{trace.seed: [1, -1]}}}}\n")
        argv = ["sweep", str(exp), "--out", str(tmp_path / "o"), "-q"]
    err = refused(argv, "trace.seed", ">= 0", cwd=tmp_path, capsys=capsys)
    assert "trace.params" not in err


@pytest.mark.parametrize("key, value", [("model.batch_size", "1000000"),
                                        ("model.pooling", "100000"),
                                        ("model.num_batches", "1000000")])
def test_the_memory_check_blames_the_key_that_grew(cfg, tmp_path, capsys, key, value):
    err = refused(["run", str(cfg), "--set", f"{key}={value}", "--out", str(tmp_path / "o"),
                   "-q"], f"{cfg}: {key}:", "of memory", cwd=tmp_path, capsys=capsys,
                  env={"SCRATCHPIPE_MEMORY_BYTES": "50000000"})
    assert "model.tables.rows:" not in err and "trace.path:" not in err


def test_a_built_traces_memory_check_names_the_config_key(cfg, monkeypatch):
    """After the trace is built (an auto warm-up may lengthen it), the check blames the
    same key as before it (it used to blame trace.path, which the config never set)."""
    from scratchpipe_sim.config import load_config
    from scratchpipe_sim.errors import UserError
    from scratchpipe_sim.timing.trace_setup import check_trace_memory, config_trace

    for key, value in (("model.batch_size", 5000), ("model.tables.rows", 1_000_000)):
        c = load_config(str(cfg), [f"{key}={value}"])
        trace = config_trace(c, cache=False)
        monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", "1000")
        with pytest.raises(UserError) as e:
            check_trace_memory(c, trace, source=c.source)
        assert e.value.field == key
        # the generator's own check (one batch's memory) names the config's key too
        with pytest.raises(UserError) as e:
            config_trace(load_config(str(cfg), ["model.batch_size=5000"]), cache=False)
        assert e.value.field == "model.batch_size"
        monkeypatch.delenv("SCRATCHPIPE_MEMORY_BYTES")


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "l1")
    return tmp_path / "loop.yaml"


@pytest.mark.parametrize("argv, field", [
    (["plot", "{loop}"], None),
    (["report", "{loop}"], None),
    (["compare", "{loop}"], None),
    (["config", "show", "{cfg}", "--set", "hardware.preset={loop}"], "hardware.preset"),
    (["sweep", "{exp}", "--dry-run"], "include"),
    (["trace", "gen", "--distribution", "reuse-distance", "--param", "profile={loop}",
      "--seed", "1", "--rows", "10", "--batch-size", "2", "--batches", "2", "--out",
      "{tmp}/t.sptrace"], None),
])
def test_a_symlink_loop_is_never_no_such_file(cfg, tmp_path, capsys, loop, argv, field):
    exp = tmp_path / "inc.yaml"
    exp.write_text(f"include: {loop}\nsweep: {{grid: {{seed: [1, 2]}}}}\n")
    argv = [a.format(loop=loop, cfg=cfg, exp=exp, tmp=tmp_path) for a in argv]
    err = refused(argv, "a symlink loop", cwd=tmp_path, capsys=capsys)
    assert "no such" not in err and (field is None or field in err)


def test_plot_says_which_figure_it_drew_and_figure_chooses(cfg, run_folder, tmp_path,
                                                           capsys):
    assert main(["sensitivity", str(cfg), "--samples", "1", "--out", str(run_folder)]) == 0
    capsys.readouterr()
    # default: the run's figure, and a note naming the other
    assert main(["plot", str(run_folder), "--format", "png"]) == 0
    io = capsys.readouterr()
    assert io.out.split() == [str(run_folder / "figures" / "stage-breakdown.png")]
    assert "tornado" in io.err and "--figure tornado" in io.err
    assert len(io.err.strip().splitlines()) == 1
    # --figure chooses: the sensitivity's tornado, or both
    assert main(["plot", str(run_folder), "--format", "png", "--figure", "tornado"]) == 0
    assert capsys.readouterr().out.split() == [str(run_folder / "figures" / "tornado.png")]
    assert main(["plot", str(run_folder), "--format", "png", "--figure", "tornado",
                 "--figure", "stage-breakdown"]) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(
        str(run_folder / "figures" / f"{n}.png") for n in ("tornado", "stage-breakdown"))
    for name in (run_folder / "figures").iterdir():
        name.unlink()
    refused(["plot", str(run_folder), "--figure", "tornado", "--figure", "no-such-figure"],
            "no-such-figure", cwd=tmp_path, capsys=capsys)
    assert not list((run_folder / "figures").iterdir())  # refused before drawing any
