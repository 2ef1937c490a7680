"""Selective-repeat reliability of an RC queue pair, as pure state machines.

The transport of a fabric that reorders by design (packet spraying, adaptive
routing): like IRN (Mittal et al., SIGCOMM 2018) and Ultra Ethernet's transport,
the responder places every frame of its window on arrival, whatever the order,
keeps a bitmap of what it holds, and names the frames it misses; the requester
retransmits those frames only. Go-back-N (``traffic.gbn``) turns every
out-of-order frame into a NAK and a window of retransmissions instead.

Responder (``SrReceiver``). A bitmap of ``WINDOW_PACKETS`` PSNs from the expected
one (a ring: bit ``index mod WINDOW_PACKETS``). A frame in the window is accepted
once (``delivered``); ahead of the expected PSN it counts as ``out_of_sequence``,
a second copy as ``duplicate_request`` (ConnectX's responder counters). ACKs are
cumulative, as go-back-N's: every ``ack_coalesce`` in-order frames, the last one,
AckReq, and at once when a frame fills a hole. **Loss is inferred at the
responder, from reordering distance**: a missing PSN is lost once a PSN
``reorder_packets`` or more beyond it has arrived (reordering displaces frames by
fewer than that); the responder then NAKs it, once, with the run of consecutive
missing PSNs it starts (at most 32). A frame reordered by less never causes a
retransmission, and since the decision is the responder's, reordered ACKs cannot
cause one either. One NAK per arriving frame at most (one that is not the next in
order): a scan frontier moves on by the run it reported, and the next such frame
continues from there.

Requester (``SrSender``). New frames up to ``window`` beyond the oldest
unacknowledged one (at most ``WINDOW_PACKETS``, the responder's bitmap); a NAKed
PSN is marked lost and retransmitted before any new frame, unless an ACK covers it
first. The retransmission timer (no progress for ``timeout_s``) marks lost the
oldest unacknowledged PSN and every PSN beyond the highest one the responder said
it holds (an ACK's MSN; a NAK implies one past its run) that was sent before the
timer started: a lost tail costs one timeout, not one per frame. A frame that
arrived is never sent again as long as the responder reports arrivals within a
timeout (coalesced ACKs plus the delayed-ACK timer do). A hole no NAK named
(within ``reorder_packets`` of the highest PSN held) waits for the timer as the
oldest unacknowledged PSN.

Wire format (``traffic.roce``: an ACKNOWLEDGE frame, BTH + AETH, 62 bytes, that
Scapy's ``scapy.contrib.roce`` decodes as it stands)::

    ACK            BTH PSN = last PSN delivered in order   AETH syndrome 0x00
                                                            AETH MSN = highest PSN received
    selective NAK  BTH PSN = first missing PSN of a run     AETH syndrome 0x40 | (run - 1)
                                                            AETH MSN = highest PSN received

Syndrome type 10b is the one IBTA leaves reserved (00b ACK, 01b RNR NAK, 11b NAK); its
5-bit value carries the run length as an ACK's carries credits. The MSN field (go-back-N:
1 once the message is complete) carries the highest PSN held, the other half of IRN's
NACK beside the PSN that triggered it. BECN is an ACK's ECN echo; a NAK reports a loss
only (no echo, and the cumulative ACK it leaves pending follows as usual).

Counters, ConnectX names where they exist (both transports): requester
``retransmissions``, ``packet_seq_err`` (sequence-error NAKs received),
``local_ack_timeout_err`` (timer expiries); responder ``out_of_sequence``,
``duplicate_request``, over the same fields as go-back-N's. PSNs are 24-bit serial
numbers and indices never wrap, as in ``traffic.gbn``.
Times are passed in (seconds); nothing reads a clock.
"""

from __future__ import annotations

from core.errors import ParameterError
from traffic.gbn import (
    _HALF,
    ACK,
    NAK,
    NONE,
    PSN_MASK,
    Action,
    RequesterCounters,
    ResponderCounters,
    _check_count,
    _check_psn,
)

__all__ = [
    "AETH_SR_NAK",
    "MAX_NAK_RUN",
    "REORDER_PACKETS",
    "WINDOW_PACKETS",
    "SrReceiver",
    "SrSender",
    "nak_syndrome",
]

