"""Micro-benchmarks behind `calibrate --cpu` (compiled with Numba, timed best-of-N).

Each benchmark runs at several sizes so that `fit_latency_bandwidth` (the same least
squares `calibrate` fits to PCIe) separates a fixed cost per call from a rate:

    stream      parallel read of a buffer (traffic = bytes read: gathers are reads), plus
                the classic copy (2 x bytes, reported) and a pointer chase (latency)
    gather      embedding-bag gather + pool of random rows (uniform ids over a table larger
                than the LLC, fresh ids every repetition) by row size, on every thread and
                on one (a core's own miss rate); rate = bytes of rows gathered
    threads     the same gather from a hot set in the core's caches on 1..T threads (the
                op's own rate per core, and its scaling)
    onchip      the gather from hot sets of 1 MiB .. 2 x the LLC, on one thread and on
                every thread: the LLC a core can use and its rate from it
    mix         one thread's gather + pool of generated traces from uniform to very skewed
                (Zipf 0.7 .. 1.4, one table of table_bytes), with each trace's on-chip hits
                counted by the model's own LLC simulator at every hot-set size: a hit's and
                a miss's core cost in a stream that does both (what the model prices), per
                row size
    backward    gradient aggregation (lookups -> unique-row gradients) of generated
                batches from uniform to very skewed (Zipf 0.8 .. 1.4) and from 20k to 256k
                lookups, each after warm-up batches (aggregated untimed, as in training),
                on-chip hits counted by the model's LLC simulator; then the optimizer apply
                (SGD, Adagrad), by row size
    planner     the real `scratchpipe` policy kernel on a synthetic Zipf trace

Ids are synthetic (uniform, or Zipf for the planner): calibration never sees the config's
trace, which `validate --cpu` uses to check the fitted model.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numba as nb
import numpy as np

from scratchpipe_sim.cpu import host_kernels as K
from scratchpipe_sim.cpu.fbgemm_update_bench import UpdatePoint
from scratchpipe_sim.cpu.measure import Timing, best_of, settle_curve, summarize, timed
from scratchpipe_sim.measure import host
from scratchpipe_sim.policies.engine import COUNTERS


@dataclass(frozen=True)
class CpuBenchSizes:
    """Sizes of each benchmark. Points are short (about 1-10 ms) and repeated many times:
    on a shared machine a short run has a fair chance to go unpreempted, so the best of
    many short runs is the work itself."""

    copy_bytes: tuple[int, ...] = (1 << 24, 1 << 25, 1 << 26)
    stream_buffer_bytes: int = 1 << 29  # each repetition reads a fresh slice: never in LLC
    table_bytes: int = 1 << 30  # well above any LLC
    hot_bytes: int = 1 << 20  # a hot set that stays on chip (1 MiB, a core's L2 or less)
    onchip_max_MiB: int = 64  # hot sets of 1, 2, 4, ... MiB up to this (2 x a 32 MiB LLC)
    lookups: tuple[int, ...] = (1 << 14, 1 << 15, 1 << 16)
    #: aggregation: Zipf exponents of the generated batches (0 = uniform ids)
    aggregate_alphas: tuple[float, ...] = (0.0, 0.8, 1.0, 1.2, 1.4)
    #: aggregation batch sizes (samples x pooling lookups): up to batches whose rows spill
    #: the LLC, as a training batch's do (256k uniform lookups: 64 MiB of gradient rows)
    aggregate_batches: tuple[int, ...] = (1024, 4096, 12800)
    aggregate_warm_batches: int = 2  # aggregated (untimed) before each timed batch
    row_bytes: tuple[int, ...] = (64, 128, 256, 512)
    pooling: int = 20
    reps: int = 15
    plan_rows: int = 8_000_000
    plan_tables: int = 8
    plan_batch: int = 2048
    plan_batches: int = 30
    #: 3: the smallest window of a fused pipeline. Not 5: five batches' rows (~430k) do not
    #: fit the 5% scratchpad (400k rows), the policy overflows and costs ~30% more per id
    #: (all-in 127-138 vs 96-99 ns at windows 5-8 vs 2-4, one core, interleaved runs)
    plan_lookahead: int = 3
    plan_load_factor: float = 0.05  # the one-term figure's scratchpad
    #: scratchpads of the two-term fit (>= 3 batches' rows at window 3: 2% overflows)
    plan_load_factors: tuple[float, ...] = (0.035, 0.05, 0.08)
    plan_steady_from: int = 10  # batches before this one fill the policy's map
    plan_reps: int = 2
    #: mix: Zipf exponents of the generated traces (0 = uniform ids)
    mix_alphas: tuple[float, ...] = (0.0, 0.7, 0.9, 1.0, 1.1, 1.2, 1.4)
    mix_table_bytes: int = 1 << 30  # as the gather benchmark: a miss is a DRAM access
    mix_batch: int = 1024  # samples per batch (x pooling lookups)
    mix_warm_batches: int = 2  # run untimed before the timed batches of every repetition
    mix_batches: int = 4  # timed
    #: FBGEMM's backward (--kernel fbgemm): rows over all tables of a shape, the most
    #: lookups per table, repetitions (cpu/fbgemm_update_bench.py)
    update_table_rows: int = 1 << 19
    update_max_lookups: int = 1 << 16
    update_reps: int = 7


QUICK = CpuBenchSizes(stream_buffer_bytes=1 << 28, table_bytes=1 << 28, reps=7,
                      aggregate_alphas=(0.0, 1.0, 1.4), aggregate_batches=(512, 4096),
                      mix_table_bytes=1 << 28, plan_rows=1_000_000, plan_batch=512,
                     update_reps=5,  # the update's full shapes: ~1 min
                      plan_batches=8, plan_reps=2, plan_steady_from=2)
TINY = CpuBenchSizes(copy_bytes=(1 << 20, 1 << 22), stream_buffer_bytes=1 << 23,
                     onchip_max_MiB=2,
                     table_bytes=1 << 23, lookups=(1 << 12, 1 << 15), row_bytes=(64, 256),
                     aggregate_alphas=(0.0, 1.2), aggregate_batches=(64, 512),
                     aggregate_warm_batches=1,
                     reps=2, plan_rows=20_000, plan_tables=2, plan_batch=64, plan_batches=4,
                     plan_lookahead=2, plan_load_factor=0.2, plan_reps=1,
                     plan_load_factors=(0.1, 0.2), plan_steady_from=1,
                     mix_alphas=(0.0, 1.2), mix_table_bytes=1 << 23, mix_batch=64,
                     mix_warm_batches=1, mix_batches=2, update_table_rows=1 << 12,
                     update_max_lookups=1 << 9, update_reps=1)


class SizeTime(NamedTuple):
    """One point of a stream curve: bytes moved and seconds."""

    nbytes: float
    seconds: float


class GatherPoint(NamedTuple):
    """A gather + pool of uniform rows: row size, bytes of rows gathered, seconds."""

    row_bytes: float
    nbytes: float
    seconds: float


class ScalingPoint(NamedTuple):
    """A hot-set gather + pool on `threads` threads."""

    threads: float
    row_bytes: float
    nbytes: float
    seconds: float


class OnchipPoint(NamedTuple):
    """A gather + pool from a hot set of `hot_MiB`: its rate (GB/s of rows)."""

    threads: float
    hot_MiB: float
    row_bytes: float
    GBps: float


class AggregatePoint(NamedTuple):
    """The aggregation of a generated batch; `hits`: [[hot-set MiB, on-chip hits], ...] by
    the model's LLC simulator."""

    row_bytes: float
    lookups: float
    unique_rows: float
    seconds: float
    hits: list[list[float]]


