"""Selective repeat (traffic.selective_repeat) against go-back-N on the same reordered
and lossy paths: a discrete-time harness with one frame per tick, per-transmission
delays (the reordering) and drops (the losses)."""

from __future__ import annotations

import heapq
import random
import sys
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scapy.contrib.roce import AETH, BTH
from scapy.layers.l2 import Ether

from core.errors import ParameterError
from traffic import gbn
from traffic.roce import (
    AETH_ACK,
    AETH_NAK_PSN_SEQ,
    Flow,
    ResponderTemplate,
    ack_packet,
    parse_frame,
)
from traffic.selective_repeat import (
    AETH_SR_NAK,
    MAX_NAK_RUN,
    WINDOW_PACKETS,
    SrReceiver,
    nak_syndrome,
)
from traffic.sr_sender import SrSender

BASE_TICKS = 5.0          # one-way delay of an undisplaced frame or reply
ACK_DELAY_TICKS = 2.0     # the responder's delayed-ACK timer (engine: ack_delay_s)
ACK_JITTER_TICKS = 30.0   # the most a reply is delayed beyond BASE_TICKS


@dataclass
class Outcome:
    sent: list[int] = field(default_factory=list)      # index of every transmission
    dropped: list[int] = field(default_factory=list)   # index of every dropped one
    retransmitted_lost_only: bool = True
    accepted: list[int] = field(default_factory=list)  # indices the receiver placed
    sender: object = None
    receiver: object = None


def run(transport: str, total: int, jitter: list[float], drops: frozenset[int],
        ack_jitter: list[float] | None = None, reorder: int = 8, window: int = 64,
        coalesce: int = 1, start_psn: int = 0, timeout_ticks: float = 200.0,
        max_ticks: int = 200_000, reorder_ticks: float | None = None) -> Outcome:
    """Send a ``total``-frame message one frame per tick; transmission k is delayed
    ``BASE_TICKS + jitter[k % len]`` and dropped if k is in ``drops``; replies are
    delayed ``BASE_TICKS + ack_jitter[...]`` (none: in order) and never lost; a frame
    the responder holds back for coalescing is ACKed after ``ACK_DELAY_TICKS``. The
    sender's reordering window in time (``reorder_ticks``) is by default what the
    engine derives: the data path's reordering, the reply path's and the ACK delay."""
    if reorder_ticks is None:
        reorder_ticks = reorder + ACK_JITTER_TICKS + ACK_DELAY_TICKS
    if transport == "sr":
        snd: object = SrSender(total, window, timeout_ticks, start_psn, reorder_ticks)
        rcv: object = SrReceiver(total, coalesce, start_psn, reorder_packets=reorder)
    else:
        snd = gbn.GbnSender(total, window, timeout_ticks, start_psn)
        rcv = gbn.GbnReceiver(total, coalesce, start_psn)
    out = Outcome(sender=snd, receiver=rcv)
    events: list[tuple[float, int, str, tuple]] = []
    seq = 0
    losses: dict[int, int] = {}   # index -> transmissions of it lost so far
    n_replies = 0
    for tick in range(max_ticks):
        now = float(tick)
        while events and events[0][0] <= now:
            _, _, kind, body = heapq.heappop(events)
            if kind == "data":
                action = rcv.on_packet(*body)
                if action.deliver:
                    out.accepted.append((body[0] - start_psn) & gbn.PSN_MASK)
                if action.reply == gbn.NONE:
                    if action.deliver and rcv.unacknowledged == 1:  # the delayed ACK
                        seq += 1
                        heapq.heappush(events, (now + ACK_DELAY_TICKS, seq, "delack", ()))
                    continue
                if transport == "sr":
                    reply = (action.psn, action.syndrome, action.msn)
                else:
                    reply = (action.psn, AETH_ACK if action.reply == gbn.ACK
                             else AETH_NAK_PSN_SEQ, 0)
            elif kind == "delack":
                action = rcv.ack_pending()
                if action is None:
                    continue
                reply = (action.psn, AETH_ACK, action.msn)
            else:
                snd.on_reply(*body, now)
                continue
            delay = BASE_TICKS + (ack_jitter[n_replies % len(ack_jitter)]
                                  if ack_jitter else 0.0)
            n_replies += 1
            seq += 1
            heapq.heappush(events, (now + delay, seq, "reply", reply))
        if snd.done:
            return out
        snd.advance(now)  # the timers first, as the engine's senders do
        solicit = snd.resending  # a retransmission asks for an ACK
        run_ = snd.take(now, 1)
        if run_ is None:
            continue
        index = (run_[0] - start_psn) & gbn.PSN_MASK
        solicit = solicit or index == total - 1  # and a message's last frame (LAST)
        k = len(out.sent)
        if index in out.sent and losses.get(index, 0) < out.sent.count(index):
            out.retransmitted_lost_only = False   # an earlier copy was not lost
        out.sent.append(index)
        if k in drops:
            out.dropped.append(index)
            losses[index] = losses.get(index, 0) + 1
            continue
        seq += 1
        heapq.heappush(events, (now + BASE_TICKS + jitter[k % len(jitter)], seq, "data",
                                ((start_psn + index) & gbn.PSN_MASK, False, solicit)))
    raise AssertionError(f"{transport}: not done after {max_ticks} ticks")


