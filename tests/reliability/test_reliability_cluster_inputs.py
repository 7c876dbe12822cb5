"""Issue 44's "Bad input", as a new user meets it: every key of the `cluster` design and its
hardware (`hardware.pcie.gpus_per_switch` / `switch_uplink_GBps`, the HBM the batches in
flight hold, `design_params.cluster.*`) given the wrong type, zero, a negative, NaN, a huge
value, an unknown name, a table or rank that does not exist, or a combination that cannot
hold. Each is one line naming the file and the dotted key and what was expected, exit 2, no
traceback, nothing written, from a YAML file and from `--set` alike (and from a sweep and
the Python API). The cases test_reliability_wave_inputs.py, test_reliability_column_wise.py
and test_reliability_cluster_pipeline.py hold are not repeated here."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from cli_errors import one_line_error
from small_configs import nested, one_node_two_tables

import scratchpipe_sim.api as api
from scratchpipe_sim.cli import main
from scratchpipe_sim.config import deep_merge
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.timing.placement import column_block

K = "design_params.cluster"
HUGE = 10**18


def _base() -> dict:
    """Two DGX H100 nodes (16 ranks), two 400-row 128-wide tables: every check below runs
    before anything is priced."""
    return deep_merge(one_node_two_tables(), {"hardware": {"cluster": {"nodes": 2}}})


def _argv(path: Path, tmp_path: Path, *sets: str) -> list[str]:
    return ["run", str(path), "--no-cache", "-q", "--no-timeline", "--out",
            str(tmp_path / "out"), *(a for s in sets for a in ("--set", s))]


def _check(tmp_path: Path, capsys, settings: dict, via: str, *words: str) -> str:
    """`settings` (dotted key -> Python value) from the YAML file or as --set; the error
    names the file and `words`; no results folder. Returns the line."""
    path = tmp_path / "c.yaml"
    if via == "yaml":
        cfg = _base()
        for k, v in settings.items():
            cfg = deep_merge(cfg, nested(k, v))
        path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
        argv = _argv(path, tmp_path)
    else:
        path.write_text(yaml.safe_dump(_base()))
        argv = _argv(path, tmp_path, *(f"{k}={json.dumps(v, ensure_ascii=False)}"
                                       for k, v in settings.items()))
    line = one_line_error(capsys, argv, str(path), *words)
    assert not (tmp_path / "out").exists()
    return line


# -- hardware.pcie: the PCIe switch GPUs share (DGX A100) ----------------------------------------
PCIE = [
    ({"hardware.pcie.gpus_per_switch": 0}, ["hardware.pcie.gpus_per_switch", ">= 1"]),
    ({"hardware.pcie.gpus_per_switch": -8}, ["hardware.pcie.gpus_per_switch", ">= 1"]),
    ({"hardware.pcie.gpus_per_switch": 3},
     ["hardware.pcie.gpus_per_switch", "do not divide", "expected a divisor of 8"]),
    ({"hardware.pcie.gpus_per_switch": 16},
     ["hardware.pcie.gpus_per_switch", "expected a divisor of 8"]),
    ({"hardware.pcie.gpus_per_switch": HUGE}, ["hardware.pcie.gpus_per_switch", "a typo?"]),
    ({"hardware.pcie.gpus_per_switch": "two"},
     ["hardware.pcie.gpus_per_switch", "expected an integer"]),
    ({"hardware.pcie.gpus_per_switch": True},
     ["hardware.pcie.gpus_per_switch", "expected an integer"]),
    ({"hardware.pcie.gpus_per_switch": 2.5},
     ["hardware.pcie.gpus_per_switch", "expected an integer"]),
    ({"hardware.pcie.gpus_per_switch": [2]},
     ["hardware.pcie.gpus_per_switch", "expected an integer"]),
    # DGX A100: two GPUs behind each PCIe switch, so a node of 5 GPUs cannot fill them
    ({"hardware.preset": "dgx-a100-cluster", "hardware.interconnect.gpus_per_node": 5},
     ["hardware.pcie.gpus_per_switch", "2 GPUs per PCIe switch", "expected a divisor of 5"]),
    ({"hardware.pcie.switch_uplink_GBps": 0}, ["hardware.pcie.switch_uplink_GBps", "> 0"]),
    ({"hardware.pcie.switch_uplink_GBps": -25}, ["hardware.pcie.switch_uplink_GBps", "> 0"]),
    ({"hardware.pcie.switch_uplink_GBps": 1e19},
     ["hardware.pcie.switch_uplink_GBps", "a typo?"]),
    ({"hardware.pcie.switch_uplink_GBps": 1e-300},
     ["hardware.pcie.switch_uplink_GBps", "a typo?"]),
    ({"hardware.pcie.switch_uplink_GBps": "fast"},
     ["hardware.pcie.switch_uplink_GBps", "expected a number or null"]),
    ({"hardware.pcie.switch_uplink_GBps": {"a": 1}},
     ["hardware.pcie.switch_uplink_GBps", "expected a number or null"]),
]

# -- design_params.cluster: types, ranges, names ------------------------------------------------
PARAMS = [
    ({f"{K}.sharding": "diagonal"}, [f"{K}.sharding", "unknown value 'diagonal'"]),
    ({f"{K}.sharding": 1}, [f"{K}.sharding", "expected a string"]),
    ({f"{K}.sharding": None}, [f"{K}.sharding", "expected a string"]),
    ({f"{K}.column_shard_dim": 0}, [f"{K}.column_shard_dim", ">= 4"]),
    ({f"{K}.column_shard_dim": -4}, [f"{K}.column_shard_dim", ">= 4"]),
    ({f"{K}.column_shard_dim": "six"}, [f"{K}.column_shard_dim", "expected an integer"]),
    ({f"{K}.column_shard_dim": True}, [f"{K}.column_shard_dim", "expected an integer"]),
    ({f"{K}.column_shard_dim": 1e18}, [f"{K}.column_shard_dim", "expected an integer"]),
    ({f"{K}.columns": 3}, [f"{K}.columns", "expected a mapping or null"]),
    ({f"{K}.columns": [2]}, [f"{K}.columns", "expected a mapping or null"]),
    ({f"{K}.columns": {"0": HUGE}}, [f"{K}.columns.0", "expected a divisor of 128"]),
    ({f"{K}.columns": {"-1": 2}}, [f"{K}.columns.-1", "no table '-1'"]),
    ({f"{K}.dp_max_MiB": -1}, [f"{K}.dp_max_MiB", ">= 0"]),
    ({f"{K}.dp_max_MiB": 1e18}, [f"{K}.dp_max_MiB", "a typo?"]),
    ({f"{K}.trace_scope": "local"}, [f"{K}.trace_scope", "did you mean 'global'"]),
    ({f"{K}.placement": [0]}, [f"{K}.placement", "expected a mapping or null"]),
    ({f"{K}.placement": {"0": [-1]}}, [f"{K}.placement.0", "rank -1", "ranks 0-15"]),
    ({f"{K}.placement": {"0": [HUGE]}}, [f"{K}.placement.0", "ranks 0-15"]),
    ({f"{K}.placement": {"0": [1, 1]}}, [f"{K}.placement.0", "expected distinct ranks"]),
    ({f"{K}.placement": {"0": [1, 3]}}, [f"{K}.placement.0", "a run of consecutive ranks"]),
    ({f"{K}.shard_group": 0}, [f"{K}.shard_group", ">= 1"]),
    ({f"{K}.shard_group": -8}, [f"{K}.shard_group", ">= 1"]),
    ({f"{K}.shard_group": 8.0}, [f"{K}.shard_group", "expected an integer or null"]),
    ({f"{K}.shard_group": HUGE}, [f"{K}.shard_group", "expected a divisor of 16"]),
    ({f"{K}.shard_group": 8, f"{K}.placement": {"1": [8]}},
     [f"{K}.placement.1", "rank 8 is beyond the shard group's 8 ranks"]),
    ({f"{K}.sync_every_batches": 0}, [f"{K}.sync_every_batches", ">= 1"]),
    ({f"{K}.sync_every_batches": 1e18}, [f"{K}.sync_every_batches", "expected an integer"]),
    ({f"{K}.rank_cache": "lru"}, [f"{K}.rank_cache", "did you mean 'lru-cache'"]),
    ({f"{K}.rank_cache": True}, [f"{K}.rank_cache", "expected a string"]),
    ({f"{K}.cached_ranks": 0}, [f"{K}.cached_ranks", ">= 1"]),
    ({f"{K}.dedup": 1}, [f"{K}.dedup", "expected true or false"]),
    ({f"{K}.dedup": None}, [f"{K}.dedup", "expected true or false"]),
    ({f"{K}.sequence_copies": "some"}, [f"{K}.sequence_copies", "expected one of: torchrec"]),
    ({f"{K}.sequence_copies": False}, [f"{K}.sequence_copies", "expected a string"]),
    ({f"{K}.unpooled_exchange": "uneven"}, [f"{K}.unpooled_exchange", "did you mean 'even'"]),
    ({f"{K}.unpooled_exchange": 0}, [f"{K}.unpooled_exchange", "expected a string"]),
    ({f"{K}.pipeline": None}, [f"{K}.pipeline", "expected a string"]),
    ({f"{K}.pipeline": "nestpipe", f"{K}.microbatches": True},
     [f"{K}.microbatches", "expected an integer"]),
    ({f"{K}.pipeline": "nestpipe", f"{K}.microbatches": -HUGE}, [f"{K}.microbatches", ">= 1"]),
    ({f"{K}.pipeline": "nestpipe", f"{K}.microbatches": HUGE}, [f"{K}.microbatches"]),
    ({f"{K}.nosuchkey": 1}, [f"{K}.nosuchkey", "unknown key"]),
    ({K: [1]}, [K, "expected a mapping"]),
    # a rank cache bigger than the GPU's HBM
    ({f"{K}.rank_cache": "lru-cache", "cache.capacity_rows": HUGE},
     ["cache.capacity_rows", "expected a cache that fits in HBM"]),
]


@pytest.mark.parametrize("via", ["yaml", "set"])
@pytest.mark.parametrize("settings, words", PCIE + PARAMS)
def test_bad_cluster_input_is_one_line_naming_the_key(tmp_path, capsys, settings, words, via):
    _check(tmp_path, capsys, settings, via, *words)


# -- defects this audit fixed (each failed before its fix) --------------------------------------
#: a wrong element inside an optional mapping (`columns`, `placement`): the element's own key
#: and type, not "expected a mapping or null, got {...} (dict)"
ELEMENTS = [
    ({f"{K}.columns": {"0": "two"}}, [f"{K}.columns.0", "expected an integer, got 'two'"]),
    ({f"{K}.columns": {"0": 2.0}}, [f"{K}.columns.0", "expected an integer, got 2.0"]),
    ({f"{K}.placement": {"0": ["two"]}}, [f"{K}.placement.0[0]", "expected an integer"]),
    ({f"{K}.placement": {"0": [True]}}, [f"{K}.placement.0[0]", "expected an integer"]),
    ({f"{K}.placement": {"0": 3}}, [f"{K}.placement.0", "expected a list"]),
    ({f"{K}.placement": {"0": None}}, [f"{K}.placement.0", "expected a list"]),
]


@pytest.mark.parametrize("via", ["yaml", "set"])
@pytest.mark.parametrize("settings, words", ELEMENTS)
def test_a_bad_element_of_an_optional_mapping_names_the_element(tmp_path, capsys, settings,
                                                                words, via):
    _check(tmp_path, capsys, settings, via, *words)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nan_for_an_optional_rate_says_finite(tmp_path, capsys, value):
    """`.nan` in the file for the optional uplink: a finite number expected, not "a number
    or null, got nan (float)"."""
    _check(tmp_path, capsys, {"hardware.pcie.switch_uplink_GBps": value}, "yaml",
           "hardware.pcie.switch_uplink_GBps", "expected a finite number")


