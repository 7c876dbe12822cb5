"""`calibrate --cpu --kernel fbgemm`'s update terms (issue 43): FBGEMM's CPU backward per
optimizer, the fit of timing/cpu_update_cost.py's terms, and the structure they assume.

No timing thresholds: the fit recovers known terms exactly from synthetic points, and on
FBGEMM itself (small tables, per optimizer; skipped without the `peers` extra) the
per-unique-row work the model counts is what FBGEMM does: the rows (and optimizer state)
one backward changes are exactly the batch's distinct ids per table.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_fakes import synthetic
from peer_packages import fbgemm_reason

from scratchpipe_sim.config import load_config
from scratchpipe_sim.cpu import fbgemm_update_bench as ub
from scratchpipe_sim.cpu.host_preset_fit import cpu_preset_yaml, fit_cpu, fit_update_terms
from scratchpipe_sim.timing.cpu_update_cost import TERM_NAMES, design_row

needs_fbgemm = pytest.mark.skipif(fbgemm_reason() is not None, reason=str(fbgemm_reason()))

#: per optimizer, known terms (core-ns) in TERM_NAMES' order
KNOWN = {"sgd": (20000.0, 3000.0, 12.0, 0.3, 90.0, 1.5, 0.4, 7.0),
         "adagrad": (30000.0, 2000.0, 10.0, 0.2, 120.0, 5.0, 0.7, 9.0),
         "rowwise-adagrad": (25000.0, 4000.0, 14.0, 0.05, 30.0, 0.8, 0.5, 7.5)}
#: the bench's rows over a shape's tables (CpuBenchSizes' default)
TABLE_ROWS = 1 << 19


def _points(opt: str, terms: tuple[float, ...], cpu=None) -> list[ub.UpdatePoint]:
    """The calibration's shapes, timed by `terms` exactly (unique rows ~ lookups / reuse),
    plus, with `cpu`, the grad_output misses its rates and LLC price."""
    from scratchpipe_sim.timing.machine import grad_output_miss_ns

    fit, check = ub.shapes(1 << 14)
    out = []
    for role, group in (("fit", fit), ("check", check)):
        for s in group:
            n = s.batch * s.pooling * s.tables
            u = n // s.reuse
            nbytes = ub.shape_table_bytes(s, TABLE_ROWS)
            secs = float(np.dot(design_row(n, u, s.dim, s.tables, s.batch * s.tables,
                                           nbytes), terms)) / 1e9
            if cpu is not None:
                secs += grad_output_miss_ns(cpu, s.batch * s.tables, s.dim * 4, u) / 1e9
            out.append(ub.UpdatePoint(opt, role, s.tables, s.batch, s.pooling, s.dim, n, u,
                                      secs, table_bytes=nbytes, rows_scale=s.rows_scale))
    return out


def test_the_fit_recovers_known_terms_exactly():
    for opt, terms in KNOWN.items():
        pts = [p for p in _points(opt, terms) if p.role == "fit"]
        got = fit_update_terms([design_row(p.lookups, p.unique_rows, p.dim, int(p.tables),
                                           p.batch * p.tables, p.table_bytes) for p in pts],
                               [p.seconds for p in pts])
        assert got == pytest.approx(terms, rel=1e-6)


def test_the_fit_shapes_separate_every_term():
    fit, _ = ub.shapes(1 << 16)
    x = np.array([design_row(s.batch * s.pooling * s.tables,
                             s.batch * s.pooling * s.tables / s.reuse, s.dim, s.tables,
                             s.batch * s.tables, ub.shape_table_bytes(s, TABLE_ROWS))
                  for s in fit])
    assert np.linalg.matrix_rank(x) == len(TERM_NAMES)
    # unique rows vary at fixed lookups, D at fixed counts, pooling at fixed batch, the
    # tables' bytes at fixed counts
    assert {s.reuse for s in fit} == {1, 3, 8} and {s.dim for s in fit} == {32, 64, 128}
    assert {s.rows_scale for s in fit} == {0.25, 1.0, 2.0, 8.0}
    assert 1 in {s.pooling for s in fit} and {s.tables for s in fit} == {1, 4, 8}


def test_the_preset_carries_every_optimizers_terms_and_the_held_out_checks(tmp_path):
    # points timed by known terms plus the grad_output misses the calibration's own rates
    # and LLC price: the fit takes those off and recovers the terms exactly
    from scratchpipe_sim.config.hardware import CpuConfig
    from scratchpipe_sim.cpu.host_preset_fit import _replace

    cpu = _replace(CpuConfig(), fit_cpu(synthetic()).values)
    m = synthetic()  # every other benchmark's synthetic samples
    for opt, terms in KNOWN.items():
        m.update += _points(opt, terms, cpu)
    cal = fit_cpu(m)
    upd = cal.values["update"]
    assert set(upd) == {"sgd", "adagrad", "rowwise_adagrad"}
    for opt, terms in KNOWN.items():
        got = upd[opt.replace("-", "_")]
        assert [got[n] for n in TERM_NAMES] == pytest.approx(terms, rel=1e-4)
        # threads as FBGEMM uses them: only rowwise Adagrad's walk is at::parallel_for
        assert got["parallel"] is (opt == "rowwise-adagrad")
    held = [c for c in cal.checks if c.startswith("update ")]
    assert len(held) == 3 * len(ub.shapes(1 << 14)[1])
    assert all("+0% (held out)" in c or "-0% (held out)" in c for c in held)
    out = tmp_path / "cpu.yaml"
    out.write_text(cpu_preset_yaml(cal, m, "x", "a100-gen4"))
    hw = load_config({"hardware": {"preset": str(out)}, "designs": ["hybrid"]}).hardware
    assert hw.cpu.update.of("rowwise-adagrad").parallel
    assert hw.cpu.update.of("sgd").ns_per_row == pytest.approx(KNOWN["sgd"][4], rel=1e-4)
    assert hw.cpu.update.of("adam") is None


def _tbe(fb, opt: str, rows: int, dim: int, tables: int):
    return fb["TBE"]([(rows, dim, fb["EmbeddingLocation"].HOST, fb["ComputeDevice"].CPU)]
                     * tables, optimizer=getattr(fb["EmbOptimType"], ub.OPTIMIZERS[opt]),
                     learning_rate=0.01, pooling_mode=fb["PoolingMode"].SUM,
                     weights_precision=fb["SparseType"].FP32)


@needs_fbgemm
@pytest.mark.parametrize("opt", list(ub.OPTIMIZERS))
def test_fbgemm_updates_exactly_the_batchs_unique_rows_and_their_state(opt):
    """The model's per-unique-row terms count each table's distinct ids of the batch:
    FBGEMM's backward changes exactly those rows, and their state (Adagrad: D floats a
    row, rowwise Adagrad: one), nothing else."""
    import torch

    from scratchpipe_sim.cpu.fbgemm_tbe import import_fbgemm

    fb = import_fbgemm()
    rows, dim, tables, batch, pooling = 300, 8, 3, 16, 5
    tbe = _tbe(fb, opt, rows, dim, tables)
    rng = np.random.default_rng(7)
    per = [ub._ids(rng, rows, batch * pooling, 3) for _ in range(tables)]
    before = [w.detach().clone().numpy() for w in tbe.split_embedding_weights()]
    out = tbe(torch.from_numpy(np.concatenate(per)),
              torch.from_numpy(np.arange(0, batch * pooling * tables + 1, pooling)))
    out.backward(torch.full_like(out, 0.5))
    states = tbe.split_optimizer_states()
    for t, ids in enumerate(per):
        want = np.unique(ids)
        w = tbe.split_embedding_weights()[t].detach().numpy()
        changed = np.flatnonzero((w != before[t]).any(axis=1))
        np.testing.assert_array_equal(changed, want)
        if opt != "sgd":
            st = states[t][0].detach().numpy().reshape(rows, -1)
            assert st.shape[1] == (dim if opt == "adagrad" else 1)
            np.testing.assert_array_equal(np.flatnonzero((st != 0).all(axis=1)), want)
            assert not st[np.setdiff1d(np.arange(rows), want)].any()


@needs_fbgemm
def test_measured_points_count_the_fed_ids_unique_rows():
    """calibrate's benchmark at tiny shapes: every shape of every optimizer asked, roles fit
    and check, unique rows the exact distinct ids fed (fewer where rows are reused)."""
    from scratchpipe_sim.cpu.fbgemm_tbe import import_fbgemm

    fit = [ub.UpdateShape(2, 16, 4, 16, k) for k in (1, 8)]
    fit += [ub.UpdateShape(2, 16, 4, 16, 1, 4.0)]  # 4x the rows: its own TBE
    check = [ub.UpdateShape(2, 32, 1, 16, 1)]  # one TBE (2 tables, dim 16) for all three
    pts = ub.measure_update(import_fbgemm(), 1 << 12, 0, 1, "median", lambda t: t.median_s,
                            optimizers=("sgd", "rowwise-adagrad"), shape_set=(fit, check))
    assert [(p.optimizer, p.role) for p in pts] == [
        (o, r) for o in ("sgd", "rowwise-adagrad") for r in ("fit", "fit", "fit", "check")]
    for p in pts:
        assert 0 < p.unique_rows <= p.lookups == p.batch * p.pooling * p.tables
        assert p.seconds > 0 and p.forward_seconds > 0
        # a table's weight bytes: (4096 x rows_scale) rows over the 2 tables, 16 floats
        assert p.table_bytes == (1 << 12) * p.rows_scale / 2 * 16 * 4
    for o in ("sgd", "rowwise-adagrad"):
        once, reused, _ = (p.unique_rows for p in pts if p.optimizer == o and p.role == "fit")
        assert reused < once  # rows used ~8 times: fewer unique rows at equal lookups


@pytest.mark.parametrize(("n", "k"), [(4096, 1), (4096, 3), (4096, 8), (1000, 3), (7, 8)])
def test_the_shapes_ids_use_each_unique_row_k_times_give_or_take_one(n, k):
    """The duplicate counts the fit shapes feed (oracle: the same generator's n // k draws,
    deduplicated): n ids over exactly those rows, each used floor or ceil of n / U times,
    so lookups per unique row is about k (U below n // k only by the draws' collisions)."""
    rows = 1 << 20
    ids = ub._ids(np.random.default_rng(3), rows, n, k)
    pool = np.unique(np.random.default_rng(3).integers(0, rows, max(1, n // k)))
    assert len(ids) == n and ids.min() >= 0 and ids.max() < rows
    uniq, counts = np.unique(ids, return_counts=True)
    np.testing.assert_array_equal(uniq, pool)
    u = len(uniq)
    assert u <= max(1, n // k)
    assert set(counts.tolist()) <= {n // u, -(-n // u)}


def test_the_size_shapes_vary_the_tables_bytes_at_fixed_counts():
    """Each size shape has a twin at the bench's rows with the same counts (tables, batch,
    pooling, dim, reuse), so the per-doubling row term is told apart from the per-row and
    per-row-element ones by the bytes alone (at fixed rows the bytes grow with D, which
    would tie it to the dims); at full sizes they span 0 to 5 doublings of 32 MiB."""
    from scratchpipe_sim.timing.cpu_update_cost import table_doublings

    fit, _ = ub.shapes(1 << 16)
    sized = [s for s in fit if s.rows_scale != 1.0]
    assert len(sized) == 3 and all(s.reuse == 1 for s in sized)
    for s in sized:
        assert s._replace(rows_scale=1.0) in fit
    got = sorted(table_doublings(ub.shape_table_bytes(s, TABLE_ROWS)) for s in sized)
    assert got == pytest.approx([0.0, 4.0, 5.0])
