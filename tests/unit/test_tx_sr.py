"""roce_tx.c's selective-repeat sender (tx_sr_take) against traffic/selective_repeat.py's
SrSender, event for event; the ctypes struct behaves as the class whose methods it
borrows, and ``attach`` hands either transport's state to a compiled QP."""

from __future__ import annotations

import random

import pytest

from core.errors import ParameterError
from engine.tx import TxGbn, TxLib, TxQp, TxSr, attach
from traffic import gbn
from traffic.roce import AETH_ACK, AETH_NAK_PSN_SEQ
from traffic.selective_repeat import MAX_NAK_RUN, WINDOW_PACKETS, nak_syndrome
from traffic.sr_sender import SrSender

_FIELDS = ("_una", "_nxt", "_lost_count", "_rtx", "_heard", "_timer_nxt", "_timer_start_s",
           "packets_sent",
           "retransmitted", "naks", "timeouts", "acks", "stale_acks",
           "reorder_s", "_rack_s", "_rack_due_s", "rack_losses", "srtt_s", "_probe_due_s",
           "probes")


def _state(s: object) -> tuple:
    return (*(getattr(s, f) for f in _FIELDS), tuple(s._lost), tuple(s._sent_s),
            tuple(s._resent))


@pytest.mark.parametrize("seed", range(40))
def test_the_c_sender_takes_as_the_python_one_between_python_events(tx_lib: TxLib, seed: int):
    _replay(tx_lib, seed)


def test_the_lost_tail_sequences_fire_the_probe(tx_lib: TxLib):
    # 18 of the 20 do (1 to 6 times; 1 of the 20 even seeds); the others finish first
    assert sum(_replay(tx_lib, seed).probes > 0 for seed in range(1, 40, 2)) >= 15


def _replay(tx_lib: TxLib, seed: int) -> SrSender:
    """Random takes (C on the struct, Python on SrSender), ACKs, selective NAKs,
    go-back-N NAKs and timer checks (SrSender's own methods on both), with the
    time-based detector's window from none to most of the timeout, and timeouts long
    enough for the tail-loss probe to fire first; the C and Python states compared
    after every event. The odd seeds lose a message's tail: short messages, all in the
    window, whose replies never name the last ``tail`` frames (fewer as time goes on),
    few NAKs, time in small steps and jumps to the probe's instant."""
    rng = random.Random(seed)
    lost_tail = seed % 2 == 1
    total = rng.choice([2, 5, 16] if lost_tail else [1, 2, 5, 64, 3000, (1 << 24) + 5])
    window = rng.choice([None, 16, WINDOW_PACKETS] if lost_tail else [None, 1, 3, 16,
                                                                      WINDOW_PACKETS])
    start = rng.choice([0, 7, (1 << 24) - 3])
    reorder = rng.choice([3e-6, 3e-4, None] if lost_tail else [0.0, 3e-6, 3e-4, None])
    timeout = 1e-1 if lost_tail else rng.choice([1e-3, 1e-1])  # the probe fires first
    tail = rng.randint(1, total) if lost_tail else 0
    steps = [0.0, 1e-6, 1e-5] if lost_tail else [0.0, 1e-6, 2e-4, 1.5e-3]
    py = SrSender(total, window=window, timeout_s=timeout, start_psn=start, reorder_s=reorder)
    c = TxSr.new(total, window=window, timeout_s=timeout, start_psn=start, reorder_s=reorder)
    now = 0.0
    for _ in range(600):
        now += rng.choice(steps)
        if tail and rng.random() < 0.005:
            tail -= 1  # the responder gets one more of the tail
        kind = rng.random()
        beyond = max(py._nxt - py._una, 1)
        held = max(total - tail - py._una, -2) if lost_tail else beyond + 3
        psn = (start + py._una + rng.randrange(-3, min(beyond + 3, held))) & gbn.PSN_MASK
        cum = (start + py._una + rng.randrange(-3, min(beyond + 1, held))) & gbn.PSN_MASK
        t = None if rng.random() < 0.1 else now
        due = py._probe_due_s if lost_tail else py.deadline_s
        if (kind < 0.45 or lost_tail) and due is not None and rng.random() < 0.3:
            now = max(now, due)  # C's timers at their very instant
        if kind < 0.45:
            count = rng.choice([1, 2, 4] if lost_tail else [1, 2, 64])
            assert tx_lib.take(c, now, count) == py.take(now, count)
        elif kind < (0.8 if lost_tail else 0.65):  # a lost tail: fewer NAKs
            assert c.on_reply(psn, AETH_ACK, cum, t) == py.on_reply(psn, AETH_ACK, cum, t)
        elif kind < 0.85:
            syndrome = nak_syndrome(rng.randint(1, MAX_NAK_RUN))
            assert c.on_reply(psn, syndrome, cum, t) == py.on_reply(psn, syndrome, cum, t)
        elif kind < 0.9:
            assert c.on_reply(psn, AETH_NAK_PSN_SEQ, 0, t) == \
                py.on_reply(psn, AETH_NAK_PSN_SEQ, 0, t)
        else:
            assert c.advance(now) == py.advance(now)
        assert _state(c) == _state(py)
        assert tx_lib.next_index(c) == py.next_index
        assert (c.done, c.in_flight, c.deadline_s, c.next_index, c.retransmissions) == \
            (py.done, py.in_flight, py.deadline_s, py.next_index, py.retransmissions)
    return py


def test_the_struct_checks_its_arguments_as_the_class_does():
    with pytest.raises(ParameterError, match="total_packets"):
        TxSr.new(0)
    with pytest.raises(ParameterError, match="window"):
        TxSr.new(5, window=WINDOW_PACKETS + 1)


def test_attach_puts_either_transport_into_a_compiled_qp():
    qp = TxQp()
    view = attach(qp, SrSender(9, timeout_s=1.0))
    assert isinstance(view, TxSr) and qp.sr.contents.total_packets == 9
    view._una = 4
    assert qp.sr.contents._una == 4          # the QP's struct is the view
    qp = TxQp()
    view = attach(qp, gbn.GbnSender(7, timeout_s=1.0))
    assert isinstance(view, TxGbn) and qp.gbn.total_packets == 7 and not qp.sr


@pytest.mark.parametrize("touched", [False, True])
def test_of_copies_the_whole_state_fresh_or_not(touched: bool):
    s = SrSender(WINDOW_PACKETS + 5, timeout_s=1e-3, start_psn=77, reorder_s=2e-4)
    if touched:  # every array and scalar away from its initial value
        for i in range(0, WINDOW_PACKETS, 7):
            s._sent_s[i] = 1e-6 * (i + 1)
        s._lost[3] = 0b1011
        s._resent[-1] = 1 << 63
        s._una, s._nxt, s._rack_due_s, s._probe_due_s = 3, 40, 5e-4, 6e-4
    assert _state(TxSr.of(s)) == _state(s)
