"""The numbers README.md and docs/*.md quote match the committed results (docs/data/), and a
stale one fails naming its file and line (experiments/doc_numbers.py, `scratchpipe-sim docs`).

The first test is the guard itself; the others check the queries against values computed
by hand on a small synthetic snapshot, and the command end to end."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from scratchpipe_sim.cli import main
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.experiments import doc_numbers

ROOT = Path(__file__).resolve().parents[2]


def test_every_quoted_number_matches_the_committed_results() -> None:
    stale = doc_numbers.check(ROOT)
    assert not stale, "\n".join(s.describe(ROOT) for s in stale) + \
        "\n(scratchpipe-sim docs --update rewrites them from docs/data/)"
    assert doc_numbers.count_markers(ROOT) > 100  # the study's figures are all marked


# -- a synthetic snapshot -------------------------------------------------------------------
ROWS = [  # two points of a sweep, three designs; speedups over hybrid
    {"index": 0, "cache.load_factor": 0.05, "design": "hybrid", "status": "ok",
     "speedup_vs_hybrid": 1.0, "fills": 0},
    {"index": 0, "cache.load_factor": 0.05, "design": "lru", "status": "ok",
     "speedup_vs_hybrid": 2.0, "fills": 1200},
    {"index": 0, "cache.load_factor": 0.05, "design": "sp", "status": "infeasible",
     "speedup_vs_hybrid": "", "fills": ""},
    {"index": 1, "cache.load_factor": 0.1, "design": "hybrid", "status": "ok",
     "speedup_vs_hybrid": 1.0, "fills": 0},
    {"index": 1, "cache.load_factor": 0.1, "design": "lru", "status": "ok",
     "speedup_vs_hybrid": 8.0, "fills": 800},
    {"index": 1, "cache.load_factor": 0.1, "design": "sp", "status": "ok",
     "speedup_vs_hybrid": 10.0, "fills": 700},
]
BANDS = [  # one point, four runs (the first nominal) of two designs
    {"values": {"cache.load_factor": 0.1},
     "runs": [{"lru": 2.0, "sp": 3.0}, {"lru": 4.0, "sp": 2.0}, {"lru": 1.0, "sp": 3.0},
              {"lru": 2.0, "sp": 4.0}]},
]
PUBLISHED = [{"id": "P1", "design": "uvm", "phase": "forward", "factor": 0.8},
             {"id": "P2", "design": "uvm", "phase": "backward", "factor": 1.1}]
#: `validate --published --json`'s end-to-end rows as the CLI writes them (a breakdown
#: mapping) and its multi-GPU rows
E2E_JSON = [
    {"id": "E1", "kind": "end-to-end", "gpu": "g", "preset": "p", "design": "multi-gpu",
     "gpus": 8, "batch_per_gpu": 256, "predicted_ms": 12.0, "measured_ms": 10.0,
     "factor": 1.2, "predicted_samples_per_s_per_gpu": 21333.3,
     "measured_samples_per_s_per_gpu": 25600.0,
     "breakdown_ms": {"embedding": 0.5, "dense": 1.0, "interaction": 0.25,
                      "host_wait": 10.25, "other": 0.0},
     "role": "fit", "status": "ok", "skip_reason": None, "source": "url"},
    {"id": "E2", "kind": "end-to-end", "gpu": "t", "preset": None, "design": "gpu-only",
     "gpus": 1, "batch_per_gpu": 64, "predicted_ms": None, "measured_ms": 3.0,
     "factor": None, "predicted_samples_per_s_per_gpu": None,
     "measured_samples_per_s_per_gpu": 21333.3, "breakdown_ms": {}, "role": "check",
     "status": "skipped", "skip_reason": "why", "source": "url"}]
CLUSTER_JSON = [
    {"id": "C1", "gpu": "8 GPUs", "design": "cluster", "quantity": "samples_per_s",
     "predicted": 2.0e6, "measured": 2.5e6, "factor": 1.25, "role": "check",
     "status": "ok", "source": "url"},
    {"id": "C2", "gpu": "64 GPUs", "design": "cluster", "quantity": "samples_per_s",
     "predicted": 6.0e6, "measured": 8.0e6, "factor": 1.333, "role": "check",
     "status": "ok", "source": "url"}]


def _snapshot(root: Path) -> None:
    data = root / doc_numbers.DATA_DIR
    (data / "study").mkdir(parents=True)
    (data / doc_numbers.BANDS_DIR).mkdir()
    with (data / "study" / "fig1_toy.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, list(ROWS[0]))
        w.writeheader()
        w.writerows(ROWS)
    (data / doc_numbers.BANDS_DIR / "fig1_toy.json").write_text(json.dumps(BANDS),
                                                               encoding="utf-8")
    (data / "published.json").write_text(json.dumps(PUBLISHED), encoding="utf-8")
    for name, rows in doc_numbers.split_published(E2E_JSON + CLUSTER_JSON).items():
        if name != doc_numbers.PUBLISHED_FILE:
            (data / name).write_text(json.dumps(rows), encoding="utf-8")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    _snapshot(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("query", "expected"), [
    ("value src=fig1 design=lru cache.load_factor=0.1", "8.00"),
    ("value src=fig1 design=lru cache.load_factor=0.05,0.1", "2.00 / 8.00"),
    ("value src=fig1 design=sp cache.load_factor=0.05", "-"),  # infeasible
    ("value src=fig1 design=lru cache.load_factor=0.05 metric=fills fmt=,.0f", "1,200"),
    ("geomean src=fig1 design=lru", f"{math.sqrt(2.0 * 8.0):.2f}"),
    ("geomean src=fig1 design=lru complete=all", "8.00"),  # only point 1 ran every design
    ("range src=fig1 design=lru+sp", "2.00-10.00"),
    ("max src=fig1 a=sp b=lru", "1.25"),  # the one point where both ran
    ("count src=fig1 design=hybrid complete=all", "1"),
    ("value src=fig1 design=lru cache.load_factor=0.1 scale=0.5 fmt=.1f", "4.0"),
    ("band src=bands:fig1 a=sp", "3.00 [2.00-4.00]"),
    ("band src=bands:fig1 a=sp b=lru", "1.50 [0.50-3.00]"),
    ("ahead src=bands:fig1 a=sp b=lru", "3 of 4"),
    ("lowest src=bands:fig1 a=lru", "1.00"),
    ("band src=bands:fig1 a=sp agg=geomean", "3.00 [2.00-4.00]"),
    ("range src=published metric=factor design=uvm", "0.80-1.10"),
    ("worst src=published metric=factor design=uvm", "1.25"),  # 1 / 0.8
    ("value src=published-e2e id=E1 metric=factor", "1.20"),
    ("value src=published-e2e id=E1 metric=host_wait_ms fmt=.1f", "10.2"),  # flattened
    ("value src=published-e2e id=E2 metric=factor", "-"),  # skipped
    ("value src=published-e2e id=E1 metric=measured_samples_per_s_per_gpu fmt=,.0f",
     "25,600"),
    ("ratio src=published-cluster num=C2 den=C1 metric=predicted", "3.00"),
    ("ratio src=published-cluster num=C2 den=C1 metric=measured fmt=.1f", "3.2"),
    ("value src=published-cluster id=C1 metric=predicted scale=1e-6", "2.00"),
    # the model's ratio over the published one: 3.0 / 3.2
    ("ratio src=published-cluster num=C2 den=C1 metric=predicted over=measured", "0.94"),
])
def test_queries_give_the_hand_computed_values(root: Path, query: str, expected: str) -> None:
    src = doc_numbers.Sources(root / doc_numbers.DATA_DIR)
    assert doc_numbers.evaluate(query, src, doc_numbers.OPS) == expected


def test_end_to_end_and_cluster_blocks_are_the_rows_as_tables(root: Path) -> None:
    src = doc_numbers.Sources(root / doc_numbers.DATA_DIR)
    e2e = doc_numbers.evaluate("end-to-end-table", src, doc_numbers.BLOCKS).splitlines()
    assert e2e[2] == ("| E1 | multi-gpu x 8 | 256 | 12.000 | 10.000 | 1.20 | fit | "
                      "0.500 / 1.000 / 0.250 / 10.250 / 0.000 |")
    assert e2e[3] == "| E2 | gpu-only x 1 | 64 | skipped | 3.000 | - | check (skipped) | - |"
    cluster = doc_numbers.evaluate("cluster-table", src, doc_numbers.BLOCKS).splitlines()
    assert cluster[2] == "| C1 | 8 GPUs | samples_per_s | 2.00 M | 2.50 M | 1.25 | check |"
    with pytest.raises(UserError, match="num=ID and den=ID"):
        doc_numbers.evaluate("ratio src=published-cluster num=C2 metric=predicted", src,
                             doc_numbers.OPS)


def test_a_stale_number_is_named_by_file_and_line_and_update_fixes_it(root: Path) -> None:
    (root / "docs").mkdir(exist_ok=True)
    doc = root / "docs" / "toy.md"
    doc.write_text("# toy\n\nlru reaches <!-- n: value src=fig1 design=lru "
                   "cache.load_factor=0.1 -->7.50<!-- /n -->x, "
                   "<!-- n: value src=fig1 design=lru cache.load_factor=0.05 -->2.00<!-- /n -->"
                   "x.\nAn example, `<!-- n: QUERY -->1.25<!-- /n -->`, is not a marker.\n",
                   encoding="utf-8")
    stale = doc_numbers.check(root)
    assert [(s.path.name, s.line, s.found, s.expected) for s in stale] == \
        [("toy.md", 3, "7.50", "8.00")]
    assert "docs/toy.md:3: stale number" in stale[0].describe(root)
    assert main(["docs", "--root", str(root)]) == 1
    assert main(["docs", "--update", "--root", str(root)]) == 0
    assert "-->8.00<!-- /n -->x" in doc.read_text(encoding="utf-8")
    assert doc_numbers.check(root) == []
    assert main(["docs", "--check", "--root", str(root)]) == 0


def test_bad_queries_are_one_line_naming_the_file_and_line(root: Path) -> None:
    (root / "docs").mkdir(exist_ok=True)
    bad = "x\n<!-- n: value src=fig1 design=nobody -->1<!-- /n -->\n"
    (root / "docs" / "bad.md").write_text(bad, encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.md:2.*no row matches"):
        doc_numbers.check(root)
    (root / "docs" / "bad.md").write_text("<!-- n: median src=fig1 -->1<!-- /n -->\n",
                                          encoding="utf-8")
    with pytest.raises(UserError, match="unknown operation 'median'"):
        doc_numbers.check(root)


def test_collect_snapshots_results_bands_and_published(tmp_path: Path) -> None:
    """--collect: results.csv without the point hash, bands as every run's speedups, the
    published rows' columns."""
    res = tmp_path / "results" / "fig9_x"
    res.mkdir(parents=True)
    (res / "results.csv").write_text("point,index,design,status,speedup_vs_hybrid\n"
                                     "abc,0,hybrid,ok,1.0\nabc,0,sp,ok,2.5\n", encoding="utf-8")
    bands = tmp_path / "bands" / "fig9_x"
    bands.mkdir(parents=True)
    sens = {"nominal": {"sp": 2.5}, "params": [{"key": "k"}],
            "one_at_a_time": {"k": {"low": {"sp": 2.0}, "high": {"sp": 3.0}}},
            "lhs": {"speedup": {"sp": [2.25, 2.75]}}}
    (bands / "bands.json").write_text(json.dumps(
        {"format": "scratchpipe-bands", "points": [
            {"values": {"a": 1}, "error": None, "sensitivity": sens},
            {"values": {"a": 2}, "error": "boom", "sensitivity": None}]}), encoding="utf-8")
    pub = tmp_path / "pub.json"
    pub.write_text(json.dumps([{**PUBLISHED[0], "gpu": "g", "optimizer": None,
                                "predicted_ms": 0.8, "measured_ms": 1.0, "role": "fit",
                                "status": "ok", "source": "url"},
                               # the end-to-end and multi-GPU rows: their own files
                               *E2E_JSON, *CLUSTER_JSON]),
                   encoding="utf-8")
    (tmp_path / "docs").mkdir()
    assert main(["docs", "--collect", "--results", str(tmp_path / "results"), "--bands",
                 str(tmp_path / "bands"), "--published", str(pub), "--root",
                 str(tmp_path)]) == 0
    data = tmp_path / doc_numbers.DATA_DIR
    assert (data / "study" / "fig9_x.csv").read_text(encoding="utf-8").splitlines()[0] == \
        "index,design,status,speedup_vs_hybrid"
    compact = data / doc_numbers.BANDS_DIR / "fig9_x.json"
    assert json.loads(compact.read_text(encoding="utf-8")) == \
        [{"values": {"a": 1}, "runs": [{"sp": 2.5}, {"sp": 2.0}, {"sp": 3.0}, {"sp": 2.25},
                                       {"sp": 2.75}]}]
    snap = json.loads((data / "published.json").read_text(encoding="utf-8"))
    assert [r["id"] for r in snap] == [PUBLISHED[0]["id"]] and "source" not in snap[0]
    e2e = json.loads((data / doc_numbers.PUBLISHED_E2E_FILE).read_text(encoding="utf-8"))
    assert [r["id"] for r in e2e] == ["E1", "E2"] and "source" not in e2e[0]
    assert e2e[0]["host_wait_ms"] == 10.25 and e2e[1]["embedding_ms"] is None
    cluster = json.loads((data / doc_numbers.PUBLISHED_CLUSTER_FILE).read_text(
        encoding="utf-8"))
    assert [r["id"] for r in cluster] == ["C1", "C2"] and "source" not in cluster[0]


def test_rerun_refuses_an_existing_study_folder(tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "study").mkdir()
    assert main(["docs", "--rerun", "--out", str(tmp_path / "study"), "--root",
                 str(tmp_path)]) == 2
    assert "--out: exists" in capsys.readouterr().err
