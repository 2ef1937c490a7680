"""DCTCP's queue oscillation (model.dctcp_oscillation) against figures computed by hand."""

import math

import pytest

from core.errors import ParameterError
from model.dctcp_oscillation import dctcp_oscillation, steady_alpha


def test_alpha_solves_the_papers_equation_and_is_near_its_approximation():
    for w in (2.0, 10.0, 61.67, 500.0):
        a = steady_alpha(w)
        assert a * a * (1 - a / 4) == pytest.approx((2 * w + 1) / (w + 1) ** 2, rel=1e-12)
        # sqrt(2/W) is the paper's approximation for large windows
        if w >= 50:
            assert a == pytest.approx(math.sqrt(2 / w), rel=0.03)


def test_alpha_is_one_when_the_window_is_tiny():
    assert steady_alpha(0.5) == 1.0


def test_two_flows_at_10g_hand_computed():
    # 10 Gb/s, 1500 B packets (1500 B in the queue too), RTT 100 us, K = 40 packets:
    # C = 833,333 pkt/s, C*RTT = 83.33 pkts, W* = (83.33 + 40) / 2 = 61.67,
    # alpha^2 (1 - alpha/4) = 124.33 / 62.67^2 = 0.031658 -> alpha = 0.18212,
    # D = 62.67 * 0.18212 / 2 = 5.707, A = 2 D = 11.41 pkts, Q_max = 42 pkts,
    # period = D x (100 us + 40 / 833,333 s) = 5.707 x 148 us = 844.6 us.
    osc = dctcp_oscillation(2, 10e9, 100e-6, 40 * 1500, 1500, 1500)
    assert osc.window_packets == pytest.approx(61.667, rel=1e-4)
    assert osc.alpha == pytest.approx(0.18212, rel=1e-3)
    assert osc.cut_packets == pytest.approx(5.707, rel=1e-3)
    assert osc.amplitude_bytes == pytest.approx(11.41 * 1500, rel=1e-3)
    assert osc.q_max_bytes == pytest.approx(42 * 1500)
    assert osc.q_min_bytes == pytest.approx((42 - 11.41) * 1500, rel=1e-3)
    assert osc.mean_bytes == pytest.approx((42 - 11.41 / 2) * 1500, rel=1e-3)
    assert osc.period_s == pytest.approx(844.6e-6, rel=1e-3)


def test_wire_overhead_counts_in_capacity_not_in_the_queue():
    plain = dctcp_oscillation(4, 100e9, 5e-6, 40_000, 4154, 4154)
    wire = dctcp_oscillation(4, 100e9, 5e-6, 40_000, 4178, 4154)
    assert wire.window_packets < plain.window_packets      # fewer packets in flight
    assert wire.q_max_bytes == plain.q_max_bytes           # K + n frames either way


def test_a_threshold_far_below_the_guideline_empties_the_queue():
    osc = dctcp_oscillation(1, 100e9, 100e-6, 0, 1500, 1500)
    assert osc.q_min_bytes == 0 and osc.amplitude_bytes == osc.q_max_bytes


@pytest.mark.parametrize("kwargs", [dict(n_flows=0), dict(capacity_bps=0), dict(rtt_s=-1),
                                    dict(k_bytes=-1), dict(wire_packet_bytes=0)])
def test_bad_input_is_refused(kwargs):
    args = dict(n_flows=2, capacity_bps=10e9, rtt_s=1e-5, k_bytes=1e4, wire_packet_bytes=1500,
                queue_packet_bytes=1500) | kwargs
    with pytest.raises(ParameterError):
        dctcp_oscillation(**args)
