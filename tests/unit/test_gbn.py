"""Go-back-N sender and receiver: scripted loss, reordering, wrap-around, random channel."""

from __future__ import annotations

import heapq
import random

import pytest

from core.errors import ParameterError
from traffic.gbn import (
    ACK,
    NAK,
    NONE,
    PSN_MASK,
    Action,
    GbnReceiver,
    GbnSender,
    psn_add,
    psn_diff,
)

US = 1e-6


def send_all(s: GbnSender, now_s: float = 0.0) -> list[int]:
    out = []
    while (psn := s.next_to_send(now_s)) is not None:
        out.append(psn)
    return out


def test_psn_arithmetic() -> None:
    assert psn_add(PSN_MASK, 1) == 0
    assert psn_add(PSN_MASK - 1, 5) == 3
    assert psn_diff(2, PSN_MASK) == 3
    assert psn_diff(PSN_MASK, 2) == -3
    assert psn_diff(7, 7) == 0


def test_parameter_validation() -> None:
    with pytest.raises(ParameterError, match="total_packets"):
        GbnSender(0)
    with pytest.raises(ParameterError, match="window"):
        GbnSender(10, window=0)
    with pytest.raises(ParameterError, match="window"):
        GbnSender(10, window=1 << 23)
    with pytest.raises(ParameterError, match="timeout_s"):
        GbnSender(10, timeout_s=0.0)
    with pytest.raises(ParameterError, match="start_psn"):
        GbnSender(10, start_psn=1 << 24)
    with pytest.raises(ParameterError, match="ack_coalesce"):
        GbnReceiver(10, ack_coalesce=0)


def test_lossless_with_ack_coalescing() -> None:
    s, r = GbnSender(10), GbnReceiver(10, ack_coalesce=4)
    acks = []
    for psn in send_all(s):
        a = r.on_packet(psn)
        assert a.deliver
        if a.reply == ACK:
            acks.append(a.psn)
            s.on_ack(a.psn, 1 * US)
    assert acks == [3, 7, 9]  # every 4th and the last
    assert s.done and r.complete and r.delivered == 10
    assert s.retransmitted == 0 and s.deadline_s is None


def test_window_limits_outstanding() -> None:
    s = GbnSender(10, window=3)
    assert send_all(s) == [0, 1, 2]
    s.on_ack(0)
    assert send_all(s) == [3]
    s.on_ack(3)
    assert send_all(s) == [4, 5, 6]


def test_single_loss_nak_and_go_back() -> None:
    s, r = GbnSender(10, timeout_s=100 * US), GbnReceiver(10)
    delivered, replies = [], []
    for psn in send_all(s):
        if psn == 3:
            continue  # lost
        a = r.on_packet(psn)
        if a.deliver:
            delivered.append(psn)
        replies.append((a.reply, a.psn) if a.reply != NONE else None)
    # 0,1,2 ACKed; 4 -> one NAK(3); 5..9 suppressed
    assert replies == [(ACK, 0), (ACK, 1), (ACK, 2), (NAK, 3)] + [None] * 5
    assert r.naks_sent == 1 and r.out_of_order == 6
    for kind, psn in filter(None, replies):
        (s.on_ack if kind == ACK else s.on_nak)(psn, 2 * US)
    assert s.acked_packets == 3 and s.naks == 1
    resent = send_all(s, 3 * US)
    assert resent == [3, 4, 5, 6, 7, 8, 9]
    assert s.retransmitted == 7  # all of 3..9 had been sent once (3 was lost in the network)
    for psn in resent:
        a = r.on_packet(psn)
        assert a.deliver
        delivered.append(psn)
        s.on_ack(a.psn, 4 * US)
    assert delivered == list(range(10))
    assert s.done and r.complete and s.timeouts == 0


def test_retransmission_count_includes_the_lost_packet() -> None:
    s = GbnSender(5)
    send_all(s)
    s.on_nak(2)
    assert send_all(s) == [2, 3, 4]
    assert s.retransmitted == 3 and s.packets_sent == 8