#: table keys str.isdigit accepts but are no table index: a superscript digit (int() raised
#: ValueError, a traceback), and spellings that made a second key for one table ("00" beside
#: "0": one silently won, and `columns` / `placement` compared them as different tables)
TABLE_KEYS = [
    ({f"{K}.columns": {"²": 2}}, [f"{K}.columns.²", "no table '²'", "a table index 0-1"]),
    ({f"{K}.placement": {"²": [0]}}, [f"{K}.placement.²", "no table '²'"]),
    ({f"{K}.placement": {"00": [1]}}, [f"{K}.placement.00", "no table '00'"]),
    ({f"{K}.columns": {"01": 1}}, [f"{K}.columns.01", "no table '01'"]),
    ({f"{K}.placement": {"٣": [1]}}, [f"{K}.placement.٣", "no table '٣'"]),
]


@pytest.mark.parametrize("via", ["yaml", "set"])
@pytest.mark.parametrize("settings, words", TABLE_KEYS)
def test_a_table_key_that_only_looks_like_an_index(tmp_path, capsys, settings, words, via):
    _check(tmp_path, capsys, settings, via, *words)


@pytest.mark.parametrize("settings, words", [
    ({f"{K}.columns": {"0": 0}}, [f"{K}.columns.0", "expected a divisor of 128"]),
    ({f"{K}.columns": {"5": 2}}, [f"{K}.columns.5", "no table '5'"]),
    ({f"{K}.placement": {"0": [16]}}, [f"{K}.placement.0", "ranks 0-15"]),
    ({f"{K}.sharding": "column-wise", f"{K}.column_shard_dim": 4},
     [f"{K}.column_shard_dim", "at least 8"]),
])
def test_a_mistake_that_is_no_fit_says_nothing_of_hbm(tmp_path, capsys, settings, words):
    """The "(each GPU's HBM less ... the batches in flight hold)" note belongs to the shards
    that do not fit, not to a table or rank that does not exist."""
    assert "batches in flight" not in _check(tmp_path, capsys, settings, "set", *words)


