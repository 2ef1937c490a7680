"""DCQCN's reaction point and DCTCP's window in C (engine/csrc/dcqcn_rp.h, dctcp_cc.h)
against the pure Python ones, event for event; the ctypes structs behave as the
classes whose methods they borrow."""

from __future__ import annotations

import ctypes
import math
import random

import pytest

from core.dcqcn_params import NIC, PAPER, DcqcnParams
from engine.ccview import TxDctcp, TxRp, TxTimely, c_twin, has_c_twin
from engine.tx import TxLib, TxQp
from traffic.cc import Dcqcn, LineRate, make_cc
from traffic.ccalgos.dctcp import Dctcp
from traffic.ccalgos.swift import Swift
from traffic.ccalgos.timely import Timely
from traffic.ccload import resolve_cc
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


def test_only_the_built_in_algorithms_move_into_c():
    """The twins are DCQCN's and DCTCP's exactly: the class's own state moves, once; a
    subclass (which may change any method) and other algorithms stay Python."""
    cc = make_cc(PAPER, 400e9, 1e-6)
    before = _state(cc.rp)
    same, twin = c_twin(cc)
    assert same is cc and isinstance(twin, TxRp) and cc.rp is twin and _state(twin) == before
    assert c_twin(cc) == (cc, twin)
    cc.on_cnp(2e-6)  # Dcqcn's methods act on the twin
    assert twin.rate_reductions == 1 and cc.rate_bps == twin._rc < 400e9

    d = Dctcp(400e9, 1e-6, base_rtt_s=8e-6)
    view, dtwin = c_twin(d)
    assert isinstance(view, TxDctcp) and view is dtwin and isinstance(view, Dctcp)
    assert _dctcp_state(view) == _dctcp_state(d) and c_twin(view) == (view, view)

    class Mine(Dcqcn):
        pass

    class MyDctcp(Dctcp):
        pass

    for other in (Mine(PAPER, 400e9), LineRate(400e9), MyDctcp(400e9), Swift(400e9)):
        assert c_twin(other) == (other, None)
    assert [has_c_twin(resolve_cc(n)) for n in ("off", "dcqcn", "nic", "dctcp", "timely",
                                                "swift", "hpcc")] == \
        [False, True, True, True, True, False, False]


_DCTCP = tuple(name for name, _ in TxDctcp._fields_[:-1]) + ("_cut_at_s",)


def _dctcp_state(d: object) -> tuple:
    return tuple(getattr(d, name) for name in _DCTCP)


_TIMELY = tuple(name for name, _ in TxTimely._fields_[:-1]) + ("prev_rtt_s",)


def _timely_state(t: object) -> tuple:
    return tuple(getattr(t, name) for name in _TIMELY)


@pytest.mark.parametrize("seed", range(60))
def test_the_c_timely_acts_as_the_python_one_between_python_events(tx_lib: TxLib, seed: int):
    """Random ACKs without an echo (C's timely_on_ack on the struct, Python's on_ack on
    the class), echoing ACKs and CNPs (Timely's own methods on both), with RTTs below
    t_low, between the thresholds and above t_high, rising and falling, and none."""
    rng = random.Random(seed)
    kwargs = dict(ewma_alpha=rng.choice([0.02, 0.875, 1.0]), beta=rng.choice([0.3, 0.8]),
                  hai_threshold=rng.choice([1, 5]), hai_factor=rng.choice([1, 5]),
                  min_rtt_s=rng.choice([None, 4e-6]),
                  initial_rate_bps=rng.choice([None, 1e9]))
    py = Timely(rng.choice([25e9, 400e9]), 0.0, **kwargs)
    c, _ = c_twin(Timely(py.line_rate_bps, 0.0, **kwargs))
    assert isinstance(c, TxTimely)
    now = 0.0
    for _ in range(500):
        now += rng.choice([0.0, 1e-6, 8e-6])
        rtt = rng.choice([0.0, 2e-6, 30e-6, 60e-6, 120e-6, 300e-6, 500e-6, 499e-6, 700e-6, 2e-3])
        kind = rng.random()
        if kind < 0.7:
            tx_lib.timely_on_ack(c, rtt)
            py.on_ack(4096, rtt, False, (), now)
        elif kind < 0.9:
            c.on_ack(4096, rtt, True, (), now)
            py.on_ack(4096, rtt, True, (), now)
        else:
            c.on_cnp(now)
            py.on_cnp(now)
        assert _timely_state(c) == _timely_state(py)
        assert c.trace() == py.trace() and c.rate_bps == py.rate_bps