class ApplyPoint(NamedTuple):
    """An optimizer's apply of `unique_rows` rows (`moved_row_bytes` each, state included)."""

    optimizer: str
    row_bytes: float
    unique_rows: float
    moved_row_bytes: float
    seconds: float


class PlanBatch(NamedTuple):
    """A steady planner batch that evicts (seconds with its share of the next-use pass)."""

    ids: float
    evictions: float
    seconds: float


class MixPoint(NamedTuple):
    """One thread's gather + pool of a generated trace of Zipf `alpha`; `hits` as in
    AggregatePoint."""

    row_bytes: float
    alpha: float
    lookups: float
    seconds: float
    hits: list[list[float]]


@dataclass
class CpuMeasurements:
    """Raw samples of `calibrate --cpu` (JSON-serialisable: each point a named record, a
    list in the JSON; seconds are the `statistic` of each point's repetitions)."""

    threads: list[int] = field(default_factory=list)
    reps: int = 0
    #: what each point reports over its repetitions: "median" or "best" (cpu/measure.py)
    statistic: str = "median"
    #: (bytes read, seconds) of the parallel read
    stream: list[SizeTime] = field(default_factory=list)
    #: (traffic bytes = 2 x copied, seconds) of the parallel copy (reported, not fitted)
    copy: list[SizeTime] = field(default_factory=list)
    #: ns per dependent load of a pointer chase over the largest buffer
    latency_ns: float | None = None
    #: (row_bytes, gathered bytes, seconds) on max(threads)
    gather: list[GatherPoint] = field(default_factory=list)
    #: the same on one thread (when 1 is among the threads and max(threads) > 1)
    gather_one: list[GatherPoint] = field(default_factory=list)
    #: (threads, row_bytes, gathered bytes, seconds) from an LLC-resident hot set
    scaling: list[ScalingPoint] = field(default_factory=list)
    #: (threads, hot set MiB, row_bytes, GB/s of rows) of gathers from hot sets, on one
    #: thread and on max(threads)
    onchip: list[OnchipPoint] = field(default_factory=list)
    #: (row_bytes, lookups, unique rows, seconds, [[hot-set MiB, on-chip hits], ...]) of
    #: the aggregation of a generated batch on max(threads); hits by the model's LLC
    #: simulator (entries of row_bytes) over the warm-up batches and the timed one
    aggregate: list[AggregatePoint] = field(default_factory=list)
    #: (optimizer, row_bytes, unique rows, moved row bytes, seconds) of the apply
    apply: list[ApplyPoint] = field(default_factory=list)
    plan_ns_per_id: float | None = None
    plan_ids: int = 0
    plan_steady: bool = False  # the measured batches evicted (a full scratchpad)
    plan_fill_ratio: float = 0.0  # fills per id over the measured batches
    #: steady batches that evict, every scratchpad size: (ids, evictions, seconds with the
    #: batch's share of the next-use pass)
    plan_batches: list[PlanBatch] = field(default_factory=list)
    #: (row_bytes, alpha, lookups, seconds, [[hot-set MiB, on-chip hits], ...]) of one
    #: thread's gather + pool of a generated trace; hits by the model's LLC simulator
    mix: list[MixPoint] = field(default_factory=list)
    #: whose gather + pool the mix timed: "numba" (the simulator's kernel) or "fbgemm"
    #: (FBGEMM's CPU TBE forward, calibrate --cpu --kernel fbgemm)
    mix_kernel: str = "numba"
    #: lookups per bag of the mix's traces (its rates carry one bag per this many lookups)
    mix_pooling: float = 20.0
    #: (optimizer, role fit / check, tables, batch, pooling, dim, lookups, unique rows,
    #: seconds) of FBGEMM's CPU backward (--kernel fbgemm; cpu/fbgemm_update_bench.py)
    update: list[UpdatePoint] = field(default_factory=list)
    #: the host reference's samples taken beside the update points (--kernel fbgemm;
    #: cpu/host_reference.py, ReferenceSamples.as_json); None when not timed
    host_reference: dict | None = None
    #: (median - best) / best of every timed point, worst one (noise)
    worst_spread: float = 0.0
    #: points re-measured because a curve's time did not grow with size (settle_curve)
    remeasured: int = 0
    #: curves whose time still did not grow with size after the re-measurements, each
    #: "what: sizes" (the preset is written, with a warning naming them)
    noisy: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


