"""DCQCN's reaction point in C (engine/csrc/dcqcn_rp.h) against the pure Python one,
event for event; the ctypes struct behaves as the class whose methods it borrows."""

from __future__ import annotations

import random

import pytest

from core.dcqcn_params import NIC, PAPER, DcqcnParams
from engine.ccview import TxRp, c_twin
from engine.tx import TxLib
from traffic.cc import Dcqcn, LineRate, make_cc
from traffic.dcqcn import ReactionPoint

_STATE = tuple(name for name, _ in TxRp._fields_[1:])


def _state(rp: object) -> tuple:
    return tuple(getattr(rp, name) for name in _STATE)


def _params(rng: random.Random) -> DcqcnParams:
    """A parameter set around the paper's or the NIC's, every branch reachable."""
    base = rng.choice([PAPER, NIC])
    return base.with_(
        g=rng.choice([1 / 256, 1 / 16, 0.5, 1.0]),
        byte_counter_bytes=rng.choice([1024, 4096, 10 << 20]),
        fast_recovery_steps=rng.choice([0, 1, 5]),
        rate_reduce_monitor_period_s=rng.choice([0.0, 4e-6, 50e-6]),
        rate_on_first_cnp_bps=rng.choice([0.0, 1e9]),
        clamp_target_rate=rng.random() < 0.5,
        clamp_target_rate_after_time_inc=rng.random() < 0.5,
        scale_increase_with_line_rate=rng.random() < 0.5)


@pytest.mark.parametrize("seed", range(60))
def test_the_c_reaction_point_acts_as_the_python_one_between_python_events(tx_lib: TxLib,
                                                                           seed: int):
    """Random bursts sent (C's rp_on_bytes_sent on the struct, Python's on the class),
    CNPs and timer checks (ReactionPoint's own methods on both), at random gaps: the
    same doubles and counters after every event."""
    rng = random.Random(seed)
    params = _params(rng)
    line = rng.choice([25e9, 400e9])
    start = rng.choice([0.0, 3.7e-6, 0.25])
    py = ReactionPoint(params, line, start)
    c = TxRp.of(py)
    assert _state(c) == _state(py)
    now = start
    for _ in range(600):
        now += rng.choice([0.0, 1e-8, 1e-6, 20e-6, 60e-6, 3e-3])
        kind = rng.random()
        if kind < 0.7:
            n = rng.choice([1, 1000, 4120, 8 * 4120, 1 << 20])
            tx_lib.rp_on_bytes_sent(c, n, now)
            py.on_bytes_sent(n, now)
        elif kind < 0.9:
            c.on_cnp(now)
            py.on_cnp(now)
        else:
            c.advance(now)
            py.advance(now)
        assert _state(c) == _state(py)
        assert (c.rate_bps, c.target_rate_bps, c.alpha, c.next_event_s) == \
            (py.rate_bps, py.target_rate_bps, py.alpha, py.next_event_s)
    assert py.rate_reductions > 0 and py.rate_increases > 0  # both directions driven


@pytest.mark.parametrize("start_s", [0.0, 1e-9, 12.5e-6, 0.3])
def test_a_start_in_c_gives_the_constructor_timers(tx_lib: TxLib, start_s: float):
    """An algorithm built before its QP's start (the compiled loop's starts), then
    started in C, is the one built at its start."""
    for params in (PAPER, NIC):
        early = TxRp.of(ReactionPoint(params, 400e9, 0.0))
        tx_lib.rp_start(early, start_s)
        assert _state(early) == _state(ReactionPoint(params, 400e9, start_s))


def test_only_the_built_in_dcqcn_moves_into_c():
    """The twin is DCQCN's exactly: the class's own state moves, once; a subclass
    (which may change any method) and other algorithms stay Python."""
    cc = make_cc(PAPER, 400e9, 1e-6)
    before = _state(cc.rp)
    twin = c_twin(cc)
    assert isinstance(twin, TxRp) and cc.rp is twin and _state(twin) == before
    assert c_twin(cc) is twin
    cc.on_cnp(2e-6)  # Dcqcn's methods act on the twin
    assert twin.rate_reductions == 1 and cc.rate_bps == twin._rc < 400e9

    class Mine(Dcqcn):
        pass

    assert c_twin(Mine(PAPER, 400e9)) is None
    assert c_twin(LineRate(400e9)) is None


def test_dcqcn_ignores_acks_as_the_compiled_loop_assumes():
    """roce_loop.c acts on a DCQCN QP's cumulative ACKs without Python (ack_here):
    right only while DCQCN's on_ack is the base's no-op and it keeps no timer."""
    from traffic.cc import CongestionControl

    assert Dcqcn.on_ack is CongestionControl.on_ack
    assert Dcqcn.next_timer_s == float("inf") and Dcqcn.window_bytes is None
