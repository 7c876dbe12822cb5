"""Calibrated popularity, the reuse-distance model and the trace presets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.config.model import Config
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces.calibrated import Target, load_target, plan_counts
from scratchpipe_sim.traces.generators import generate_to_store, generate_trace
from scratchpipe_sim.traces.reuse_distance import stack_distances
from scratchpipe_sim.traces.store import read_trace

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "configs" / "traces"


def _shared(name: str) -> Path:
    """Meta's published locality statistics, copied into the repository (MIT)."""
    p = ROOT / "traces" / "dlrm_datasets_locality" / name
    if not p.is_file():
        pytest.skip(f"{p.relative_to(ROOT)} missing (a copy of github.com/facebookresearch/"
                    "dlrm_datasets embedding_bag/*/locality_stats.txt)")
    return p


def meta_histogram(ids: np.ndarray):
    """Oracle: Meta's buckets by explicit edges, (0,1], (1,2], (2,4], ... (32768+."""
    counts = np.bincount(ids)
    counts = counts[counts > 0]
    edges = [0, 1] + [2 ** k for k in range(1, 16)]
    rows = np.zeros(17, np.int64)
    acc = np.zeros(17, np.int64)
    for c in counts:
        b = 16
        for i in range(16):
            if edges[i] < c <= edges[i + 1]:
                b = i
                break
        rows[b] += 1
        acc[b] += c
    return rows, acc


def preset(name: str) -> dict:
    return yaml.safe_load((PRESETS / f"{name}.yaml").read_text())


# -- calibrated -------------------------------------------------------------------------------
@pytest.mark.parametrize("year,bound", [("2021", 0.005), ("2022", 0.005)])
def test_plan_within_target_at_10M(year, bound):
    t = load_target(str(_shared(f"{year}_locality_stats.txt")))
    p = plan_counts(t, 10_000_000, 10**9)
    assert p.accesses.sum() == 10_000_000
    assert p.distance <= bound
    # every bucket's accesses fit its rows' count range
    lo = np.array([1, 2] + [2 ** (k - 1) + 1 for k in range(2, 16)] + [32769])
    hi = np.array([1, 2] + [2 ** k for k in range(2, 16)] + [10**12])
    assert np.all(p.accesses >= lo * p.rows) and np.all(p.accesses <= hi * p.rows)


