"""Issue 42, the hostile-input corpus over this wave's new inputs: sampled runs (`--sample`,
`--salts`), time ranges (`--ranges`), `trace convert` of Criteo days, `trace gen --preset`,
`hardware.cluster` and the cluster design's sharding keys, TorchRec statistics files and
`torchrec-plan --world-size`, and the Python API's equivalents. Each case: exit 2 with one
line naming the key or file, no traceback, in bounded time (a limit checked before the work
it bounds) and nothing lost (a failed `trace convert` leaves an earlier OUT as it was)."""

from __future__ import annotations

import copy
import gzip
import hashlib
from pathlib import Path

import pytest
import yaml
from cli_errors import one_line_error
from criteo_days import day_lines, write_day
from small_configs import SHORT_A100

import scratchpipe_sim.api as api
from scratchpipe_sim.cli import main
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.generators import generate_trace


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(SHORT_A100))
    return p


def _run(cfg: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["run", str(cfg), "--no-cache", "-q", "--out", str(tmp_path / "out"), *extra]


# -- sampled runs -------------------------------------------------------------------------------
@pytest.mark.parametrize("rate, words", [
    ("0", ["trace.sample_rate", "> 0"]),
    ("1.5", ["trace.sample_rate", "<= 1"]),
    ("nan", ["trace.sample_rate", "finite"]),
    ("1e-12", ["trace.sample_rate", "keeps no row"]),
    ("1e-7", ["trace.sample_rate", "keeps no row of table 0"]),
])
def test_a_sampling_rate_outside_the_range_or_keeping_no_row(cfg, tmp_path, capsys, rate,
                                                              words):
    one_line_error(capsys, _run(cfg, tmp_path, "--sample", rate), *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("salts, words", [("0", [">= 1"]), ("-1", [">= 1"]), ("65", ["<= 64"])])
def test_salts_outside_their_range(cfg, tmp_path, capsys, salts, words):
    one_line_error(capsys, _run(cfg, tmp_path, "--sample", "0.5", "--salts", salts),
                   "trace.sample_salts", *words)


# -- time ranges --------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, words", [
    (["--ranges", "0"], [">= 1"]),
    (["--ranges", "-2"], [">= 1"]),
    (["--ranges", "3", "--sample", "0.5"], ["not with a sampled run"]),
    (["--ranges", "2", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:1"],
     ["--scheduler", "cannot reach the Dask scheduler"]),
])
def test_bad_time_ranges(cfg, tmp_path, capsys, extra, words):
    if "dask" in extra:
        pytest.importorskip("distributed")
    # lru-cache alone: the policies time ranges do not apply to warn (a line each)
    err = one_line_error(capsys, _run(cfg, tmp_path, "--design", "lru-cache", *extra), *words)
    assert "--ranges" in err or "--scheduler" in err
    assert "cache.params" not in err  # a flag is named as the flag, never as a policy key


# -- trace convert of Criteo days ---------------------------------------------------------------
def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(p.name.encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def converted(tmp_path: Path) -> Path:
    """An OUT an earlier conversion wrote: a failed one with --force must leave it whole."""
    out = tmp_path / "o.sptrace"
    day = write_day(tmp_path / "good_day", day_lines(200, 5))
    assert main(["trace", "convert", str(day), str(out), "--rows", "1000", "-q"]) == 0
    return out


def _garbage_gz(tmp_path: Path) -> tuple[Path, list[str]]:
    p = tmp_path / "garbage.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00" + b"junk" * 100)
    return p, ["gzip file damaged", "expected a complete .gz file"]


def _bad_integer(tmp_path: Path) -> tuple[Path, list[str]]:
    lines = day_lines(900, 6)
    fields = lines[876].split("\t")
    fields[3] = "1e999"
    lines[876] = "\t".join(fields)
    p = write_day(tmp_path / "day_int", lines)
    return p, [f"{p}:877", "I3 (field 4)", "expected an integer"]


def _truncated_second_day(tmp_path: Path) -> tuple[Path, list[str]]:
    data = gzip.compress(("\n".join(day_lines(2000, 7)) + "\n").encode())
    p = tmp_path / "day_2.gz"
    p.write_bytes(data[: len(data) // 2])
    return p, [str(p), "gzip file truncated"]


def _binary(tmp_path: Path) -> tuple[Path, list[str]]:
    p = tmp_path / "day_bin"
    p.write_bytes(bytes(range(256)) * 10)
    return p, [f"{p}:1", "expected 40 tab-separated fields"]


@pytest.mark.parametrize("make", [_garbage_gz, _bad_integer, _truncated_second_day, _binary])
def test_a_damaged_day_names_file_line_and_field_and_keeps_the_old_out(converted, tmp_path,
                                                                        capsys, make):
    before = _tree_digest(converted)
    day, words = make(tmp_path)
    first = write_day(tmp_path / "day_1", day_lines(300, 8))
    one_line_error(capsys, ["trace", "convert", "--format", "criteo", str(first), str(day),
                            str(converted), "--force", "--rows", "1000", "-q"], *words)
    assert _tree_digest(converted) == before  # nothing lost
    assert sorted(p.name for p in tmp_path.iterdir() if "o.sptrace" in p.name) == ["o.sptrace"]


def test_a_glob_matching_nothing_names_the_pattern(tmp_path, capsys):
    one_line_error(capsys, ["trace", "convert", "--format", "criteo",
                            str(tmp_path / "day_*.gz"), str(tmp_path / "o.sptrace")],
                   "day_*.gz", "no file matches")


# -- trace gen --preset -------------------------------------------------------------------------
def _preset(tmp_path: Path, text: str) -> str:
    p = tmp_path / "preset.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("preset, words", [
    (lambda t: "criteo-terabyte-da", ["--preset", "did you mean 'criteo-terabyte-day'"]),
    (lambda t: str(t / "missing.yaml"), ["--preset", "no preset"]),
    (lambda t: _preset(t, "- a\n"), ["expected a mapping"]),
    (lambda t: _preset(t, "tables: 3\n"), ["tables", "unknown key"]),
])
def test_a_bad_generator_preset(tmp_path, capsys, preset, words):
    out = tmp_path / "g.sptrace"
    one_line_error(capsys, ["trace", "gen", "--preset", preset(tmp_path), "--seed", "1",
                            "--out", str(out), "-q"], *words)
    assert not out.exists()


def test_a_preset_override_of_the_wrong_length(tmp_path, capsys):
    one_line_error(capsys, ["trace", "gen", "--preset", "criteo-terabyte-day", "--pooling",
                            "1,2", "--seed", "1", "--out", str(tmp_path / "g.sptrace")],
                   "--pooling", "one pooling factor per table (26)")


# -- hardware.cluster and the cluster design's keys ---------------------------------------------
@pytest.fixture
def cluster_cfg(tmp_path: Path) -> Path:
    c = copy.deepcopy(SHORT_A100)
    c["hardware"] = {"preset": "dgx-a100-cluster", "cluster": {"nodes": 2}}
    c["designs"] = ["cluster"]
    p = tmp_path / "cluster.yaml"
    p.write_text(yaml.safe_dump(c))
    return p


@pytest.mark.parametrize("setting, words", [
    ("hardware.cluster.nic_GBps=0", ["hardware.cluster.nic_GBps", "> 0"]),
    ("hardware.cluster.nic_GBps=-3", ["hardware.cluster.nic_GBps", "> 0"]),
    ("hardware.cluster.net_latency_ns=-1", ["hardware.cluster.net_latency_ns", ">= 0"]),
    ("hardware.cluster.nodes=0", ["hardware.cluster.nodes", ">= 1"]),
    ("hardware.cluster.nics_per_node=0", ["hardware.cluster.nics_per_node", ">= 1"]),
    ("hardware.cluster.nodes=1000000000", ["hardware.cluster.nodes", "8,000,000,000 GPUs",
                                            "SCRATCHPIPE_MAX_CLUSTER_RANKS"]),
    ("hardware.interconnect.gpus_per_node=1000000",
     ["hardware.interconnect.gpus_per_node", "2,000,000 GPUs"]),
    ("design_params.cluster.shard_group=3", ["design_params.cluster.shard_group",
                                             "does not divide the cluster's 16 ranks"]),
    ("design_params.cluster.shard_group=64", ["design_params.cluster.shard_group",
                                              "expected a divisor of 16"]),
    ("design_params.cluster.placement={5: [0]}", ["design_params.cluster.placement.5",
                                                  "no table '5'"]),
    ("design_params.cluster.placement={0: [99]}", ["design_params.cluster.placement.0",
                                                   "rank 99"]),
    ("design_params.cluster.placement={0: []}", ["design_params.cluster.placement.0"]),
])
def test_bad_cluster_keys(cluster_cfg, tmp_path, capsys, setting, words):
    one_line_error(capsys, ["run", str(cluster_cfg), "--set", setting, "--no-cache", "-q",
                            "--out", str(tmp_path / "out")], str(cluster_cfg), *words)
    assert not (tmp_path / "out").exists()


def test_the_cluster_limit_can_be_raised(cluster_cfg, capsys, monkeypatch):
    monkeypatch.setenv("SCRATCHPIPE_MAX_CLUSTER_RANKS", "16")
    assert main(["config", "show", str(cluster_cfg)]) == 0
    capsys.readouterr()
    one_line_error(capsys, ["config", "show", str(cluster_cfg), "--set",
                            "hardware.cluster.nodes=3"], "24 GPUs", "at most 16")


# -- TorchRec statistics files and world sizes --------------------------------------------------
@pytest.fixture(scope="module")
def torchrec_setup(tmp_path_factory):
    pytest.importorskip("torchrec")
    d = tmp_path_factory.mktemp("torchrec")
    for name, rows in (("a", [400, 400]), ("b", [300, 300, 300])):
        t = generate_trace("zipf", rows, 64, 8, 2, seed=1)
        from scratchpipe_sim.traces.store import write_trace

        write_trace(t, d / f"{name}.sptrace")
        assert main(["trace", "stats", str(d / f"{name}.sptrace"), "--torchrec",
                     str(d / f"{name}.json")]) == 0
    c = copy.deepcopy(SHORT_A100)
    c["model"]["batch_size"] = 64
    c["model"]["tables"] = {"count": 2, "rows": 400, "dim": 16}
    c["trace"] = {"path": str(d / "a.sptrace")}
    (d / "tr.yaml").write_text(yaml.safe_dump(c))
    (d / "bad.json").write_text("{oops")
    (d / "list.json").write_text("[1, 2]")
    return d


@pytest.mark.parametrize("stats, words", [
    ("b.json", ["b.json", "tables", "3 tables of rows 300", "expected the same tables"]),
    ("bad.json", ["bad.json", "cannot read as JSON"]),
    ("list.json", ["list.json", "not a statistics file"]),
    ("missing.json", ["missing.json", "--stats", "no such statistics file"]),
])
def test_a_statistics_file_from_elsewhere(torchrec_setup, capsys, stats, words):
    d = torchrec_setup
    capsys.readouterr()
    one_line_error(capsys, ["torchrec-plan", str(d / "tr.yaml"), "--stats", str(d / stats)],
                   *words)


@pytest.mark.parametrize("world, words", [
    ("0", ["--world-size", "0 GPUs"]),
    ("12", ["--world-size", "whole hosts"]),
    ("1000000000", ["--world-size", "1,000,000,000 GPUs", "SCRATCHPIPE_MAX_WORLD_SIZE"]),
])
def test_a_world_size_the_topology_cannot_hold(torchrec_setup, capsys, world, words):
    d = torchrec_setup
    capsys.readouterr()
    one_line_error(capsys, ["torchrec-plan", str(d / "tr.yaml"), "--world-size", world],
                   *words)


@pytest.mark.parametrize("out, words", [
    (lambda d: d / "nowhere" / "s.json", ["--torchrec", "does not exist"]),
    (lambda d: d, ["Is a directory"]),
])
def test_trace_stats_torchrec_output_that_cannot_be_written(torchrec_setup, capsys, out,
                                                            words):
    d = torchrec_setup
    capsys.readouterr()
    one_line_error(capsys, ["trace", "stats", str(d / "a.sptrace"), "--torchrec",
                            str(out(d))], *words)


# -- the Python API's equivalents ---------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"sample": 0}, ["trace.sample_rate", "> 0"]),
    ({"sample": "0.5"}, ["trace.sample_rate", "expected a number"]),
    ({"sample": True}, ["trace.sample_rate", "expected a number"]),
    ({"sample": 0.5, "salts": 10**9}, ["trace.sample_salts", "<= 64"]),
    ({"sample": 0.5, "salts": 2.5}, ["trace.sample_salts", "an integer"]),
    ({"ranges": 0}, ["ranges", ">= 1"]),
    ({"ranges": "3"}, ["ranges", ">= 1"]),
    ({"ranges": True}, ["ranges", ">= 1"]),
    ({"ranges": 2, "executor": "bogus"}, ["executor", "bogus"]),
    ({"**": {"hardware.cluster.nodes": 0}}, ["hardware.cluster.nodes"]),
])
def test_the_api_raises_its_own_error_naming_the_key(kwargs, words):
    kwargs = dict(kwargs)
    dotted = kwargs.pop("**", {})
    with pytest.raises(UserError) as e:
        api.simulate(copy.deepcopy(SHORT_A100), ["lru-cache"], replay_cache=False,
                     **kwargs, **dotted)
    text = str(e.value)
    assert "\n" not in text
    for w in words:
        assert w in text, (w, text)


