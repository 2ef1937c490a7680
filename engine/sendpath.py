"""The send path: serving a NIC's pacing slot (``SendPath``), in Python.

A NIC's slot fires (``sources.Nic``); its send path sends every frame of the NIC due
within a turn, QP by QP in slot order: go-back-N (``traffic.gbn``) picks the PSNs,
the QP's congestion control gives the rate and window, both schedules
(``traffic.pacing.Schedule``, the QP's and the NIC's) book the burst, and the burst
goes to the fabric (``engine.handover``) or, for a QP whose path delay is longer
than its NIC clock's, into its delay line. Then the NIC's deadline is re-armed at
its next slot, or its busy period closes (the rate check, engine.worker's
docstring, "Pacing").

``SendPath`` is the interface the worker uses, and the Python implementation of it,
for machines without a compiler; ``engine.csend.CompiledSendPath`` runs the same
loop in C (csrc/roce_tx.c). Both see the same state: QPs' go-back-N and schedules,
NICs' schedules and books.
"""

from __future__ import annotations

from array import array
from typing import Any

from core.frame import WIRE_OVERHEAD_BYTES
from engine.books import Books
from engine.burst import MAX_BURST
from engine.handover import Handover
from engine.sources import MAX_CATCHUP_NS, Nic, SendQp
from traffic.transport import new_sender


def fresh_transport(plan: Any, n_packets: int) -> tuple[Any, array]:
    """A message's sender, go-back-N or selective repeat as ``plan`` says, and the send
    times of its ``n_packets`` packets, both fresh."""
    return (new_sender(plan.transport, n_packets, plan.rto_s, plan.reorder_s, plan.window),
            array("q", bytes(8 * n_packets)))


