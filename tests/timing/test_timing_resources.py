"""SimPy resources: processor sharing checked against closed forms.

Every resource's unloaded latency and peak bandwidth are measured from the model and
compared with its own config; the deviation in percent is printed (`pytest -s`) and must be
~0 (the model is exact for a lone transfer).
"""

from __future__ import annotations

import pytest
import simpy

from scratchpipe_sim.config import interpolate, load_config
from scratchpipe_sim.timing.dense_compute import dense_iteration
from scratchpipe_sim.timing.machine import Machine, PlannerParams
from scratchpipe_sim.timing.resources import Server

PRESETS = ("v100-gen3", "a100-gen4", "h100-gen5", "h200-gen5", "mi250-gen4", "gh200-c2c",
           "gb300-c2c")


def lone(make, bytes_):
    """Time of one transfer alone on a fresh machine."""
    env = simpy.Environment()
    ev = make(env, bytes_)
    env.run()
    assert ev.processed
    return env.now


def server(env, GBps=2.0, lat=10.0):
    return Server(env, "s", GBps, lat, num_batches=4)


def test_two_equal_concurrent_transfers_take_twice_the_service_time():
    env = simpy.Environment()
    s = server(env)
    a, b = s.transfer(1000, 0), s.transfer(1000, 0)
    env.run()
    single = 1000 / 2.0
    assert a.processed and b.processed
    assert env.now == pytest.approx(10 + 2 * single, rel=1e-12)
    assert s.busy_ns == pytest.approx(2 * single, rel=1e-12)
    assert s.bytes_by_batch[0] == 2000


def test_staggered_processor_sharing_closed_form():
    # A: 600 B alone at 1 B/ns from t=0; B: 200 B arrives at t=100.
    # 0..100 A alone (A left 500); then both at 0.5 B/ns: B done after 400 ns (t=500),
    # A has 300 left at t=500 -> alone -> done t=800.
    env = simpy.Environment()
    s = Server(env, "s", 1.0, 0.0, num_batches=1)
    ends = {}

    def job(name, start, nbytes):
        yield env.timeout(start)
        yield s.transfer(nbytes, 0)
        ends[name] = env.now

    env.process(job("A", 0, 600))
    env.process(job("B", 100, 200))
    env.run()
    assert ends["B"] == pytest.approx(500, rel=1e-12)
    assert ends["A"] == pytest.approx(800, rel=1e-12)
    assert s.busy_ns == pytest.approx(800, rel=1e-12)


def test_efficiency_scales_service_and_zero_bytes_cost_nothing():
    env = simpy.Environment()
    s = server(env)
    assert s.transfer(0, 0) is None
    ev = s.transfer(1000, 1, efficiency=0.25)
    env.run()
    assert ev.processed and env.now == pytest.approx(10 + 1000 / (2.0 * 0.25))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_resource_unloaded_latency_and_peak_bandwidth(preset):
    cfg = load_config({"hardware": {"preset": preset, "pcie": {"dma_loads_dram": False}},
                       "model": {"tables": {"dim": 128}}})
    hw = cfg.hardware
    big = 1 << 30
    rb = cfg.model.row_bytes
    cases = {
        # name: (factory(env, nbytes), expected latency, expected effective bandwidth GB/s)
        "pcie_h2d": (lambda env, n: Machine(env, cfg, 1).pcie.h2d(n, 0, "x"),
                     hw.pcie.latency_ns, hw.pcie.h2d_GBps),
        "pcie_d2h": (lambda env, n: Machine(env, cfg, 1).pcie.d2h(n, 0, "x"),
                     hw.pcie.latency_ns, hw.pcie.d2h_GBps),
        "pcie_uvm": (lambda env, n: Machine(env, cfg, 1).pcie.h2d(n, 0, "x", uvm=True),
                     hw.pcie.latency_ns, hw.pcie.h2d_GBps * hw.pcie.uvm_read_share),
        "hbm_gather": (lambda env, n: Machine(env, cfg, 1).hbm.gather(n / rb, rb, 0, "x"),
                       hw.gpu.hbm_latency_ns,
                       hw.gpu.hbm_GBps * interpolate(hw.gpu.gather_efficiency, rb)),
        "hbm_stream": (lambda env, n: Machine(env, cfg, 1).hbm.server.transfer(n, 0),
                       hw.gpu.hbm_latency_ns, hw.gpu.hbm_GBps),
        "dram_gather": (lambda env, n: Machine(env, cfg, 1).dram.gather(n / rb, rb, 0, "x"),
                        hw.cpu.dram_latency_ns,
                        hw.cpu.dram_GBps * interpolate(hw.cpu.gather_efficiency, rb)),
        "llc": (lambda env, n: Machine(env, cfg, 1).dram.gather(n / rb, rb, 0, "x", 1.0),
                0.0, hw.cpu.llc_GBps),
        "l2": (lambda env, n: Machine(env, cfg, 1).hbm.gather(n / rb, rb, 0, "x", 1.0),
               0.0, hw.gpu.l2_GBps),
        "dram_stream": (lambda env, n: Machine(env, cfg, 1).dram.server.transfer(n, 0),
                        hw.cpu.dram_latency_ns, hw.cpu.dram_GBps),
    }
    for name, (make, lat, bw) in cases.items():
        t_small = lone(make, 1)
        t_big = lone(make, big)
        lat_meas = t_small - 1 / bw
        bw_meas = (big - 1) / (t_big - t_small)
        dev_lat = abs(lat_meas - lat) / lat * 100 if lat else abs(lat_meas)
        dev_bw = abs(bw_meas - bw) / bw * 100
        print(f"{preset:10s} {name:12s} latency {lat_meas:9.1f} ns (cfg {lat:9.1f}, "
              f"{dev_lat:.2e}%)  bandwidth {bw_meas:8.2f} GB/s (cfg {bw:8.2f}, "
              f"{dev_bw:.2e}%)")  # shown with pytest -s
        assert dev_lat < 1e-6 and dev_bw < 1e-6
    # a CPU gather is a roofline: DRAM (latency + bytes) and the cores' op work in parallel
    dram_bw = hw.cpu.dram_GBps * interpolate(hw.cpu.gather_efficiency, rb)
    ops_bw = hw.cpu.cores * hw.cpu.parallel_efficiency * hw.cpu.embedding_op_GBps
    for n in (rb, 1 << 20, big):
        t = lone(lambda env, n: Machine(env, cfg, 1).cpu_gather(n / rb, rb, 0, "x"), n)
        assert t == pytest.approx(max(hw.cpu.dram_latency_ns + n / dram_bw, n / ops_bw),
                                  rel=1e-12)


