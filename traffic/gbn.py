"""Go-back-N reliability of an RC queue pair, as pure state machines.

The sender numbers packets 0..total_packets-1 internally and puts
``PSN = (start_psn + index) mod 2**24`` on the wire (the 24-bit BTH PSN). The
receiver ACKs cumulatively (ACK PSN p = everything up to and including p was
delivered), coalescing ACKs to one per ``ack_coalesce`` packets plus the last
one and any packet that carries AckReq (the sender solicits an ACK); on a gap it
sends **one** NAK (sequence error) carrying the expected PSN and stays silent
until the gap is filled, like RC responders; duplicates are re-ACKed with the
latest delivered PSN. The sender goes back to the NAKed PSN, or to the oldest
unacknowledged PSN after ``timeout_s`` without progress.

ECN echo. Every ACK or NAK says whether a packet it newly acknowledges (delivered
in order since the previous ACK or NAK) arrived CE-marked (``Action.echo``). With
``ce_ack`` the receiver is DCTCP's two-state ACK machine (Alizadeh et al. 2010,
section 3.1): a delivered packet whose CE state differs from that of the packets
still waiting for their ACK first sends an ACK for those (``Action.flush``), so an
ACK's echo covers all of its packets exactly and the sender's marked fraction is
exact under coalescing.

Delayed ACK. ``ack_pending()`` ACKs what was delivered and not yet acknowledged; the
engine calls it when the first such packet has waited its ACK delay, so that a
sender whose window closed between two coalesced ACKs is not left waiting for its
retransmission timer.

PSN comparisons use serial-number arithmetic on 24 bits: a PSN is "ahead" of
another if the forward distance is below 2**23. That requires fewer than 2**23
packets in flight, so the sender's window is capped at 2**23 - 1 packets. A
message may have more than 2**24 packets (PSNs wrap); the indices never do.

Counters. ConnectX's per-QP names (``RequesterCounters``, ``ResponderCounters``):
``retransmissions``, ``packet_seq_err`` (NAKs received), ``local_ack_timeout_err``
(timer expiries); ``out_of_sequence`` (frames past a gap), ``duplicate_request``.
``traffic.selective_repeat`` keeps the same fields and names.

Times are passed in (seconds); nothing reads a clock.
"""

from __future__ import annotations

from typing import NamedTuple

from core.errors import ParameterError

__all__ = [
    "ACK",
    "NAK",
    "NONE",
    "PSN_BITS",
    "PSN_MASK",
    "Action",
    "RequesterCounters",
    "ResponderCounters",
    "GbnReceiver",
    "GbnSender",
    "psn_add",
    "psn_diff",
]

PSN_BITS = 24
PSN_MASK = (1 << PSN_BITS) - 1
_HALF = 1 << (PSN_BITS - 1)
MAX_WINDOW = _HALF - 1

# Reply kinds of the receiver.
NONE = 0
ACK = 1
NAK = 2
#: AETH syndrome bits 6:5 of a NAK (11b; 00b is an ACK); with code 0, a NAK's syndrome
#: (PSN sequence error, ``traffic.roce.AETH_NAK_PSN_SEQ``).
_NAK_TYPE = 0x60


