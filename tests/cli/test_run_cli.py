"""`scratchpipe-sim run` end to end: table, CSV, JSON, timelines, metadata, bad input."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml
from cli_errors import one_line_error
from small_configs import SMALL_A100

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config, resolve
from scratchpipe_sim.timing import simulate
from scratchpipe_sim.timing.designs import with_default_designs

SMALL = SMALL_A100
WALL = ("policy_wall_s", "simpy_wall_s")


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(SMALL))
    return p


def test_run_writes_every_artifact(cfg_file, tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["run", str(cfg_file), "--out", str(out), "--set", "model.pooling=4"]) == 0
    text = capsys.readouterr().out
    for d in ("hybrid", "gpu-only", "static-cache", "lru-cache", "lru-prefetch",
              "scratchpipe"):
        assert d in text
    assert "busy fraction" in text and "mean stage time per batch" in text
    assert f"results: {out}" in text
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [r["design"] for r in rows] == ["hybrid", "gpu-only", "static-cache", "lru-cache",
                                          "lru-prefetch", "scratchpipe"]
    assert all(r["cfg.model.pooling"] == "4" for r in rows)
    assert rows[0]["cfg.hardware.gpu.hbm_GBps"] == "2039.0"
    resolved = yaml.safe_load((out / "resolved_config.yaml").read_text())
    assert resolved == with_default_designs(resolve(cfg_file, ["model.pooling=4"]))
    sha = (out / "trace.sha256").read_text().strip()
    assert len(sha) == 64 and json.loads((out / "metadata.json").read_text())[
        "trace_sha256"] == sha
    for d in ("hybrid", "scratchpipe"):
        doc = json.loads((out / f"timeline_{d}.json").read_text())
        assert any(e["ph"] == "X" for e in doc["traceEvents"])
    # same numbers as the Python API on the same config
    api = simulate(load_config(cfg_file, ["model.pooling=4"]))
    saved = json.loads((out / "results.json").read_text())
    strip = lambda rs: [{k: v for k, v in r.items() if k not in WALL} for r in rs]  # noqa: E731
    assert strip(saved) == strip(api)
    assert float(rows[5]["iter_ns_mean"]) == pytest.approx(api[5]["iter_ns_mean"], rel=1e-12)


def test_existing_results_folder_is_never_overwritten(cfg_file, tmp_path, capsys):
    out = tmp_path / "res"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["run", str(cfg_file), "--out", str(out), "--design", "hybrid", "--no-timeline"]
    assert main(args) == 0
    assert main(args) == 0
    capsys.readouterr()
    assert (out / "keep.txt").read_text() == "mine" and not (out / "results.csv").exists()
    assert (tmp_path / "res-1" / "results.csv").exists()
    assert (tmp_path / "res-2" / "results.csv").exists()
    assert not list((tmp_path / "res-1").glob("timeline_*"))


def test_json_output_and_design_filter(cfg_file, tmp_path, capsys):
    assert main(["run", str(cfg_file), "--out", str(tmp_path / "o"), "--json",
                 "--design", "gpu-only", "--design", "scratchpipe"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["design"] for r in rows] == ["gpu-only", "scratchpipe"]
    assert rows[0]["speedup_vs_hybrid"] is None
    assert rows[1]["policy_train_misses"] == 0
    assert rows[0]["iter_ns_mean"] <= rows[1]["iter_ns_mean"]


def test_trace_file_input(cfg_file, tmp_path, capsys):
    ids = np.random.default_rng(0).integers(0, 400, 32 * 12)
    np.save(tmp_path / "ids.npy", ids)
    argv = ["run", str(cfg_file), "--out", str(tmp_path / "o"), "--json", "--design", "hybrid",
            "--set", "trace.path=ids.npy", "--set", "model.tables.count=1",
            "--set", "model.top_mlp=null"]  # one table: the interaction's width is derived
    assert main(argv) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["accesses"] == 32 * 10  # 12 batches of 32 ids, 2 warm-up


@pytest.mark.parametrize(
    "sets, words",
    [
        (["cache.capcity_rows=5"], ["cache.capcity_rows", "did you mean 'capacity_rows'"]),
        (["model.pooling=many"], ["model.pooling", "expected an integer"]),
        (["hardware.pcie.d2h_GBps=-4"], ["hardware.pcie.d2h_GBps", "> 0"]),
        (
            [
                "cache.capacity_rows=400",
                "hardware.gpu.hbm_capacity_GiB=0.00001",
                "hardware.gpu.l2_MiB=0",
            ],
            ["cache.capacity_rows", "fits in HBM"],
        ),
        (["designs=[hybrid, scratchpip]"], ["designs", "did you mean 'scratchpipe'"]),
        (["cache.capacity_rows=10"], ["cache.capacity_rows", "scratchpipe needs capacity >="]),
        (["cache.policy=lruu"], ["cache.policy", "did you mean 'lru'"]),
        (
            ["design_params.static-cache.policy=statik"],
            ["design_params.static-cache.policy", "did you mean 'static'"],
        ),
        (["trace.distribution=zipff"], ["trace.distribution"]),
    ],
)
def test_bad_config_is_one_line_exit_2(cfg_file, tmp_path, capsys, sets, words):
    argv = ["run", str(cfg_file), "--out", str(tmp_path / "o")]
    for s in sets:
        argv += ["--set", s]
    one_line_error(capsys, argv, str(cfg_file), *words)
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_unknown_design_flag(cfg_file, tmp_path, capsys):
    one_line_error(capsys, ["run", str(cfg_file), "--design", "lru-cach", "--out",
                            str(tmp_path / "o")], "designs", "did you mean 'lru-cache'")


def test_trace_ids_exceed_table_rows(cfg_file, tmp_path, capsys):
    np.save(tmp_path / "ids.npy", np.array([1, 2, 399, 450] * 96))
    one_line_error(capsys, ["run", str(cfg_file), "--out", str(tmp_path / "o"),
                            "--set", "trace.path=ids.npy", "--set", "model.tables.count=1",
                            "--set", "model.top_mlp=null"],
                   "model.tables.rows", "expected 0 <= id < 400")


def test_missing_config(tmp_path, capsys):
    one_line_error(capsys, ["run", str(tmp_path / "nope.yaml")], "no such config file")


def test_resolved_config_reruns_to_identical_numbers(cfg_file, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", str(cfg_file), "--out", str(a), "--json", "--no-timeline",
                 "--set", "hardware.preset=h200-gen5"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["run", str(a / "resolved_config.yaml"), "--out", str(b), "--json",
                 "--no-timeline"]) == 0
    second = json.loads(capsys.readouterr().out)
    strip = lambda rs: [{k: v for k, v in r.items() if k not in WALL} for r in rs]  # noqa: E731
    assert strip(first) == strip(second)
    assert (a / "trace.sha256").read_text() == (b / "trace.sha256").read_text()
    assert first[0]["iter_ns_mean"] > 0


def test_help_without_importing_subcommands_equals_the_full_parser():
    from scratchpipe_sim.cli import build_parser, commands

    full = build_parser()
    assert build_parser(None).format_help() == full.format_help()
    sub = next(a for a in full._actions if a.dest == "command")
    # the help lines read from the modules' text are the constants they import with
    assert {c.dest: c.help for c in sub._choices_actions} == commands()
    # each command alone: its own parser is the full one's, the others stubs
    assert build_parser("run")._actions[-1].choices["run"].format_help() == \
        sub.choices["run"].format_help()


@pytest.mark.parametrize("argv, expect", [
    (["--version"], set()),
    (["--help"], set()),
    (["bogus"], set()),
    (["config", "--help"], {"config"}),
    (["--bad", "config"], {"config"}),
])
def test_main_imports_only_the_chosen_subcommand(argv, expect):
    import subprocess
    import sys

    code = ("import sys\nfrom scratchpipe_sim.cli import commands, main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print(sorted(c for c in commands()\n"
            "             if 'scratchpipe_sim.cli.' + c.replace('-', '_') in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    assert set(eval(out)) == expect  # noqa: S307


def test_warm_run_recomputes_nothing_and_equals_no_cache(cfg_file, tmp_path, monkeypatch,
                                                         capsys):
    """Second run of a config: the trace, every policy replay and every other trace pass
    come from the on-disk caches (the functions computing them would fail), with results,
    CSV (column order included), timelines and trace checksum identical to --no-cache."""
    import scratchpipe_sim.timing.counts as counts_mod
    import scratchpipe_sim.timing.onchip as onchip_mod
    import scratchpipe_sim.timing.replay_passes as passes_mod
    import scratchpipe_sim.timing.trace_setup as setup_mod
    import scratchpipe_sim.traces.generators as gen_mod

    monkeypatch.setenv("SCRATCHPIPE_CACHE_DIR", str(tmp_path / "cache"))
    base = ["run", str(cfg_file), "-q", "--set", "cache.warmup_batches=auto"]
    assert main([*base, "--out", str(tmp_path / "off"), "--no-cache"]) == 0
    assert not (tmp_path / "cache").exists()
    assert main([*base, "--out", str(tmp_path / "fill")]) == 0
    # one trace a prefix auto tried (doubling from num_batches), each read on a warm run
    cfg = load_config(cfg_file, ["cache.warmup_batches=auto"])
    prefix = setup_mod.build_trace(cfg, cache=False).meta[setup_mod.AUTO_PREFIX]
    tried = (prefix // cfg.model.num_batches).bit_length()
    assert len(list((tmp_path / "cache" / "traces").iterdir())) == tried

    def boom(*a, **k):
        raise AssertionError("recomputed on a warm run")

    for mod, name in ((gen_mod, "generate_trace"), (counts_mod, "replay_columns"),
                      (onchip_mod, "onchip_hits"), (passes_mod, "first_touches"),
                      (passes_mod, "access_unique"), (passes_mod, "warmup_length"),
                      (setup_mod, "first_touches"), (setup_mod, "warmup_length")):
        monkeypatch.setattr(mod, name, boom)
    assert main([*base, "--out", str(tmp_path / "warm")]) == 0
    capsys.readouterr()

    def load(d):
        rows = json.loads((tmp_path / d / "results.json").read_text())
        table = list(csv.reader(open(tmp_path / d / "results.csv")))
        keep = [i for i, h in enumerate(table[0]) if h not in WALL]
        return ([{k: v for k, v in r.items() if k not in WALL} for r in rows],
                [[r[i] for i in keep] for r in table],
                (tmp_path / d / "trace.sha256").read_text(),
                [(tmp_path / d / f"timeline_{r['design']}.json").read_text() for r in rows])

    off, fill, warm = load("off"), load("fill"), load("warm")
    assert off == fill == warm
    assert len(off[0]) == 6 and off[0][3]["fills"] > 0


def test_run_sample_writes_each_figure_with_its_spread(cfg_file, tmp_path, capsys):
    out = tmp_path / "sampled"
    assert main(["run", str(cfg_file), "--out", str(out), "--sample", "0.5", "--salts", "2",
                 "--quiet", "--no-timeline"]) == 0
    text = capsys.readouterr().out
    assert "sampled run (R = 0.5, 2 salts)" in text and "+-" in text
    rows = list(csv.DictReader(open(out / "results.csv")))
    for r in rows:
        assert float(r["sample_rate"]) == 0.5 and int(r["sample_salts"]) == 2
        assert float(r["hit_ratio_spread"]) >= 0 and "pcie_h2d_bytes_per_sample_spread" in r
        assert r["cfg.trace.sample_rate"] == "0.5"
    js = json.loads((out / "results.json").read_text())
    assert [r["design"] for r in js] == [r["design"] for r in rows]
    assert all("iter_ns_mean_spread" in r for r in js)


@pytest.mark.parametrize(("argv", "word"), [
    (["--sample", "1.5"], "trace.sample_rate"), (["--sample", "0"], "trace.sample_rate"),
    (["--sample", "1e-7"], "trace.sample_rate"), (["--salts", "0"], "trace.sample_salts")])
def test_run_sample_bad_rates_are_one_line(cfg_file, tmp_path, capsys, argv, word):
    one_line_error(capsys, ["run", str(cfg_file), "--out", str(tmp_path / "o"), "--quiet",
                            *argv], word)


def test_run_sample_salts_as_tasks_give_the_serial_figures(cfg_file, tmp_path, capsys):
    """`--executor local` (the salts one after the other) and the default (forked tasks,
    `--jobs 2`): the same rows, wall times aside."""
    def rows(*flags):
        out = tmp_path / "_".join(flags)
        assert main(["run", str(cfg_file), "--out", str(out), "--sample", "0.5", "--salts",
                     "2", "--quiet", "--no-timeline", *flags]) == 0
        capsys.readouterr()
        return [{k: v for k, v in r.items() if not k.endswith(("wall_s", "wall_s_spread"))}
                for r in json.loads((out / "results.json").read_text())]

    assert rows("--executor", "local") == rows("--jobs", "2")