def test_shards_beyond_a_ranks_host_dram_say_host_dram(tmp_path, capsys):
    """With a rank cache the shards live in each rank's share of its node's host DRAM: the
    line says so and names the key that sets it, not "GPUs of 1.25e-07 GiB" alone."""
    _check(tmp_path, capsys, {f"{K}.rank_cache": "lru-cache", f"{K}.sharding": "row-wise",
                              "hardware.dram_capacity_GiB": 1e-6}, "yaml",
           "hardware.cluster.nodes", "expected more ranks", "host DRAM",
           "hardware.dram_capacity_GiB / interconnect.gpus_per_node = 1.25e-07 GiB a rank")


@pytest.mark.parametrize("via", ["yaml", "set"])
def test_microbatches_have_a_bound_before_any_chunk_is_simulated(tmp_path, capsys, via):
    """Each micro-batch is a simulated chunk: 65,536 of a rank's 65,536 samples priced 3
    batches in 31 s (a run of 1,000 batches: hours). Beyond 1,024 is a typo."""
    _check(tmp_path, capsys, {"model.batch_size": 16 * 2048, f"{K}.pipeline": "nestpipe",
                              f"{K}.microbatches": 2048}, via,
           f"{K}.microbatches", "<= 1024")


@pytest.mark.parametrize("settings, words", [
    ({"model.batch_size": 7}, ["7 samples over the cluster's 16 ranks is 0.4375 a rank",
                               "expected a multiple of 16"]),
    ({"model.batch_size": 24}, ["1.5 a rank", "expected a multiple of 16"]),
    ({"model.batch_size": 12, f"{K}.shard_group": 8, f"{K}.trace_scope": "shard-group"},
     ["over a shard group's 8 ranks is 1.5 a rank", "expected a multiple of 8"]),
])
def test_a_batch_the_ranks_cannot_share_whole(tmp_path, capsys, settings, words):
    """Each rank trains a whole local batch (TorchRec's global batch is the local batch x
    the world size; HugeCTR refuses one its GPUs do not divide): 7 samples on 16 ranks
    priced 0.4375 a rank, some ranks with no sample."""
    _check(tmp_path, capsys, settings, "yaml", "model.batch_size", *words)


