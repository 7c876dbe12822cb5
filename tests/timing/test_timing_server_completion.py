"""`Server`'s construction check and its completion rule: transfers whose remaining work is
within `_EPS_NS` of the one completing finish at the same instant (no sliver-long timers)."""

from __future__ import annotations

import pytest
import simpy

from scratchpipe_sim.timing.resources import _EPS_NS, Server


@pytest.mark.parametrize("GBps", [0.0, -1.0])
def test_non_positive_bandwidth_is_refused(GBps):
    with pytest.raises(ValueError, match="^s: bandwidth must be positive$"):
        Server(simpy.Environment(), "s", GBps, 0.0, num_batches=1)


def test_transfers_within_eps_of_the_completing_one_finish_with_it():
    """Three transfers share 1 B/ns from t=0 (1/3 each). a (1000 B) completes at 3000 ns;
    b is 1e-9 B longer (its remaining 3e-9 ns of shared service <= _EPS_NS): it finishes at
    the same instant, exactly; c is 1e-3 B longer (3e-3 ns > _EPS_NS): it goes on alone at
    1 B/ns and finishes 1e-3 ns later."""
    env = simpy.Environment()
    s = Server(env, "s", 1.0, 0.0, num_batches=1)
    done: dict[str, float] = {}
    for name, nbytes in (("a", 1000.0), ("b", 1000.0 + 1e-9), ("c", 1000.0 + 1e-3)):
        ev = s.transfer(nbytes, 0)
        ev.callbacks.append(lambda _ev, n=name: done.setdefault(n, env.now))
    env.run()
    assert 3 * 1e-9 < _EPS_NS < 3 * 1e-3
    assert done["a"] == pytest.approx(3000.0, rel=1e-15)
    assert done["b"] == done["a"]
    assert done["c"] == pytest.approx(done["a"] + 1e-3, abs=1e-9)
    assert s.busy_ns == pytest.approx(3000.0 + 1e-3, abs=1e-9)
