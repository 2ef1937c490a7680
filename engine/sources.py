"""The event sources of a worker (engine.worker) and the state each one carries.

Everything that can need the worker's attention is a ``Source`` with one method,
``fire(now)``, called by the loop at wall time ``now`` (monotonic ns) when its
deadline in the heap (``traffic.pacing.Deadlines``, keyed by the source) is due or
its file descriptor is ready; the loop never asks what a source is. A source knows
who serves it, so firing it is one call:

* ``Nic``, a NIC's pacing slot: its send path serves it (``SendServer.service``);
* ``SendQp``, a QP's start time or retransmission timer, ``CcTimer`` its congestion
  control's timer, ``DelayLine`` its delay lines: its requester (``QpServer``);
* ``RecvQp``, a responder's delayed ACK, and ``Host``, a host's receive ring: its
  receive path (``RingServer``).

The worker's completion ring (engine.completions) and its timerfd are sources too.
The servers are Protocols here so that this module imports none of them.
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import Any, Protocol

from core.frame import WIRE_FRAME_BYTES, WIRE_OVERHEAD_BYTES
from core.scaling import Scale
from engine.plan import MsgPlan, NicPlan
from engine.rawsock import RingSpec, map_ring, slot_offsets
from engine.rx import RxRing
from engine.tx import TxNic, TxQp
from traffic import gbn
from traffic.dcqcn import NotificationPoint
from traffic.pacing import Deadlines, Schedule
from traffic.roce import QpTemplate, ResponderTemplate
from traffic.transport import new_receiver

# A sender that fell behind its schedule (preempted on a busy machine) catches up
# to keep the average rate exact, but never by more than this (emulated ns) or two
# frames, whichever is longer: beyond that it restarts the schedule from now
# (``Schedule`` counts the reset and the debt it dropped).
MAX_CATCHUP_NS = 20_000_000
# Busy periods shorter than this many full frames at the NIC's rate have no rate to
# speak of: their timing is the wake-up lag, which the lag checks judge against a
# full frame's time. Judged by their "rate", a 1 ms wake-up on a 33 us 8-byte frame
# would fail a run whose latencies it moves by 2 %.
_RATE_PERIOD_FRAMES = 4


class Source:
    """Something the worker's loop wakes for (htsim's ``EventSource``)."""

    __slots__ = ()

    def fire(self, now: int) -> None:
        """Act at wall time ``now``: the source's deadline is due or its fd is ready."""
        raise NotImplementedError


class SendServer(Protocol):
    def service(self, nic: Nic, now: int) -> None: ...


class QpServer(Protocol):
    def on_due(self, qp: SendQp, now: int) -> None: ...

    def on_cc_timer(self, qp: SendQp, now: int) -> None: ...

    def release(self, line: DelayLine, now: int) -> None: ...


class RingServer(Protocol):
    def receive(self, host: Host, now: int) -> None: ...

    def delayed_ack(self, rq: RecvQp) -> None: ...


class Nic(Source):
    """A host NIC: its line-rate schedule, busy QPs, push-back backlog and busy-period
    books. Fires at its next pacing slot (on its clock, ``fwd_ns`` behind the wall)."""

    __slots__ = ("host", "ifname", "sock", "rate_bps", "rate_emu_bps", "ns_per_bit", "sched", "qps",
                 "backlog", "bits_sent", "period_start", "period_first_out", "ideal_end", "actual_end",
                 "rate_period_ns", "slot", "fwd_ns", "server",
                 "dropped", "period_dropped", "busy_ns", "ideal_ns", "c", "c_addr", "active")

    def __init__(self, plan: NicPlan, sock: Any, scale: Scale, slot: int):
        self.slot = slot                # its index in RxState.blocked
        self.fwd_ns = 0                 # how far its clock runs behind the wall clock
        self.server: SendServer = None  # type: ignore[assignment]  # set by the worker
        self.host = plan.host
        self.ifname = plan.ifname
        self.sock = sock
        self.rate_bps = plan.rate_bps
        self.rate_emu_bps = scale.rate_emu_bps(plan.rate_bps)
        self.ns_per_bit = 1e9 / self.rate_emu_bps
        self.rate_period_ns = _RATE_PERIOD_FRAMES * 8 * WIRE_FRAME_BYTES * self.ns_per_bit
        self.sched = Schedule(MAX_CATCHUP_NS)
        self.qps: list[SendQp] = []     # QPs with something to send now
        self.backlog: list[bytes] = []  # frames the qdisc pushed back, sent first
        self.bits_sent = 0
        # Busy periods: from the first due slot to the end of the last frame, as it
        # happened (actual) and as the schedules allotted it (ideal).
        self.period_start = -1
        self.period_first_out = 0
        self.ideal_end = 0
        self.actual_end = 0
        self.dropped = 0                # schedule debt dropped by resets, all periods
        self.period_dropped = 0
        self.busy_ns = 0
        self.ideal_ns = 0
        # The compiled sender's view (None: this NIC is served in Python).
        self.c: TxNic | None = None
        self.c_addr = 0
        self.active: Any = None         # its busy QPs' slots, in ``qps`` order

    def fire(self, now: int) -> None:
        self.server.service(self, now - self.fwd_ns)


