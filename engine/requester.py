"""The requester side of a worker's NICs: what happens to a message's QP besides
sending (engine.sendpath).

It serves a ``SendQp``'s own deadlines (its start, then its retransmission timer),
its congestion control's timer, and its delay lines; it acts on the ACKs, NAKs and
CNPs the receive path hands it, or the compiled loop's control line releases
(``released``; go-back-N, ``traffic.gbn``; the algorithm, from the plan's
``traffic.ccload.CcFactory``); and it starts the messages its ``posting`` posts
(``Posting`` here, counting dependencies in Python; ``engine.cpost``'s in the
compiled loop). Every time here is NIC time (engine.worker's docstring, "Fixed
delays") unless it says wall.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from engine.books import TRACE_CNP, TRACE_ECHO, TRACE_TIMER, Books
from engine.handover import Handover
from engine.plan import starts_at_t0
from engine.rx import ARG_BECN, EV_ACK_IN
from engine.sendpath import SendPath
from engine.sources import DelayLine, SendQp
from traffic.ccload import check_read_back
from traffic.int_telemetry import decode_block
from traffic.pacing import DepCounter


def publish_acked(books: Books, n_acked: int, n_senders: int) -> None:
    """``n_acked`` of the worker's ``n_senders`` messages are wholly acknowledged: into
    shared memory, and when that is all of them, every worker's eventfd written."""
    shared = books.shared
    shared.acked[books.plan.worker] = n_acked
    if n_acked == n_senders:
        for fd in shared.wake_fds:  # everyone re-checks "all acknowledged"
            os.eventfd_write(fd, 1)


class Posting:
    """When each message of a worker is posted: its dependency counters
    (``traffic.pacing.DepCounter``) and start times, armed as its QP's deadline; and
    how many are wholly acknowledged. ``engine.cpost.CompiledPosting`` is the same in
    the compiled loop."""

    def __init__(self, requester: Requester):
        self.requester = requester
        self.deps = DepCounter({qp.plan.index: qp.plan.deps for qp in requester.senders})
        self.n_acked = 0

    def acked(self) -> None:
        """One more message is wholly acknowledged."""
        self.n_acked += 1
        publish_acked(self.requester.books, self.n_acked, len(self.requester.senders))

    def ready(self) -> None:
        """Post every message without dependencies; called before ``t0``. Those posted
        at ``t0`` itself are started now, as if at ``t0``: started when the clock runs,
        an all-to-all's thousands of QPs (16,256 on fattree,8) would hold back every
        NIC's first frames for as long as their set-up takes, beyond the NIC overhead
        at any S. The parent leaves time for it before ``t0`` (``plan.PRESTART_NS``).
        The others are armed at their start time."""
        requester = self.requester
        books = requester.books
        for index in self.deps.ready():
            qp = requester.by_index[index]
            qp.post_ns = books.t0_ns + qp.plan.start_emu_ns
            if starts_at_t0(qp.plan):
                requester.start(qp, qp.post_ns)
            else:
                books.deadlines.arm(qp, qp.post_ns + qp.nic.fwd_ns)

    def completed(self, index: int, done_ns: int, now: int) -> None:
        """Message ``index`` was fully received at ``done_ns``: post what waited for it
        then, plus its compute gap (``gap_emu_ns``). A worker that learns of it late (a
        stall, a wake-up) starts the message late against that post time, and its
        frames' lag says so. ``now`` is wall time."""
        requester = self.requester
        books = requester.books
        for child in self.deps.complete(index):
            qp = requester.by_index[child]
            qp.post_ns = max(done_ns + qp.plan.gap_emu_ns, books.t0_ns + qp.plan.start_emu_ns)
            fwd = qp.nic.fwd_ns
            if qp.post_ns <= now - fwd:
                requester.start(qp, now - fwd)
            else:
                books.deadlines.arm(qp, qp.post_ns + fwd)