def test_burst_loss() -> None:
    s, r = GbnSender(12), GbnReceiver(12, ack_coalesce=2)
    lost = {4, 5, 6, 7}
    for psn in send_all(s):
        if psn in lost:
            continue
        a = r.on_packet(psn)
        if a.reply == ACK:
            s.on_ack(a.psn)
        elif a.reply == NAK:
            assert a.psn == 4
            s.on_nak(a.psn)
    assert r.naks_sent == 1 and s.acked_packets == 4
    for psn in send_all(s):
        a = r.on_packet(psn)
        assert a.deliver
        if a.reply == ACK:
            s.on_ack(a.psn)
    assert s.done and r.complete and r.delivered == 12


def test_last_packet_lost_recovers_by_timeout() -> None:
    s, r = GbnSender(8, timeout_s=50 * US), GbnReceiver(8, ack_coalesce=4)
    for psn in send_all(s, 0.0):
        if psn == 7:
            continue
        a = r.on_packet(psn)
        if a.reply == ACK:
            s.on_ack(a.psn, 1 * US)
    assert s.acked_packets == 4 and r.delivered == 7
    assert s.deadline_s == pytest.approx(51 * US)  # restarted by the ACK at 1 us
    assert not s.advance(50 * US)
    assert s.advance(51 * US) and s.timeouts == 1
    resent = send_all(s, 52 * US)
    assert resent == [4, 5, 6, 7]
    replies = [r.on_packet(p) for p in resent]
    assert replies[:3] == [Action(False, ACK, 6)] * 3  # duplicates re-ACKed
    assert replies[3] == Action(True, ACK, 7, msn=1)  # the last one: MSN says complete
    assert r.duplicates == 3
    for a in replies:
        s.on_ack(a.psn, 53 * US)
    assert s.done and r.complete
    assert s.acks == 3 and s.stale_acks == 2  # ACK(3), ACK(6), ACK(7); ACK(6) twice more is stale
    assert s.deadline_s is None


def test_timeout_is_checked_in_next_to_send() -> None:
    s = GbnSender(3, timeout_s=10 * US)
    assert send_all(s, 0.0) == [0, 1, 2]
    assert s.next_to_send(9 * US) is None
    assert s.next_to_send(10 * US) == 0
    assert s.timeouts == 1


def test_reordering() -> None:
    s, r = GbnSender(4), GbnReceiver(4)
    sent = send_all(s)
    assert sent == [0, 1, 2, 3]
    a2 = r.on_packet(2)  # arrives before 0 and 1
    assert a2 == Action(False, NAK, 0, syndrome=0x60)  # AETH: NAK, PSN sequence error
    assert r.on_packet(0) == Action(True, ACK, 0)
    assert r.on_packet(1) == Action(True, ACK, 1)
    assert r.on_packet(3) == Action(False, NAK, 2, syndrome=0x60)  # 2 dropped: a new NAK
    s.on_nak(0)  # late NAK: go back to 0 (harmless duplicates)
    s.on_ack(0)
    s.on_ack(1)
    s.on_nak(2)
    assert send_all(s) == [2, 3]
    assert r.on_packet(2) == Action(True, ACK, 2)
    assert r.on_packet(3) == Action(True, ACK, 3, msn=1)
    for p in (2, 3):
        s.on_ack(p)
    assert s.done and r.complete


def test_duplicate_and_old_acks_are_ignored() -> None:
    s = GbnSender(10)
    send_all(s)
    assert s.on_ack(3)
    assert not s.on_ack(3)
    assert not s.on_ack(1)
    assert not s.on_nak(2)  # older than what is acknowledged
    assert not s.on_ack(10)  # never sent
    assert s.acked_packets == 4 and s.stale_acks == 4


def test_nak_suppression_until_gap_filled() -> None:
    r = GbnReceiver(20)
    assert r.on_packet(0).reply == ACK
    assert r.on_packet(2) == Action(False, NAK, 1, syndrome=0x60)
    for p in range(3, 8):
        assert r.on_packet(p) == Action(False, NONE, 0)
    assert r.on_packet(0) == Action(False, ACK, 0)  # duplicate: re-ACK, NAK still pending
    assert r.on_packet(4) == Action(False, NONE, 0)
    assert r.naks_sent == 1
    assert r.on_packet(1) == Action(True, ACK, 1)  # gap filled
    assert r.on_packet(5) == Action(False, NAK, 2, syndrome=0x60)  # a new gap, a new NAK
    assert r.naks_sent == 2