def _time(m: CpuMeasurements, fn: Callable[[], object], reps: int,
          setup: Callable[[], object] | None = None) -> float:
    return _note(m, best_of(fn, reps, setup))


def _note(m: CpuMeasurements, t: Timing) -> float:
    """A point's figure (`m.statistic` of its repetitions); its spread joins the worst."""
    m.worst_spread = max(m.worst_spread, t.spread)
    return t.value(m.statistic)


Point = tuple[Callable[[], object], Callable[[], object] | None]  # (timed call, setup)


def _curve(m: CpuMeasurements, what: str, unit: str, sizes: list[float], points: list[Point],
           reps: int) -> list[float]:
    """Seconds of each point of a size curve (`m.statistic` of `reps`), its out-of-order
    points re-measured (settle_curve); those still out of order are recorded in m.noisy."""
    seconds = [_time(m, fn, reps, setup) for fn, setup in points]

    def once(i: int) -> float:
        fn, setup = points[i]
        if setup is not None:
            setup()
        return timed(fn)

    settled = settle_curve(sizes, seconds, once, reps, m.statistic)
    m.remeasured += settled.remeasured
    if settled.noisy:
        m.noisy.append(f"{what} at {', '.join(f'{sizes[i]:,.0f}' for i in settled.noisy)} "
                       f"{unit} (" + ", ".join(f"{settled.seconds[i] * 1e6:.0f}"
                                               for i in settled.noisy) + " us)")
    return list(settled.seconds)