def test_generated_histogram_equals_plan_and_target():
    sh = preset("meta-2021")["params"]
    target = Target.from_shares(sh["row_shares"], sh["access_shares"])
    N = 2_000_000
    trace = generate_trace("calibrated", 4_000_000, 1000, N // 1000, 1, seed=4, **sh)
    ids = trace.linear_ids()
    rows, acc = meta_histogram(ids)
    plan = plan_counts(target, N, 4_000_000)
    assert np.array_equal(rows, plan.rows) and np.array_equal(acc, plan.accesses)
    dist = max(np.abs(rows / rows.sum() - target.row_share).max(),
               np.abs(acc / N - target.access_share).max())
    assert dist == pytest.approx(plan.distance)
    assert dist <= 0.02  # 0.02 is the 10M goal; the top bucket already fits at 2M
    # a uniform shuffle: each hot row has about half of its accesses in each half
    c1 = np.bincount(ids[: N // 2], minlength=4_000_000)
    c = np.bincount(ids, minlength=4_000_000)
    hot = c >= 2000
    assert hot.sum() >= 10
    assert np.all(np.abs(c1[hot] / c[hot] - 0.5) < 0.05)


def test_calibrated_deterministic_and_store_equal(tmp_path):
    sh = preset("meta-2022")["params"]
    a = generate_trace("calibrated", [50_000, 80_000], 256, 40, [2, 1], seed=9, **sh)
    b = generate_trace("calibrated", [50_000, 80_000], 256, 40, [2, 1], seed=9, **sh)
    c = generate_trace("calibrated", [50_000, 80_000], 256, 40, [2, 1], seed=10, **sh)
    assert np.array_equal(a.indices, b.indices) and not np.array_equal(a.indices, c.indices)
    generate_to_store(tmp_path / "s.sptrace", "calibrated", [50_000, 80_000], 256, 40, [2, 1],
                      seed=9, **sh)
    s = read_trace(tmp_path / "s.sptrace")
    assert np.array_equal(np.asarray(s.indices), a.indices)
    # each table is calibrated over its own stream (2*256*40 and 256*40 accesses)
    target = Target.from_shares(sh["row_shares"], sh["access_shares"])
    for t, n in ((0, 20480), (1, 10240)):
        ids = np.concatenate([a.batch(k).table(t)[0] for k in range(a.num_batches)])
        rows, acc = meta_histogram(ids.astype(np.int64))
        plan = plan_counts(target, n, [50_000, 80_000][t])
        assert np.array_equal(rows, plan.rows) and np.array_equal(acc, plan.accesses)


def test_calibrated_errors(tmp_path, capsys):
    with pytest.raises(UserError, match="target=FILE"):
        generate_trace("calibrated", 1000, 10, 10, 1, seed=1)
    with pytest.raises(UserError, match="17 non-negative shares"):
        generate_trace("calibrated", 1000, 10, 10, 1, seed=1, row_shares=[1, 2],
                       access_shares=[1, 2])
    sh = preset("meta-2021")["params"]
    with pytest.raises(UserError, match="distinct rows but the table has 100"):
        generate_trace("calibrated", 100, 100, 100, 1, seed=1, **sh)
    rc = main(["trace", "gen", "--distribution", "calibrated", "--param",
               f"target={tmp_path / 'none.txt'}", "--rows", "1000", "--batch-size", "10",
               "--batches", "10", "--seed", "1", "--out", str(tmp_path / "o.sptrace")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_trace_locality_cli(tmp_path, capsys):
    target = _shared("2022_locality_stats.txt")
    out = tmp_path / "c.sptrace"
    assert main(["trace", "gen", "--distribution", "calibrated", "--param",
                 f"target={target}", "--rows", "500000", "--batch-size", "1000",
                 "--batches", "500", "--seed", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["trace", "locality", str(out), "--target", str(target), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    t = load_target(str(target))
    assert d["distance"] == pytest.approx(plan_counts(t, 500_000, 500_000).distance)
    assert d["distance"] <= 0.02
    assert main(["trace", "locality", str(out), "--target", str(target),
                 "--max-distance", "0.00001"]) == 1
    assert "distance" in capsys.readouterr().out
    assert main(["trace", "locality", str(out), "--target", str(target), "--block",
                 "nope"]) == 2
    assert "no block 'nope'" in capsys.readouterr().err


# -- reuse distance ---------------------------------------------------------------------------
def stack_oracle(ids):
    stack: list[int] = []
    out = []
    for x in ids:
        if x in stack:
            d = len(stack) - stack.index(x)
            stack.remove(x)
            out.append(d)
        else:
            out.append(0)
        stack.append(x)
    return out


def test_stack_distances_oracle():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 30, size=400)
    assert stack_distances(ids, 30).tolist() == stack_oracle(ids.tolist())


def _power_p(d, S, alpha):
    F = (lambda x: math.log(x)) if alpha == 1 else (lambda x: x ** (1 - alpha) / (1 - alpha))
    return (F(d + 1) - F(d)) / (F(S + 1) - F(1))


@pytest.mark.parametrize("alpha", [1.0, 1.3])
def test_reuse_distance_follows_model(alpha):
    rows, nf = 2000, 0.2
    trace = generate_trace("reuse-distance", rows, 500, 400, 1, seed=2, new_fraction=nf,
                           alpha=alpha)
    ids = trace.linear_ids()
    d = stack_distances(ids, rows)
    full = int(np.argmax(np.cumsum(d == 0) == rows)) + 1  # stack full from here on
    assert len(np.unique(ids)) == rows and full < 40_000
    tail = d[full:]
    assert np.all(tail >= 1)
    n = len(tail)
    # once every row is used a "new" access takes the oldest row (depth = rows)
    assert np.mean(tail == rows) == pytest.approx(nf + (1 - nf) * _power_p(rows, rows, alpha),
                                                  abs=0.01)
    for k in range(1, 6):
        assert np.mean(tail == k) == pytest.approx((1 - nf) * _power_p(k, rows, alpha),
                                                   abs=4 * math.sqrt(0.25 / n) + 0.002)


def test_reuse_distance_is_one_continuous_stream(tmp_path):
    trace = generate_trace("reuse-distance", 10**6, 64, 300, 1, seed=5, new_fraction=0.05)
    d = stack_distances(trace.linear_ids(), 10**6)
    firsts = np.asarray(trace.batch_access_ptr()[1:-1])
    # the first id of a batch is new only with new_fraction (a per-bag reset makes it 1.0)
    assert np.mean(d[firsts] == 0) == pytest.approx(0.05, abs=0.04)
    assert np.mean(d == 0) == pytest.approx(0.05, abs=0.005)
    generate_to_store(tmp_path / "r.sptrace", "reuse-distance", 10**6, 64, 300, 1, seed=5,
                      new_fraction=0.05)
    assert np.array_equal(np.asarray(read_trace(tmp_path / "r.sptrace").indices),
                          trace.indices)


def test_reuse_distance_profile_replay(tmp_path):
    src = tmp_path / "z.sptrace"
    generate_to_store(src, "zipf", 20_000, 100, 300, 1, seed=1, alpha=1.1)
    ref = stack_distances(read_trace(src).linear_ids(), 20_000)
    out = generate_trace("reuse-distance", 20_000, 100, 300, 1, seed=8, profile=str(src))
    got = stack_distances(out.linear_ids(), 20_000)
    # same stack-distance distribution, up to sampling (and deep reuses early on that have
    # to be new rows): compare the CDF at a few depths after a warm-up
    for q in (1, 10, 100, 1000):
        assert np.mean((got[5000:] <= q) & (got[5000:] > 0)) == pytest.approx(
            np.mean((ref[5000:] <= q) & (ref[5000:] > 0)), abs=0.03)


def test_reuse_distance_errors(tmp_path, capsys):
    rc = main(["trace", "gen", "--distribution", "reuse-distance", "--param",
               "new_fraction=1.5", "--rows", "100", "--batch-size", "10", "--batches", "2",
               "--seed", "1", "--out", str(tmp_path / "o.sptrace")])
    assert rc == 2 and "--param new_fraction: expected a fraction" in capsys.readouterr().err
    with pytest.raises(UserError, match="no such trace"):
        generate_trace("reuse-distance", 100, 10, 2, 1, seed=1,
                       profile=str(tmp_path / "missing.sptrace"))


# -- presets ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["uniform", "zipf-1.05", "zipf-1.1", "zipf-1.2",
                                  "meta-2021", "meta-2022"])
def test_presets_are_valid_trace_sections(name):
    d = preset(name)
    cfg = Config.from_dict({"trace": d}, source=name)
    assert cfg.trace.distribution == d["distribution"]
    if name.startswith("zipf-"):
        assert cfg.trace.alpha == float(name[5:])
    params = dict(cfg.trace.params)
    if cfg.trace.alpha is not None:
        params["alpha"] = cfg.trace.alpha
    t = generate_trace(cfg.trace.distribution, 100_000, 100, 20, 2, seed=1, **params)
    t.validate()
    assert t.num_accesses == 4000


@pytest.mark.parametrize("year", ["2021", "2022"])
def test_meta_presets_are_the_mean_of_the_published_blocks(year):
    from scratchpipe_sim.traces.stats import read_locality_stats

    blocks = read_locality_stats(_shared(f"{year}_locality_stats.txt"))
    p = preset(f"meta-{year}")["params"]
    assert np.allclose(p["row_shares"], np.mean([b.row_share for b in blocks], axis=0),
                       atol=6e-6)
    assert np.allclose(p["access_shares"], np.mean([b.access_share for b in blocks], axis=0),
                       atol=6e-6)


def test_run_config_uses_a_trace_preset(tmp_path):
    import subprocess
    import sys

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"trace: {{preset: {PRESETS / 'meta-2022.yaml'}}}\n"
                   "model: {tables: {count: 2, rows: 300000, dim: 16, bytes_per_element: 4},\n"
                   "        pooling: 2, batch_size: 1000, num_batches: 100}\n")
    # a fresh interpreter: nothing has imported the calibrated module yet
    code = ("from scratchpipe_sim.config import loader\n"
            "from scratchpipe_sim.config.model import Config\n"
            "from scratchpipe_sim.timing.trace_setup import build_trace\n"
            f"d = loader.resolve({str(cfg)!r})\n"
            f"t = build_trace(Config.from_dict(d, source={str(cfg)!r}))\n"
            "print(t.meta['generator']['distribution'], t.num_accesses)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    # whole batches of 2 tables x 1000 samples x pooling 2; at least the 100 asked for (the
    # runner may add a warm-up prefix)
    assert out[0] == "calibrated" and int(out[1]) % (2 * 2 * 1000) == 0
    assert int(out[1]) >= 2 * 2 * 1000 * 100