def test_psn_wrap_around() -> None:
    start = PSN_MASK - 2  # PSNs 16777213, 16777214, 16777215, 0, 1, 2
    s, r = GbnSender(6, start_psn=start), GbnReceiver(6, start_psn=start)
    sent = send_all(s)
    assert sent == [PSN_MASK - 2, PSN_MASK - 1, PSN_MASK, 0, 1, 2]
    for psn in sent:
        if psn == 0:
            continue
        a = r.on_packet(psn)
        if a.reply == ACK:
            s.on_ack(a.psn)
        elif a.reply == NAK:
            assert a.psn == 0
            s.on_nak(a.psn)
    assert s.acked_packets == 3
    resent = send_all(s)
    assert resent == [0, 1, 2]
    for psn in resent:
        s.on_ack(r.on_packet(psn).psn)
    assert s.done and r.complete
    # a duplicate of the first packet (behind the wrap) is recognised as old
    assert r.on_packet(PSN_MASK - 2) == Action(False, ACK, 2, msn=1)


def test_message_longer_than_psn_space_maps_indices_modulo() -> None:
    s = GbnSender((1 << 24) + 10, start_psn=5)
    assert s.psn_of(0) == 5
    assert s.psn_of(1 << 24) == 5
    assert s.psn_of((1 << 24) - 5) == 0


# -- randomized lossy channel ------------------------------------------------------

def simulate(seed: int) -> tuple[GbnSender, GbnReceiver]:
    rng = random.Random(seed)
    total = rng.randint(1, 300)
    start = rng.choice([0, rng.randrange(1 << 24), PSN_MASK - rng.randrange(50)])
    window = rng.choice([None, 1, 4, 16, 64])
    coalesce = rng.randint(1, 5)
    p_loss_data, p_loss_ctrl = rng.uniform(0, 0.3), rng.uniform(0, 0.3)
    timeout_s = 40 * US
    s = GbnSender(total, window=window, timeout_s=timeout_s, start_psn=start)
    r = GbnReceiver(total, ack_coalesce=coalesce, start_psn=start)
    delivered: list[int] = []
    events: list[tuple[float, int, str, int]] = []  # (time, seq, kind, psn)
    seq = 0
    now = 0.0
    tick = 0.5 * US
    while not (s.done and r.complete):
        assert now < 1.0, f"seed {seed}: no completion"  # 2M ticks would mean a livelock
        # deliver everything due
        while events and events[0][0] <= now:
            _, _, kind, psn = heapq.heappop(events)
            if kind == "data":
                a = r.on_packet(psn)
                if a.deliver:
                    delivered.append((psn - start) & PSN_MASK)
                if a.reply != NONE and rng.random() >= p_loss_ctrl:
                    seq += 1
                    reply = "ack" if a.reply == ACK else "nak"
                    heapq.heappush(events, (now + rng.uniform(1, 4) * US, seq, reply, a.psn))
            elif kind == "ack":
                s.on_ack(psn, now)
            else:
                s.on_nak(psn, now)
        s.advance(now)
        psn = s.next_to_send(now)
        if psn is not None and rng.random() >= p_loss_data:
            seq += 1  # random delay: packets may overtake each other
            heapq.heappush(events, (now + rng.uniform(1, 4) * US, seq, "data", psn))
        now += tick
    assert delivered == list(range(total)), f"seed {seed}"
    assert r.delivered == total and s.acked_packets == total
    return s, r


@pytest.mark.parametrize("seed", range(40))
def test_random_lossy_channel_delivers_exactly_once_in_order(seed: int) -> None:
    simulate(seed)


def test_random_channel_exercises_every_recovery_path() -> None:
    runs = [simulate(seed) for seed in range(40)]
    assert sum(s.timeouts for s, _ in runs) > 0
    assert sum(s.naks for s, _ in runs) > 0
    assert sum(r.duplicates for _, r in runs) > 0
    assert sum(s.stale_acks for s, _ in runs) > 0