def psn_add(psn: int, n: int) -> int:
    """``psn + n`` modulo 2**24."""
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance ``a - b`` on the 24-bit PSN circle, in [-2**23, 2**23)."""
    d = (a - b) & PSN_MASK
    return d - (1 << PSN_BITS) if d >= _HALF else d


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParameterError(name, value, f"must be an integer >= {minimum}")
    return value


def _check_psn(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= PSN_MASK:
        raise ParameterError("start_psn", value, f"must be an integer in [0, {PSN_MASK}]")
    return value


class RequesterCounters:
    """ConnectX's per-QP requester counter names over a sender's fields."""

    __slots__ = ()

    @property
    def retransmissions(self) -> int:
        return self.retransmitted  # type: ignore[attr-defined]

    @property
    def packet_seq_err(self) -> int:
        """Sequence-error NAKs received."""
        return self.naks  # type: ignore[attr-defined]

    @property
    def local_ack_timeout_err(self) -> int:
        """Retransmission timer expiries."""
        return self.timeouts  # type: ignore[attr-defined]


class ResponderCounters:
    """ConnectX's per-QP responder counter names over a receiver's fields."""

    __slots__ = ()

    @property
    def out_of_sequence(self) -> int:
        """Frames ahead of the expected PSN."""
        return self.out_of_order  # type: ignore[attr-defined]

    @property
    def duplicate_request(self) -> int:
        """Frames received again."""
        return self.duplicates  # type: ignore[attr-defined]


class GbnSender(RequesterCounters):
    """Requester side of one message: which PSN to send next.

    ``next_to_send(now_s)`` returns the PSN to transmit now (first checking the
    retransmission timer) or None when the window is full or everything is sent;
    each call that returns a PSN counts it as sent. ``take(now_s, n)`` is the same
    for a run of up to n consecutive packets. Feed ACK/NAK PSNs to
    ``on_ack``/``on_nak``; call ``advance(now_s)`` when idle so a lost tail is
    retransmitted (``deadline_s`` says when that would happen).
    """

    #: Its retransmissions ask for no ACK: the responder ACKs each in-order frame it
    #: delivers after a NAK as any other (``sr_sender.SrSender.resending`` does).
    resending = False

    __slots__ = (
        "total_packets", "window", "timeout_s", "start_psn",
        "_una", "_nxt", "_max_sent", "_timer_start_s",
        "packets_sent", "retransmitted", "naks", "timeouts", "acks", "stale_acks",
        "rack_losses", "probes",
    )

    def __init__(self, total_packets: int, window: int | None = None, timeout_s: float = 1e-3,
                 start_psn: int = 0):
        self.total_packets = _check_count("total_packets", total_packets, 1)
        if window is None:
            self.window = MAX_WINDOW
        else:
            _check_count("window", window, 1)
            if window > MAX_WINDOW:
                raise ParameterError("window", window, f"must be <= {MAX_WINDOW} (PSN space / 2)")
            self.window = window
        if not 0.0 < timeout_s < float("inf"):
            raise ParameterError("timeout_s", timeout_s, "must be a positive finite number")
        self.timeout_s = float(timeout_s)
        self.start_psn = _check_psn(start_psn)
        self._una = 0  # oldest unacknowledged index
        self._nxt = 0  # next index to (re)send
        self._max_sent = 0  # one past the highest index ever sent
        self._timer_start_s: float | None = None  # armed while packets are outstanding
        self.packets_sent = 0
        self.retransmitted = 0
        self.naks = 0
        self.timeouts = 0
        self.acks = 0
        self.stale_acks = 0
        # Selective repeat's time-based detector and tail-loss probe (`SrSender`):
        # go-back-N has neither, it learns of loss by NAK or timer alone.
        self.rack_losses = 0
        self.probes = 0

    # -- state ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Every packet was acknowledged."""
        return self._una >= self.total_packets

    @property
    def acked_packets(self) -> int:
        return self._una

    @property
    def in_flight(self) -> int:
        """Packets sent (this round) and not yet acknowledged."""
        return self._nxt - self._una

    @property
    def deadline_s(self) -> float | None:
        """When the retransmission timer fires, or None if it is not armed."""
        return None if self._timer_start_s is None else self._timer_start_s + self.timeout_s

    def psn_of(self, index: int) -> int:
        return (self.start_psn + index) & PSN_MASK

    # -- events --------------------------------------------------------------------
    def next_to_send(self, now_s: float) -> int | None:
        """The PSN to transmit now, or None (window full or all sent)."""
        run = self.take(now_s, 1)
        return None if run is None else run[0]

    @property
    def next_index(self) -> int:
        """Index of the packet ``take`` would send first (after ``advance``)."""
        return self._nxt

    def take(self, now_s: float, max_count: int) -> tuple[int, int] | None:
        """Up to ``max_count`` consecutive packets to transmit now: ``(first PSN, count)``.

        None if the window is full or everything is sent; every packet returned
        counts as sent (a retransmission if it was sent before).
        """
        if self._timer_start_s is not None and now_s - self._timer_start_s >= self.timeout_s:
            self._go_back_on_timeout(now_s)
        nxt = self._nxt
        n = min(max_count, self.total_packets - nxt, self.window - (nxt - self._una))
        if n <= 0:
            return None
        if nxt < self._max_sent:
            self.retransmitted += min(n, self._max_sent - nxt)
        self._max_sent = max(self._max_sent, nxt + n)
        if self._timer_start_s is None:
            self._timer_start_s = now_s
        self._nxt = nxt + n
        self.packets_sent += n
        return (self.start_psn + nxt) & PSN_MASK, n

    def on_ack(self, psn: int, now_s: float | None = None) -> bool:
        """Cumulative ACK of everything up to ``psn``; True if it made progress."""
        d = (psn - self.start_psn - self._una) & PSN_MASK  # forward distance from una
        if d >= self._max_sent - self._una:
            self.stale_acks += 1  # duplicate/old ACK, or nothing outstanding
            return False
        self.acks += 1
        self._progress(self._una + d + 1, now_s)
        return True

    def on_reply(self, psn: int, syndrome: int, msn: int, now_s: float | None = None) -> bool:
        """An ACK or NAK as its AETH carried it (``msn`` unused: go-back-N's ACK PSN
        says it all); True if it made progress."""
        if syndrome & _NAK_TYPE == _NAK_TYPE:
            return self.on_nak(psn, now_s)
        return self.on_ack(psn, now_s)

    def on_nak(self, psn: int, now_s: float | None = None) -> bool:
        """NAK (sequence error) expecting ``psn``: ACKs what precedes it and goes back to it."""
        d = (psn - self.start_psn - self._una) & PSN_MASK
        if d >= self._max_sent - self._una:
            self.stale_acks += 1
            return False
        self.naks += 1
        if d:
            self._progress(self._una + d, now_s)
        elif now_s is not None:
            self._timer_start_s = now_s  # the responder is alive: restart the timer
        self._nxt = self._una
        return True

    def advance(self, now_s: float) -> bool:
        """Fire the retransmission timer if due; True if it fired."""
        if self._timer_start_s is not None and now_s - self._timer_start_s >= self.timeout_s:
            self._go_back_on_timeout(now_s)
            return True
        return False

    on_timeout = advance

    # -- internals -------------------------------------------------------------------
    def _progress(self, new_una: int, now_s: float | None) -> None:
        self._una = new_una
        if self._nxt < new_una:
            self._nxt = new_una
        if new_una >= self._max_sent:
            self._timer_start_s = None  # nothing outstanding
        elif now_s is not None:
            self._timer_start_s = now_s  # restart on progress
        # (without now_s the timer keeps its start: conservative, never later)

    def _go_back_on_timeout(self, now_s: float) -> None:
        self.timeouts += 1
        self._nxt = self._una
        self._timer_start_s = now_s