#: The responder's bitmap: PSNs it can hold ahead of the expected one, and the
#: requester's largest window. 1024 full frames are 4 MiB, several BDPs of any
#: fabric here; engine/csrc/roce_rx.c and roce_tx.c hold the same ring.
WINDOW_PACKETS = 1024
_WORDS = WINDOW_PACKETS // 64
#: Default reordering tolerance: PSNs beyond a hole that must arrive before it is lost.
REORDER_PACKETS = 16
#: The longest run one selective NAK names (the AETH syndrome's 5-bit value + 1).
MAX_NAK_RUN = 32
#: AETH syndrome of a selective NAK: type 10b (IBTA reserved), low 5 bits run - 1.
AETH_SR_NAK = 0x40
_TYPE_MASK = 0x60


def nak_syndrome(run: int) -> int:
    """The AETH syndrome of a selective NAK naming ``run`` consecutive PSNs."""
    return AETH_SR_NAK | (run - 1)


def _test(bits: object, index: int) -> int:
    slot = index % WINDOW_PACKETS
    return bits[slot >> 6] >> (slot & 63) & 1  # type: ignore[index]


def _set(bits: object, index: int) -> None:
    slot = index % WINDOW_PACKETS
    bits[slot >> 6] |= 1 << (slot & 63)  # type: ignore[index]


def _clear(bits: object, index: int) -> None:
    slot = index % WINDOW_PACKETS
    bits[slot >> 6] &= ~(1 << (slot & 63)) & 0xFFFF_FFFF_FFFF_FFFF  # type: ignore[index]


