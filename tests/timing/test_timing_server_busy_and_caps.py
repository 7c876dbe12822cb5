"""`Server.busy_now` (the utilisation windows read it mid-run) and water-filling progress
when a transfer joins a capped one: closed forms on a 1 B/ns server without latency."""

from __future__ import annotations

import pytest
import simpy

from scratchpipe_sim.timing.resources import Server


def test_busy_now_integrates_busy_time_up_to_now():
    """A: 1000 B from t=0 (busy 0-1000); idle 1000-1500; B: 1000 B from t=1500. Read at
    t=400 (A in service: 400), 1200 (idle: 1000) and 2000 (B in service: 1000 + 500)."""
    env = simpy.Environment()
    s = Server(env, "s", 1.0, 0.0, num_batches=1)
    seen = {}

    def run():
        s.transfer(1000, 0)
        yield env.timeout(400)
        seen[400] = s.busy_now()
        yield env.timeout(800)
        seen[1200] = s.busy_now()
        yield env.timeout(300)
        s.transfer(1000, 0)
        yield env.timeout(500)
        seen[2000] = s.busy_now()

    env.process(run())
    env.run()
    assert seen == {400: pytest.approx(400.0, abs=1e-9), 1200: pytest.approx(1000.0, abs=1e-9),
                    2000: pytest.approx(1500.0, abs=1e-9)}
    assert s.busy_ns == pytest.approx(2000.0, abs=1e-9) and env.now == pytest.approx(2500.0)


def test_capped_transfer_progress_when_another_joins():
    """A: 100 B capped at 25% from t=0 (alone: 25 B served by t=100); B: 300 B uncapped
    from t=100 takes the other 75%. A's 75 B left at 0.25 B/ns: done at t=400; B has
    300 - 0.75 x 300 = 75 B left, alone at 1 B/ns: done at t=475."""
    env = simpy.Environment()
    s = Server(env, "s", 1.0, 0.0, num_batches=1)
    ends = {}

    def job(name, nbytes, cap, start):
        yield env.timeout(start)
        yield s.transfer(nbytes, 0, max_share=cap)
        ends[name] = env.now

    env.process(job("A", 100, 0.25, 0.0))
    env.process(job("B", 300, 1.0, 100.0))
    env.run()
    assert ends == {"A": pytest.approx(400.0, rel=1e-12), "B": pytest.approx(475.0, rel=1e-12)}