@pytest.mark.parametrize("args, words", [
    (("lru", 10, 0), ["ranges", ">= 1"]),
    (("lru", 10, "2"), ["ranges", ">= 1"]),
    (("lru", 0, 2), ["capacity"]),
    (("nope", 10, 2), ["policy", "unknown policy 'nope'"]),
])
def test_api_time_ranges_refuse_alike(args, words):
    t = generate_trace("zipf", [300], 16, 6, 2, seed=1)
    with pytest.raises(UserError) as e:
        api.replay_time_ranges(t, *args, executor="local")
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_a_dense_remap_dictionary_beyond_the_memory_is_one_line(converted, tmp_path, capsys,
                                                                 monkeypatch):
    """Every distinct (table, value) costs ~100 bytes: a day of distinct values on a small
    memory is refused a block at a time (not an OOM kill), and the earlier OUT is kept."""
    before = _tree_digest(converted)
    day = write_day(tmp_path / "wide", day_lines(2000, 3, vocab=10**6))
    monkeypatch.setenv("SCRATCHPIPE_MEMORY_BYTES", "200000")
    one_line_error(capsys, ["trace", "convert", "--dense-remap", str(day), str(converted),
                            "--force", "-q"], str(day), "--dense-remap",
                   "distinct (table, value) pairs", "expected --rows N")
    assert _tree_digest(converted) == before


def test_row_counts_for_the_wrong_tables_name_the_flag(tmp_path, capsys):
    day = write_day(tmp_path / "day", day_lines(50, 1))
    err = one_line_error(capsys, ["trace", "convert", "--rows", "5,6", str(day),
                                  str(tmp_path / "o.sptrace")], "--rows",
                         "2 row counts for 26 tables")
    assert "options" not in err
