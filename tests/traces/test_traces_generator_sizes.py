"""The generators' sizes and small-set edges: `spec_disk_bytes` is exactly the bytes the
written `.sptrace` holds (constant bags: no offsets file; mixed bag lengths: u32-marks);
an exact permutation table holds 4 bytes a row; a hot set too small to round to one row
still has one."""

from __future__ import annotations

import numpy as np
import pytest

from scratchpipe_sim.traces import generators as gen


@pytest.mark.parametrize("pooling, sigma", [([2, 2], 0.0), ([2, 1], 0.0), ([3, 3], 0.5)])
def test_spec_disk_bytes_is_exactly_the_stores_data_files(tmp_path, pooling, sigma):
    spec = gen.make_spec("uniform", [50, 70], 4, 3, pooling, 1, pooling_sigma=sigma)
    out = gen.store_from_spec(spec, tmp_path / "s.sptrace")
    assert gen.spec_disk_bytes(spec) == sum(f.stat().st_size for f in out.glob("*.bin"))


def test_exact_permutation_table_is_int32_below_2_31_rows():
    p = gen.Permutation(1000, np.random.SeedSequence(1))
    assert p.table is not None and p.table.dtype == np.int32
    assert sorted(p.table.tolist()) == list(range(1000))


def test_a_hot_fraction_rounding_to_no_row_keeps_one_hot_row():
    s = gen.hotset(100, np.random.SeedSequence(1), hot_fraction=0.001,
                   hot_access_fraction=0.9)
    assert (s.hot_rows, s.p_hot) == (1, 0.9)
    ids = s.sample(np.random.default_rng(2), 10_000)
    hot = int(s.perm(np.arange(1))[0])
    assert 0.88 < np.mean(ids == hot) < 0.92  # 0.9 + 0.1 / 99 of the draws
    none = gen.hotset(100, np.random.SeedSequence(1), hot_fraction=0.0)
    assert (none.hot_rows, none.p_hot) == (0, 0.0)
