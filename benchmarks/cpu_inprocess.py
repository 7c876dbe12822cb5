"""In-process checks of the CPU model's shape, free of the host's drift between processes.

    python benchmarks/cpu_inprocess.py aggregate [--rounds 5] [--llc 2,4,8,16]
    python benchmarks/cpu_inprocess.py collect [--rounds 5]

Why: `calibrate --cpu` and `validate --cpu` run minutes apart in two processes, and on a
shared host the same gather moves 20-40% between them, so a pair's error mixes the model's
error with the host's drift. Here both sides run in ONE process, interleaved round by
round (a slow moment lands on both), one thread (pin it: `taskset -c 0`):

    aggregate  calibrate's aggregation points (generated batches, `cpu.host_bench`) and the
               quickstart's training batches; the on-chip fit (`cpu.host_preset_fit`) of the former,
               with hits counted at each LLC size, predicts the latter
    collect    validate's collect and write-back of the quickstart's fill rows vs a
               uniform gather + pool and a uniform copy of as many rows, same table: is a
               copied row priced right as one missed row?
"""

from __future__ import annotations

import argparse

import numba as nb
import numpy as np

from scratchpipe_sim.config import load_config
from scratchpipe_sim.cpu import host_kernels as K
from scratchpipe_sim.cpu.host_bench import CpuBenchSizes, _aggregate_streams
from scratchpipe_sim.cpu.host_preset_fit import fit_aggregate_onchip
from scratchpipe_sim.cpu.measure import timed
from scratchpipe_sim.cpu.plan_stage import run_planner
from scratchpipe_sim.measure import host
from scratchpipe_sim.timing.designs import design_params
from scratchpipe_sim.timing.onchip import onchip_hits
from scratchpipe_sim.timing.replay_passes import Replays
from scratchpipe_sim.timing.trace_setup import build_trace

CONFIG = "configs/quickstart.yaml"


def _quickstart(batches: int):
    cfg = load_config(CONFIG)
    trace = build_trace(cfg)
    rep = Replays(cfg, trace, cached=True)
    first = rep.prefix + cfg.model.warmup_batches
    return cfg, trace, rep, list(range(first, first + batches))