class CcTimer(Source):
    """A QP's congestion-control timer (``next_timer_s``)."""

    __slots__ = ("qp",)

    def __init__(self, qp: SendQp):
        self.qp = qp

    def fire(self, now: int) -> None:
        qp = self.qp
        qp.server.on_cc_timer(qp, now - qp.nic.fwd_ns)


class DelayLine(Source):
    """A QP's delay lines (engine.worker's docstring, "Fixed delays").

    ``frames``: (release_ns, shape, psn, count, lag_ns, step_ns, solicit) of decided bursts
    whose path delay exceeds their NIC clock's, where the loop is Python's (the
    compiled loop keeps them in C, ``engine.csend``); ``ctrl``: (release_ns, kind, psn,
    syndrome, int_block) of received ACKs (kind EV_ACK_IN) and CNPs (EV_CNP_IN).
    Release times are wall times. Each FIFO's delay is constant, so its head is its
    earliest.
    """

    __slots__ = ("qp", "frames", "ctrl")

    def __init__(self, qp: SendQp):
        self.qp = qp
        self.frames: deque[tuple[int, Any, int, int, int, int, bool]] = deque()
        self.ctrl: deque[tuple[int, int, int, int, bytes]] = deque()

    def next_ns(self) -> int | None:
        heads = [q[0][0] for q in (self.frames, self.ctrl) if q]
        return min(heads) if heads else None

    def hold(self, fifo: deque, entry: tuple, deadlines: Deadlines) -> None:
        """Append ``entry`` (release time first) to ``fifo``, one of this line's FIFOs."""
        fifo.append(entry)
        if len(fifo) == 1:
            armed = deadlines.armed(self)
            if armed is None or entry[0] < armed:
                deadlines.arm(self, entry[0])

    def fire(self, now: int) -> None:
        self.qp.server.release(self, now)