def test_gpu_compute_lone_kernel_matches_flops_and_launches():
    cfg = load_config({"hardware": {"preset": "a100-gen4"}})
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    ev = m.mlp(0, cfg.model.batch_size)
    env.run()
    assert ev.processed
    cost = dense_iteration(cfg.model, cfg.hardware.gpu, float(cfg.model.batch_size))
    expect = cost.busy_ns + cost.launch_ns  # launch waits, then the kernels' GPU time
    assert env.now == pytest.approx(expect, rel=1e-12)


def both_directions(cfg_over):
    cfg = load_config({"hardware": {"pcie": {"h2d_GBps": 10.0, "d2h_GBps": 20.0,
                                             "latency_ns": 0.0, "dma_loads_dram": False,
                                             **cfg_over}}})
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    ends = {}

    def go(name, ev):
        yield ev
        ends[name] = env.now

    env.process(go("h2d", m.pcie.h2d(1000, 0, "x")))
    env.process(go("d2h", m.pcie.d2h(1000, 0, "x")))
    env.run()
    return ends


def test_full_duplex_directions_are_independent():
    ends = both_directions({"full_duplex": True})
    assert ends == {"h2d": pytest.approx(100.0), "d2h": pytest.approx(50.0)}


def test_half_duplex_directions_time_share_one_link():
    # work: h2d 100 ns, d2h 50 ns at full rate; shared equally: d2h ends at 100,
    # h2d has 50 left -> 150.
    ends = both_directions({"full_duplex": False})
    assert ends == {"h2d": pytest.approx(150.0), "d2h": pytest.approx(100.0)}


def test_duplex_h2d_slowdown_while_d2h_runs():
    # h2d at 5 GB/s while d2h busy (0..50 ns): 250 B done, 750 B left at 10 -> t=125.
    ends = both_directions({"full_duplex": True, "duplex_h2d_GBps": 5.0})
    assert ends == {"h2d": pytest.approx(125.0), "d2h": pytest.approx(50.0)}


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1000), st.floats(1, 5000)), min_size=1, max_size=12))
def test_processor_sharing_is_work_conserving(jobs):
    """Busy time equals total work; nobody finishes faster than alone; all bytes served."""
    env = simpy.Environment()
    s = Server(env, "s", 1.0, 0.0, num_batches=1)
    spans = []

    def job(start, nbytes):
        yield env.timeout(start)
        t0 = env.now
        yield s.transfer(nbytes, 0)
        spans.append((t0, env.now, nbytes))

    for a, n in jobs:
        env.process(job(a, n))
    env.run()
    assert len(spans) == len(jobs)
    assert s.busy_ns == pytest.approx(sum(n for _, n in jobs), rel=1e-9)
    for t0, t1, n in spans:
        assert t1 - t0 >= n * (1 - 1e-9)
    # the server is idle only when nothing is pending: makespan >= total work
    assert env.now >= sum(n for _, n in jobs) * (1 - 1e-9)
    assert s.bytes_by_batch[0] == pytest.approx(sum(n for _, n in jobs))