class SrSender(RequesterCounters):
    """Requester side of one message; the interface of ``gbn.GbnSender``.

    ``take(now_s, n)`` returns a run of consecutive PSNs to send now, lost ones first;
    ``on_reply(psn, syndrome, msn, now_s)`` acts on an ACK or selective NAK as it
    came off the wire; ``advance(now_s)`` fires the timer if due.
    """

    __slots__ = (
        "total_packets", "window", "timeout_s", "start_psn",
        "_una", "_nxt", "_lost_count", "_rtx", "_heard", "_timer_nxt", "_timer_start_s",
        "packets_sent", "retransmitted", "naks", "timeouts", "acks", "stale_acks", "_lost",
    )

    def __init__(self, total_packets: int, window: int | None = None, timeout_s: float = 1e-3,
                 start_psn: int = 0):
        self.total_packets = _check_count("total_packets", total_packets, 1)
        if window is None:
            self.window = WINDOW_PACKETS
        else:
            _check_count("window", window, 1)
            if window > WINDOW_PACKETS:
                raise ParameterError("window", window,
                                     f"must be <= {WINDOW_PACKETS} (the responder's bitmap)")
            self.window = window
        if not 0.0 < timeout_s < float("inf"):
            raise ParameterError("timeout_s", timeout_s, "must be a positive finite number")
        self.timeout_s = float(timeout_s)
        self.start_psn = _check_psn(start_psn)
        self._una = 0          # oldest unacknowledged index
        self._nxt = 0          # next new index; everything below was sent
        self._lost_count = 0   # indices marked lost, not yet retransmitted
        self._rtx = 0          # no index below this one is marked lost
        self._heard = 0        # one past the highest index the responder said it holds
        self._timer_nxt = 0    # indices below it were sent when the timer last started
        self._timer_start_s: float | None = None
        self.packets_sent = 0
        self.retransmitted = 0
        self.naks = 0
        self.timeouts = 0
        self.acks = 0
        self.stale_acks = 0
        self._lost = [0] * _WORDS

    # -- state ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._una >= self.total_packets

    @property
    def acked_packets(self) -> int:
        return self._una

    @property
    def in_flight(self) -> int:
        """Packets sent, not acknowledged and not known lost (RFC 6675's pipe)."""
        return self._nxt - self._una - self._lost_count

    @property
    def deadline_s(self) -> float | None:
        return None if self._timer_start_s is None else self._timer_start_s + self.timeout_s

    def psn_of(self, index: int) -> int:
        return (self.start_psn + index) & PSN_MASK

    @property
    def next_index(self) -> int:
        """Index of the packet ``take`` would send first: the oldest lost one, else new."""
        if not self._lost_count:
            return self._nxt
        i = self._rtx
        while not _test(self._lost, i):
            i += 1
        return i

    # -- events --------------------------------------------------------------------
    def next_to_send(self, now_s: float) -> int | None:
        run = self.take(now_s, 1)
        return None if run is None else run[0]

    def take(self, now_s: float, max_count: int) -> tuple[int, int] | None:
        """Up to ``max_count`` consecutive packets to send now: ``(first PSN, count)``;
        the oldest run of lost ones if any, else new ones within the window."""
        self.advance(now_s)
        if self._lost_count:
            i = self.next_index
            n = 0
            while n < max_count and i + n < self._nxt and _test(self._lost, i + n):
                _clear(self._lost, i + n)
                n += 1
            self._lost_count -= n
            self._rtx = i + n
            self.retransmitted += n
        else:
            i = self._nxt
            n = min(max_count, self.total_packets - i, self.window - (i - self._una))
            if n <= 0:
                return None
            self._nxt = i + n
        if self._timer_start_s is None:
            self._arm(now_s)
        self.packets_sent += n
        return (self.start_psn + i) & PSN_MASK, n

    def on_reply(self, psn: int, syndrome: int, msn: int, now_s: float | None = None) -> bool:
        """An ACK (``psn`` its cumulative PSN) or a selective NAK (``psn`` the first
        missing PSN, the run in ``syndrome``), ``msn`` the highest PSN the responder
        holds, as the AETH carried them; True if it changed anything. Go-back-N's NAK is
        not this transport's: counted stale."""
        kind = syndrome & _TYPE_MASK
        if kind == 0:
            self._hear(msn, 1)
            return self.on_ack(psn, now_s)
        if kind == AETH_SR_NAK:
            return self.on_nak(psn, (syndrome & (MAX_NAK_RUN - 1)) + 1, msn, now_s)
        self.stale_acks += 1
        return False

    def on_ack(self, psn: int, now_s: float | None = None) -> bool:
        """Cumulative ACK of everything up to ``psn``; True if it made progress."""
        d = (psn - self.start_psn - self._una) & PSN_MASK
        if d >= self._nxt - self._una:
            self.stale_acks += 1
            return False
        self.acks += 1
        self._progress(self._una + d + 1, now_s)
        return True

    def on_nak(self, first_psn: int, run: int, high_psn: int, now_s: float | None = None
               ) -> bool:
        """Selective NAK of ``run`` PSNs from ``first_psn`` from a responder holding
        ``high_psn``: they are retransmitted unless acknowledged first."""
        self._hear(high_psn, 1)
        first = (first_psn - self.start_psn - self._una) & PSN_MASK
        if first >= self._nxt - self._una:
            self.stale_acks += 1
            return False
        self.naks += 1
        for i in range(self._una + first, min(self._una + first + run, self._nxt)):
            self._mark(i)
        if now_s is not None:
            self._arm(now_s)  # the responder is alive: restart the timer
        return True

    def advance(self, now_s: float) -> bool:
        """Fire the retransmission timer if due. Lost: the oldest unacknowledged PSN and
        every PSN beyond what the responder said it holds that was sent before the timer
        started (a whole timeout ago)."""
        start = self._timer_start_s
        if start is None or now_s - start < self.timeout_s:
            return False
        self.timeouts += 1
        una = self._una
        if una < self._nxt:
            self._mark(una)
        for i in range(max(una + 1, self._heard), self._timer_nxt):
            self._mark(i)
        self._arm(now_s)
        return True

    on_timeout = advance

    # -- internals -------------------------------------------------------------------
    def _arm(self, now_s: float) -> None:
        self._timer_start_s = now_s
        self._timer_nxt = self._nxt

    def _hear(self, psn: int, past: int) -> None:
        """The responder holds the PSN ``past - 1`` after ``psn`` (if outstanding)."""
        d = (psn - self.start_psn - self._una) & PSN_MASK
        if d < self._nxt - self._una and self._una + d + past > self._heard:
            self._heard = min(self._una + d + past, self._nxt)

    def _mark(self, i: int) -> None:
        if not _test(self._lost, i):
            _set(self._lost, i)
            self._lost_count += 1
            if i < self._rtx:
                self._rtx = i

    def _progress(self, new_una: int, now_s: float | None) -> None:
        if self._lost_count:  # acknowledged before their retransmission: not lost
            for i in range(max(self._una, self._rtx), new_una):
                if _test(self._lost, i):
                    _clear(self._lost, i)
                    self._lost_count -= 1
        self._una = new_una
        if self._rtx < new_una:
            self._rtx = new_una
        if new_una >= self._nxt:
            self._timer_start_s = None
        elif now_s is not None:
            self._arm(now_s)


