"""Zipf draws and the generators' plumbing against exact figures: the tabulated head plus
the tail's integral equals the exact normalizer with a Zipf-Mandelbrot shift; tables drawn
in forked processes give the same ids; `store_from_spec` reports every batch to its
progress callback once."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.traces import generators as gen


def test_zipf_tail_integral_with_a_shift_matches_the_exact_sum(monkeypatch):
    """Ranks above the tabulated head are priced by the integral of (x + shift)^-alpha over
    [head + 1/2, rows + 1/2] (midpoint rule: error ~1e-6 here; misplacing the shift in
    either bound moves the total by > 1e-4)."""
    monkeypatch.setattr(gen, "ZIPF_EXACT_ROWS", 100)
    rows, alpha, shift = 10_000, 1.2, 20.0
    cdf, guide, head_mass, total = gen.ZipfSampler._tabulate(rows, alpha, shift)
    exact = float(np.sum((np.arange(1, rows + 1) + shift) ** -alpha))
    assert total == pytest.approx(exact, rel=1e-5)
    head = float(np.sum((np.arange(1, 101) + shift) ** -alpha))
    assert head_mass == pytest.approx(head / exact, rel=1e-5)


def test_tables_drawn_in_forked_processes_are_the_serial_ids(monkeypatch):
    spec = gen.make_spec("zipf", [300, 500, 700], 8, 5, [2, 3, 1], 7, alpha=1.1)
    serial = np.asarray(gen.trace_from_spec(spec).indices)
    monkeypatch.setattr(gen, "PARALLEL_MIN_ACCESSES", 0)
    forked = np.asarray(gen.trace_from_spec(spec, jobs=2).indices)
    np.testing.assert_array_equal(forked, serial)


def test_store_from_spec_reports_each_batch_once(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "BLOCK_ACCESSES", 40)  # several blocks
    spec = gen.make_spec("uniform", [50, 70], 4, 9, [2, 1], 1)
    seen = []
    gen.store_from_spec(spec, tmp_path / "s.sptrace", progress=seen.append)
    assert len(seen) > 1 and sum(seen) == 9