@pytest.mark.parametrize("settings, words", [
    ({"hardware.gpu.hbm_capacity_GiB": 0.0001, "hardware.gpu.l2_MiB": 0},
     ["model.batch_size", "of batches in flight", "more than a GPU's 0.0001 GiB"]),
    ({"hardware.gpu.hbm_capacity_GiB": 0.00005, "hardware.gpu.l2_MiB": 0,
      f"{K}.rank_cache": "lru-cache"}, ["cache.load_factor", "the cache needs 7.63e-05 GiB"]),
    ({"hardware.gpu.hbm_capacity_GiB": 0.00005, "hardware.gpu.l2_MiB": 0,
      f"{K}.rank_cache": "lru-cache", "cache.capacity_rows": 1},
     ["model.batch_size", "no room for rank 0's cache"]),
    ({f"{K}.rank_cache": "lru-cache", f"{K}.sharding": "row-wise",
      "hardware.dram_capacity_GiB": 1e-6}, ["hardware.cluster.nodes", "host DRAM"]),
])
def test_small_memories_are_not_said_to_hold_zero_gib(tmp_path, capsys, settings, words):
    """Bytes below 0.01 GiB in three significant digits: "rank 0 holds 0.00 GiB of tables
    and 0.00 GiB of batches in flight, more than a GPU's 0.0001 GiB" read as a bug."""
    assert "0.00 GiB" not in _check(tmp_path, capsys, settings, "yaml", *words)


@pytest.mark.parametrize("settings, key", [
    ({"cache.capacity_rows": 1}, "cache.capacity_rows"),
    ({"cache.load_factor": 0.01}, "cache.load_factor"),
])
def test_a_scratchpipe_rank_cache_too_small_names_the_key_that_sized_it(tmp_path, capsys,
                                                                        settings, key):
    """A rank's scratchpipe cache smaller than its two pinned batches: the key that set its
    capacity (load_factor was blamed as cache.capacity_rows), and no advice to set an
    on_overflow the rank's policy does not read."""
    line = _check(tmp_path, capsys, {f"{K}.rank_cache": "scratchpipe", **settings}, "set",
                  key, "rank cache scratchpipe", "scratchpipe needs capacity >=",
                  f"expected a larger {key}")
    assert "on_overflow" not in line


# -- sweeps and the Python API ------------------------------------------------------------------
def _sweep(tmp_path: Path, grid: dict, designs: list[str]) -> Path:
    base = {k: v for k, v in _base().items() if k != "designs"}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "hostile", "base": base, "designs": designs,
                                    "sweep": {"grid": grid}, "metrics": ["samples_per_s"]},
                                   allow_unicode=True))
    return path


@pytest.mark.parametrize("grid, field", [
    ({f"{K}.pipeline": ["none", "gpipe"]}, f"{K}.pipeline"),
    ({f"{K}.columns": [{"0": "two"}]}, f"{K}.columns.0"),
    ({f"{K}.pipeline": ["nestpipe"], f"{K}.microbatches": [2, 2048]}, f"{K}.microbatches"),
    ({"hardware.pcie.switch_uplink_GBps": [25, 0]}, "hardware.pcie.switch_uplink_GBps"),
])
def test_a_sweep_with_a_bad_key_value_exits_2_before_any_point(tmp_path, capsys, grid, field):
    exp = _sweep(tmp_path, grid, ["cluster"])
    one_line_error(capsys, ["sweep", str(exp), "--out", str(tmp_path / "out"), "-q"],
                   str(exp), "sweep point", field)
    assert not list((tmp_path / "out").glob("*"))  # no manifest, no rows


