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
cumulative, as go-back-N's: every ``ack_coalesce`` frames delivered in order (a frame
that fills a hole delivers those it releases too), the last one, and AckReq (the
requester sets it on its retransmissions, so a repaired hole is reported at once,
while a frame that was only reordered waits for the coalesced ACK as any other: a
sprayed flow is acknowledged as often as an ordered one). **Loss is inferred at the
responder, from reordering distance**: a missing PSN is lost once a PSN
``reorder_packets`` or more beyond it has arrived (reordering displaces frames by
fewer than that); the responder then NAKs it, once, with the run of consecutive
missing PSNs it starts (at most 32). A frame reordered by less never causes a
retransmission, and since the decision is the responder's, reordered ACKs cannot
cause one either. One NAK per arriving frame at most (one that is not the next in
order): a scan frontier moves on by the run it reported, and the next such frame
continues from there.

Requester: ``traffic.sr_sender.SrSender`` (NAKed frames first, a timer, and loss
detection in time).

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

from traffic.gbn import (
    _HALF,
    ACK,
    NAK,
    NONE,
    PSN_MASK,
    Action,
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
                self._since_ack += exp - index  # it and the frames it released
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
        if not deliver or complete or ackreq or self._since_ack >= self.ack_coalesce:
            self._since_ack = 0
            self.acks_sent += 1
            return Action(deliver, ACK, self._psn(exp - 1), self._reported(), flush, 0,
                          self._psn(self._high - 1), flush_msn)
        return Action(deliver, NONE, psn, False, flush, flush_msn=flush_msn)