def aggregate(rounds: int, llc: list[float]) -> None:
    cfg, trace, _rep, qb = _quickstart(6)
    dim = cfg.model.tables.dim
    rb = dim * 4
    q = [trace.linear_batch(b) for b in qb]
    q_hits = {mib: onchip_hits(trace, int(mib * 2**20) // rb, 16).lookup_hits[qb]
              for mib in llc}
    q_bags = [(K.bag_of_lookups(bp), np.full((len(bp) - 1, dim), 1e-4, np.float32))
              for _, bp in q]
    qbw = K.Backward(trace.total_rows, dim, max(len(i) for i, _ in q), 1)
    z = CpuBenchSizes(onchip_max_MiB=int(max(llc)))
    rows = z.table_bytes // rb
    streams = _aggregate_streams(z, rb, rows)
    cbw = K.Backward(rows, dim, max(len(ids[-1]) for ids, _b, _h in streams), 1)
    rng = np.random.default_rng(1)
    c_t: list[list[float]] = [[] for _ in streams]
    c_u = [0.0] * len(streams)
    q_t: list[list[float]] = [[] for _ in q]
    q_u = [0] * len(q)

    def run(bw: K.Backward, ids, bag_of, grads) -> tuple[float, int]:
        out = {}
        t = timed(lambda: out.__setitem__("n", bw.aggregate(ids, bag_of, grads)))
        K.reset_slots(bw.slot, bw.uniq, out["n"])
        return t, out["n"]

    for r in range(rounds + 1):  # round 0: compile and touch
        for i, (ids, bags, _h) in enumerate(streams):
            shift = int(rng.integers(0, rows))
            moved = [(x + shift) % rows for x in ids]
            for x, (bag_of, grads) in zip(moved[:-1], bags[:-1], strict=True):
                run(cbw, x, bag_of, grads)
            t, u = run(cbw, moved[-1], *bags[-1])
            if r:
                c_t[i].append(t)
                c_u[i] = u
        for i, (ids, _bp) in enumerate(q):
            t, u = run(qbw, ids, *q_bags[i])
            if r:
                q_t[i].append(t)
                q_u[i] = u
    qn = np.array([len(i) for i, _ in q], float)
    qm = np.array([np.median(t) for t in q_t]) * 1e9
    print(f"quickstart: {np.round(qm / qn, 1).tolist()} ns per lookup "
          f"({np.mean(np.array(q_u) / qn):.2f} unique rows per lookup)")
    for mib in llc:
        pts = []
        for (ids, _b, hits), t, u in zip(streams, c_t, c_u, strict=True):
            x = dict(hits).get(float(mib), 0.0)
            pts.append((len(ids[-1]), u, x / len(ids[-1]), float(np.median(t))))
        fit = fit_aggregate_onchip(pts, 1.0)
        if fit is None:
            print(f"LLC {mib:g} MiB: no on-chip fit")
            continue
        a_miss, a_hit, c = fit
        h = q_hits[mib] / qn
        # the fit's a_miss / a_hit include the op on the gradient row (fit_cpu charges it
        # apart in a preset): predicted as fitted
        pred = qn * (1 - h) * a_miss + qn * h * a_hit + np.array(q_u) * c
        err = (pred - qm) / qm * 100
        print(f"LLC {mib:g} MiB: a_miss {a_miss:.1f}, a_hit {a_hit:.1f}, c {c:.1f} ns; "
              f"quickstart h {h.mean():.2f}: error per batch "
              + " ".join(f"{e:+.0f}%" for e in err) + f" (median {np.median(err):+.0f}%)")


def collect(rounds: int) -> None:
    cfg, trace, rep, _qb = _quickstart(0)
    m = cfg.model
    run_trace = trace.slice(rep.prefix - rep.warm, trace.num_batches)
    sp = design_params(cfg, "scratchpipe")
    plan = run_planner(run_trace, cfg.capacity_rows(), sp.lookahead, keep_fills=True,
                       on_overflow=sp.on_overflow)
    fills = [f for f in plan.fills[rep.warm + m.warmup_batches:] if len(f)][:12]
    cols = m.moved_row_bytes // 4
    store = np.full((trace.total_rows, cols), 0.01, np.float32)
    staging = np.zeros((max(len(f) for f in fills), cols), np.float32)
    pooled = np.empty((len(staging) // 20 + 2, cols), np.float32)
    rng = np.random.default_rng(3)
    names = ("collect", "write_back", "uniform_copy", "uniform_pool")
    t: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds + 1):
        for f in fills:
            n = len(f)
            u = rng.integers(0, trace.total_rows, n).astype(np.int64)
            bags = np.append(np.arange(0, n, 20, dtype=np.int64), n)
            ops = (lambda f=f: host.gather_rows(store, f, staging),
                   lambda f=f: host.scatter_rows(store, f, staging),
                   lambda u=u: host.gather_rows(store, u, staging),
                   lambda u=u, b=bags: K.bag_pool(store, cols, u, b, pooled))
            for k, fn in zip(names, ops, strict=True):
                s = timed(fn)
                if r:
                    t[k].append(s / n * 1e9)
    print(f"{len(fills)} batches of {np.mean([len(f) for f in fills]):.0f} fill rows, "
          f"{trace.total_rows} rows of {m.moved_row_bytes} B:")
    for k in names:
        v = np.array(t[k]).reshape(rounds, -1)
        print(f"  {k:<13} {np.median(v):6.1f} ns per row (median), "
              f"{v.min(axis=0).mean():6.1f} (best per batch, mean)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("check", choices=("aggregate", "collect"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--llc", default="2,4,8,16", help="MiB at which hits are counted")
    args = ap.parse_args()
    nb.set_num_threads(1)
    if args.check == "aggregate":
        aggregate(args.rounds, [float(x) for x in args.llc.split(",")])
    else:
        collect(args.rounds)


if __name__ == "__main__":
    main()