def test_a_cluster_point_refused_first_is_infeasible_as_when_refused_later(tmp_path, capsys):
    """A design whose input check refuses a point is an infeasible result beside the
    designs that ran. It was an error (exit 1, "rerun with --retry-failed") when the point
    was the first of its trace in the worker (the trace's warm-up check builds every
    design) and infeasible when the trace was already built."""
    exp = _sweep(tmp_path, {f"{K}.placement": [{"²": [0]}, {"0": [99]}, None]},
                 ["multi-gpu", "cluster"])
    assert main(["sweep", str(exp), "--out", str(tmp_path / "out"), "-q"]) == 0
    capsys.readouterr()
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        rows = {(r["index"], r["design"]): r for r in csv.DictReader(f)}
    assert {k: r["status"] for k, r in rows.items()} == {
        ("0", "multi-gpu"): "ok", ("0", "cluster"): "infeasible",
        ("1", "multi-gpu"): "ok", ("1", "cluster"): "infeasible",
        ("2", "multi-gpu"): "ok", ("2", "cluster"): "ok"}
    assert f"{K}.placement.²: no table '²'" in rows["0", "cluster"]["error"]
    assert f"{K}.placement.0: rank 99" in rows["1", "cluster"]["error"]
    assert rows["0", "multi-gpu"]["samples_per_s"] == rows["2", "multi-gpu"]["samples_per_s"]


@pytest.mark.parametrize("dotted, words", [
    ({f"{K}.placement": {"²": [0]}}, [f"{K}.placement.²", "no table"]),
    ({f"{K}.columns": {"0": "two"}}, [f"{K}.columns.0", "expected an integer"]),
    ({f"{K}.pipeline": "nestpipe", f"{K}.microbatches": 2048}, [f"{K}.microbatches", "<= 1024"]),
    ({"hardware.pcie.gpus_per_switch": 3}, ["hardware.pcie.gpus_per_switch", "divisor of 8"]),
    ({"model.batch_size": 7}, ["model.batch_size", "expected a multiple of 16"]),
])
def test_the_api_raises_the_same_line(dotted, words):
    with pytest.raises(UserError) as e:
        api.simulate(_base(), ["cluster"], replay_cache=False, **dotted)
    text = str(e.value)
    assert "\n" not in text
    for w in words:
        assert w in text, (w, text)


@pytest.mark.parametrize("ranges, words", [
    ({"cluster.nic_GBps": [0, 10]}, ["hardware.ranges.cluster.nic_GBps", "low end 0",
                                      "expected a value > 0"]),
    ({"pcie.switch_uplink_GBps": [0, 25]},
     ["hardware.ranges.pcie.switch_uplink_GBps", "low end 0", "expected a value > 0"]),
    ({"interconnect.alltoall_efficiency": [0.5, 1.5]},
     ["hardware.ranges.interconnect.alltoall_efficiency", "high end 1.5", "<= 1"]),
])
def test_a_sensitivity_range_end_a_key_refuses_names_the_range(tmp_path, capsys, ranges,
                                                                 words):
    """`sensitivity` varies each hardware.ranges key to both ends: an end the key refuses
    is one line naming the range before anything is priced (it named the hardware key
    after the nominal run, as if the config had set it)."""
    cfg = deep_merge(_base(), {"hardware": {"ranges": ranges}})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    line = one_line_error(capsys, ["sensitivity", str(path), "--samples", "0", "--out",
                                   str(tmp_path / "s")], str(path), *words)
    assert "nominal" not in line and not (tmp_path / "s").exists()


def test_torchrecs_column_block_of_a_huge_dim_is_found_from_its_divisors():
    """`column_block` tried every width up to the dim (a prime dim of 99,999,989: 5 s a
    table, four tables of it 40 s of a run that prices nothing else); from the divisor
    pairs it is the same block: every width tried by hand on small dims, and the huge
    prime's whole dim."""
    def tried(dim: int, least: int) -> int:
        return next((w for w in range(max(least, 1), dim) if dim % w == 0 and w % 4 == 0),
                    dim)

    for dim in range(1, 600):
        for least in (1, 4, 6, 32, 128):
            assert column_block(dim, least) == tried(dim, least), (dim, least)
    assert column_block(99_999_989, 4) == 99_999_989
    assert column_block(2**40, 128) == 128 and column_block(3 * 2**40, 2**40 + 1) == 3 * 2**39