class Requester:
    def __init__(self, books: Books, path: SendPath, out: Handover, senders: list[SendQp]):
        self.books = books
        self.path = path
        self.out = out
        self.senders = senders
        self.by_index = {qp.plan.index: qp for qp in senders}
        self.overhead_ns = books.plan.scale.emu_ns(books.plan.nic_overhead_s)
        for qp in senders:
            qp.server = self
        #: Python's; the compiled loop puts its own (``engine.cpost``).
        self.posting: Any = Posting(self)

    def post_ready(self) -> None:
        """Post every message without dependencies (``Posting.ready``)."""
        self.posting.ready()

    def completed(self, index: int, done_ns: int, now: int) -> None:
        """Message ``index`` was fully received at ``done_ns`` (``Posting.completed``)."""
        self.posting.completed(index, done_ns, now)

    # -- a QP's deadlines --------------------------------------------------------------
    def on_due(self, qp: SendQp, now: int) -> None:
        """``qp``'s start time, or its retransmission timer once started."""
        if qp.gbn is None:
            self.start(qp, now)
            return
        g = qp.gbn
        if g.done:
            return
        g.advance(self.books.real_s(now))
        if g.next_index < g.total_packets:
            self.wake(qp, now)
        else:
            self.books.arm_rto(qp)

    def on_cc_timer(self, qp: SendQp, now: int) -> None:
        if qp.acked_ns >= 0:
            return
        qp.cc.on_timer(self.books.real_s(now))
        self.path.sync_cc(qp)
        self.books.trace(qp, now, TRACE_TIMER)
        self.arm_cc_timer(qp)
        if qp.idle and qp.gbn.next_index < qp.gbn.total_packets:
            self.wake(qp, now)  # its window may have opened

    def release(self, line: DelayLine, now: int) -> None:
        """Hand over the bursts and act on the ACKs/CNPs whose delay is up (``now``: wall)."""
        qp = line.qp
        books = self.books
        horizon = now + books.turn_ns
        frames = line.frames
        while frames and frames[0][0] <= horizon:
            release, shape, psn, n, lag, step, solicit = frames.popleft()
            books.book_lags(lag + now - release, n, step)
            self.out.hand_over(qp.nic, shape, psn, n, now, now - qp.plan.fwd_delay_emu_ns,
                               solicit)
        ctrl = line.ctrl
        while ctrl and ctrl[0][0] <= horizon:
            release, kind, psn, arg, int_block = ctrl.popleft()
            self.act(qp, kind, psn, arg, release - qp.nic.fwd_ns, int_block)
        due = line.next_ns()
        if due is not None:
            books.deadlines.arm(line, due)

    # -- starting and waking -------------------------------------------------------------
    def start(self, qp: SendQp, now: int) -> None:
        books = self.books
        p = books.plan
        # The real line rate and path round trip: CC never sees S.
        qp.cc = p.cc(qp.nic.rate_bps, books.real_s(now), qp.plan.base_rtt_s, qp.plan.hops)
        self.path.begin(qp, now)
        # A message counts from when it was posted, whether it is served up to a turn
        # early or late (then its first frames' lag is booked, as any stall's).
        post = qp.post_ns
        qp.start_ns = post
        books.start_lags.append(now - post)
        # The rate trace's first row is the start's (a row due at the first burst
        # would send every message's first burst back from C to Python for it).
        books.trace(qp, now)
        self.arm_cc_timer(qp)
        self.wake(qp, now, post + self.overhead_ns)  # the NIC's per-message overhead

    def wake(self, qp: SendQp, now: int, due_ns: int | None = None) -> None:
        """``qp`` has frames to send from ``due_ns`` (default ``now``: an idle QP owed
        nothing; both NIC time): put it on its NIC and serve the NIC now."""
        if not qp.idle:
            return
        qp.idle = False
        deadlines = self.books.deadlines
        deadlines.disarm(qp)
        due = now if due_ns is None else due_ns
        qp.sched.restart(due)
        nic = qp.nic
        if not self.path.busy(nic):
            nic.sched.restart(due)
        self.path.activate(qp)
        wall = now + nic.fwd_ns
        armed = self.books.nic_armed(nic)
        if armed is None or armed > wall:
            self.books.arm_nic(nic, wall)

    def arm_cc_timer(self, qp: SendQp) -> None:
        """Arm (or disarm) ``qp``'s CC timer at its ``next_timer_s`` (read after its events)."""
        books = self.books
        t_s = qp.cc.next_timer_s
        if t_s != t_s:  # NaN: neither a time nor "no timer"
            check_read_back(books.plan.cc.spec, qp.cc, "during the run")
        if t_s < math.inf and qp.acked_ns < 0:
            books.deadlines.arm(qp.timer, books.t0_ns + int(t_s * books.scale_ns) + qp.nic.fwd_ns)
        else:
            books.deadlines.disarm(qp.timer)

    # -- ACKs and CNPs ---------------------------------------------------------------------
    def ctrl_in(self, qp: SendQp, kind: int, psn: int, arg: int, rx_ns: int,
                int_block: bytes = b"") -> None:
        """An ACK (``EV_ACK_IN``, ``arg``: AETH syndrome | ARG_BECN for the ECN echo
        | the AETH MSN << 16,
        ``int_block`` the INT it echoes) or CNP (``EV_CNP_IN``) for ``qp`` arrived at
        ``rx_ns`` (wall): acted on now, or at its arrival plus the ACK path's delay on
        the NIC's clock (wall time plus both delays)."""
        line = qp.delay
        if line is None:
            self.act(qp, kind, psn, arg, rx_ns, int_block)
        else:
            line.hold(line.ctrl, (rx_ns + self.reply_delay_ns(qp), kind, psn, arg, int_block),
                      self.books.deadlines)

    @staticmethod
    def reply_delay_ns(qp: SendQp) -> int:
        """How long after its arrival (wall) the requester acts on an ACK or CNP for
        ``qp`` that has a delay line: the reply path's delay, on the NIC's clock."""
        return qp.plan.back_delay_emu_ns + qp.nic.fwd_ns

    def released(self, index: int, kind: int, psn: int, arg: int, release_ns: int) -> None:
        """An ACK or CNP (``ctrl_in``'s arguments) for message ``index`` that the
        compiled loop held in its control line (engine.cloop) is due at
        ``release_ns`` (wall); counted as unknown if that QP has not started."""
        qp = self.by_index[index]
        if self.knows(qp, kind):
            self.act(qp, kind, psn, arg, release_ns - qp.nic.fwd_ns, b"")
        else:
            self.books.unknown_frames += 1

    @staticmethod
    def knows(qp: SendQp, kind: int) -> bool:
        """``qp`` can act on an ACK (``EV_ACK_IN``: it has transport state) or a CNP
        (it has congestion control): it has started."""
        return (qp.gbn if kind == EV_ACK_IN else qp.cc) is not None

    def act(self, qp: SendQp, kind: int, psn: int, arg: int, t_ns: int,
            int_block: bytes) -> None:
        """The requester acts on an ACK or CNP at ``t_ns``, NIC time."""
        if kind == EV_ACK_IN:
            self.on_ack(qp, psn, arg & 0xFF, t_ns, bool(arg & ARG_BECN), int_block, arg >> 16)
        else:
            qp.cc.on_cnp(self.books.real_s(t_ns))
            self.path.sync_cc(qp)
            self.books.trace(qp, t_ns, TRACE_CNP)
            self.arm_cc_timer(qp)

    def on_ack(self, qp: SendQp, psn: int, syndrome: int, rx_ns: int, echo: bool,
               int_block: bytes, msn: int) -> None:
        books = self.books
        g = qp.gbn
        qp.echoes += echo
        t = books.real_s(rx_ns)
        una = g.acked_packets
        progress = g.on_reply(psn, syndrome, msn, t)
        if not progress:
            return
        acked = g.acked_packets
        if acked > una:
            payload = books.plan.payload_bytes
            size = qp.plan.size_bytes
            newest = acked - 1
            qp.cc.on_ack(min(acked * payload, size) - min(una * payload, size),
                         (rx_ns - qp.tx_ns[newest]) / books.scale_ns, echo,
                         decode_block(int_block) if int_block else (), t)
            self.path.sync_cc(qp)
            self.arm_cc_timer(qp)
            if echo:
                books.trace(qp, rx_ns, TRACE_ECHO)
        if g.done:
            if qp.acked_ns < 0:
                self._acked(qp, rx_ns)
            return
        if qp.idle:
            if g.next_index < g.total_packets:
                self.wake(qp, time.monotonic_ns() - qp.nic.fwd_ns)
            else:
                books.arm_rto(qp)

    def _acked(self, qp: SendQp, rx_ns: int) -> None:
        """``qp``'s message is wholly acknowledged, at ``rx_ns``."""
        books = self.books
        qp.acked_ns = rx_ns
        books.deadlines.disarm(qp)
        books.deadlines.disarm(qp.timer)
        if not qp.idle:
            qp.idle = True
            self.path.deactivate(qp)
        self.posting.acked()