class SendPath:
    """Sends what a NIC owes (``service``) and keeps its busy QPs."""

    def __init__(self, books: Books, out: Handover):
        self.books = books
        self.out = out

    # -- the interface ---------------------------------------------------------------
    def service(self, nic: Nic, now: int) -> None:
        """Send every frame of ``nic`` due within a turn of ``now`` (NIC time); re-arm
        its deadline."""
        if nic.backlog and not self.out.flush_backlog(nic):
            self.books.arm_nic(nic, now + nic.fwd_ns + int(nic.ns_per_bit * 8 * 1500))
            return
        self._serve(nic, now)

    def start_clock(self, t0_ns: int) -> None:
        """The run starts at ``t0_ns`` (``books.t0_ns`` is set)."""

    def begin(self, qp: SendQp, now: int) -> None:
        """``qp`` was started at ``now`` (NIC time), its CC made: its transport's sender
        (``qp.gbn``) and the send times of its packets (``qp.tx_ns``)."""
        qp.gbn, qp.tx_ns = fresh_transport(self.books.plan, qp.n)

    def sync_cc(self, qp: SendQp) -> None:
        """Take in what ``qp``'s algorithm now says (after any of its events)."""

    def activate(self, qp: SendQp) -> None:
        """``qp`` joins its NIC's busy QPs."""
        qp.nic.qps.append(qp)

    def busy(self, nic: Nic) -> bool:
        """``nic`` has QPs with frames to send."""
        return nic.qps != []

    def deactivate(self, qp: SendQp) -> None:
        """``qp`` leaves its NIC's busy QPs."""
        qp.nic.qps.remove(qp)

    def end_period(self, nic: Nic) -> None:
        """``nic`` has nothing left to send: its busy period joins its totals if it lasted
        a rate period (shorter ones are wake-up lag; roce_tx.c's tx_close_period is the
        compiled twin)."""
        if nic.period_start < 0:
            return
        ideal = nic.ideal_end - nic.period_dropped - nic.period_start
        if ideal >= nic.rate_period_ns:
            nic.busy_ns += nic.actual_end - nic.period_first_out
            nic.ideal_ns += ideal
        nic.dropped += nic.period_dropped
        nic.period_start = -1

    def finish(self) -> None:
        """The run is over: what this path counted joins the books and the QPs."""

    # -- Python ----------------------------------------------------------------------
    def _serve(self, nic: Nic, now: int) -> None:
        books = self.books
        qps = nic.qps
        horizon = now + books.turn_ns
        while qps:
            best = qps[0]
            for qp in qps:
                if qp.sched.next_ns < best.sched.next_ns:
                    best = qp
            sched = best.sched.next_ns if best.sched.next_ns > nic.sched.next_ns \
                else nic.sched.next_ns
            if sched > horizon:
                books.arm_nic(nic, sched + nic.fwd_ns)
                return
            sent = self._burst(nic, best, now, sched)
            if sent is None:  # window full or everything sent: wait for ACKs or the RTO
                best.idle = True
                qps.remove(best)
                books.arm_rto(best)
                continue
            if sent:  # the NIC queue is full: the hand-over kept the rest
                return
        self.end_period(nic)

    def _burst(self, nic: Nic, best: SendQp, now: int, sched: int) -> bool | None:
        """Send ``best``'s burst due at ``sched``: None if it has nothing it may send,
        True if the NIC's queue refused part of it."""
        books = self.books
        scale_ns = books.scale_ns
        lag = now - sched
        g = best.gbn
        cc = best.cc
        t_real = (now - books.t0_ns) / scale_ns
        # The timer first: a timeout goes back to una, and the frame's shape (first,
        # middle, last) and send-time slot follow the index sent.
        g.advance(t_real)
        index = g.next_index  # start PSN 0 and < 2**24 packets: the PSN is the index
        last_index = best.n - 1
        if 0 < index < last_index:
            shape, bits, limit = best.middle, best.mid_bits, last_index - index
        elif index == 0:
            shape, bits, limit = best.first, best.bits[0], 1
        else:
            shape, bits, limit = best.last, best.bits[2], 1
        rate, window = books.pace_of(cc)
        interval = int(bits * scale_ns / rate)
        line = int(bits * nic.ns_per_bit)
        step = interval if interval > line else line
        # A late sender alone on its NIC catches up in one burst (the port's
        # shaper bucket absorbs it); no burst reaches past the next slot: the
        # bucket would let its frames onto the wire early.
        due = 1 + lag // step if len(nic.qps) == 1 and 0 < lag < MAX_CATCHUP_NS else 1
        allowed = 0
        if window is not None:  # payload bytes in flight; one frame at least
            allowed = max(1, int(window // books.plan.payload_bytes))
            due = min(due, allowed - g.in_flight)
        resend = g.resending
        run = g.take(t_real, min(due, limit, MAX_BURST)) if due > 0 else None
        if run is None:
            return None
        psn, n = run
        # The frame that fills the window asks for an ACK (AckReq): coalesced
        # ACKs would otherwise hold it shut until the retransmission timer; so does
        # selective repeat's retransmission, for the hole it fills.
        solicit = window is not None and g.in_flight >= allowed or resend
        if not best.line_ns:  # on the fabric now: its slot plus the NIC clock's delay
            books.book_lags(lag, n, step)
            sent = self.out.hand_over(nic, shape, psn, n, now + nic.fwd_ns, now, solicit)
        else:  # the lags are booked when the line hands the burst over
            delay = best.delay
            delay.hold(delay.frames,  # type: ignore[union-attr]
                       (now + best.plan.fwd_delay_emu_ns, shape, psn, n, lag, step, solicit),
                       books.deadlines)
            sent = n
        best.tx_ns[index:index + n] = array("q", [now]) * n
        self._book(nic, best, now, sched, n, interval, line)
        sent_bytes = n * ((bits >> 3) - WIRE_OVERHEAD_BYTES)
        cc.on_send(sent_bytes, t_real)
        best.bytes_sent += sent_bytes
        nic.bits_sent += n * bits
        if best.first_tx_ns < 0:
            best.first_tx_ns = now
        best.last_tx_ns = now
        books.data_sent += n
        if now >= best.next_trace_ns:
            books.trace(best, now)
        return sent < n

    @staticmethod
    def _book(nic: Nic, best: SendQp, now: int, sched: int, n: int, interval: int,
              line: int) -> None:
        """Both schedules and the NIC's busy period book ``n`` frames sent at ``now``
        for slot ``sched``."""
        dropped = best.sched.dropped_ns + nic.sched.dropped_ns
        # Both schedules are judged from the frame's actual slot: the one that was
        # not binding (a NIC under a slower CC pace, a QP waiting for its NIC) did
        # not fall behind, it had nothing to send.
        best.sched.restart(sched)
        nic.sched.restart(sched)
        best.sched.sent(now, n, interval)
        nic.sched.sent(now, n, line)
        dropped = best.sched.dropped_ns + nic.sched.dropped_ns - dropped
        if nic.period_start < 0:
            # A busy period starts: its first frame's wait (and any debt dropped
            # for it) is wake-up lag, judged by the lag checks, not the rate.
            nic.period_start = sched
            nic.period_first_out = now
            nic.period_dropped = 0
        else:
            nic.period_dropped += dropped
        step = interval if interval > line else line
        end = sched + n * step
        if end > nic.ideal_end:
            nic.ideal_end = end
        end = now + n * line if now + n * line > end else end
        if end > nic.actual_end:
            nic.actual_end = end