@pytest.mark.parametrize("text, words", [
    # YAML keeps the integer 0 and the string "0" apart; as table keys they are one, and
    # one of the two was dropped without a word
    ('placement: {0: [1], "0": [2]}', [f"{K}.placement.0", "keys 0 and '0' are both '0'"]),
    ('columns: {0: 2, "0": 4}', [f"{K}.columns.0", "expected each key once"]),
    # .nan for a key with a physical range: finite expected, not "0 to 1e+09 MiB, got nan"
    ("dp_max_MiB: .nan", [f"{K}.dp_max_MiB", "expected a finite number"]),
])
def test_yaml_spellings_of_one_key_or_no_number(tmp_path, capsys, text, words):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base()) + "design_params:\n  cluster:\n    " + text + "\n")
    one_line_error(capsys, _argv(path, tmp_path), str(path), *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("setting, words", [
    # a duplicate key in a --set mapping made the whole value a string: "expected a mapping
    # or null, got '{00: [1], 0: [2]}' (str)", the duplicate never named
    (f"{K}.placement={{00: [1], 0: [2]}}", ["duplicate key 0", "expected each key once"]),
    (f"{K}.columns={{0: 2, 0: 4}}", ["duplicate key 0"]),
    # an unclosed flow list or mapping: meant as one, not text
    (f"{K}.placement={{0: [1, 2}}", ["not valid YAML", "expected ',' or ']'"]),
    (f"{K}.sharding=[row-wise", ["not valid YAML"]),
])
def test_a_set_value_that_is_broken_yaml_says_so(tmp_path, capsys, setting, words):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base()))
    one_line_error(capsys, _argv(path, tmp_path, setting), "--set",
                   setting.split("=", 1)[0], *words)


@pytest.mark.parametrize("value", ["inf", "-5", "nan", "lots", "1e400", "0"])
def test_a_bad_cluster_rank_limit_in_the_environment(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv("SCRATCHPIPE_MAX_CLUSTER_RANKS", value)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base()))
    one_line_error(capsys, _argv(path, tmp_path), "environment",
                   "SCRATCHPIPE_MAX_CLUSTER_RANKS", "expected a whole number >= 1")