@pytest.mark.parametrize("start_ns", [0.0, 1e11, 1e13])
def test_transfers_finish_late_in_a_long_simulation(start_ns):
    # Past ~1e11 ns the float spacing of `now` exceeds any absolute work threshold; the
    # server must still complete staggered transfers in a bounded number of events.
    env = simpy.Environment(initial_time=start_ns)
    s = server(env, GBps=3.0, lat=0.0)
    done = []

    def job(delay, nbytes):
        yield env.timeout(delay)
        yield s.transfer(nbytes, 0)
        done.append(env.now)

    for delay, nbytes in ((0.0, 1000), (7.3, 333), (11.1, 77)):
        env.process(job(delay, nbytes))
    steps = 0
    while env.peek() != float("inf"):
        env.step()
        steps += 1
        assert steps < 1000, "processor-sharing server livelocked"
    assert len(done) == 3
    # total work 1410 B at 3 B/ns, the server never idle after t=0
    assert max(done) - start_ns == pytest.approx(1410 / 3.0, rel=1e-6)


def test_duplex_rate_never_exceeds_the_solo_rate():
    # The a100 preset's duplex H2D figure (11 GB/s) is above a solo H2D lowered to 5 GB/s:
    # H2D must not speed up while D2H runs, so more D2H bandwidth never slows the H2D.
    def h2d_end(d2h_GBps):
        cfg = load_config({"hardware": {"preset": "a100-gen4", "pcie": {
            "h2d_GBps": 5.0, "d2h_GBps": d2h_GBps, "latency_ns": 0.0,
            "dma_loads_dram": False}}})
        env = simpy.Environment()
        m = Machine(env, cfg, num_batches=1)
        end = {}

        def fill():
            yield m.pcie.h2d(50_000, 0, "fill")
            end["h2d"] = env.now

        env.process(fill())
        m.pcie.d2h(50_000, 0, "victims")
        env.run()
        return end["h2d"]

    ends = [h2d_end(g) for g in (5.0, 10.0, 20.0, 40.0)]
    pairs = zip(ends[:-1], ends[1:], strict=True)
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in pairs)
    assert min(ends) >= 50_000 / 5.0 * (1 - 1e-12)  # never faster than H2D alone


def test_capped_transfer_leaves_the_rest_to_the_others():
    # water-filling: A may use at most 25% of a 1 B/ns server; B takes the other 75%.
    # A: 100 B -> 400 ns alone-capped. B: 300 B at 0.75 -> 400 ns; both end at 400.
    env = simpy.Environment()
    s = Server(env, "s", 1.0, 0.0, num_batches=1)
    ends = {}

    def job(name, nbytes, cap):
        yield s.transfer(nbytes, 0, max_share=cap)
        ends[name] = env.now

    env.process(job("A", 100, 0.25))
    env.process(job("B", 300, 1.0))
    env.run()
    assert ends == {"A": pytest.approx(400.0), "B": pytest.approx(400.0)}
    # alone, the capped transfer still runs at its cap only
    env2 = simpy.Environment()
    s2 = Server(env2, "s", 1.0, 0.0, num_batches=1)
    s2.transfer(100, 0, max_share=0.25)
    env2.run()
    assert env2.now == pytest.approx(400.0)


def test_dma_copies_also_load_cpu_dram():
    cfg = load_config({"hardware": {"pcie": {"h2d_GBps": 10.0, "d2h_GBps": 10.0,
                                             "latency_ns": 0.0},
                                    "cpu": {"dram_GBps": 4.0, "dram_latency_ns": 0.0}}})
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    m.pcie.h2d(1000, 0, "x")
    env.run()
    # the host side (4 GB/s) is slower than the link (10 GB/s): it sets the time
    assert env.now == pytest.approx(250.0)
    assert m.dram.server.bytes_by_batch[0] == 1000
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    m.pcie.h2d(1000, 0, "x", uvm=True)  # UVM: the design charges the host gather itself
    env.run()
    assert m.dram.server.bytes_by_batch[0] == 0


def test_planner_shares_the_cores_with_collect():
    cfg = load_config({"hardware": {"cpu": {"cores": 4, "parallel_efficiency": 1.0,
                                            "plan_ns_per_id": 10.0}}, "cache": {}})
    one_thread = PlannerParams(plan_threads=1)
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    m.plan(0, 100, knobs=one_thread)  # 1000 core-ns on at most 1 of 4 cores: 1000 ns
    env.run()
    assert env.now == pytest.approx(1000.0)
    env = simpy.Environment()
    m = Machine(env, cfg, 1)
    m.plan(0, 100, knobs=one_thread)
    m.cpu_work(3000.0, 0, "collect")  # the other 3 cores: both end at 1000 ns
    env.run()
    assert env.now == pytest.approx(1000.0)
