"""The engine worker: the RoCEv2 NIC models of a set of hosts, driven by events.

One worker process owns the raw sockets of a set of emulated hosts. For each host
it runs the RoCEv2 NIC model:

* **requester** (one per message = one RC QP, ``engine.requester``): go-back-N
  sequencing (``traffic.gbn.GbnSender``) paced at the rate of its congestion control
  and held to its window (one object per QP from the plan's
  ``traffic.ccload.CcFactory``, fed sends, ACKs with their RTT and ECN echo, CNPs and
  its own timer), and on top of that the host NIC's line rate shared by its QPs
  (``engine.sendpath``). The frame that fills the window carries AckReq, so the
  responder ACKs it at once;
* **responder** (``engine.recvpath``): go-back-N receive (``GbnReceiver``), coalesced
  ACKs and NAKs carrying the ECN echo in BTH BECN, a delayed ACK when a delivered
  frame has waited ``ack_delay_s`` for its ACK, CNPs from a ``NotificationPoint`` (at
  most one per QP per CNP interval).

Protocol decisions are all taken by those pure objects; the engine moves frames and
converts clocks. They get REAL-fabric time, ``(t_emu_ns - t0_ns) / S``.

Event loop (``Worker``). The CPU cost follows frames and events, never the wall clock.
Everything the worker acts on is an event source (``engine.sources``) with one
``fire(now)``: a NIC's pacing slot, a QP's start or retransmission timer, its CC
timer, its delay line, a responder's delayed ACK (deadlines in one heap,
``traffic.pacing.Deadlines``), a host's receive ring, the completion ring's eventfd
and the timerfd (file descriptors in epoll):

* the loop runs in passes: first the rings and the eventfd that are ready (read
  without sleeping, so frames that arrived are answered before anything is sent),
  then the deadlines due within a turn (``engine.books.TURN_FRAMES``) of the pass,
  earliest first, each fired at the time it is fired; a pass fires deadlines for at
  most a turn, then reads the rings again before the rest, so that a worker with many
  NICs due together never leaves its rings waiting for all of them. Deadlines due at
  the same instant count one by one (``Deadlines.pop_next``): a step of a ring
  all-reduce starts eight QPs of a worker at once, 46-67 us of Python each, which
  fired as one held its rings for 0.66 ms at S = 2000. Only when nothing
  is ready and no deadline is due within a turn does the worker sleep in ``epoll`` on
  its rings, its eventfd and a timerfd armed at the next deadline: a deadline a
  turn away is served early instead of costing a wake-up of its own, and a deadline
  that fired early and re-armed itself for the same time (a timer not yet expired)
  is waited for. A deadline due within ``engine.books.BATCH_FRAMES`` is slept for
  on the clock alone: what reaches the rings meanwhile is read when it fires
  instead of waking the worker once per frame;
* dependencies are counters (``DepCounter``; C's in the compiled loop, ``engine.cpost``)
  decremented on completion; completions of other workers arrive through the rings of
  ``engine.plan`` and wake this worker through its eventfd (``engine.completions``);
* frames are received in batches from the TPACKET_V2 ring, headers only, and sent in
  compiled ``sendmmsg`` bursts (``engine.burst``, ``engine.handover``). Each read
  records how long its oldest frame waited in the ring (receive lag), which the gate
  judges beside the send lag.

Pacing. Each QP and each NIC keeps a ``Schedule`` of absolute due times; the
lag of every frame behind its due time is recorded, and a stall that drops
schedule debt is counted (resets, dropped ns). Per NIC, the time it was busy (first
frame out to last frame out of each busy period of at least a few full frames) is
compared with the time its schedule allotted the same frames (rate check). The wait
before a period's first frame, and short periods, are wake-up lag, judged by the lag
checks: counted here they would fail every small message on wake latency. The send
and receive paths each have a Python implementation and a compiled one behind the
same interface (``engine.sendpath``/``engine.csend``, ``engine.recvpath``); the
compiled ones are used where clang works.

Fixed delays. A QP's frames enter the fabric the real fabric's fixed path delay
(``MsgPlan.fwd_delay_emu_ns``, dilated by S, engine/run.py) after the time they
would leave a real NIC, stamped with their hand-over time less that delay, so the
receiver's one-way latency includes it. Rather than hold every decided frame, the NIC
model runs on a **NIC clock** ``fwd_ns`` behind the wall clock, ``fwd_ns`` the smallest
path delay of its QPs: it decides, paces and books a frame at its slot on that clock, i.e. at
the wall time its frame is due on the fabric, and hands it over at once. A QP whose
path delay is longer has a **delay line** for the difference: the burst waits in a
FIFO and goes to the fabric stamped with its hand-over time less the whole delay.
With the compiled loop (``engine.cloop``) the bursts' lines are in C, one per NIC and
path delay (``CompiledSendPath.use_lines``), and the loop hands them over when due;
ACKs and CNPs reach the requester the ACK path's delay after they arrive, on its
NIC's clock (``fwd_ns`` later on the wall clock: a second FIFO). Every sender-side
time (slots, send stamps, RTT samples, the CC's clock, retransmission and CC timers,
a message's post) is NIC time; the deadline heap holds wall times. Both delays are
constant per QP, so either FIFO releases in order; a frame's pacing lag includes how
late its hand-over was. A message's first frame is due ``nic_overhead_s`` after it
is posted. (The clock saves a deadline, a hold and a release per burst where a NIC's
QPs share one path, as in a ring all-reduce: 30 % fewer Python calls per frame,
docs/design.md.)

Clocks. Data frames carry the send time as CLOCK_MONOTONIC ns (``traffic.roce``);
receive times are the ring's kernel timestamps converted with the parent's
``realtime - monotonic`` offset.
"""