def test_a_placement_list_beyond_the_yaml_node_limit_is_refused_at_the_limit(tmp_path,
                                                                              capsys):
    """A million ranks written for one table: refused when the 100,001st node is composed
    (it composed all of them first, 31 s, then said "aliases expand", with no alias in
    the file)."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base()) + "design_params:\n  cluster:\n    placement: {0: ["
                    + ", ".join(["1"] * 1_000_000) + "]}\n")
    line = one_line_error(capsys, _argv(path, tmp_path), str(path), "YAML refused",
                          "more than 100,000 nodes written", "SCRATCHPIPE_MAX_YAML_NODES")
    assert "aliases expand" not in line


# -- the cluster's checks at config load: `config show` and the start of a sweep ----------------
#: each a check the cluster design made only when it was built to be priced (the trace
#: generated first), which the config alone decides (`Cluster.check_config`)
CONFIG_LEVEL = [
    ({"hardware.pcie.gpus_per_switch": 3},
     ["hardware.pcie.gpus_per_switch", "expected a divisor of 8"]),
    ({"hardware.preset": "dgx-a100-cluster", "hardware.interconnect.gpus_per_node": 5},
     ["hardware.pcie.gpus_per_switch", "expected a divisor of 5"]),
    ({"model.batch_size": 7}, ["model.batch_size", "expected a multiple of 16"]),
    ({f"{K}.shard_group": 5}, [f"{K}.shard_group", "expected a divisor of 16"]),
    ({f"{K}.microbatches": 2}, [f"{K}.microbatches", "needs pipeline: nestpipe"]),
    ({f"{K}.pipeline": "nestpipe", f"{K}.microbatches": 3},
     [f"{K}.microbatches", "does not divide a rank's batch"]),
    ({"hardware.gpu.hbm_capacity_GiB": 0.0001, "hardware.gpu.l2_MiB": 0},
     ["model.batch_size", "of batches in flight", "more than a GPU's 0.0001 GiB"]),
    ({f"{K}.rank_cache": "lru-cache", "hardware.gpu.hbm_capacity_GiB": 0.00005,
      "hardware.gpu.l2_MiB": 0, "cache.capacity_rows": 1},
     ["model.batch_size", "no room for rank 0's cache"]),
    ({f"{K}.placement": {"0": [99]}}, [f"{K}.placement.0", "ranks 0-15"]),
    ({f"{K}.placement": {"0": [1, 3]}}, [f"{K}.placement.0", "a run of consecutive ranks"]),
    ({f"{K}.placement": {"²": [0]}}, [f"{K}.placement.²", "no table '²'"]),
    ({f"{K}.columns": {"0": 3}}, [f"{K}.columns.0", "expected a divisor of 128"]),
    ({f"{K}.columns": {"0": 2}, f"{K}.column_shard_dim": 128},
     [f"{K}.columns.0", "64 columns wide"]),
    ({f"{K}.sharding": "column-wise", f"{K}.column_shard_dim": 4},
     [f"{K}.column_shard_dim", "at least 8"]),
    ({f"{K}.rank_cache": "lru-cache", f"{K}.sharding": "row-wise",
      "hardware.dram_capacity_GiB": 1e-6}, ["hardware.cluster.nodes", "host DRAM"]),
]


def _config_file(tmp_path: Path, settings: dict) -> Path:
    cfg = _base()
    for k, v in settings.items():
        cfg = deep_merge(cfg, nested(k, v))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
    return path


@pytest.mark.parametrize("settings, words", CONFIG_LEVEL)
def test_config_show_reports_what_the_cluster_would_refuse_when_priced(tmp_path, capsys,
                                                                        settings, words):
    """`config show` is the check a user runs before a sweep: it printed a config the
    cluster design refuses (the refusal came after the trace was generated)."""
    path = _config_file(tmp_path, settings)
    line = one_line_error(capsys, ["config", "show", str(path)], str(path), *words)
    assert line.startswith(f"scratchpipe-sim config: {path}: ")


def test_config_show_still_shows_a_config_the_cluster_accepts(tmp_path, capsys):
    path = _config_file(tmp_path, {})
    assert main(["config", "show", str(path)]) == 0
    assert "design_params:" in capsys.readouterr().out


def test_a_cluster_check_in_a_config_that_does_not_run_the_cluster_is_not_made(tmp_path,
                                                                               capsys):
    """The checks are the designs' that the config runs: multi-gpu's config with a PCIe
    switch the cluster could not fill is shown."""
    path = _config_file(tmp_path, {"designs": ["multi-gpu"],
                                   "hardware.pcie.gpus_per_switch": 3})
    assert main(["config", "show", str(path)]) == 0
    capsys.readouterr()


def test_with_a_trace_file_config_show_makes_the_checks_that_need_no_table(tmp_path, capsys):
    """A trace file may size the tables (their rows, their count): the checks of ranks,
    switches and batches are made at load, the placement's when the trace is read."""
    path = _config_file(tmp_path, {"trace.path": str(tmp_path / "t.sptrace"),
                                   "model.tables": {"count": None, "rows": None},
                                   "model.batch_size": 7})
    one_line_error(capsys, ["config", "show", str(path)], str(path), "model.batch_size",
                   "expected a multiple of 16")
    path = _config_file(tmp_path, {"trace.path": str(tmp_path / "t.sptrace"),
                                   "model.tables": {"count": None, "rows": None},
                                   f"{K}.placement": {"0": [99]}})
    assert main(["config", "show", str(path)]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("settings, words", CONFIG_LEVEL[:4] + CONFIG_LEVEL[6:9])
def test_run_refuses_before_the_trace_is_generated(tmp_path, capsys, settings, words,
                                                   monkeypatch):
    """`run` checks the designs' inputs with the config (`check_designs`), before the
    trace is built: nothing generated, nothing priced."""
    import scratchpipe_sim.timing as timing

    def no_trace(*a, **k):
        raise AssertionError("the trace was built")

    monkeypatch.setattr(timing, "build_trace", no_trace)  # `api.run_trace`'s
    path = _config_file(tmp_path, settings)
    one_line_error(capsys, _argv(path, tmp_path), str(path), *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("settings, words", CONFIG_LEVEL[:3] + CONFIG_LEVEL[6:9])
def test_a_sweep_no_point_of_which_the_cluster_accepts_exits_2_before_any_point(
        tmp_path, capsys, settings, words, monkeypatch):
    """A cluster check every point fails is the experiment's mistake, not a column of
    infeasible rows: one line before any point is priced (or the folder made)."""
    import scratchpipe_sim.experiments.sweep_runner as sweep_runner

    def never(*a, **k):
        raise AssertionError("a point was priced")

    monkeypatch.setattr(sweep_runner, "simulate_point", never)
    monkeypatch.setattr(sweep_runner, "reported_metrics", never)
    base = _base()
    for k, v in settings.items():
        base = deep_merge(base, nested(k, v))
    base.pop("designs", None)
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "hostile", "base": base, "designs": ["cluster"],
                                   "sweep": {"grid": {"seed": [1, 2]}},
                                   "metrics": ["samples_per_s"]}, allow_unicode=True))
    line = one_line_error(capsys, ["sweep", str(exp), "--out", str(tmp_path / "out"), "-q"],
                          str(exp), "design cluster refuses every sweep point",
                          "{'seed': 1}", *words)
    assert line.count(str(exp)) == 2  # the experiment, and its base config (in it)
    assert not (tmp_path / "out").exists()