def measure_stream(m: CpuMeasurements, z: CpuBenchSizes) -> None:
    """Parallel read (a gather's traffic is reads: its rate is what gathers are compared
    with), the classic copy (reported), and a pointer chase (load-to-use latency). Each
    repetition reads the next slice of a large buffer, so no repetition hits in the LLC."""
    total = max(z.stream_buffer_bytes, 2 * max(z.copy_bytes)) // 4
    src = np.ones(total, np.float32)
    dst = np.empty(max(z.copy_bytes) // 4, np.float32)
    reads: list[Point] = []
    for nbytes in z.copy_bytes:
        k = nbytes // 4
        pos = {"at": 0}

        def read(k=k, pos=pos) -> None:
            lo = pos["at"]
            pos["at"] = (lo + k) % (total - k)
            K.stream_read(src[lo : lo + k])

        reads.append((read, None))

        def copy(k=k, pos=pos) -> None:
            lo = pos["at"]
            pos["at"] = (lo + k) % (total - k)
            host.stream_copy(src[lo : lo + k], dst[:k])

        m.copy.append(SizeTime(2.0 * k * 4, _time(m, copy, z.reps)))
    sizes = [float(b // 4 * 4) for b in z.copy_bytes]
    m.stream.extend(SizeTime(b, s) for b, s in zip(
        sizes, _curve(m, "stream read", "B", sizes, reads, z.reps), strict=True))
    nxt = K.random_cycle(max(z.copy_bytes) // 8, 5)
    steps = max(1000, min(200_000, len(nxt)))
    s = _time(m, lambda: K.pointer_chase(nxt, steps), z.reps)
    m.latency_ns = s / steps * 1e9


def _pool_samples(m: CpuMeasurements, z: CpuBenchSizes, rb: int, store: np.ndarray,
                  rng: np.random.Generator, what: str = "gather"
                  ) -> list[tuple[float, float]]:
    """(bytes of rows, seconds) of gather + pool per lookup count. Every repetition draws
    fresh ids (untimed): repeating one set of ids would leave its rows in the LLC and
    flatter the best repetition. Out-of-order points are re-measured (`_curve`)."""
    dim = rb // 4
    points: list[Point] = []
    for n in z.lookups:
        ids = {"now": np.zeros(n, np.int64)}
        bag_ptr = np.arange(0, n + 1, z.pooling, dtype=np.int64)
        if bag_ptr[-1] != n:
            bag_ptr = np.append(bag_ptr, n)
        out = np.empty((len(bag_ptr) - 1, dim), np.float32)

        def draw(n=n, ids=ids) -> None:
            ids["now"] = rng.integers(0, store.shape[0], n).astype(np.int64)

        points.append((lambda ids=ids, b=bag_ptr, out=out: K.bag_pool(store, dim, ids["now"],
                                                                      b, out), draw))
    sizes = [float(n * rb) for n in z.lookups]
    return list(zip(sizes, _curve(m, f"{what} {rb} B on {nb.get_num_threads()} thread(s)",
                                  "B", sizes, points, z.reps), strict=True))


def measure_gather(m: CpuMeasurements, z: CpuBenchSizes) -> None:
    """Cold gathers (uniform rows of a table far above the LLC) on every thread: what DRAM
    allows (gather_efficiency). Hot gathers (rows of a set that stays in the LLC) on 1..T
    threads: what the cores allow (embedding_op_GBps, parallel_efficiency), so the model's
    cores term prices the op itself and DRAM's term the misses, LLC hits included."""
    rng = np.random.default_rng(11)
    top = max(m.threads)
    for rb in z.row_bytes:
        store = np.ones((max(z.table_bytes // rb, max(z.lookups)), rb // 4), np.float32)
        nb.set_num_threads(top)
        for nbytes, s in _pool_samples(m, z, rb, store, rng):
            m.gather.append(GatherPoint(float(rb), nbytes, s))
        if top > 1 and 1 in m.threads:  # one core's own miss rate (core_dram_GBps)
            nb.set_num_threads(1)
            for nbytes, s in _pool_samples(m, z, rb, store, rng):
                m.gather_one.append(GatherPoint(float(rb), nbytes, s))
        hot = store[: max(1, z.hot_bytes // rb)]
        for t in m.threads:
            nb.set_num_threads(t)
            for nbytes, s in _pool_samples(m, z, rb, hot, rng, "hot-set gather"):
                m.scaling.append(ScalingPoint(float(t), float(rb), nbytes, s))
        if rb == 256 or (256 not in z.row_bytes and rb == z.row_bytes[-1]):
            for t in sorted({1, top} & set(m.threads)) or [top]:
                nb.set_num_threads(t)
                _onchip_curve(m, z, rb, store, rng, t)
        del store, hot
    nb.set_num_threads(top)


def _onchip_curve(m: CpuMeasurements, z: CpuBenchSizes, rb: int, store: np.ndarray,
                  rng: np.random.Generator, threads: int) -> None:
    """Gather + pool rate from hot sets of 1 MiB .. 2 x the OS's LLC on `threads` threads
    (the ids of one size repeat, so the set stays warm): where it falls off is the LLC a
    core can actually use (on a shared host, less than the OS says)."""
    n = max(z.lookups)
    dim = rb // 4
    bag_ptr = np.arange(0, n + 1, z.pooling, dtype=np.int64)
    if bag_ptr[-1] != n:
        bag_ptr = np.append(bag_ptr, n)
    out = np.empty((len(bag_ptr) - 1, dim), np.float32)
    mib = 1
    while mib <= max(1, z.onchip_max_MiB) and (mib << 20) // rb <= store.shape[0]:
        # the hot rows scattered over the table, as a real table's hot rows are (a trace's
        # hottest 32k rows lie on 31k different 4 KiB pages): a hit also pays its TLB miss
        hot = rng.integers(0, store.shape[0], (mib << 20) // rb)
        ids = hot[rng.integers(0, len(hot), n)].astype(np.int64)
        s = _time(m, lambda ids=ids: K.bag_pool(store, dim, ids, bag_ptr, out), z.reps)
        m.onchip.append(OnchipPoint(float(threads), float(mib), float(rb), n * rb / s / 1e9))
        mib *= 2


def hot_set_sizes(z: CpuBenchSizes) -> list[int]:
    """MiB of the on-chip caches whose hits are counted: 1, 2, 4, .. onchip_max_MiB."""
    sizes, mib = [], 1
    while mib <= max(1, z.onchip_max_MiB):
        sizes.append(mib)
        mib *= 2
    return sizes


def _hits(tr, rb: int, sizes: list[int], rows: int, skip: int = 0) -> list[list[float]]:
    """[[MiB, on-chip hits of the trace's batches from `skip` on], ...] by the model's own
    LLC simulator (16 ways, entries of rb bytes) at each size that is not the whole table."""
    from scratchpipe_sim.timing.onchip import onchip_hits  # noqa: PLC0415

    return [[float(s), float(onchip_hits(tr, (s << 20) // rb, 16).lookup_hits[skip:].sum())]
            for s in sizes if (s << 20) // rb <= rows]


def measure_backward(m: CpuMeasurements, z: CpuBenchSizes) -> None:
    rng = np.random.default_rng(12)
    top = max(m.threads)
    nb.set_num_threads(top)
    for rb in z.row_bytes:
        for opt in ("sgd", "adagrad"):
            _backward_point(m, z, rb, opt, rng, top)


def _repeated_ids(rng: np.random.Generator, rows: int, n: int, k: int) -> np.ndarray:
    """n ids in random order over about n / k distinct random rows, each used k times."""
    pool = np.unique(rng.integers(0, rows, max(1, n // k)))
    return rng.permutation(np.resize(pool, n)).astype(np.int64)


def _aggregate_streams(z: CpuBenchSizes, rb: int, rows: int
                       ) -> list[tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]],
                                       list[list[float]]]]:
    """Per (alpha, batch size): the generated batches' ids (warm-up ones, then the timed
    one), each batch's (bag of every lookup, bag gradients), and the timed batch's on-chip
    hits by the model's LLC simulator over the whole stream (inter-batch hits included, as
    the model counts a trace's)."""
    from scratchpipe_sim.traces.generators import generate_trace  # noqa: PLC0415

    dim = rb // 4
    out = []
    total = z.aggregate_warm_batches + 1
    for k, (alpha, batch) in enumerate((a, b) for a in z.aggregate_alphas
                                       for b in z.aggregate_batches):
        params = {"alpha": alpha} if alpha > 0 else {}
        tr = generate_trace("zipf" if alpha > 0 else "uniform", [rows], batch, total,
                            z.pooling, 301 + k, **params)
        ids, bags = [], []
        for i in range(total):
            batch_ids, bag_ptr = tr.linear_batch(i)
            ids.append(batch_ids)
            bags.append((K.bag_of_lookups(bag_ptr),
                         np.full((len(bag_ptr) - 1, dim), 1e-3, np.float32)))
        out.append((ids, bags, _hits(tr, rb, hot_set_sizes(z), rows,
                                     z.aggregate_warm_batches)))
    return out


def _backward_point(m: CpuMeasurements, z: CpuBenchSizes, rb: int, opt: str,
                    rng: np.random.Generator, top: int) -> None:
    """Aggregation (timed with SGD's table) of generated batches of varied skew and size,
    so a least-squares fit separates the cost per unique row from the cost per lookup, on
    chip and off; each repetition relabels the rows by a fresh random offset (no
    repetition finds the previous one's rows on chip; the simulator's hits do not depend on
    the labels' offset, only on their reuse) and first aggregates the warm-up batches
    untimed. Then the apply of one optimizer at one row size, on fresh uniform ids."""
    dim = rb // 4
    cols = dim + K.state_columns(opt, dim)
    most = max(*z.lookups, max(z.aggregate_batches) * z.pooling)
    rows = max(z.table_bytes // (cols * 4), most)
    store = np.ones((rows, cols), np.float32)
    bw = K.Backward(rows, dim, most, top)
    state = {"n": 0}

    def reset() -> None:
        if state["n"]:
            K.reset_slots(bw.slot, bw.uniq, state["n"])
            state["n"] = 0

    def aggregate(ids: np.ndarray, bag_of: np.ndarray, grads: np.ndarray) -> None:
        state["n"] = bw.aggregate(ids, bag_of, grads)

    if opt == "sgd":
        # every point once a round, the statistic over the rounds: a slow moment of a shared
        # host then slows every point alike instead of tilting the fit's split between the
        # per-lookup and the per-row cost (consecutive repetitions per point moved that
        # split 1.6x between calibrations minutes apart)
        streams = _aggregate_streams(z, rb, rows)
        times: list[list[float]] = [[] for _ in streams]
        uniq: list[list[int]] = [[] for _ in streams]
        for r in range(max(1, z.reps) + 1):  # round 0: warm-up (compiles, first touch)
            for (ids, bags, _h), t, u in zip(streams, times, uniq, strict=True):
                shift = int(rng.integers(0, rows))
                moved = [(x + shift) % rows for x in ids]
                for x, (bag_of, grads) in zip(moved[:-1], bags[:-1], strict=True):
                    reset()
                    aggregate(x, bag_of, grads)
                reset()
                bag_of, grads = bags[-1]
                secs = timed(lambda x=moved[-1], b=bag_of, g=grads: aggregate(x, b, g))
                if r:
                    t.append(secs)
                    u.append(state["n"])
        for (ids, _b, hits), t, u in zip(streams, times, uniq, strict=True):
            m.aggregate.append(AggregatePoint(float(rb), float(len(ids[-1])),
                                              float(np.mean(u)), _note(m, Timing.of(t)), hits))
        reset()
    shapes = {}
    for n in z.lookups:
        bag_ptr = np.arange(0, n + 1, z.pooling, dtype=np.int64)
        bag_of = K.bag_of_lookups(np.append(bag_ptr[bag_ptr < n], n))
        shapes[n] = (bag_of, np.full((int(bag_of[-1]) + 1, dim), 1e-3, np.float32))
    for n in z.lookups:  # the apply updates one batch's uniform rows (each used once)
        bag_of, grads = shapes[n]
        reset()
        state["n"] = bw.aggregate(_repeated_ids(rng, rows, n, 1), bag_of, grads)
        u = state["n"]
        s = _time(m, lambda u=u: K.apply(opt, store, bw.uniq, bw.grad_rows, u), z.reps)
        m.apply.append(ApplyPoint(opt, float(rb), float(u), float(cols * 4), s))
        reset()


def measure_planner(m: CpuMeasurements, z: CpuBenchSizes) -> None:
    """The policy kernel's cost per id and per eviction, in steady state: batches from
    plan_steady_from on (the policy's map, ghosts included, keeps growing for ~10 batches:
    63.6 ns per id over batches 1-9, 76-77 from 10 to 45, one core) that evict (a
    scratchpad with free slots never picks a victim and costs about half as much per id),
    at several scratchpad sizes so that evictions per id vary (0.16-0.22 at 3.5-8% of
    rows) — the regressor varies where the model uses it. The next-use pass is spread over
    the ids of each batch (the model's plan_ns_per_id carries it too)."""
    from scratchpipe_sim.cpu.plan_stage import run_planner  # noqa: PLC0415
    from scratchpipe_sim.traces.generators import generate_trace  # noqa: PLC0415

    per = max(1, z.plan_rows // z.plan_tables)
    trace = generate_trace("zipf", [per] * z.plan_tables, z.plan_batch, z.plan_batches,
                           z.pooling, 7, alpha=1.05)
    fi, ei = COUNTERS.index("fills"), COUNTERS.index("evictions")
    m.plan_batches = []
    for lf in sorted(set(z.plan_load_factors) | {z.plan_load_factor}):
        cap = max(1, int(trace.total_rows * lf))
        runs = [run_planner(trace, cap, z.plan_lookahead, on_overflow="stall")
                for _ in range(max(1, z.plan_reps))]
        sec = summarize([r.seconds for r in runs], m.statistic)  # per batch, over replays
        acc = runs[0].accesses
        per_id = float(summarize([r.next_use_s for r in runs], m.statistic)) / acc.sum()
        evict = runs[0].counts[:, ei]
        steady = np.flatnonzero(evict > 0)
        steady = steady[steady >= max(1, z.plan_steady_from)]  # batch 0 also compiles
        m.plan_batches += [PlanBatch(float(acc[b]), float(evict[b]),
                                     float(sec[b] + per_id * acc[b])) for b in steady]
        if lf != z.plan_load_factor:
            continue
        m.plan_steady = len(steady) > 0
        if not len(steady):
            steady = np.arange(1, len(acc))
        ids = float(acc[steady].sum())
        m.plan_ns_per_id = (float(sec[steady].sum()) / ids + per_id) * 1e9
        m.plan_ids = int(ids)
        m.plan_fill_ratio = float(runs[0].counts[steady, fi].sum() / ids)


#: a gather + pool kernel for the mix: given (store, dim, rows) of a row size's table, a
#: function (ids, bag offsets, out) -> None that gathers and pools the ids' rows
PoolFactory = Callable[[np.ndarray, int, int], Callable[[np.ndarray, np.ndarray, np.ndarray],
                                                        object]]


def numba_pool(store: np.ndarray, dim: int, _rows: int
               ) -> Callable[[np.ndarray, np.ndarray, np.ndarray], object]:
    """The simulator's own gather + pool (cpu/host_kernels.py) on `store`."""
    return lambda ids, ptr, out: K.bag_pool(store, dim, ids, ptr, out)


def measure_mix(m: CpuMeasurements, z: CpuBenchSizes,
                pool: PoolFactory = numba_pool) -> None:
    """One thread's gather + pool of generated traces of varied skew, hits counted by the
    model's own on-chip simulator (`timing.onchip`, 16 ways) at hot-set sizes 1 MiB ..
    onchip_max_MiB. Why: a hit in a stream that also misses costs a core far more than a
    hit in a hot-set benchmark (the misses' lines evict the hot rows' lines and TLB
    entries from the core's own caches: measured here 25-33 ns vs 13-17 ns per 256 B
    row), so `fit_cpu` fits a hit's and a miss's core cost to these streams, with hits as
    the model counts them. Repetitions interleave the traces and the row sizes (a noisy
    moment of a shared host then moves every point alike) and relabel the rows by a fresh
    random offset each time (no repetition finds the previous one's rows on chip; hits do
    not change: the simulator's set index is a hash). `pool` is the kernel timed (the
    simulator's by default; FBGEMM's forward with calibrate --cpu --kernel fbgemm, on its
    own table of the same rows)."""
    from scratchpipe_sim.traces.csr_trace import Trace  # noqa: PLC0415
    from scratchpipe_sim.traces.generators import generate_trace  # noqa: PLC0415

    rng = np.random.default_rng(13)
    nb.set_num_threads(1)
    m.mix_pooling = float(z.pooling)
    sizes = hot_set_sizes(z)
    total = z.mix_warm_batches + z.mix_batches
    # one trace per exponent over the most rows (the smallest row size), folded onto each
    # row size's table by id modulo its rows: the hits are counted on the folded ids, so
    # the fit sees exactly the stream that is timed; one buffer holds every table
    most = max(z.mix_table_bytes // min(z.row_bytes), 1024)
    traces = []
    for k, alpha in enumerate(z.mix_alphas):
        params = {"alpha": alpha} if alpha > 0 else {}
        traces.append((alpha, generate_trace("zipf" if alpha > 0 else "uniform", [most],
                                             z.mix_batch, total, z.pooling, 101 + k,
                                             **params)))
    buf = np.ones(most * min(z.row_bytes) // 4, np.float32)
    blocks = []  # per row size: (store, dim, rows, streams, out); the stores share buf
    for rb in z.row_bytes:
        dim = rb // 4
        rows = max(z.mix_table_bytes // rb, 1024)
        streams = []
        for alpha, tr0 in traces:
            tr = Trace(np.array([rows], np.int64), np.asarray(tr0.indices) % rows,
                       tr0.offsets, tr0.batch_bounds, tr0.batch_size)
            ch = tr.chunk(0, total)
            split = int(ch.batch_ptr[z.mix_warm_batches])
            timed_n = len(ch.ids) - split
            hits = _hits(tr, rb, sizes, rows, z.mix_warm_batches)
            offs = np.asarray(tr.offsets, np.int64)
            warm_ptr = offs[: int(tr.batch_bounds[z.mix_warm_batches]) + 1]
            lo = int(tr.batch_bounds[z.mix_warm_batches])
            timed_ptr = offs[lo:] - offs[lo]
            streams.append((alpha, ch.ids, split, timed_n, warm_ptr, timed_ptr, hits))
        nbags = max(len(s[4]) for s in streams) + max(len(s[5]) for s in streams)
        store = buf[: rows * dim].reshape(rows, dim)
        blocks.append((pool(store, dim, rows), dim, rows, streams,
                       np.empty((nbags, dim), np.float32)))
    # every (row size, trace) once a repetition: a fast or slow few seconds of the host
    # then land on every row size alike (one block per row size let a fast moment tilt
    # one size's curve: 4.64 GB/s at 256 B between 1.80 at 128 and 3.50 at 512)
    times = [[[] for _ in streams] for *_x, streams, _o in blocks]
    for _ in range(max(1, z.reps)):
        for (run, _dim, rows, streams, out), block_times in zip(blocks, times, strict=True):
            for i, (_a, ids, split, _n, warm_ptr, timed_ptr, _h) in enumerate(streams):
                shifted = (ids + rng.integers(0, rows)) % rows
                run(shifted[:split], warm_ptr, out)
                tail = shifted[split:]
                block_times[i].append(timed(lambda f=run, t=tail, p=timed_ptr, o=out:
                                            f(t, p, o)))
    for rb, (*_x, streams, _o), block_times in zip(z.row_bytes, blocks, times, strict=True):
        for (alpha, _i, _s, n, _w, _t, hits), t in zip(streams, block_times, strict=True):
            m.mix.append(MixPoint(float(rb), float(alpha), float(n), _note(m, Timing.of(t)),
                                  hits))
    nb.set_num_threads(max(m.threads))


def measure_all(threads: list[int], z: CpuBenchSizes = CpuBenchSizes(),
                log: Callable[[str], None] = print, statistic: str = "median",
                mix_pool: tuple[str, PoolFactory] = ("numba", numba_pool),
                update: Callable[[CpuMeasurements, CpuBenchSizes], None] | None = None
                ) -> CpuMeasurements:
    """Every benchmark; `mix_pool` (name, factory) is the kernel the mix times; `update`
    (with --kernel fbgemm) times FBGEMM's backward per optimizer into m.update."""
    import time  # noqa: PLC0415

    m = CpuMeasurements(threads=sorted(set(threads)), reps=z.reps, statistic=statistic,
                        mix_kernel=mix_pool[0])
    nb.set_num_threads(max(m.threads))  # every benchmark not about scaling runs on all
    for name, fn in (("stream", measure_stream), ("gather", measure_gather),
                     ("mix", lambda mm, zz: measure_mix(mm, zz, mix_pool[1])),
                     ("backward", measure_backward),
                     ("planner", measure_planner),
                     *((("fbgemm update", update),) if update is not None else ())):
        t0 = time.perf_counter()
        fn(m, z)
        log(f"calibrate --cpu: {name} done in {time.perf_counter() - t0:.1f} s")
    return m