from __future__ import annotations

import gc
import os
import select
import socket
import time
from dataclasses import dataclass

from core.errors import CapabilityError
from engine.books import Books
from engine.burst import Burst
from engine.cloop import compiled_loop
from engine.completions import Completions
from engine.csend import CompiledSendPath
from engine.handover import Handover
from engine.plan import Shared, WorkerPlan
from engine.rawsock import RingSpec, TimerFd, ring_drops
from engine.recvpath import RX_BUDGET, CompiledReceivePath, ReceivePath
from engine.requester import Requester
from engine.rx import RxLib, RxState
from engine.sendpath import SendPath
from engine.sources import Host, Nic, RecvQp, SendQp, Source
from engine.stats import NicRecord, ReceiveRecord, SendRecord, WorkerCounters, WorkerStats
from engine.tx import TxLib

_IDLE_WAKE_NS = 50_000_000              # the longest sleep: stop and parent checks


def runqueue_wait_ns() -> int:
    """ns this thread has waited on a run queue while runnable (/proc schedstat, field 2;
    0 where the kernel does not keep it)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


@dataclass
class PreparedQps:
    """A worker's QPs, built before its sockets exist (`prepared_qps`)."""

    senders: list[SendQp]
    receivers: list[RecvQp]


def prepared_qps(plan: WorkerPlan, burst: Burst) -> PreparedQps:
    """The requester and responder QPs of ``plan``, their frames built (the senders'
    prepared for ``burst``): a worker's longest set-up step, made while the parent
    opens its sockets. They meet their NICs and hosts in `Worker`."""
    senders = [SendQp(m, plan.payload_bytes) for m in plan.sends]
    for qp in senders:
        for shape in {id(s): s for s in (qp.first, qp.middle, qp.last)}.values():
            burst.prepare(shape)
    receivers = []
    for m in plan.receives:
        n_packets = -(-m.size_bytes // plan.payload_bytes)
        receivers.append(RecvQp(m, n_packets, plan.ack_coalesce or n_packets, plan.ce_ack,
                                plan.transport, plan.reorder_packets))
    return PreparedQps(senders, receivers)


class _Alarm(Source):
    """The timerfd: its wake-up is the deadlines' (the loop re-arms it before it sleeps)."""

    __slots__ = ("timer",)

    def __init__(self, timer: TimerFd):
        self.timer = timer

    def fire(self, now: int) -> None:
        self.timer.fired()


# ----------------------------------------------------------------------------- worker

class Worker:
    """A worker's NICs, QPs and hosts, its send and receive paths, and its loop."""

    def __init__(self, plan: WorkerPlan, shared: Shared, qps: PreparedQps,
                 rx_socks: dict[str, socket.socket],
                 tx_socks: dict[tuple[str, str], socket.socket], ring: RingSpec, burst: Burst,
                 rx_lib: RxLib, parent_pid: int):
        self.plan = plan
        self.shared = shared
        self.parent_pid = parent_pid
        nics = [Nic(n, tx_socks[(n.host, n.ifname)], plan.scale, k)
                for k, n in enumerate(plan.nics)]
        self.nics = {(n.host, n.ifname): n for n in nics}
        self.books = books = Books(plan, shared, min((n.ns_per_bit for n in nics), default=0))
        self.hosts = {h: Host(h, rx_socks[h], ring, plan.cnp_interval_s) for h in plan.hosts}
        self.senders = self._on_nics(qps.senders)
        for qp in qps.receivers:
            qp.nic = self.nics[(qp.plan.dst, qp.plan.reply_ifname)]
            self.hosts[qp.plan.dst].rx_qps[qp.plan.flow.dqpn] = qp
        rx = (RxState(rx_lib, plan.n_messages, RX_BUDGET, len(nics), books.scale_ns,
                      plan.cnp_interval_s) if rx_lib.available else None)
        out = Handover(books, burst, None if rx is None else rx.blocked)
        self.send = self._send_path(books, out, burst, nics)
        for nic in nics:
            nic.server = self.send
        self.requester = Requester(books, self.send, out, self.senders)
        self.completions = Completions(books, self.requester)
        hosts = list(self.hosts.values())
        self.recv = (ReceivePath(books, out, self.requester, self.completions, hosts)
                     if rx is None else
                     CompiledReceivePath(books, out, self.requester, self.completions, hosts, rx))
        # The loop in C where both paths are (engine.cloop), else the Python loop below.
        self.cloop = compiled_loop(books, self.send, self.recv, hosts, nics, _IDLE_WAKE_NS)
        self.wakeups = 0
        self.wait_ns = -1               # a deadline that fired early and waits for its time
        self.cpu0 = 0.0
        self.times0: os.times_result | None = None
        self.cpu_wait0_ns = 0
        self.realtime = False
        self.wall_ns = 0
        self.drops = {h: 0 for h in self.hosts}
        self.stop_reason: str | None = None

    def _on_nics(self, senders: list[SendQp]) -> list[SendQp]:
        """``senders`` (`prepared_qps`) on their NICs and their NICs' clocks."""
        for qp in senders:
            qp.nic = self.nics[(qp.plan.src, qp.plan.ifname)]
            self.hosts[qp.plan.src].tx_qps[qp.plan.reply_flow.dqpn] = qp
        fwd: dict[int, int] = {}  # a NIC's clock leads by its QPs' shortest path delay
        for qp in senders:
            key = id(qp.nic)
            fwd[key] = min(fwd.get(key, qp.plan.fwd_delay_emu_ns), qp.plan.fwd_delay_emu_ns)
        for nic in self.nics.values():
            nic.fwd_ns = fwd.get(id(nic), 0)
        for qp in senders:
            qp.line_ns = qp.plan.fwd_delay_emu_ns - qp.nic.fwd_ns
        return senders

    def _send_path(self, books: Books, out: Handover, burst: Burst,
                   nics: list[Nic]) -> SendPath:
        """roce_tx.c's loop where the burst sender is compiled, else Python's."""
        if burst.compiled:
            try:
                lib = TxLib()
            except (CapabilityError, OSError):
                pass  # the Python sender serves every NIC
            else:
                return CompiledSendPath(books, out, lib, burst, self.senders, nics)
        return SendPath(books, out)

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> None:
        shared = self.shared
        while not shared.t0_ns.value:
            if shared.stop.value:
                self.stop_reason = "stopped before start"
                return
            time.sleep(0.0005)
        self.books.t0_ns = t0 = shared.t0_ns.value
        self.send.start_clock(t0)
        for h in self.hosts.values():
            self.drops[h.name] += ring_drops(h.sock)  # frames before t0 are not ours to judge
        # The Scapy templates are hundreds of thousands of long-lived objects: out of
        # the collector's sight, a collection during the run costs microseconds.
        gc.freeze()
        timer = TimerFd()
        eps = select.epoll(), select.epoll()
        try:
            self._loop(t0, timer, *eps)
        finally:
            for e in eps:
                e.close()
            timer.close()

    def _start(self, t0: int, timer: TimerFd, ep: select.epoll,
               ep_io: select.epoll) -> dict[int, Source]:
        """Register the sources with a file descriptor; wait for the common start ``t0``.
        Returns the sources by fd."""
        by_fd: dict[int, Source] = {h.sock.fileno(): h for h in self.hosts.values()}
        by_fd[self.completions.fd] = self.completions
        for fd in by_fd:
            ep.register(fd, select.EPOLLIN)
            ep_io.register(fd, select.EPOLLIN)
        by_fd[timer.fd] = _Alarm(timer)
        ep.register(timer.fd, select.EPOLLIN)
        self.requester.post_ready()
        timer.arm(t0)
        while time.monotonic_ns() < t0:  # every worker starts on the same clock reading
            ep.poll(0.05)
            timer.clear()
            timer.arm(t0)
        self.cpu0 = time.process_time()
        self.times0 = os.times()
        self.cpu_wait0_ns = runqueue_wait_ns()
        return by_fd

    def _loop(self, t0: int, timer: TimerFd, ep: select.epoll, ep_io: select.epoll) -> None:
        """Passes: the rings and the eventfd first (``ep_io``, without sleeping), then the
        deadlines due within a turn (``_fire_due``). The worker sleeps (``ep``: the
        rings, the eventfd and the timerfd at the next deadline) only when nothing is
        ready and no deadline is due within a turn. The compiled loop
        (``engine.cloop``) runs the same passes."""
        by_fd = self._start(t0, timer, ep, ep_io)
        cloop = self.cloop
        if cloop is not None:
            cloop.start(ep, ep_io, timer.fd)
        turns = self.shared.turns
        w = self.plan.worker
        passes = next_house = 0
        while True:
            passes += 1
            turns[w] = passes
            now = (self._pass(by_fd, timer, ep, ep_io) if cloop is None else
                   cloop.run_pass(by_fd, 0 if self.completions.all_acked else next_house))
            if self.completions.all_acked or now >= next_house:
                next_house = now + _IDLE_WAKE_NS
                if self._over():
                    break
        if cloop is not None:
            cloop.drain()
            cloop.close()
            self.wakeups = cloop.wakeups
        turns[w] = -1  # the results take a while; the watchdog leaves them be
        self.wall_ns = time.monotonic_ns() - t0

    def _over(self) -> bool:
        """True when the run is over for this worker (and why, in ``stop_reason``)."""
        shared = self.shared
        if sum(shared.acked) >= self.plan.n_messages:
            return True
        if shared.stop.value:
            self.stop_reason = "stopped"
            return True
        if os.getppid() != self.parent_pid:
            self.stop_reason = "engine process died"
            return True
        return False

    def _pass(self, by_fd: dict[int, Source], timer: TimerFd, ep: select.epoll,
              ep_io: select.epoll) -> int:
        """One pass of the Python loop; returns the time it ended."""
        mono = time.monotonic_ns
        events = ep_io.poll(0)
        now = mono()
        due = self.books.deadlines.next_ns()
        if not events and (due is None or due - now > self.books.turn_ns
                           or due == self.wait_ns and due > now):
            self.wakeups += 1
            if due is not None and due - now <= self.books.batch_ns:
                time.sleep((due - now) / 1e9)  # the rings wait for it (BATCH_FRAMES)
                events = ep_io.poll(0)
            else:
                timer.arm(now + _IDLE_WAKE_NS if due is None or due - now > _IDLE_WAKE_NS
                          else due)
                events = ep.poll()
        for fd, _ in events:
            by_fd[fd].fire(mono())
        return self._fire_due(mono())

    def _fire_due(self, now: int) -> int:
        """Fire the deadlines due within a turn of ``now``, earliest first, each at the
        time it is fired, for at most a turn: then the rings are read again before
        the rest (a worker with many NICs due together does not leave its rings
        waiting for all of them). Returns the time it stopped."""
        mono = time.monotonic_ns
        deadlines = self.books.deadlines
        turn_ns = self.books.turn_ns
        end = now + turn_ns
        while True:
            due = deadlines.next_ns()
            if due is None or due > now + turn_ns or due == self.wait_ns and due > now:
                return now
            source = deadlines.pop_next()
            source.fire(now)  # type: ignore[union-attr]
            if due > now and deadlines.armed(source) == due:
                # Fired early, it armed itself for the same time again (a timer that
                # has not expired yet): the worker sleeps until then.
                self.wait_ns = due
                return now
            now = mono()
            if now > end:
                return now

    # -- results ------------------------------------------------------------------------
    def results(self) -> WorkerStats:
        """Counters and samples; times in emulated ns after t0 (-1: never happened)."""
        books = self.books
        t0 = books.t0_ns

        def rel(t_ns: int) -> int:
            return t_ns - t0 if t_ns >= 0 else -1

        for h in self.hosts.values():
            self.drops[h.name] += ring_drops(h.sock)
        for n in self.nics.values():
            self.send.end_period(n)
        self.send.finish()
        self.recv.finish(list(self.hosts.values()))
        sends = [SendRecord(
            index=q.plan.index, start_ns=rel(q.start_ns), acked_ns=rel(q.acked_ns),
            first_tx_ns=rel(q.first_tx_ns), last_tx_ns=rel(q.last_tx_ns),
            packets=q.n, bytes_sent=q.bytes_sent,
            packets_sent=q.gbn.packets_sent if q.gbn else 0,
            retransmitted=q.gbn.retransmitted if q.gbn else 0,
            naks=q.gbn.naks if q.gbn else 0,
            timeouts=q.gbn.timeouts if q.gbn else 0,
            rack_losses=q.gbn.rack_losses if q.gbn else 0,
            probes=q.gbn.probes if q.gbn else 0,
            cnps_received=q.cc.cnps_received if q.cc else 0,
            ecn_echoes=q.echoes,
        ) for q in self.senders]
        receives = [ReceiveRecord(
            index=rq.plan.index, received_ns=rel(rq.done_ns),
            first_rx_ns=rel(rq.first_rx_ns),
            bytes_received=rq.bytes, ce_marked=rq.ce, cnps_sent=rq.cnps,
            data_packets_received=rq.seen, duplicates=rq.gbn.duplicates,
            out_of_order=rq.gbn.out_of_order,
        ) for h in self.hosts.values() for rq in h.rx_qps.values()]
        nics = [NicRecord(
            host=n.host, ifname=n.ifname, bits_sent=n.bits_sent,
            busy_emu_ns=n.busy_ns, scheduled_emu_ns=n.ideal_ns, dropped_emu_ns=n.dropped,
        ) for n in self.nics.values()]
        return WorkerStats(self._counters(), sends=sends, receives=receives, nics=nics,
                           latency=books.lat, rates=books.rates, lags=books.lags,
                           rx_lags=books.rx_lags, start_lags=books.start_lags)

    def _counters(self) -> WorkerCounters:
        books = self.books
        scheds = [q.sched for q in self.senders] + [n.sched for n in self.nics.values()]
        return WorkerCounters(
            worker=self.plan.worker, error=None, stop_reason=self.stop_reason,
            hosts=list(self.hosts),
            lag_total_ns=books.lag_total_ns,
            pacing_resets=sum(s.resets for s in scheds),
            pacing_dropped_ns=sum(s.dropped_ns for s in scheds),
            packets_sent=books.packets_sent, data_packets_sent=books.data_sent,
            ctrl_packets_sent=books.ctrl_sent, packets_received=books.packets_received,
            push_backs=books.push_backs, unknown_frames=books.unknown_frames,
            ring_drops=sum(self.drops.values()), wakeups=self.wakeups,
            cpu_s=time.process_time() - self.cpu0 if self.cpu0 else 0.0,
            # The kernel's share: sends carry frames through the shapers and switches.
            sys_s=os.times().system - self.times0.system if self.times0 else 0.0,
            # Runnable but not running (another task had the CPU): what stalls a worker.
            cpu_wait_s=(runqueue_wait_ns() - self.cpu_wait0_ns) / 1e9 if self.times0 else 0.0,
            realtime=self.realtime,
            wall_s=self.wall_ns / 1e9,
        )