# -- `sensitivity`: every range end (and sample) through the designs' config checks first -------
def _preset_config(tmp_path: Path, ranges: dict) -> tuple[Path, Path]:
    """A hardware preset copied from configs/hardware/dgx-h100-cluster.yaml with `ranges`
    added, and a config of two nodes on it (the cluster's L2 left out: a GPU of a few KiB
    of HBM, below)."""
    from scratchpipe_sim.config.loader import CONFIGS_DIR

    preset = yaml.safe_load((CONFIGS_DIR / "hardware" / "dgx-h100-cluster.yaml").read_text())
    preset["ranges"] = {**ranges, **preset.get("ranges", {})}
    pfile = tmp_path / "mycluster.yaml"
    pfile.write_text(yaml.safe_dump(preset))
    cfg = _base()
    cfg["hardware"] = {"preset": str(pfile), "cluster": {"nodes": 2}, "gpu": {"l2_MiB": 0}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return pfile, path


@pytest.mark.parametrize("ranges, words", [
    ({"gpu.hbm_capacity_GiB": [0.0001, 80.0]},
     ["ranges.gpu.hbm_capacity_GiB", "the range's low end 0.0001 is refused by design cluster",
      "model.batch_size", "of batches in flight"]),
    ({"interconnect.gpus_per_node": [8, 12]},
     ["ranges.interconnect.gpus_per_node", "the range's high end 12 is refused by design "
      "cluster", "model.batch_size", "expected a multiple of 24"]),
])
def test_a_range_end_a_design_refuses_names_the_preset_before_anything_is_priced(
        tmp_path, capsys, monkeypatch, ranges, words):
    """The end was refused only when its varied config was priced, after the nominal and
    the other ends: the line names the preset file that writes the range (`ranges.KEY`
    there) and the design's own key."""
    import scratchpipe_sim.experiments.sensitivity_analysis as sa

    def never(*a, **k):
        raise AssertionError("something was priced")

    monkeypatch.setattr(sa, "build_trace", never)
    monkeypatch.setattr(sa.Pricer, "speedups", never)
    pfile, path = _preset_config(tmp_path, ranges)
    line = one_line_error(capsys, ["sensitivity", str(path), "--samples", "0", "--out",
                                   str(tmp_path / "s")], *words)
    assert line.startswith(f"scratchpipe-sim sensitivity: {pfile}: ranges.")
    assert str(path) in line  # the design's key, in the config that was loaded
    assert not (tmp_path / "s").exists()


def test_a_range_written_in_the_config_names_the_config(tmp_path, capsys):
    pfile, path = _preset_config(tmp_path, {})
    cfg = yaml.safe_load(path.read_text())
    cfg["hardware"]["ranges"] = {"gpu.hbm_capacity_GiB": [0.0001, 80.0]}
    path.write_text(yaml.safe_dump(cfg))
    one_line_error(capsys, ["sensitivity", str(path), "--samples", "0"],
                   f"{path}: hardware.ranges.gpu.hbm_capacity_GiB: the range's low end")


def test_a_sample_between_accepted_ends_that_a_design_refuses(tmp_path, capsys, monkeypatch):
    """Both ends of 1-8 GPUs a PCIe switch divide a node's 8; the Latin hypercube draws
    values between (3, 5, 7) that do not: refused naming the range and the value, before
    anything is priced."""
    import scratchpipe_sim.experiments.sensitivity_analysis as sa

    def never(*a, **k):
        raise AssertionError("something was priced")

    monkeypatch.setattr(sa, "build_trace", never)
    pfile, path = _preset_config(tmp_path, {"pcie.gpus_per_switch": [1, 8]})
    line = one_line_error(capsys, ["sensitivity", str(path), "--samples", "8"],
                          f"{pfile}: ranges.pcie.gpus_per_switch: its value",
                          "drawn by Latin-hypercube sample", "refused by design cluster",
                          "hardware.pcie.gpus_per_switch", "expected a divisor of 8")
    value = int(line.split("its value ")[1].split()[0])
    assert 8 % value


def test_ranges_every_design_accepts_are_priced(tmp_path, capsys):
    pfile, path = _preset_config(tmp_path, {"pcie.gpus_per_switch": [1, 1]})
    assert main(["sensitivity", str(path), "--samples", "2", "--jobs", "1"]) == 0
    assert "cluster" in capsys.readouterr().out


def test_a_range_a_set_replaced_names_the_config_not_the_preset(tmp_path, capsys):
    """The preset writes an accepted range; `--set` replaces it by one a design refuses:
    the line names the config's hardware.ranges key, not the preset's untouched one."""
    pfile, path = _preset_config(tmp_path, {"gpu.hbm_capacity_GiB": [70.0, 80.0]})
    line = one_line_error(capsys, ["sensitivity", str(path), "--samples", "0", "--set",
                                   "hardware.ranges={gpu.hbm_capacity_GiB: [0.0001, 80]}"],
                          f"{path}: hardware.ranges.gpu.hbm_capacity_GiB: the range's low end")
    assert str(pfile) not in line