class Action(NamedTuple):
    """What the receiver does with a packet: deliver it? reply ACK/NAK with ``psn``?

    ``echo``: the reply's ECN echo. ``flush``: before anything else, ACK the packets
    before this one (PSN ``psn - 1``, MSN ``flush_msn``), echoing the opposite of this
    packet's CE state (``ce_ack`` only). ``syndrome`` and ``msn``: the reply's AETH
    fields (an ACK's MSN is 1 once the message is complete), so that a responder writes
    any transport's reply (``traffic.selective_repeat`` too) from the action alone."""

    deliver: bool
    reply: int  # NONE, ACK or NAK
    psn: int  # the ACK/NAK PSN (meaningless when reply is NONE)
    echo: bool = False
    flush: bool = False
    syndrome: int = 0
    msn: int = 0
    flush_msn: int = 0


class GbnReceiver(ResponderCounters):
    """Responder side of one message (see the module docstring for the rules)."""

    __slots__ = (
        "total_packets", "ack_coalesce", "start_psn", "ce_ack",
        "_expected", "_since_ack", "_nak_outstanding", "_unreported", "_echo",
        "delivered", "duplicates", "out_of_order", "acks_sent", "naks_sent",
    )

    def __init__(self, total_packets: int, ack_coalesce: int = 1, start_psn: int = 0,
                 ce_ack: bool = False):
        self.total_packets = _check_count("total_packets", total_packets, 1)
        self.ack_coalesce = _check_count("ack_coalesce", ack_coalesce, 1)
        self.start_psn = _check_psn(start_psn)
        self.ce_ack = bool(ce_ack)
        self._expected = 0  # index of the next in-order packet
        self._since_ack = 0
        self._nak_outstanding = False
        self._unreported = 0  # delivered since the last ACK or NAK
        self._echo = False    # one of those arrived CE-marked
        self.delivered = 0
        self.duplicates = 0
        self.out_of_order = 0
        self.acks_sent = 0
        self.naks_sent = 0

    @property
    def complete(self) -> bool:
        return self._expected >= self.total_packets

    def _reported(self) -> bool:
        """The echo of a reply that acknowledges everything delivered so far."""
        echo = self._echo
        self._echo = False
        self._unreported = 0
        return echo

    @property
    def unacknowledged(self) -> int:
        """Packets delivered since the last ACK or NAK."""
        return self._unreported

    def ack_pending(self) -> Action | None:
        """The delayed ACK: ACK everything delivered so far, or None if nothing waits."""
        if not self._unreported:
            return None
        self._since_ack = 0
        self.acks_sent += 1
        return Action(False, ACK, (self.start_psn + self._expected - 1) & PSN_MASK,
                      self._reported())

    def on_packet(self, psn: int, ce: bool = False, ackreq: bool = False) -> Action:
        """A data packet with ``psn`` arrived (``ce``: CE-marked; ``ackreq``: AckReq set)."""
        exp = self._expected
        d = (psn - self.start_psn - exp) & PSN_MASK
        if d == 0 and exp < self.total_packets:
            flush = self.ce_ack and self._unreported > 0 and ce != self._echo
            if flush:  # the CE state changed: ACK the earlier packets with their state
                self._reported()
                self._since_ack = 0
                self.acks_sent += 1
            self._expected = exp + 1
            self.delivered += 1
            self._nak_outstanding = False
            self._since_ack += 1
            self._unreported += 1
            self._echo = self._echo or ce
            if self._since_ack >= self.ack_coalesce or exp + 1 == self.total_packets or ackreq:
                self._since_ack = 0
                self.acks_sent += 1
                return Action(True, ACK, psn, self._reported(), flush, 0,
                              int(exp + 1 == self.total_packets))
            return Action(True, NONE, psn, False, flush)
        if 0 < d < _HALF and exp + d < self.total_packets:
            # Ahead of the expected PSN: a gap. NAK once, then stay quiet.
            self.out_of_order += 1
            if self._nak_outstanding:
                return Action(False, NONE, 0)
            self._nak_outstanding = True
            self.naks_sent += 1
            return Action(False, NAK, (self.start_psn + exp) & PSN_MASK, self._reported(),
                          False, _NAK_TYPE)
        # Behind (already delivered) or outside the message: re-ACK the latest delivered.
        self.duplicates += 1
        self._since_ack = 0
        self.acks_sent += 1
        return Action(False, ACK, (self.start_psn + exp - 1) & PSN_MASK, self._reported(),
                      False, 0, int(self.complete))