@pytest.mark.parametrize("seed", range(60))
def test_the_c_dctcp_acts_as_the_python_one_between_python_events(tx_lib: TxLib, seed: int):
    """Random ACKs without an echo (C's dctcp_on_ack on the struct, Python's on_ack on
    the class), echoing ACKs and CNPs (Dctcp's own methods on both), with RTTs from
    before to after the cut and the window's start: the same doubles after each."""
    rng = random.Random(seed)
    kwargs = dict(g=rng.choice([1 / 16, 0.5, 1.0]), alpha_initial=rng.choice([0.0, 0.3, 1.0]),
                  base_rtt_s=rng.choice([4e-6, 10e-6]),
                  feedback=rng.choice(["ecn_echo", "cnp"]))
    start = rng.choice([0.0, 2.5e-6])
    py = Dctcp(rng.choice([25e9, 400e9]), start, **kwargs)
    c = TxDctcp.of(py)
    now = start
    for _ in range(500):
        now += rng.choice([0.0, 1e-7, 1e-6, 8e-6, 40e-6])
        n = rng.choice([8, 4096, 16 * 4096, 1 << 20])
        rtt = rng.choice([0.0, 1e-6, 5e-6, 20e-6, 100e-6])
        kind = rng.random()
        if kind < 0.7:
            tx_lib.dctcp_on_ack(c, n, rtt, now)
            py.on_ack(n, rtt, False, (), now)
        elif kind < 0.9:
            c.on_ack(n, rtt, True, (), now)
            py.on_ack(n, rtt, True, (), now)
        else:
            c.on_cnp(now)
            py.on_cnp(now)
        assert _dctcp_state(c) == _dctcp_state(py)
        assert c.trace() == py.trace() and c.window_bytes == py.window_bytes
    assert py.alpha != kwargs["alpha_initial"] or py.window_bytes != c.min_window_bytes


@pytest.mark.parametrize("start_s", [0.0, 1e-9, 12.5e-6])
def test_a_c_start_gives_the_constructor_state_and_its_trace(tx_lib: TxLib, start_s: float):
    """The compiled loop's start of a QP whose algorithm was built at set-up (time 0):
    the twin is then the one built at its start, and the trace C records is its own."""
    for early, late, state in (
            (make_cc(PAPER, 400e9, 0.0), make_cc(PAPER, 400e9, start_s), _state),
            (Dctcp(400e9, 0.0, base_rtt_s=6e-6), Dctcp(400e9, start_s, base_rtt_s=6e-6),
             _dctcp_state),
            (Timely(400e9, 0.0, initial_rate_bps=9e9), Timely(400e9, start_s,
                                                                initial_rate_bps=9e9),
             _timely_state)):
        algo, twin = c_twin(early)
        qp = TxQp()
        setattr(qp, twin.QP_FIELD, ctypes.addressof(twin))
        trace = tx_lib.cc_start(qp, start_s)
        assert trace == late.trace() == algo.trace()
        assert state(twin) == state(late.rp if isinstance(twin, TxRp) else late)
    assert math.isnan(tx_lib.cc_start(TxQp(), start_s)[0])  # no twin: NaN, Python reads it


def test_dcqcn_ignores_acks_as_the_compiled_loop_assumes():
    """roce_loop.c acts on a DCQCN QP's cumulative ACKs without Python (ack_here):
    right only while DCQCN's on_ack is the base's no-op and it keeps no timer."""
    from traffic.cc import CongestionControl

    assert Dcqcn.on_ack is CongestionControl.on_ack
    assert Dcqcn.next_timer_s == float("inf") and Dcqcn.window_bytes is None
