"""Selective repeat's requester (``traffic.selective_repeat`` has the responder, the
wire format and the counters), as a pure state machine.

New frames up to ``window`` beyond the oldest
unacknowledged one (at most ``WINDOW_PACKETS``, the responder's bitmap); a NAKed
PSN is marked lost and retransmitted before any new frame, unless an ACK covers it
first (a NAK naming a frame sent again already is ignored: the responder's distance
rule cannot tell a lost retransmission from one overtaken by newer frames). The retransmission timer (no progress for ``timeout_s``) marks lost the
oldest unacknowledged PSN and every PSN beyond the highest one the responder said
it holds (an ACK's MSN; a NAK implies one past its run) that was sent before the
timer started: a lost tail costs one timeout, not one per frame. A frame that
arrived is never sent again as long as the responder reports arrivals within a
timeout (coalesced ACKs plus the delayed-ACK timer do).

**Loss in time** (RACK, RFC 8985, on what an ACK says): the sender keeps the latest
send time of every outstanding PSN, and of the frames the responder reported holding
(the cumulatively acknowledged ones and the MSN's) the latest one sent. The oldest
unacknowledged PSN is missing at the responder; if a frame sent after its latest copy
was delivered, it is lost once ``reorder_s`` more than that frame's round trip has
passed since it was sent (a frame sent later arrived, and reordering delays a frame
by less than ``reorder_s``; the engine derives it from the fabric,
``traffic.reorder_bound.reorder_window_s``). The holes the responder does not NAK
(within ``reorder_packets`` of the highest PSN held, or whose retransmission was lost
again) are so recovered one per round trip as they become the oldest, not one per
timeout.

**Tail-loss probe** (TLP, RFC 8985 section 7): when every frame has been sent and
the last ones stay unacknowledged for ``PROBE_RTTS`` smoothed round trips (``srtt_s``,
from ACKs of frames sent once, RFC 6298's gain) plus ``reorder_s`` with nothing sent
after them, the frames past the highest one the responder reported holding are sent
again (with AckReq, as every retransmission): what the timer would mark, a timeout
early. The last frame asks for an ACK (LAST), so its reply is late by no more than
the reordering the window already covers: a probe before that would be spurious.
Not only the last frame (RFC 8985's probe): this transport's ACK names the highest
PSN held but not which frames below it arrived, so a reply to the last frame alone
would leave the detector in time one round trip per lost frame before it (64 frames,
the last 16 lost: done at 452 ticks, against 202 with the timer alone). A lost tail
so costs about a round trip instead of a timeout. Once per
episode: the probe is armed again only by progress, and pushed back by every
retransmission (it waits for that frame's answer too). Not when the responder already
said it holds the last frame (the detector has what it needs), nor before a
round trip was measured.

Times are passed in (seconds); nothing reads a clock. Indices never wrap; PSNs are
24-bit serial numbers, as in ``traffic.gbn``.
"""

from __future__ import annotations

from core.errors import ParameterError
from traffic.gbn import PSN_MASK, RequesterCounters, _check_count, _check_psn
from traffic.selective_repeat import (
    _TYPE_MASK,
    _WORDS,
    AETH_SR_NAK,
    MAX_NAK_RUN,
    WINDOW_PACKETS,
    _clear,
    _set,
    _test,
)

__all__ = ["PROBE_RTTS", "SrSender"]

#: The tail-loss probe fires after this many smoothed round trips (RFC 8985's PTO).
PROBE_RTTS = 2.0
#: RFC 6298's smoothing gain of the round-trip estimate.
_SRTT_GAIN = 0.125


