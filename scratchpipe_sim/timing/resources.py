"""SimPy resources: memories, links and compute as processor-sharing servers.

Discipline: **processor sharing** (PS). A transfer first waits the resource's latency (a pure
delay: it occupies nothing, so concurrent transfers pay it in parallel, like outstanding DMA
or memory requests), then needs `work = bytes / (bandwidth x efficiency)` nanoseconds of
service; the n transfers in service at a time each progress at rate/n. So a lone transfer
takes `latency + bytes / bandwidth`, and two equal concurrent transfers both finish at twice
the single service time. PS, not FIFO, because DMA engines, memory controllers and SMs
interleave concurrent streams rather than serving them one after the other.

One SimPy event per transfer (plus one timer per arrival/departure): never per access.
Efficiency < 1 (random gathers, UVM) makes a transfer occupy the server longer, so it slows
everything sharing the resource, as real gathers do.

Units: bytes, ns; 1 GB/s = 1 byte/ns. Compute "bandwidth" is FLOP/ns (TFLOP/s x 1e3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from heapq import heappop, heappush

import numpy as np
import simpy
from simpy.events import NORMAL, PENDING

_EPS_NS = 1e-6


class _Timer:
    """A bare SimPy queue entry: what `env.timeout(delay)` schedules, without the Timeout.

    Why: a sensitivity point makes millions of PS timers and latency waits, and SimPy's
    `step` reads only `callbacks` and `_ok` of an event; pushing this onto the queue with
    the same (time, priority, eid) key as `Timeout` keeps the event order (so the floats)
    exactly while skipping the Event/Timeout constructors. A superseded PS timer has its
    callbacks emptied, so popping it costs no call.
    """

    __slots__ = ("callbacks", "_ok", "_value", "args")

    def __init__(self, callback: Callable[[_Timer], None], args: tuple = ()) -> None:
        self.callbacks = [callback]
        self._ok = True
        self._value = None
        self.args = args


def run_to_end(env: simpy.Environment) -> None:
    """`env.run()` (until no event is left) with SimPy's `step` inlined: the same pops in the
    same order, the same callbacks and the same crash on an undefused failed event, without
    a method call and a try block per event (a sensitivity point steps ~2M events)."""
    queue = env._queue
    while queue:
        env._now, _, _, event = heappop(queue)
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc


class AllDone(simpy.Event):
    """`env.all_of(events)` for events that never fail and whose value nobody reads.

    Why: SimPy's AllOf builds a ConditionValue of every child and re-checks a predicate
    on each one; a stage waits on hundreds of thousands of these in a sensitivity. This
    succeeds at the same moment as AllOf (as the callback of its last child, or at once
    when every child was already processed), so it takes the same place in the event
    queue and the simulation is unchanged. Its value is None.
    """

    def __init__(self, env: simpy.Environment, events: list[simpy.Event]) -> None:
        super().__init__(env)
        left = 0
        for ev in events:
            if ev.callbacks is not None:  # not yet processed
                ev.callbacks.append(self._one)
                left += 1
        self._left = left
        if not left:
            self.succeed()

    def _one(self, ev: simpy.Event) -> None:
        if self._value is not PENDING:  # failed already
            return
        if not ev._ok:  # as AllOf: a failed child fails the whole
            ev._defused = True
            self.fail(ev._value)
            return
        self._left -= 1
        if not self._left:
            self.succeed()


@dataclass
class Span:
    """One interval on a timeline track (a transfer on a resource, or a stage of a design)."""

    track: str
    name: str
    start_ns: float
    end_ns: float
    batch: int
    nbytes: float = 0.0


@dataclass
class Recorder:
    """Collects spans when a timeline is wanted; counts stage time always."""

    keep_spans: bool = False
    spans: list[Span] = field(default_factory=list)

    def add(self, span: Span) -> None:
        if self.keep_spans:
            self.spans.append(span)


class Server:
    """A processor-sharing resource with a per-transfer latency.

    `transfer(nbytes, ...)` returns a SimPy event to yield on (no process per transfer). Bytes are
    counted per mini-batch (`bytes_by_batch`) so designs can be checked byte for byte;
    busy time (at least one transfer in service) is integrated for utilisation.
    """

    def __init__(self, env: simpy.Environment, name: str, GBps: float, latency_ns: float,
                 num_batches: int, recorder: Recorder | None = None):
        if GBps <= 0:
            raise ValueError(f"{name}: bandwidth must be positive")
        self.env = env
        self.name = name
        self.GBps = float(GBps)
        self.latency_ns = float(latency_ns)
        self.rate = 1.0
        self.recorder = recorder or Recorder()
        self.bytes_by_batch = np.zeros(num_batches, np.float64)
        self.busy_ns = 0.0
        # id -> [remaining work ns, completion event, share cap, span or None]
        self._active: dict[int, list] = {}
        self._next_id = 0
        self._last = 0.0
        self._timer: _Timer | None = None  # the pending PS timer (None: none pending)
        self._target: int | None = None  # the transfer the pending timer will complete
        self._capped = 0  # active transfers with max_share < 1
        self._listeners: list[Callable[[bool], None]] = []

    # -- public ------------------------------------------------------------------------------
    def transfer(self, nbytes: float, batch: int, label: str = "", efficiency: float = 1.0,
                 GBps: float | None = None, latency_ns: float | None = None,
                 max_share: float = 1.0) -> simpy.Event | None:
        """Move `nbytes` at `GBps x efficiency` (default: this server's bandwidth).

        `max_share` caps the fraction of the server this transfer can use even when alone
        (e.g. a planner limited to some of the CPU cores); the others share the rest (water-
        filling processor sharing). Nothing to move costs nothing: returns None (no latency,
        no event), which stage helpers skip; a design never pays an empty transfer's latency.
        """
        if nbytes <= 0:
            return None
        # No SimPy process per transfer: it starts at once (waits its latency, then joins the
        # processor sharing) and returns the event that fires when it completes: two events
        # a transfer (latency, completion) plus the shared completion timers.
        env = self.env
        end = simpy.Event(env)
        nbytes = float(nbytes)
        self.bytes_by_batch[batch] += nbytes
        lat = self.latency_ns if latency_ns is None else latency_ns
        work = nbytes / ((GBps or self.GBps) * efficiency)
        span = (Span(self.name, label, env._now, 0.0, batch, nbytes)
                if self.recorder.keep_spans else None)
        if lat > 0:
            heappush(env._queue, (env._now + lat, NORMAL, next(env._eid),
                                  _Timer(self._arrive, (work, max_share, span, end))))
        else:
            self._serve(work, max_share, span, end)
        return end

    def busy_now(self) -> float:
        """Busy time integrated up to now (without advancing the PS state)."""
        extra = (self.env.now - self._last) if self._active else 0.0
        return self.busy_ns + extra

    def on_busy_change(self, fn: Callable[[bool], None]) -> None:
        """Call `fn(busy)` when the server turns busy or idle (duplex coupling)."""
        self._listeners.append(fn)

    def set_rate(self, rate: float) -> None:
        """Scale the service rate (e.g. H2D slows while D2H runs)."""
        if rate == self.rate:
            return
        self._advance()
        self.rate = rate
        self._reschedule()

    # -- PS machinery -------------------------------------------------------------------------
    def _arrive(self, timer: _Timer) -> None:
        self._serve(*timer.args)

    def _serve(self, work: float, max_share: float, span: Span | None,
               end: simpy.Event) -> None:
        """After the latency: join the processor sharing (when there is work)."""
        if work > 0:
            was_idle = not self._active
            if was_idle:  # _advance() of an idle server: only the clock moves
                self._last = self.env._now
            else:
                self._advance()
            share_cap = 1.0 if max_share == 1.0 else min(max(max_share, 1e-9), 1.0)
            self._active[self._next_id] = [work, end, share_cap, span]
            self._capped += share_cap < 1.0
            self._next_id += 1
            self._reschedule()
            if was_idle:
                for fn in self._listeners:
                    fn(True)
        else:
            self._finish(span, end)

    def _finish(self, span: Span | None, end: simpy.Event) -> None:
        if span is not None:
            span.end_ns = self.env.now
            self.recorder.spans.append(span)
        # end.succeed(), inlined (a fresh event: never triggered before)
        end._ok = True
        end._value = None
        env = self.env
        heappush(env._queue, (env._now, NORMAL, next(env._eid), end))

    def _shares(self) -> dict[int, float]:
        """Fraction of the server each active transfer gets: equal shares, except that a
        transfer capped below its share gives the surplus to the others (water-filling)."""
        items = sorted(self._active.items(), key=lambda kv: kv[1][2])
        left, n, out = 1.0, len(items), {}
        for i, (k, item) in enumerate(items):
            share = min(item[2], left / (n - i))
            out[k] = share
            left -= share
        return out

    # Without capped transfers (the common case) every share is 1 / n: the methods below
    # then skip the shares dict and compute exactly what it would give.
    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0 and self._active:
            if self._capped:
                for k, share in self._shares().items():
                    self._active[k][0] -= dt * self.rate * share
            else:
                step = dt * self.rate * (1.0 / len(self._active))
                for item in self._active.values():
                    item[0] -= step
            self.busy_ns += dt
        self._last = now

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.callbacks = []  # superseded: popped later, calls nothing
            self._timer = None
        active = self._active
        if not active:
            return
        if self._capped:
            shares = self._shares()
            self._target = min(active, key=lambda k: active[k][0] / shares[k])
            share = shares[self._target]
            least = active[self._target][0]
        elif len(active) == 1:  # alone: share 1.0 (= 1.0 / 1)
            for t, item in active.items():
                self._target, least = t, item[0]
            share = 1.0
        else:
            # min(active, key=work / share), unrolled: the first transfer with the least
            share = 1.0 / len(active)
            best = None
            for k, item in active.items():
                v = item[0] / share
                if best is None or v < best:
                    best, t = v, k
            self._target = t
            least = active[t][0]
        delay = (0.0 if 0.0 > least else least) / (share * self.rate)  # max(least, 0.0)
        self._timer = timer = _Timer(self._on_timer)
        env = self.env
        heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), timer))

    def _on_timer(self, _timer: _Timer) -> None:
        self._timer = None
        self._advance()
        # The timer was set for `_target`'s completion: finish it (and any transfer at least
        # as close) even when float rounding at a large `now` leaves a sliver of work, which
        # an absolute threshold alone would reschedule forever (a zero-length timeout).
        active, t = self._active, self._target
        if self._capped:
            shares = self._shares()
            cutoff = max(active[t][0], 0.0) / shares[t] + _EPS_NS
            finished = [k for k, item in active.items()
                        if k == t or item[0] / shares[k] <= cutoff]
        elif len(active) == 1:
            finished = [t]
        else:
            share = 1.0 / len(active)
            cutoff = max(active[t][0], 0.0) / share + _EPS_NS
            finished = [k for k, item in active.items()
                        if k == t or item[0] / share <= cutoff]
        items = []
        for k in finished:
            item = active.pop(k)
            self._capped -= item[2] < 1.0
            items.append(item)
        self._reschedule()
        if not active:
            for fn in self._listeners:
                fn(False)
        for item in items:
            self._finish(item[3], item[1])


class Memory:
    """A memory (CPU DRAM or HBM) behind an optional on-chip cache (LLC or L2).

    Streaming bandwidth, latency and gather efficiency by row size; rows that hit on chip
    (`onchip_fraction` of a gather, from the compiled on-chip cache model) move over the
    on-chip server instead and cost the memory nothing.
    """

    def __init__(self, server: Server, gather_eff: Callable[[float], float],
                 onchip: Server | None = None):
        self.server = server
        self.gather_eff = gather_eff
        self.onchip = onchip

    def gather(self, rows: float, row_bytes: float, batch: int, label: str,
               onchip_fraction: float = 0.0) -> simpy.Event | None:
        """Random access to `rows` rows of `row_bytes` each (read or write)."""
        if self.onchip is None or onchip_fraction <= 0.0 or rows <= 0:
            return self.server.transfer(rows * row_bytes, batch, label,
                                        efficiency=self.gather_eff(row_bytes))
        hit = rows * min(onchip_fraction, 1.0)
        parts = [self.onchip.transfer(hit * row_bytes, batch, label),
                 self.server.transfer((rows - hit) * row_bytes, batch, label,
                                      efficiency=self.gather_eff(row_bytes))]
        evs = [p for p in parts if p is not None]
        return evs[0] if len(evs) == 1 else AllDone(self.server.env, evs)

    def stream(self, nbytes: float, batch: int, label: str, efficiency: float = 1.0
               ) -> simpy.Event | None:
        """Sequential traffic (DMA of a staging buffer, a sort pass) at `efficiency`."""
        return self.server.transfer(nbytes, batch, label, efficiency=efficiency)


class Pcie:
    """Host<->device link: two servers (full duplex) or one time-shared server.

    Full duplex with `duplex_h2d_GBps` set: while a D2H transfer is in service, H2D runs at
    that bandwidth instead (and symmetrically for `duplex_d2h_GBps`): nvbandwidth measures
    Gen4 H2D dropping to ~11 GB/s during D2H. Half duplex: one server "pcie", each direction
    at its own bandwidth, concurrent transfers time-sharing it.
    """

    def __init__(self, env: simpy.Environment, cfg, num_batches: int, recorder: Recorder,
                 dram: Server | None = None):
        self.env = env
        self.cfg = cfg
        # copy-engine DMA reads (H2D) or writes (D2H) host memory: the same bytes stream
        # through CPU DRAM (UVM traffic is charged as gathers by the designs instead)
        self.dram = dram if cfg.dma_loads_dram else None
        if cfg.full_duplex:
            self.h2d_server = Server(env, "pcie_h2d", cfg.h2d_GBps, cfg.latency_ns,
                                     num_batches, recorder)
            self.d2h_server = Server(env, "pcie_d2h", cfg.d2h_GBps, cfg.latency_ns,
                                     num_batches, recorder)
            # A direction never runs faster while the other is busy than alone: clamp the
            # duplex rates to the solo ones (a preset's duplex figure may exceed a solo
            # bandwidth lowered by --set or a sweep).
            if cfg.duplex_h2d_GBps is not None:
                ratio = min(cfg.duplex_h2d_GBps / cfg.h2d_GBps, 1.0)
                self.d2h_server.on_busy_change(
                    lambda busy: self.h2d_server.set_rate(ratio if busy else 1.0))
            if cfg.duplex_d2h_GBps is not None:
                ratio_d = min(cfg.duplex_d2h_GBps / cfg.d2h_GBps, 1.0)
                self.h2d_server.on_busy_change(
                    lambda busy: self.d2h_server.set_rate(ratio_d if busy else 1.0))
            self.servers = [self.h2d_server, self.d2h_server]
        else:
            shared = Server(env, "pcie", cfg.h2d_GBps, cfg.latency_ns, num_batches, recorder)
            self.h2d_server = self.d2h_server = shared
            self.servers = [shared]
        self.h2d_bytes = np.zeros(num_batches)
        self.d2h_bytes = np.zeros(num_batches)
        self._num_batches, self._recorder = num_batches, recorder
        #: (h2d, d2h) servers of the PCIe switch's uplink to the CPU this GPU's share of it,
        #: when one is shared (`share_uplink`); None: the GPU's own link sets the rate
        self.uplink: tuple[Server, Server] | None = None

    def share_uplink(self, GBps: float) -> None:
        """Every host<->GPU copy also crosses the PCIe switch's uplink to the CPU, of which
        this GPU gets `GBps` per direction (the uplink's bandwidth over the GPUs behind the
        switch that copy at once): a transfer ends when both its link and the uplink have
        carried its bytes (they stream through both at once, each at its own rate). Called
        before any transfer."""
        lat = self.cfg.latency_ns
        self.uplink = (Server(self.env, "pcie_uplink_h2d", GBps, lat, self._num_batches,
                              self._recorder),
                       Server(self.env, "pcie_uplink_d2h", GBps, lat, self._num_batches,
                              self._recorder))
        self.servers = [*self.servers, *self.uplink]

    def h2d(self, nbytes: float, batch: int, label: str, uvm: bool = False, dma: bool = True
            ) -> simpy.Event | None:
        """Host-to-device copy; `dma=False` when the design charges the host-memory side
        itself (a GPU kernel pulling rows from pinned memory: its DRAM gather is the read)."""
        if nbytes <= 0:
            return None
        self.h2d_bytes[batch] += nbytes
        link = self.h2d_server.transfer(nbytes, batch, "h2d " + label,
                                        efficiency=self.cfg.uvm_read_share if uvm else 1.0,
                                        GBps=self.cfg.h2d_GBps)
        if self.uplink is not None:
            up = self.uplink[0].transfer(nbytes, batch, "uplink h2d " + label)
            link = AllDone(self.env, [link, up])
        return self._with_dma(link, nbytes, batch, "dma read " + label, uvm or not dma)

    def d2h(self, nbytes: float, batch: int, label: str, uvm: bool = False, dma: bool = True
            ) -> simpy.Event | None:
        if nbytes <= 0:
            return None
        self.d2h_bytes[batch] += nbytes
        link = self.d2h_server.transfer(nbytes, batch, "d2h " + label,
                                        efficiency=self.cfg.uvm_write_share if uvm else 1.0,
                                        GBps=self.cfg.d2h_GBps)
        if self.uplink is not None:
            up = self.uplink[1].transfer(nbytes, batch, "uplink d2h " + label)
            link = AllDone(self.env, [link, up])
        return self._with_dma(link, nbytes, batch, "dma write " + label, uvm or not dma)

    def _with_dma(self, link: simpy.Event, nbytes: float, batch: int, label: str,
                  skip: bool) -> simpy.Event:
        if self.dram is None or skip:
            return link
        dram = self.dram.transfer(nbytes, batch, label)
        return link if dram is None else AllDone(self.env, [link, dram])
