"""TIMELY against steps computed by hand from Mittal et al., SIGCOMM 2015, Algorithm 1."""

from __future__ import annotations

import math

import pytest

from core.errors import ParameterError
from traffic.ccalgos import Timely

US = 1e-6


def test_defaults_are_the_papers_scaled_to_the_line_rate():
    cc = Timely(10e9)
    assert (cc.t_low_s, cc.t_high_s, cc.beta, cc.ewma_alpha) == (50e-6, 500e-6, 0.8, 0.875)
    assert cc.additive_step_bps == 10e6          # the paper's 10 Mb/s at 10 Gb/s
    assert Timely(400e9).additive_step_bps == 400e6
    assert (cc.hai_threshold, cc.hai_factor) == (5, 5)
    assert cc.min_rate_bps == 10e6                # line / 1000, the HPCC simulator's floor
    assert cc.rate_bps == 10e9 and cc.window_bytes is None and math.isinf(cc.next_timer_s)


def test_each_branch_by_hand():
    cc = Timely(10e9, initial_rate_bps=5e9)   # delta = 10 Mb/s, beta = 0.8, alpha = 0.875
    # 1. rtt 60 us (T_low < rtt < T_high), first sample: diff 0, gradient 0 <= 0 -> +delta
    cc.on_ack(4096, 60 * US, False, (), 100 * US)
    assert cc.gradient == 0.0 and cc.rate_bps == pytest.approx(5.01e9)
    # 2. rtt 30 us < T_low: diff -30 us, rtt_diff = 0.875 * -30 = -26.25 us,
    #    min_rtt = 30 us, gradient = -0.875; rate + delta = 5.02e9
    cc.on_ack(4096, 30 * US, False, (), 200 * US)
    assert cc.rtt_diff_s == pytest.approx(-26.25 * US)
    assert cc.gradient == pytest.approx(-0.875)
    assert cc.rate_bps == pytest.approx(5.02e9)
    # 3. rtt 66 us: diff +36, rtt_diff = 0.125 * -26.25 + 0.875 * 36 = -3.28125 + 31.5
    #    = 28.21875 us, gradient = 28.21875 / 30 = 0.940625 > 0:
    #    rate = 5.02e9 (1 - 0.8 * 0.940625) = 5.02e9 * 0.2475 = 1.24245e9
    cc.on_ack(4096, 66 * US, False, (), 300 * US)
    assert cc.gradient == pytest.approx(0.940625)
    assert cc.rate_bps == pytest.approx(1.24245e9)
    # 4. rtt 600 us > T_high: rate = 1.24245e9 (1 - 0.8 (1 - 500/600)) = 1.07679e9
    cc.on_ack(4096, 600 * US, False, (), 400 * US)
    assert cc.rate_bps == pytest.approx(1.07679e9)
    assert cc.trace() == (cc.rate_bps, cc.rate_bps, cc.gradient)


def test_hai_after_five_non_positive_gradients():
    cc = Timely(10e9, initial_rate_bps=1e9)
    expected = 1e9
    for k in range(1, 8):
        cc.on_ack(4096, 100 * US, False, (), k * 10 * US)   # constant RTT: gradient 0
        expected += (5 if k >= 5 else 1) * 10e6             # N = 5 from the fifth event
        assert cc.negative_gradients == k
        assert cc.rate_bps == pytest.approx(expected)
    # 1e9 + 4 * 10e6 + 3 * 50e6 = 1.19e9
    assert cc.rate_bps == pytest.approx(1.19e9)
    cc.on_ack(4096, 120 * US, False, (), 100 * US)          # positive gradient resets HAI
    assert cc.negative_gradients == 0 and cc.rate_bps < 1.19e9


def test_rate_is_clamped_to_min_rate_and_line_rate():
    cc = Timely(10e9, min_rate_bps=1e6)
    cc.on_ack(4096, 60 * US, False, (), 1 * US)
    assert cc.rate_bps == 10e9                          # + delta, capped at line rate
    cc.on_ack(4096, 300 * US, False, (), 2 * US)
    # rtt_diff = 0.875 * 240 = 210 us, gradient = 210/60 = 3.5: factor 1 - 2.8 < 0 -> floor
    assert cc.rate_bps == 1e6


def test_fixed_min_rtt_and_ignored_signals():
    cc = Timely(10e9, initial_rate_bps=2e9, min_rtt_s=20 * US)
    cc.on_ack(4096, 60 * US, False, (), 1 * US)
    cc.on_ack(4096, 70 * US, False, (), 2 * US)
    assert cc.gradient == pytest.approx(0.875 * 10 / 20)     # normalised by the fixed 20 us
    before = cc.rate_bps
    cc.on_cnp(3 * US)
    cc.on_ack(4096, math.nan, True, (), 4 * US)              # no RTT sample: no update
    assert cc.rate_bps == before and cc.cnps_received == 1


@pytest.mark.parametrize("kw", [{"ewma_alpha": 0}, {"beta": 2}, {"t_low_s": -1e-6},
                                {"t_low_s": 1e-3, "t_high_s": 1e-4}, {"hai_threshold": 0},
                                {"hai_factor": 1.5}, {"min_rate_bps": 1e12}])
def test_bad_parameters_are_refused(kw: dict[str, float]):
    with pytest.raises(ParameterError):
        Timely(10e9, **kw)