_totals = st.integers(1, 300)
_reorder = st.integers(1, 12)


@st.composite
def _path(draw: st.DrawFn, lossy: bool) -> tuple:
    total = draw(_totals)
    reorder = draw(_reorder)
    # A frame is displaced by fewer than `reorder` frames sent after it: its extra delay
    # is below `reorder` ticks, one frame per tick.
    jitter = draw(st.lists(st.floats(0.0, reorder - 0.01), min_size=1, max_size=64))
    ack_jitter = draw(st.none() | st.lists(st.floats(0.0, ACK_JITTER_TICKS), min_size=1,
                                           max_size=64))
    drops = draw(st.frozensets(st.integers(0, 3 * total), max_size=max(1, total // 4))
                 if lossy else st.just(frozenset()))
    start = draw(st.sampled_from([0, 5, gbn.PSN_MASK - 40]))
    window = draw(st.integers(reorder + 1, 200))
    coalesce = draw(st.integers(1, 4))
    return total, jitter, ack_jitter, drops, reorder, start, window, coalesce


def _check_exactly_once(out: Outcome, total: int) -> None:
    assert sorted(out.accepted) == list(range(total))   # every frame placed, once
    assert out.receiver.complete


@settings(max_examples=150, deadline=None)
@given(_path(lossy=True))
# The last frame lost, resent by the detector in time, then by a probe armed before
# that retransmission, whose ACK the 13-tick ACK jitter held back.
@example((73, [0.0], [13.0, 0.0, 0.0], frozenset([75, 0, 1, 2, 66]), 1, 0, 10, 1))
def test_sr_delivers_everything_once_and_retransmits_only_what_was_lost(path):
    total, jitter, ack_jitter, drops, reorder, start, window, coalesce = path
    out = run("sr", total, jitter, drops, ack_jitter, reorder, window, coalesce, start)
    _check_exactly_once(out, total)
    assert out.retransmitted_lost_only
    # Every lost transmission was sent again, once: nothing else was.
    assert out.sender.retransmissions == len(out.dropped)
    assert out.receiver.duplicate_request == 0


@settings(max_examples=150, deadline=None)
@given(_path(lossy=False))
def test_sr_retransmits_nothing_when_frames_are_only_reordered(path):
    total, jitter, ack_jitter, _, reorder, start, window, coalesce = path
    out = run("sr", total, jitter, frozenset(), ack_jitter, reorder, window, coalesce, start)
    _check_exactly_once(out, total)
    assert out.sender.retransmissions == 0
    assert out.sender.local_ack_timeout_err == 0
    assert out.sender.packet_seq_err == 0
    assert out.receiver.duplicate_request == 0
    assert out.sender.packets_sent == total


@settings(max_examples=100, deadline=None)
@given(_path(lossy=False))
def test_gbn_retransmits_on_the_same_reordering_whenever_a_frame_came_out_of_order(path):
    """In-order replies: go-back-N's receiver NAKs the first frame past each gap and its
    sender goes back; with the same path selective repeat sends every frame once."""
    total, jitter, _, _, reorder, start, window, coalesce = path
    g = run("gbn", total, jitter, frozenset(), None, reorder, window, coalesce, start)
    s = run("sr", total, jitter, frozenset(), None, reorder, window, coalesce, start)
    _check_exactly_once(g, total)
    assert s.sender.retransmissions == 0
    if g.receiver.out_of_sequence:
        assert g.sender.retransmissions > 0
        assert g.sender.packet_seq_err > 0
    else:
        assert g.sender.retransmissions == 0


def test_holes_below_the_highest_psn_held_are_recovered_per_round_trip_not_per_timeout():
    """Every other frame of a message's last 16 lost (no NAK names them: they are within
    the responder's tolerance of the highest PSN held). The time-based detector
    retransmits each as soon as it is the oldest unacknowledged one; with a window in
    time beyond the timeout the timer is left to find them, one per expiry."""
    drops = frozenset(range(48, 64, 2))
    timed = run("sr", 64, [0.0], drops, reorder=16, timeout_ticks=100.0)
    timer = run("sr", 64, [0.0], drops, reorder=16, timeout_ticks=100.0, reorder_ticks=1e4)
    for out in (timed, timer):
        _check_exactly_once(out, 64)
        assert out.sender.retransmissions == 8 and out.receiver.duplicate_request == 0
        assert out.sender.packet_seq_err == 0   # no NAK
    assert (timed.sender.rack_losses, timed.sender.local_ack_timeout_err) == (8, 0)
    assert (timer.sender.rack_losses, timer.sender.local_ack_timeout_err) == (0, 8)


@pytest.mark.parametrize("lost", [range(63, 64), range(60, 64), range(48, 64)])
def test_a_lost_tail_is_probed_not_timed_out(lost):
    """The last frames lost, nothing sent after them: the tail-loss probe re-sends the
    last frame after two round trips and the window, its ACK reports the holes before
    it, and the detector in time finds them; no timeout, no duplicate."""
    out = run("sr", 64, [0.0], frozenset(lost), reorder=16, timeout_ticks=1000.0)
    _check_exactly_once(out, 64)
    assert out.sender.probes == 1 and out.sender.local_ack_timeout_err == 0
    assert out.sender.retransmissions == len(lost) and out.receiver.duplicate_request == 0


@pytest.mark.parametrize("seed", range(8))
def test_without_a_delayed_ack_the_detector_reads_only_acks(seed, monkeypatch):
    """CC off: no delayed-ACK timer, ACKs every 16 frames, 1 % loss on one path. A NAK's
    MSN names a frame held but no cumulative PSN, so frames delivered in order before
    the hole may still wait for their coalesced ACK: the detector must not read them
    as missing (it did, re-sending up to 11 of them). The timer still may (a known
    limit without the delayed ACK), so only runs without a timeout are judged."""
    monkeypatch.setattr(sys.modules[__name__], "ACK_DELAY_TICKS", 1e9)
    rng = random.Random(seed)
    drops = frozenset(k for k in range(3000) if rng.random() < 0.01)
    out = run("sr", 1024, [0.0], drops, reorder=16, window=1024, coalesce=16,
              reorder_ticks=32.0, timeout_ticks=500.0, max_ticks=3_000_000)
    _check_exactly_once(out, 1024)
    if out.sender.local_ack_timeout_err == 0:
        assert out.receiver.duplicate_request == 0
        assert out.sender.retransmissions == len(out.dropped)


def test_a_nak_about_a_copy_sent_before_a_retransmission_is_not_acted_on():
    s = SrSender(10, timeout_s=100.0, reorder_s=1.0)
    for t in range(10):
        s.take(float(t), 1)
    s.on_reply(0, nak_syndrome(1), 5, 20.0)   # 1..5 arrived, 0 did not: lost
    assert s.take(21.0, 1) == (0, 1)         # retransmitted at 21
    s.on_reply(0, nak_syndrome(1), 6, 22.0)   # about the copy sent at 0 (6 was sent at 6)
    assert s.next_index == 10 and s.retransmissions == 1


def _sprayed(total: int, reordered: float, seed: int) -> list[float]:
    """Per-frame extra delays: a fraction ``reordered`` of frames take a path 1-7 frame
    times longer than the others (a sprayed flow over paths of unequal queues)."""
    rng = random.Random(seed)
    return [rng.uniform(1.0, 7.99) if rng.random() < reordered else 0.0 for _ in range(total)]


@pytest.mark.parametrize("reordered, gbn_retx", [(0.01, 151), (0.05, 829), (0.2, 1762)])
def test_sprayed_sequence_gbn_retransmits_sr_does_not(reordered, gbn_retx):
    """1000 frames, window 64, ACK every frame: go-back-N's retransmissions on a sprayed
    path (stated) against none for selective repeat with reorder 8."""
    jitter = _sprayed(1000, reordered, 1)
    g = run("gbn", 1000, jitter, frozenset(), window=64)
    s = run("sr", 1000, jitter, frozenset(), window=64, reorder=8)
    assert g.sender.retransmissions == gbn_retx
    assert s.sender.retransmissions == 0
    assert s.receiver.out_of_sequence > 0


def test_a_hole_is_nakked_once_with_its_run_and_the_highest_psn_held():
    r = SrReceiver(100, reorder_packets=1)
    for psn in (0, 1, 5):        # 2, 3, 4 missing
        a = r.on_packet(psn)
    assert (a.deliver, a.reply, a.psn, a.syndrome, a.msn, a.echo) == \
        (True, gbn.NAK, 2, nak_syndrome(3), 5, False)
    a = r.on_packet(6)            # out of order, nothing new missing: no reply
    assert (a.deliver, a.reply) == (True, gbn.NONE)
    for psn in (2, 3):
        a = r.on_packet(psn)
    assert (a.reply, a.psn, a.msn) == (gbn.ACK, 3, 6)   # cumulative PSN, highest held
    a = r.on_packet(4)            # fills the hole: ACK at once up to 6
    assert (a.reply, a.psn, a.msn) == (gbn.ACK, 6, 6)
    a = r.on_packet(6)
    assert (a.deliver, a.reply, a.psn) == (False, gbn.ACK, 6)
    assert (r.delivered, r.out_of_sequence, r.duplicate_request, r.naks_sent) == (7, 2, 1, 1)


def test_a_hole_is_lost_only_once_reorder_packets_beyond_it_arrived():
    r = SrReceiver(100, reorder_packets=3)
    assert [r.on_packet(p).reply for p in (0, 2, 3)] == [gbn.ACK, gbn.NONE, gbn.NONE]
    a = r.on_packet(4)            # 4 = 1 + 3: PSN 1 is lost
    assert (a.reply, a.psn, a.syndrome) == (gbn.NAK, 1, AETH_SR_NAK)


def test_a_run_longer_than_the_syndrome_holds_is_nakked_in_pieces():
    r = SrReceiver(200, reorder_packets=1)
    a = r.on_packet(0)
    a = r.on_packet(50)           # 1..49 missing: 32 now, the rest on the next frame
    assert (a.psn, a.syndrome) == (1, nak_syndrome(MAX_NAK_RUN))
    a = r.on_packet(60)
    assert (a.psn, a.syndrome) == (33, nak_syndrome(17))


def test_the_sender_retransmits_nakked_psns_first_unless_acked_meanwhile():
    s = SrSender(20, window=20, timeout_s=1.0)
    assert s.take(0.0, 20) == (0, 20)
    assert s.on_reply(2, AETH_ACK, 2, 0.05)            # up to 2 delivered
    assert s.on_reply(5, nak_syndrome(3), 9, 0.1)      # 5, 6, 7 lost; 9 arrived
    assert (s.acked_packets, s.in_flight, s.next_index, s.packet_seq_err) == (3, 14, 5, 1)
    assert s.on_reply(5, AETH_ACK, 9, 0.2)             # 5 arrived after all
    assert s.take(0.3, 5) == (6, 2)                    # 6 and 7 only
    assert s.take(0.3, 5) is None                      # nothing new: all 20 sent
    assert s.retransmissions == 2
    assert not s.on_reply(6, AETH_NAK_PSN_SEQ, 0, 0.4)  # go-back-N's NAK: not ours
    assert s.advance(1.5) and s.local_ack_timeout_err == 1
    # The timer: the oldest, and what lies past the highest PSN held (9) that a whole
    # timeout did not acknowledge.
    assert s.take(1.5, 5) == (6, 1)
    assert s.take(1.5, 20) == (10, 10)
    assert s.retransmissions == 13


def test_arguments_are_checked():
    with pytest.raises(ParameterError, match="window"):
        SrSender(5, window=WINDOW_PACKETS + 1)
    with pytest.raises(ParameterError, match="reorder_packets"):
        SrReceiver(5, reorder_packets=0)
    with pytest.raises(ParameterError, match="total_packets"):
        SrSender(0)


def test_gbn_has_the_connectx_counter_names_too():
    s, r = gbn.GbnSender(10, timeout_s=1.0), gbn.GbnReceiver(10)
    s.take(0.0, 10)
    r.on_packet(3)
    assert s.on_reply(0, AETH_NAK_PSN_SEQ, 0, 0.1)
    assert (s.packet_seq_err, s.retransmissions, r.out_of_sequence) == (1, 0, 1)
    s.take(0.2, 10)
    assert s.retransmissions == 10


@pytest.mark.parametrize("run_, cum", [(1, 0), (7, 12345), (MAX_NAK_RUN, gbn.PSN_MASK)])
def test_the_selective_nak_is_an_ack_frame_scapy_decodes(run_, cum):
    flow = Flow("02:00:00:00:00:02", "02:00:00:00:00:01", "10.0.0.2", "10.0.0.1", 0xC001, 0x105)
    wire = ResponderTemplate(flow).write_ack(999, cum, nak_syndrome(run_), echo=True)
    scapy_frame = bytes(ack_packet(flow, psn=999, syndrome=nak_syndrome(run_), msn=cum,
                                   echo=True))
    assert bytes(wire) == scapy_frame
    pkt = Ether(bytes(wire))
    assert (pkt[BTH].psn, pkt[AETH].syndrome, pkt[AETH].msn) == (999, nak_syndrome(run_), cum)
    f = parse_frame(wire)
    assert f is not None and (f.psn, f.syndrome & 0x60, (f.syndrome & 31) + 1, f.msn) == \
        (999, AETH_SR_NAK, run_, cum)


def test_the_transport_setting_is_checked_and_builds_either_machine():
    from engine.run import EngineConfig
    from experiments.options import COMMON_OPTIONS
    from traffic.transport import new_receiver, new_sender

    assert isinstance(new_sender("sr", 4, 1e-3), SrSender)
    assert isinstance(new_sender("gbn", 4, 1e-3), gbn.GbnSender)
    assert isinstance(new_receiver("sr", 4, 1, False, reorder_packets=3), SrReceiver)
    assert isinstance(new_receiver("gbn", 4, 1, False), gbn.GbnReceiver)
    assert EngineConfig(transport="sr").transport == "sr"
    with pytest.raises(ParameterError, match="transport"):
        EngineConfig(transport="tcp")
    with pytest.raises(ParameterError, match="reorder_packets"):
        EngineConfig(transport="sr", reorder_packets=WINDOW_PACKETS)
    assert COMMON_OPTIONS["transport"].parse("SR") == "sr"
    with pytest.raises(ParameterError):
        COMMON_OPTIONS["transport"].parse("irn")