def test_take_is_a_run_of_next_to_send():
    """take(n) hands out exactly what n calls of next_to_send would, counters included."""
    one, run = GbnSender(10, window=6), GbnSender(10, window=6)
    singles = [one.next_to_send(0.0) for _ in range(8)]
    assert singles == [0, 1, 2, 3, 4, 5, None, None]  # the window stops at 6
    assert run.take(0.0, 4) == (0, 4)
    assert run.take(0.0, 4) == (4, 2)  # capped by the window
    assert run.take(0.0, 4) is None
    assert run.packets_sent == one.packets_sent == 6
    # A NAK at PSN 2: both go back; the re-sent packets count as retransmissions.
    assert one.on_nak(2, 1e-6) and run.on_nak(2, 1e-6)
    assert [one.next_to_send(2e-6) for _ in range(6)] == [2, 3, 4, 5, 6, 7]
    assert run.take(2e-6, 6) == (2, 6)
    assert run.retransmitted == one.retransmitted == 4
    assert run.next_index == one.next_index == 8


def test_take_stops_at_the_last_packet_and_wraps_psns():
    g = GbnSender(5, start_psn=PSN_MASK - 1)
    assert g.take(0.0, 64) == (PSN_MASK - 1, 5)
    assert g.take(0.0, 64) is None


# -- ECN echo, DCTCP's ACK on a CE change, solicited ACKs -----------------------------

def test_every_reply_echoes_whether_a_packet_it_newly_acknowledges_was_marked():
    r = GbnReceiver(10, ack_coalesce=4)
    acts = [r.on_packet(p, ce=p == 1) for p in range(4)]
    assert acts[3] == Action(True, ACK, 3, echo=True)       # packets 0..3, one marked
    assert [a.reply for a in acts[:3]] == [NONE] * 3 and not any(a.flush for a in acts)
    assert r.on_packet(2) == Action(False, ACK, 3, echo=False)  # duplicate: nothing new marked
    assert r.on_packet(4, ce=True).reply == NONE
    assert r.on_packet(6) == Action(False, NAK, 5, echo=True,   # the NAK acknowledges 4
                                    syndrome=0x60)                  # (marked)
    assert r.on_packet(5) == Action(True, NONE, 5)
    assert r.on_packet(4, ce=True) == Action(False, ACK, 5, echo=False)


def test_ce_ack_flushes_on_every_ce_state_change_so_each_ack_is_uniform():
    r = GbnReceiver(12, ack_coalesce=16, ce_ack=True)
    marks = [False, False, True, True, True, False, False, False, False, False, False, False]
    acts = [r.on_packet(p, ce=m) for p, m in enumerate(marks)]
    # 0-1 unmarked, flushed when 2 arrives marked; 2-4 flushed when 5 arrives unmarked;
    # 5-11 ACKed at the last packet.
    assert [p for p, a in enumerate(acts) if a.flush] == [2, 5]
    assert acts[-1] == Action(True, ACK, 11, echo=False, msn=1)
    assert r.acks_sent == 3
    # Without ce_ack the same packets give one ACK, echoing the marks.
    plain = GbnReceiver(12, ack_coalesce=16)
    assert [plain.on_packet(p, ce=m) for p, m in enumerate(marks)][-1] == \
        Action(True, ACK, 11, echo=True, msn=1)
    assert plain.acks_sent == 1


def test_ackreq_solicits_an_ack_at_once():
    r = GbnReceiver(100, ack_coalesce=16)
    assert r.on_packet(0).reply == NONE
    assert r.on_packet(1, ackreq=True) == Action(True, ACK, 1)
    assert [r.on_packet(p).reply for p in range(2, 18)] == [NONE] * 15 + [ACK]  # 16 later


def test_the_delayed_ack_acknowledges_what_waits_once():
    r = GbnReceiver(10, ack_coalesce=4)
    assert r.ack_pending() is None
    r.on_packet(0)
    r.on_packet(1, ce=True)
    assert r.unacknowledged == 2
    assert r.ack_pending() == Action(False, ACK, 1, echo=True)
    assert r.ack_pending() is None and r.unacknowledged == 0
    # Coalescing counts from the delayed ACK: the next ACK is 4 packets later.
    assert [r.on_packet(p).reply for p in range(2, 6)] == [NONE, NONE, NONE, ACK]
