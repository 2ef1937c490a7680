"""roce_tx.c's per-burst functions against the pure Python ones, event for event; the
ctypes structs behave as the classes whose methods they borrow."""

from __future__ import annotations

import random

import pytest

from core.errors import ParameterError
from engine.tx import TxGbn, TxLib, TxSched
from traffic import gbn
from traffic.pacing import Schedule

_GBN_FIELDS = ("_una", "_nxt", "_max_sent", "_timer_start_s", "packets_sent",
               "retransmitted", "naks", "timeouts", "acks", "stale_acks")


def _state(g: object) -> tuple:
    return tuple(getattr(g, f) for f in _GBN_FIELDS)


@pytest.mark.parametrize("seed", range(40))
def test_the_c_sender_takes_as_the_python_one_between_python_events(tx_lib: TxLib, seed: int):
    """Random takes (C on the struct, Python on GbnSender), ACKs (C's own at a time
    half of them, the compiled loop's), NAKs and timer checks (GbnSender's own methods
    on both)."""
    rng = random.Random(seed)
    total = rng.choice([1, 2, 5, 64, 1000, (1 << 24) + 5])
    window = rng.choice([None, 1, 3, 16])
    start = rng.choice([0, 7, (1 << 24) - 3])
    py = gbn.GbnSender(total, window=window, timeout_s=1e-3, start_psn=start)
    c = TxGbn.new(total, window=window, timeout_s=1e-3, start_psn=start)
    now = 0.0
    for _ in range(400):
        now += rng.choice([0.0, 1e-6, 2e-4, 1.5e-3])
        kind = rng.random()
        psn = (start + rng.randrange(-3, max(py._max_sent, 1) + 3)) & gbn.PSN_MASK
        t = None if rng.random() < 0.1 else now
        if kind < 0.45:
            count = rng.choice([1, 2, 64])
            assert tx_lib.take(c, now, count) == py.take(now, count)
        elif kind < 0.75:
            c_ack = tx_lib.ack if t is not None and rng.random() < 0.5 else \
                (lambda g, p, at: g.on_ack(p, at))
            assert c_ack(c, psn, t) == py.on_ack(psn, t)
        elif kind < 0.9:
            assert c.on_nak(psn, t) == py.on_nak(psn, t)
        else:
            assert c.advance(now) == py.advance(now)
        assert _state(c) == _state(py)
        assert (c.done, c.in_flight, c.deadline_s, c.next_index) == \
            (py.done, py.in_flight, py.deadline_s, py.next_index)


def test_the_struct_reports_every_counter_the_engine_records():
    """The worker's SendRecord reads these from whichever sender a QP has."""
    c, py = TxGbn.new(8), gbn.GbnSender(8)
    for name in ("packets_sent", "retransmitted", "naks", "timeouts", "rack_losses", "probes"):
        assert getattr(c, name) == getattr(py, name) == 0, name


def test_the_struct_checks_its_arguments_as_the_class_does():
    with pytest.raises(ParameterError, match="total_packets"):
        TxGbn.new(0)
    with pytest.raises(ParameterError, match="window"):
        TxGbn.new(5, window=0)


@pytest.mark.parametrize("seed", range(10))
def test_the_c_schedule_books_as_the_python_one(tx_lib: TxLib, seed: int):
    rng = random.Random(seed)
    py, c = Schedule(20_000_000, 5), TxSched(5, 20_000_000, 0, 0)
    now = 0
    for _ in range(300):
        now += rng.choice([0, 1000, 800_000, 30_000_000])
        if rng.random() < 0.3:
            tx_lib.restart(c, now) if rng.random() < 0.5 else c.restart(now)
            py.restart(now)
        else:
            n, step = rng.choice([1, 3, 64]), rng.choice([1, 830_000, 12_000_000])
            tx_lib.sent(c, now, n, step)
            py.sent(now, n, step)
        assert (c.next_ns, c.resets, c.dropped_ns) == (py.next_ns, py.resets, py.dropped_ns)
