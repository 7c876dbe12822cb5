"""The `burst` generator, `trace fit` and `trace gen --from-fit`."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.engine import run_cache
from scratchpipe_sim.traces import distribution_fit as ft
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.generators import ZipfSampler, generate_trace, trace_from_spec
from scratchpipe_sim.traces.io import open_trace
from scratchpipe_sim.traces.stats import lru_miss_ratio_curve
from scratchpipe_sim.traces.store import TraceWriter
from scratchpipe_sim.traces.temporal import _repeat, lag_draws

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "traces"
FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2)


# -- the generator ----------------------------------------------------------------------------
def test_repeat_kernel_against_a_python_oracle():
    rng = np.random.default_rng(0)
    n, H = 3000, 50
    fresh = rng.integers(0, 100, n)
    u = rng.random(n)
    lag = lag_draws(rng.random(n), 1.5, H)
    hist, state = np.zeros(H, np.int64), np.zeros(2, np.int64)
    # two calls: the history carries over
    out = np.concatenate([_repeat(fresh[:1234], u[:1234], 0.7, lag[:1234], hist, state),
                          _repeat(fresh[1234:], u[1234:], 0.7, lag[1234:], hist, state)])
    exp = []
    for i in range(n):
        k = int(lag[i])
        exp.append(exp[i - k] if u[i] < 0.7 and k <= min(i, H) else int(fresh[i]))
    assert out.tolist() == exp
    assert 1 <= lag.min() and lag.max() <= H


def test_lag_law_closed_form():
    u = (np.arange(200000) + 0.5) / 200000
    lag = lag_draws(u, 2.0, 1000)
    # P(lag = k) = (k^-1 - (k+1)^-1) / (1 - 1001^-1) for the density x^-2 on [1, 1001)
    for k in (1, 2, 5):
        p = (1 / k - 1 / (k + 1)) / (1 - 1 / 1001)
        assert np.mean(lag == k) == pytest.approx(p, abs=1e-4)


def test_burst_without_repeats_is_zipf_mandelbrot():
    rows, alpha, q = 500, 1.1, 0.04
    t = generate_trace("burst", rows, 100, 20, 1, seed=3, alpha=alpha, head_scale=q,
                       permute=False)
    # the same draws as the Zipf sampler with the shift (the generator's RNG keys: (1, t, j))
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(3, spawn_key=(1, 0, 0))))
    ref = ZipfSampler(rows, alpha, None, shift=q * rows).sample(rng, 2000)
    assert t.linear_ids().tolist() == ref.tolist()
    # and the law: P(rank r) ∝ (r + q*rows)^-alpha
    w = (np.arange(1, rows + 1) + q * rows) ** -alpha
    z = ZipfSampler(rows, alpha, None, shift=q * rows)
    assert np.diff(np.concatenate(([0.0], z.cdf))) == pytest.approx(w / w.sum(), rel=1e-9)


def test_repeats_keep_the_popularity_marginal():
    # a repeat copies an earlier access, so every access is marginally Zipf-Mandelbrot
    rows = 50
    w = (np.arange(1, rows + 1) + 5.0) ** -1.2
    w /= w.sum()
    counts = np.zeros(rows)
    for seed in range(4):
        t = generate_trace("burst", rows, 1000, 50, 1, seed=seed, alpha=1.2, head_scale=0.1,
                           repeat_fraction=0.5, lag_alpha=1.5, permute=False)
        counts += np.bincount(t.linear_ids(), minlength=rows)
    share = counts / counts.sum()
    assert np.abs(share - w).max() < 0.01


def test_per_table_lists_and_cycles():
    rows = [300, 300, 300, 300]
    t = generate_trace("burst", rows, 64, 40, 1, seed=1, alpha=[0.8, 1.2],
                       repeat_fraction=[0.95, 0.0], lag_alpha=6.0)
    assert t.meta["generator"]["params"]["alpha"] == [0.8, 1.2]
    ids = t.linear_ids()
    for tab in range(4):  # tables 0, 2 take entry 0 (bursty), 1, 3 entry 1 (no repeats)
        x = ids[(ids >= 300 * tab) & (ids < 300 * (tab + 1))]
        same = np.mean(x[1:] == x[:-1])
        assert (same > 0.5) if tab % 2 == 0 else (same < 0.2)
    with pytest.raises(UserError) as e:
        generate_trace("burst", [10, 10, 10], 4, 2, 1, seed=1, alpha=[1.0, 1.1])
    assert e.value.field == "alpha" and "2 values for 3 tables" in e.value.message
    with pytest.raises(UserError) as e:
        generate_trace("burst", 10, 4, 2, 1, seed=1, repeat_fraction=[0.5, 1.5])
    assert e.value.field == "repeat_fraction[1]"


def test_preset_generates_with_its_lists():
    d = yaml.safe_load((PRESETS / "movielens-100k.yaml").read_text())
    assert d["distribution"] == "burst" and d["alpha"] is None
    t = generate_trace("burst", [944, 1683], 512, 10, 1, seed=0, **d["params"])
    assert t.num_accesses == 2 * 512 * 10


# -- fitting ----------------------------------------------------------------------------------
def _lag_cdf(k: int, lag_alpha: float, H: int = 65536) -> float:
    e = 1.0 - lag_alpha
    return (1.0 - (k + 1.0) ** e) / (1.0 - (H + 1.0) ** e)


def _top_share(alpha: float, head: float, rows: int, frac: float) -> float:
    w = (np.arange(1, rows + 1) + head * rows) ** -alpha
    return float(w[: int(frac * rows)].sum() / w.sum())


def test_fit_recovers_known_parameters():
    """Held-in trace from the model itself. Tolerances: 3x the spread of the fitted values
    over seeds 0-3 (measured: repeat_fraction +-0.01, lag_alpha +-0.1, alpha +-0.1 with
    head_scale trading off against it, so the popularity law is compared through its top-k
    mass). A table with few, long-lag repeats only identifies its short-lag repeats, so
    there the test compares repeat_fraction * P(lag <= 8)."""
    truth = dict(alpha=[0.9, 1.1], head_scale=[0.02, 0.0005], repeat_fraction=[0.6, 0.1],
                 lag_alpha=[2.5, 1.5])
    t = generate_trace("burst", [3000, 1000], 256, 120, 1, seed=0, **truth)
    f = ft.fit_trace(t)
    a, b = f.tables
    assert (a.rows, b.rows, a.pooling, b.pooling, f.batch_size) == (3000, 1000, 1, 1, 256)
    assert a.repeat_fraction == pytest.approx(0.6, abs=0.03)
    assert a.lag_alpha == pytest.approx(2.5, abs=0.3)
    for tf, k in ((a, 0), (b, 1)):
        for frac in (0.01, 0.05, 0.2):
            assert _top_share(tf.alpha, tf.head_scale, tf.rows, frac) == pytest.approx(
                _top_share(truth["alpha"][k], truth["head_scale"][k], tf.rows, frac),
                abs=0.03)
    short = b.repeat_fraction * _lag_cdf(8, b.lag_alpha)
    assert short == pytest.approx(0.1 * _lag_cdf(8, 1.5), abs=0.015)


def _session_trace(seed: int, users=400, items=1200, samples=30000, batch=500) -> Trace:
    """A held-in trace NOT from the burst model: users in sessions (geometric, mean 8) with
    Zipf(0.8) activity, items i.i.d. from (r + 50)^-1.2, ids permuted."""
    rng = np.random.default_rng(seed)
    act = np.arange(1, users + 1) ** -0.8
    pop = (np.arange(1, items + 1) + 50.0) ** -1.2
    lens = rng.geometric(1 / 8, size=samples)
    u = np.repeat(rng.choice(users, size=samples, p=act / act.sum()), lens)[:samples]
    it = rng.permutation(items)[rng.choice(items, size=samples, p=pop / pop.sum())]
    n = samples // batch
    return Trace.from_batches([[u[k * batch:(k + 1) * batch], it[k * batch:(k + 1) * batch]]
                               for k in range(n)], [users, items], source="<sessions>")


def test_fit_then_gen_reproduces_lru_curve_and_policy_order():
    src = _session_trace(0)
    f = ft.fit_trace(src)
    synth = trace_from_spec(ft.spec_from_fit(f, src.num_batches, seed=5))
    for frac in FRACTIONS:
        c = max(1, round(frac * src.total_rows))
        lru_s = 1 - lru_miss_ratio_curve(src, [c]).miss_ratio(c)
        lru_f = 1 - lru_miss_ratio_curve(synth, [c]).miss_ratio(c)
        assert abs(lru_s - lru_f) <= 0.03, (frac, lru_s, lru_f)
        st_s = run_cache(src, "static", c).hits / src.num_accesses
        st_f = run_cache(synth, "static", c).hits / synth.num_accesses
        assert (lru_s > st_s) == (lru_f > st_f), (frac, lru_s, st_s, lru_f, st_f)


def test_fit_file_round_trip(tmp_path):
    t = generate_trace("burst", [200, 100], 32, 30, [2, 1], seed=2, pooling_sigma=0.8,
                       repeat_fraction=0.3)
    f = ft.fit_trace(t, max_evals=40)
    p = tmp_path / "f.yaml"
    ft.write_fit(f, p)
    g = ft.load_fit(p)
    assert g.tables == f.tables and g.batch_size == 32 and g.num_batches == 30
    text = p.read_text()
    assert "# popularity exponent" in text and "repeat_fraction:" in text
    # bag lengths: mean and spread come from the trace
    b0 = ft.bag_lengths(t)[0]
    assert len(b0) == 30 * 32 and f.tables[0].pooling == max(1, round(float(b0.mean())))
    assert f.tables[0].pooling_sigma == pytest.approx(float(b0.std()), abs=1e-4)


# -- CLI --------------------------------------------------------------------------------------
def _gen(tmp_path, name="src.sptrace", batches=40):
    out = tmp_path / name
    assert main(["trace", "gen", "--distribution", "burst", "--param", "repeat_fraction=0.5,0",
                 "--param", "alpha=0.9,1.2", "--rows", "400,300", "--batch-size", "64",
                 "--batches", str(batches), "--seed", "4", "--out", str(out)]) == 0
    return out


def test_cli_fit_and_gen_from_fit(tmp_path, capsys):
    src = _gen(tmp_path)
    fit_p, preset_p = tmp_path / "fit.yaml", tmp_path / "mine.yaml"
    assert main(["trace", "fit", str(src), "--out", str(fit_p), "--preset",
                 str(preset_p)]) == 0
    out = capsys.readouterr().out
    assert "max LRU hit gap" in out and "table 1" in out
    f = ft.load_fit(fit_p)
    assert f.check["capacity_fraction"] == list(FRACTIONS) and f.check["max_lru_gap"] < 0.03
    preset = yaml.safe_load(preset_p.read_text())
    assert preset["params"]["alpha"] == pytest.approx([t.alpha for t in f.tables], rel=1e-5)
    g = tmp_path / "g.sptrace"
    assert main(["trace", "gen", "--from-fit", str(fit_p), "--batches", "7", "--seed", "3",
                 "--out", str(g)]) == 0
    tg = open_trace(g)
    api = trace_from_spec(ft.spec_from_fit(f, 7, 3))
    assert tg.table_rows.tolist() == [400, 300] and tg.batch_size == 64
    assert tg.linear_ids().tolist() == api.linear_ids().tolist()
    # --rows scales the tables; --batch-size overrides the fit's
    big = tmp_path / "big.sptrace"
    assert main(["trace", "gen", "--from-fit", str(fit_p), "--rows", "40000", "--batch-size",
                 "16", "--batches", "3", "--seed", "3", "--out", str(big)]) == 0
    tb = open_trace(big)
    assert tb.table_rows.tolist() == [40000, 40000] and tb.batch_size == 16


def test_fit_bad_input_one_line_exit_2(tmp_path, capsys):
    one = _gen(tmp_path, "one.sptrace", batches=1)
    capsys.readouterr()
    assert main(["trace", "fit", str(one), "--out", str(tmp_path / "f.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(one) in err and "expected at least 2 batches" in err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["trace", "fit", str(empty), "--out", str(tmp_path / "f.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(empty) in err
    assert not (tmp_path / "f.yaml").exists()
    # --from-fit with a distribution flag, and a malformed fit file
    src = _gen(tmp_path, "s.sptrace")
    capsys.readouterr()
    bad = tmp_path / "bad.yaml"
    bad.write_text("distribution: burst\nbatch_size: 8\ntables:\n  - {rows: 10, alpha: -1}\n")
    assert main(["trace", "gen", "--from-fit", str(bad), "--batches", "2", "--seed", "1",
                 "--out", str(tmp_path / "x.sptrace")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tables[0].alpha" in err and str(bad) in err
    assert main(["trace", "gen", "--from-fit", str(bad), "--alpha", "1", "--batches", "2",
                 "--seed", "1", "--out", str(tmp_path / "x.sptrace")]) == 2
    assert "--alpha" in capsys.readouterr().err
    assert src.exists()


def test_id_beyond_its_tables_rows(tmp_path, capsys):
    p = tmp_path / "bad.sptrace"
    with TraceWriter(p, [10, 5], 2, {}) as w:  # table 1 has 5 rows; id 7 is beyond
        w.append_batches(np.array([1, 2, 3, 7]), np.arange(5, dtype=np.int64),
                         np.array([0, 4], np.int64))
    for cmd in (["trace", "stats", str(p)], ["trace", "fit", str(p), "--out",
                                             str(tmp_path / "f.yaml")]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(p) in err and "indices" in err
        assert "table 1: expected 0 <= id < 5" in err


# -- fixes found on the way -------------------------------------------------------------------
def test_calibrated_states_the_true_minimum_of_rows():
    from scratchpipe_sim.traces.calibrated import Target, plan_counts

    d = yaml.safe_load((PRESETS / "meta-2021.yaml").read_text())
    t = Target.from_shares(d["params"]["row_shares"], d["params"]["access_shares"])
    with pytest.raises(UserError) as e:
        plan_counts(t, 100000, 1)
    need = int(e.value.message.split("at least ")[1].split()[0])
    plan_counts(t, 100000, need)  # exactly the stated minimum works ...
    with pytest.raises(UserError):
        plan_counts(t, 100000, need - 1)  # ... and one fewer does not


def test_param_comma_list(tmp_path, capsys):
    base = ["trace", "gen", "--distribution", "calibrated", "--rows", "5000", "--batch-size",
            "10", "--batches", "3", "--seed", "1"]
    assert main([*base, "--param", "row_shares=0.3,0.7", "--param", "access_shares=0.5,0.5",
                 "--out", str(tmp_path / "a.sptrace")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--param row_shares: expected 17" in err
    shares = ",".join(["1"] + ["0"] * 16)
    assert main([*base, "--param", f"row_shares={shares}", "--param",
                 f"access_shares={shares}", "--out", str(tmp_path / "b.sptrace")]) == 0
    assert open_trace(tmp_path / "b.sptrace").meta["generator"]["params"]["row_shares"][0] == 1


def test_tsv_with_a_sample_table_id_header_is_a_table(tmp_path, capsys):
    p = tmp_path / "lookups.tsv"
    p.write_text("sample\ttable\tid\n0\t0\t5\n0\t1\t2\n1\t0\t5\n1\t1\t3\n2\t0\t4\n2\t1\t2\n")
    t = open_trace(p, batch_size=2)
    assert t.num_tables == 2 and t.num_batches == 2 and t.table_rows.tolist() == [6, 4]
    assert t.linear_ids().tolist() == [5, 5, 6 + 2, 6 + 3, 4, 6 + 2]
    out = tmp_path / "l.sptrace"
    assert main(["trace", "convert", str(p), str(out), "--batch-size", "2"]) == 0
    msg = capsys.readouterr().out
    assert "6 tsv records read -> 2 tables" in msg and "10 table rows in all" in msg
    assert " rows from " not in msg


def test_convert_summary_says_records_and_distinct_ids(tmp_path, capsys):
    p = tmp_path / "l.csv"
    p.write_text("sample,table,id\n0,0,50\n0,1,7\n1,0,50\n1,1,9\n")
    assert main(["trace", "convert", str(p), str(tmp_path / "o.sptrace"),
                 "--dense-remap"]) == 0
    msg = capsys.readouterr().out
    assert "4 csv records read" in msg and "3 table rows in all (distinct ids" in msg


def test_gen_unwritable_out_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    # (a missing folder is made, as `trace convert` makes it: test_reliability_first_contact)
    outs = [afile / "x.sptrace"]
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if not os.access(ro, os.W_OK):  # root may write anywhere
        outs.append(ro / "x.sptrace")
    try:
        for out in outs:
            assert main(["trace", "gen", "--rows", "10", "--batch-size", "2", "--batches", "2",
                         "--seed", "1", "--out", str(out)]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and str(out) in err and "--out" in err
            assert not out.exists()
    finally:
        ro.chmod(0o700)


def _subparser(*path: str) -> argparse.ArgumentParser:
    from scratchpipe_sim.cli import build_parser

    p = build_parser()
    for name in path:
        act = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = act.choices[name]
    return p


@pytest.mark.parametrize("cmd", [("trace", "gen"), ("trace", "convert"), ("trace", "fit")])
def test_every_option_has_help(cmd):
    p = _subparser(*cmd)
    for a in p._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        assert a.help, f"{' '.join(cmd)} {a.option_strings or a.dest} has no help"


def test_stats_text_per_table_columns_aligned(tmp_path, capsys):
    t = tmp_path / "t.sptrace"
    assert main(["trace", "gen", "--rows", "5,123456", "--batch-size", "8", "--batches", "3",
                 "--seed", "1", "--out", str(t)]) == 0
    capsys.readouterr()
    assert main(["trace", "stats", str(t), "--no-mrc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(k for k, x in enumerate(lines) if x.startswith("per table"))
    block = lines[i:i + 3]
    assert len({len(x) for x in block}) == 1  # right-aligned columns end together
    assert "distinct rows" in block[0]
    assert main(["trace", "stats", str(t), "--no-mrc", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ids = open_trace(t).linear_ids()
    assert "unique" not in d and d["distinct_rows_per_table"] == [
        len(np.unique(ids[ids < 5])), len(np.unique(ids[ids >= 5]))]


def test_ratings_log_is_replayed_in_time_order(tmp_path, capsys):
    p = tmp_path / "ratings.dat"  # MovieLens-1M layout: user::item::rating::timestamp
    p.write_text("1::10::5::300\n2::11::3::100\n1::12::4::200\n3::10::1::100\n")
    t = open_trace(p, fmt="ratings", batch_size=2)
    # time order (ties keep file order): (2,11)@100, (3,10)@100, (1,12)@200, (1,10)@300
    assert t.table_rows.tolist() == [4, 13] and t.num_batches == 2
    assert t.batch(0).table(0)[0].tolist() == [2, 3]
    assert t.batch(0).table(1)[0].tolist() == [11, 10]
    assert t.batch(1).table(0)[0].tolist() == [1, 1]
    assert t.batch(1).table(1)[0].tolist() == [12, 10]
    inter = tmp_path / "x.inter"  # RecBole: a header line, tabs
    inter.write_text("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                     "1\t10\t5\t300\n2\t11\t3\t100\n1\t12\t4\t200\n3\t10\t1\t100\n")
    out = tmp_path / "r.sptrace"
    assert main(["trace", "convert", str(inter), str(out), "--format", "ratings",
                 "--batch-size", "2"]) == 0
    assert "4 interactions read -> 2 tables" in capsys.readouterr().out
    assert open_trace(out).linear_ids().tolist() == t.linear_ids().tolist()
    bad = tmp_path / "u.data"
    bad.write_text("1\t10\t5\t300\n2\tx\t3\t100\n")
    assert main(["trace", "convert", str(bad), str(tmp_path / "b.sptrace"), "--format",
                 "ratings"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}:2: item: expected a non-negative integer" in err


@pytest.mark.skipif(not os.environ.get("SCRATCHPIPE_MOVIELENS"),
                    reason="set SCRATCHPIPE_MOVIELENS to a MovieLens-100k u.data or RecBole "
                           "ml-100k.inter (not redistributable, so not shipped)")
def test_movielens_round_trip(tmp_path):  # pragma: no cover - needs the real file
    """The docs/traces.md check on the real file: convert, fit, generate, compare."""
    src = tmp_path / "ml.sptrace"
    assert main(["trace", "convert", os.environ["SCRATCHPIPE_MOVIELENS"], str(src),
                 "--format", "ratings"]) == 0
    real = open_trace(src)
    assert real.table_rows.tolist() == [944, 1683] and real.num_accesses == 200000
    f = ft.fit_trace(real)
    synth = trace_from_spec(ft.spec_from_fit(f, real.num_batches, seed=1))
    for frac in FRACTIONS:
        c = max(1, round(frac * real.total_rows))
        lru = [1 - lru_miss_ratio_curve(t, [c]).miss_ratio(c) for t in (real, synth)]
        static = [run_cache(t, "static", c).hits / t.num_accesses for t in (real, synth)]
        assert abs(lru[0] - lru[1]) <= 0.03
        assert (lru[0] > static[0]) == (lru[1] > static[1])