class SendQp(Source):
    """A requester QP (one message). Fires at its start time, or at its retransmission
    timer once started."""

    __slots__ = ("plan", "tmpl", "first", "middle", "last", "n", "gbn", "cc", "nic",
                 "sched", "_idle", "start_ns", "acked_ns", "first_tx_ns", "last_tx_ns",
                 "bytes_sent", "next_trace_ns", "mid_bits", "bits", "tx_ns", "timer", "echoes",
                 "delay", "line_ns", "post_ns", "c", "slot", "server")

    def __init__(self, plan: MsgPlan, payload_bytes: int):
        self.plan = plan
        self.server: QpServer = None  # type: ignore[assignment]  # set by the worker
        self.tmpl = QpTemplate(plan.flow, plan.size_bytes, mtu_payload_bytes=payload_bytes)
        self.n = self.tmpl.n_packets
        if self.n >= gbn.PSN_MASK:
            raise ValueError(f"message {plan.msg_id}: {self.n} packets exceed the PSN space")
        # Frame of each index: resolved once (the hot path calls Shape.write directly).
        shapes = self.tmpl.shapes
        self.first = shapes[self.tmpl.opcode(0)]
        self.last = shapes[self.tmpl.opcode(self.n - 1)]
        self.middle = shapes.get(self.tmpl.opcode(1)) if self.n > 2 else self.last
        # Wire bits: the frame and Ethernet's preamble, FCS and gap, which the
        # fabric's shapers charge too (a NIC paced on frame bits alone would outrun
        # its own port by 0.6 %).
        self.bits = [(len(s.buf) + WIRE_OVERHEAD_BYTES) * 8
                     for s in (self.first, self.middle, self.last)]
        self.mid_bits = self.bits[1]
        self.gbn: gbn.GbnSender | None = None
        self.cc: Any = None
        self.nic: Nic = None  # type: ignore[assignment]  # set by the worker
        self.sched = Schedule(MAX_CATCHUP_NS)
        self._idle = True
        self.start_ns = -1
        self.acked_ns = -1
        self.first_tx_ns = -1
        self.last_tx_ns = -1
        self.bytes_sent = 0
        self.next_trace_ns = 0
        self.tx_ns = array("q")         # latest send time of every packet (RTT samples)
        self.timer = CcTimer(self)
        self.echoes = 0                 # ACKs and NAKs received with the ECN echo
        self.delay = (DelayLine(self) if plan.fwd_delay_emu_ns or plan.back_delay_emu_ns
                      else None)
        self.line_ns = 0                # path delay beyond its NIC clock's: a frame's wait
        # When the message is posted (NIC time): its start time, or the completion of its
        # last dependency if later (the receive stamp of that message's last frame).
        self.post_ns = -1
        self.c: TxQp | None = None      # the compiled sender's view of it, if any
        self.slot = -1

    @property
    def idle(self) -> bool:
        """Nothing to send now (before its start, waiting for ACKs or its timer): off
        its NIC's busy QPs. The compiled sender's flag where it has one, which
        tx_service sets when the QP runs out of frames and the compiled loop clears
        when it starts the QP."""
        c = self.c
        return self._idle if c is None else bool(c.idle)

    @idle.setter
    def idle(self, value: bool) -> None:
        if self.c is None:
            self._idle = value
        else:
            self.c.idle = value

    def fire(self, now: int) -> None:
        self.server.on_due(self, now - self.nic.fwd_ns)


class RecvQp(Source):
    """A responder QP. Fires when a delivered frame has waited ``ack_delay_s`` for its ACK."""

    __slots__ = ("plan", "gbn", "resp", "nic", "done_ns", "bytes", "ce", "cnps", "seen",
                 "first_rx_ns", "server")

    def __init__(self, plan: MsgPlan, n_packets: int, ack_coalesce: int, ce_ack: bool,
                 transport: str, reorder_packets: int):
        self.plan = plan
        self.server: RingServer = None  # type: ignore[assignment]  # set by the worker
        self.gbn = new_receiver(transport, n_packets, ack_coalesce, ce_ack, reorder_packets)
        self.resp = ResponderTemplate(plan.reply_flow)
        self.nic: Nic = None  # type: ignore[assignment]  # set by the worker
        self.done_ns = -1
        self.bytes = 0
        self.ce = 0
        self.cnps = 0
        self.seen = 0
        self.first_rx_ns = -1

    def fire(self, now: int) -> None:
        self.server.delayed_ack(self)


class Host(Source):
    """A host's receive ring and the QPs it sends and receives. Fires when the ring
    holds frames."""

    __slots__ = ("name", "sock", "mm", "offsets", "idx", "rx_qps", "tx_qps", "np", "rx_count",
                 "ring", "server")

    def __init__(self, name: str, sock: Any, ring: RingSpec, cnp_interval_s: float):
        self.name = name
        self.sock = sock
        self.server: RingServer = None  # type: ignore[assignment]  # set by the worker
        self.mm = map_ring(sock, ring)
        self.offsets = slot_offsets(ring)
        self.ring: RxRing | None = None     # the compiled receive loop's view
        self.idx = 0
        self.rx_qps: dict[int, RecvQp] = {}
        self.tx_qps: dict[int, SendQp] = {}
        self.np = NotificationPoint(cnp_interval_s)
        self.rx_count = 0

    def fire(self, now: int) -> None:
        self.server.receive(self, now)