class SrSender(RequesterCounters):
    """Requester side of one message; the interface of ``gbn.GbnSender``.

    ``take(now_s, n)`` returns a run of consecutive PSNs to send now, lost ones first;
    ``on_reply(psn, syndrome, msn, now_s)`` acts on an ACK or selective NAK as it
    came off the wire; ``advance(now_s)`` fires the timers if due. ``reorder_s``: the
    reordering window in time (default: a quarter of the timeout).
    """

    __slots__ = (
        "total_packets", "window", "timeout_s", "start_psn",
        "_una", "_nxt", "_lost_count", "_rtx", "_heard", "_timer_nxt", "_timer_start_s",
        "packets_sent", "retransmitted", "naks", "timeouts", "acks", "stale_acks", "_lost",
        "reorder_s", "_rack_s", "_rack_due_s", "rack_losses", "_sent_s", "_resent",
        "srtt_s", "_probe_due_s", "probes",
    )

    def __init__(self, total_packets: int, window: int | None = None, timeout_s: float = 1e-3,
                 start_psn: int = 0, reorder_s: float | None = None):
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
        if reorder_s is None:
            reorder_s = timeout_s / 4
        if not 0.0 <= reorder_s < float("inf"):
            raise ParameterError("reorder_s", reorder_s, "must be a non-negative finite number")
        self.reorder_s = float(reorder_s)
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
        self._rack_s = -1.0    # latest send time of a frame the responder reported holding
        self._rack_due_s: float | None = None  # when the oldest unacknowledged one is lost
        self.rack_losses = 0   # frames the time-based detector declared lost
        self._sent_s = [0.0] * WINDOW_PACKETS  # latest send time of each index (a ring)
        self._resent = [0] * _WORDS  # indices sent more than once
        self.srtt_s = 0.0      # smoothed round trip; 0: none measured yet
        self._probe_due_s: float | None = None  # when the tail-loss probe fires
        self.probes = 0        # tail-loss probes sent

    # -- state ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._una >= self.total_packets

    @property
    def acked_packets(self) -> int:
        return self._una

    @property
    def resending(self) -> bool:
        """``take`` sends frames marked lost next: they ask for an ACK (AckReq), so the
        responder reports the hole they fill at once."""
        return self._lost_count > 0

    @property
    def in_flight(self) -> int:
        """Packets sent, not acknowledged and not known lost (RFC 6675's pipe)."""
        return self._nxt - self._una - self._lost_count

    @property
    def deadline_s(self) -> float | None:
        """When ``advance`` has something to do: the timer, the time-based detector
        or the tail-loss probe."""
        due = self._rack_due_s
        probe = self._probe_due_s
        if probe is not None and (due is None or probe < due):
            due = probe
        if self._timer_start_s is None:
            return due
        rto = self._timer_start_s + self.timeout_s
        return rto if due is None or rto < due else due

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
                _set(self._resent, i + n)
                n += 1
            self._lost_count -= n
            self._rtx = i + n
            self.retransmitted += n
            if self._probe_due_s is not None:
                # A retransmission is sent too: the probe waits for its answer as for
                # the tail's (RFC 8985 arms the PTO at each transmission). Without this
                # the probe sent again a frame the detector in time had just resent.
                self._arm_probe(now_s)
        else:
            i = self._nxt
            n = min(max_count, self.total_packets - i, self.window - (i - self._una))
            if n <= 0:
                return None
            for k in range(i, i + n):
                _clear(self._resent, k)
            self._nxt = i + n
            if self._nxt == self.total_packets:
                self._arm_probe(now_s)
        if self._timer_start_s is None:
            self._arm(now_s)
        self.packets_sent += n
        sent = self._sent_s
        for k in range(i, i + n):
            sent[k % WINDOW_PACKETS] = now_s
        return (self.start_psn + i) & PSN_MASK, n

    def on_reply(self, psn: int, syndrome: int, msn: int, now_s: float | None = None) -> bool:
        """An ACK (``psn`` its cumulative PSN) or a selective NAK (``psn`` the first
        missing PSN, the run in ``syndrome``), ``msn`` the highest PSN the responder
        holds, as the AETH carried them; True if it changed anything. Go-back-N's NAK is
        not this transport's: counted stale."""
        kind = syndrome & _TYPE_MASK
        una, rack_s = self._una, self._rack_s
        if kind == 0:
            self._hear(msn, 1, True)
            changed = self.on_ack(psn, now_s)
        elif kind == AETH_SR_NAK:
            changed = self.on_nak(psn, (syndrome & (MAX_NAK_RUN - 1)) + 1, msn, now_s)
        else:
            self.stale_acks += 1
            return False
        if now_s is not None and (self._una != una or self._rack_s != rack_s):
            due, lost = self._rack_due_s, self._lost_count
            self._rack(now_s)  # a reply that only reports a later frame held may decide
            changed = changed or self._rack_due_s != due or self._lost_count != lost
        return changed

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
        ``high_psn``: they are retransmitted unless acknowledged first, or sent again
        already (the responder's distance rule says nothing of a retransmission, which
        a frame sent after it may overtake; the detector in time and the timer look
        after those)."""
        self._hear(high_psn, 1)
        first = (first_psn - self.start_psn - self._una) & PSN_MASK
        if first >= self._nxt - self._una:
            self.stale_acks += 1
            return False
        self.naks += 1
        for i in range(self._una + first, min(self._una + first + run, self._nxt)):
            if not _test(self._resent, i):
                self._mark(i)
        if now_s is not None:
            self._arm(now_s)  # the responder is alive: restart the timer
        return True

    def advance(self, now_s: float) -> bool:
        """Fire the time-based detector and the retransmission timer if due; True if
        either did. The timer's lost: the oldest unacknowledged PSN and every PSN beyond
        what the responder said it holds that was sent before the timer started (a whole
        timeout ago)."""
        due = self._rack_due_s
        fired = due is not None and now_s >= due
        if fired:
            self._rack_lost()
        probe = self._probe_due_s
        if probe is not None and now_s >= probe:
            self._probe()
            fired = True
        start = self._timer_start_s
        if start is None or now_s - start < self.timeout_s:
            return fired
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

    def _hear(self, psn: int, past: int, sent_after: bool = False) -> None:
        """The responder holds the PSN ``past - 1`` after ``psn`` (if outstanding);
        ``sent_after``: it reported it with the PSNs it lacks (an ACK: the cumulative
        PSN and the MSN of one moment, which a NAK's MSN is not), so the detector may
        compare their send times."""
        d = (psn - self.start_psn - self._una) & PSN_MASK
        if d < self._nxt - self._una:
            held = self._una + d + past - 1
            if sent_after and held < self._nxt:
                sent_s = self._sent_s[held % WINDOW_PACKETS]
                if sent_s > self._rack_s:
                    self._rack_s = sent_s
            if held + 1 > self._heard:
                self._heard = min(held + 1, self._nxt)

    def _rack(self, now_s: float) -> None:
        """The responder lacks the oldest unacknowledged PSN (it reported ``_rack_s``'s
        frame, sent later, delivered, now): when is it lost?"""
        una = self._una
        self._rack_due_s = None
        if una >= self._nxt or _test(self._lost, una):
            return
        ahead_s = self._rack_s - self._sent_s[una % WINDOW_PACKETS]
        if ahead_s > 0.0:
            self._rack_due_s = now_s + self.reorder_s - ahead_s
            if self._rack_due_s <= now_s:
                self._rack_lost()

    def _rack_lost(self) -> None:
        self._rack_due_s = None
        if self._una < self._nxt and not _test(self._lost, self._una):
            self.rack_losses += 1
            self._mark(self._una)

    def _arm_probe(self, now_s: float) -> None:
        """Every frame is sent: probe the tail if nothing is heard of it in time."""
        srtt = self.srtt_s
        self._probe_due_s = now_s + PROBE_RTTS * srtt + self.reorder_s if srtt > 0.0 else None

    def _probe(self) -> None:
        """The tail-loss probe: the frames past the highest one the responder holds,
        unless something is due anyway or it said it holds the last frame."""
        self._probe_due_s = None
        if self._una < self._nxt and not self._lost_count and self._heard < self._nxt:
            self.probes += 1
            for i in range(max(self._una, self._heard), self._nxt):
                self._mark(i)

    def _mark(self, i: int) -> None:
        if i == self._una:  # lost already: the detector has nothing more to decide
            self._rack_due_s = None
        if not _test(self._lost, i):
            _set(self._lost, i)
            self._lost_count += 1
            if i < self._rtx:
                self._rtx = i

    def _progress(self, new_una: int, now_s: float | None) -> None:
        # The latest-sent frame they acknowledge: the newest, unless some were sent again.
        sent = self._sent_s
        newest = sent[(new_una - 1) % WINDOW_PACKETS]
        if self.retransmitted:
            newest = max(sent[i % WINDOW_PACKETS] for i in range(self._una, new_una))
        if newest > self._rack_s:
            self._rack_s = newest
        last = new_una - 1
        if now_s is not None and not _test(self._resent, last):  # Karn: a frame sent once
            sample = now_s - sent[last % WINDOW_PACKETS]
            srtt = self.srtt_s
            self.srtt_s = sample if srtt <= 0.0 else srtt + _SRTT_GAIN * (sample - srtt)
        self._rack_due_s = None  # it was about the old una
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
            self._probe_due_s = None
        elif now_s is not None:
            self._arm(now_s)
            if self._nxt == self.total_packets:
                self._arm_probe(now_s)