class SrReceiver(ResponderCounters):
    """Responder side of one message (see the module docstring for the rules)."""

    __slots__ = (
        "total_packets", "ack_coalesce", "start_psn", "ce_ack", "reorder_packets",
        "_expected", "_since_ack", "_unreported", "_echo", "_high", "_nak_scan", "_acked",
        "_got",
        "delivered", "duplicates", "out_of_order", "beyond_window", "acks_sent", "naks_sent",
    )

    def __init__(self, total_packets: int, ack_coalesce: int = 1, start_psn: int = 0,
                 ce_ack: bool = False, reorder_packets: int = REORDER_PACKETS):
        self.total_packets = _check_count("total_packets", total_packets, 1)
        self.ack_coalesce = _check_count("ack_coalesce", ack_coalesce, 1)
        self.start_psn = _check_psn(start_psn)
        self.ce_ack = bool(ce_ack)
        self.reorder_packets = _check_count("reorder_packets", reorder_packets, 1)
        self._expected = 0   # the oldest index not received
        self._since_ack = 0
        self._unreported = 0
        self._echo = False
        self._high = 0       # one past the highest index received
        self._nak_scan = 0   # holes below it were NAKed (or were not holes)
        self._acked = 0      # the expected index the last ACK reported
        self._got = [0] * _WORDS  # received indices above the expected one
        self.delivered = 0
        self.duplicates = 0
        self.out_of_order = 0
        self.beyond_window = 0
        self.acks_sent = 0
        self.naks_sent = 0

    @property
    def complete(self) -> bool:
        return self._expected >= self.total_packets

    @property
    def unacknowledged(self) -> int:
        return self._unreported

    def _reported(self) -> bool:
        """The echo of an ACK reporting everything delivered so far."""
        echo = self._echo
        self._echo = False
        self._unreported = 0
        self._acked = self._expected
        return echo

    def _psn(self, index: int) -> int:
        return (self.start_psn + index) & PSN_MASK

    def ack_pending(self) -> Action | None:
        """The delayed ACK of everything delivered in order, or None if nothing waits."""
        if not self._unreported:
            return None
        self._since_ack = 0
        self.acks_sent += 1
        return Action(False, ACK, self._psn(self._expected - 1), self._reported(), False, 0,
                      self._psn(self._high - 1))

    def _hole(self) -> tuple[int, int] | None:
        """The next run of missing indices that reordering cannot explain: (first, run)."""
        limit = self._high - self.reorder_packets
        i = max(self._nak_scan, self._expected)
        while i < limit and (i != self._expected and _test(self._got, i)):
            i += 1
        if i >= limit:
            self._nak_scan = max(self._nak_scan, limit)
            return None
        run = 1
        while run < MAX_NAK_RUN and i + run < limit and not _test(self._got, i + run):
            run += 1
        self._nak_scan = i + run
        return i, run

    def on_packet(self, psn: int, ce: bool = False, ackreq: bool = False) -> Action:
        """A data packet with ``psn`` arrived (``ce``: CE-marked; ``ackreq``: AckReq set)."""
        exp = self._expected
        d = (psn - self.start_psn - exp) & PSN_MASK
        deliver = flush = False
        fill = False
        flush_msn = 0
        if d >= _HALF or exp + d >= self.total_packets:
            self.duplicates += 1  # behind the expected PSN, or outside the message
        elif d >= WINDOW_PACKETS:
            self.beyond_window += 1
        elif d and _test(self._got, exp + d):
            self.duplicates += 1
        else:
            deliver = True
            index = exp + d
            if d == 0:
                flush = self.ce_ack and self._unreported > 0 and ce != self._echo
                if flush:  # it reports the highest PSN held before this frame
                    flush_msn = self._psn(self._high - 1)
                    self._reported()
                    self._since_ack = 0
                    self.acks_sent += 1
                exp += 1
                while exp < self._high and _test(self._got, exp):
                    _clear(self._got, exp)
                    exp += 1
                fill = exp > index + 1
                self._since_ack += 1  # (a frame that fills a hole is ACKed at once)
                self._expected = exp
            else:
                _set(self._got, index)
                self.out_of_order += 1
            if index + 1 > self._high:
                self._high = index + 1
            self.delivered += 1
            self._unreported += 1
            self._echo = self._echo or ce
        # Only a frame that is not the next in order can reveal a loss: its successor
        # moved the highest PSN held (or the scan resumes after a run cut at 32).
        hole = None if deliver and d == 0 else self._hole()
        if hole is not None:  # a loss report only: the ACK's duties stay pending
            first, run = hole
            self.naks_sent += 1
            if self._acked == exp:  # it reports every arrival: none waits for a delayed ACK
                self._unreported = 0
            return Action(deliver, NAK, self._psn(first), False, flush, nak_syndrome(run),
                          self._psn(self._high - 1), flush_msn)
        complete = exp >= self.total_packets
        if not deliver or fill or complete or ackreq or self._since_ack >= self.ack_coalesce:
            self._since_ack = 0
            self.acks_sent += 1
            return Action(deliver, ACK, self._psn(exp - 1), self._reported(), flush, 0,
                          self._psn(self._high - 1), flush_msn)
        return Action(deliver, NONE, psn, False, flush, flush_msn=flush_msn)
