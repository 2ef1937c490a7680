"""DCTCP window control against steps computed by hand from Alizadeh et al., SIGCOMM 2010."""

from __future__ import annotations

import math

import pytest

from core.errors import ParameterError
from traffic.ccalgos import Dctcp

US = 1e-6


def make(**kw: float) -> Dctcp:
    # 8 Gb/s, 1000-byte MTU, 10 kB initial window; alpha starts at 1 (the default)
    return Dctcp(8e9, 0.0, mtu_bytes=1000, initial_window_bytes=10_000, **kw)


def test_alpha_per_window_cut_once_per_window_and_additive_increase_by_hand():
    cc = make()
    assert cc.g == 1 / 16 and cc.alpha == 1.0 and cc.window_bytes == 10_000
    # Window 0 ends at the first ACK (its frame left at 0 >= start 0), as in TCP:
    # F = 0 -> alpha = 15/16 * 1 = 0.9375; no mark -> W = 10000 + 1000 = 11000.
    cc.on_ack(1000, 10 * US, False, (), 10 * US)
    assert cc.alpha == pytest.approx(0.9375)
    assert cc.window_bytes == pytest.approx(11_000)
    # Window 1 began at 10 us. Frames sent at 2, 4, 6 us (< 10 us) stay in it.
    cc.on_ack(1000, 10 * US, False, (), 12 * US)
    assert cc.window_bytes == pytest.approx(11_000)
    # First mark: W = 11000 (1 - 0.9375/2) = 11000 * 0.53125 = 5843.75 (alpha unchanged)
    cc.on_ack(1000, 10 * US, True, (), 14 * US)
    assert cc.window_bytes == pytest.approx(5843.75)
    assert cc.alpha == pytest.approx(0.9375)
    # A second mark in the same window does not cut again.
    cc.on_ack(1000, 10 * US, True, (), 16 * US)
    assert cc.window_bytes == pytest.approx(5843.75)
    # Frame sent at 11 us >= 10 us ends window 1: acked 4000, marked 2000, F = 0.5:
    # alpha = 15/16 * 0.9375 + 1/16 * 0.5 = 0.87890625 + 0.03125 = 0.91015625; no increase.
    cc.on_ack(1000, 10 * US, False, (), 21 * US)
    assert cc.alpha == pytest.approx(0.91015625)
    assert cc.window_bytes == pytest.approx(5843.75)
    # Window 2 (began at 21 us) ends at the frame sent at 21 us, no marks:
    # alpha = 15/16 * 0.91015625 = 0.853271484375; W = 5843.75 + 1000 = 6843.75.
    cc.on_ack(1000, 10 * US, False, (), 31 * US)
    assert cc.alpha == pytest.approx(0.853271484375)
    assert cc.window_bytes == pytest.approx(6843.75)
    # Window control only: the engine paces at line rate.
    assert cc.rate_bps == 8e9 and math.isinf(cc.next_timer_s)
    rate, target, alpha = cc.trace()
    assert rate == pytest.approx(6843.75 * 8 / (10 * US))      # W / last RTT
    assert target == pytest.approx(6843.75 * 8 / (10 * US))    # W / base RTT (10 us default)
    assert alpha == cc.alpha


def test_cnps_count_as_one_marked_frame_each():
    cc = make(alpha_initial=0.5, feedback="cnp")
    cc.on_ack(1000, 10 * US, False, (), 10 * US)   # window 0: alpha = 15/16 * 0.5 = 0.46875
    assert cc.alpha == pytest.approx(0.46875)
    assert cc.window_bytes == pytest.approx(11_000)
    # A CNP in window 1 cuts at once: W = 11000 (1 - 0.46875/2) = 8421.875
    cc.on_cnp(11 * US)
    assert cc.cnps_received == 1
    assert cc.window_bytes == pytest.approx(8421.875)
    for t in (12, 14, 16):
        cc.on_ack(1000, 10 * US, False, (), t * US)
    # Ends window 1: acked 4000, marked 1000 (one CNP = one MTU), F = 0.25:
    # alpha = 15/16 * 0.46875 + 1/16 * 0.25 = 0.439453125 + 0.015625 = 0.455078125
    cc.on_ack(1000, 10 * US, False, (), 21 * US)
    assert cc.alpha == pytest.approx(0.455078125)
    assert cc.window_bytes == pytest.approx(8421.875)


def test_fraction_is_capped_at_one_and_window_floored_at_min():
    cc = make(min_window_bytes=2000, feedback="cnp")
    cc.on_ack(1000, 10 * US, False, (), 10 * US)   # alpha = 0.9375
    for k in range(10):                            # 10 CNPs = 10000 "marked" > 1000 acked
        cc.on_cnp((11 + k * 0.1) * US)
    cc.on_ack(1000, 10 * US, False, (), 21 * US)   # F = min(1, 10000/1000) = 1
    assert cc.alpha == pytest.approx(15 / 16 * 0.9375 + 1 / 16)
    for start in range(21, 200, 10):               # every window marked: W falls to its floor
        cc.on_cnp((start + 5) * US)
        cc.on_ack(1000, 10 * US, False, (), (start + 10) * US)
    assert cc.window_bytes == 2000


def test_one_feedback_at_a_time_so_no_mark_counts_twice():
    echo = make()                            # default: the ACKs' ECN echo
    echo.on_cnp(1 * US)
    assert echo.cnps_received == 1 and echo.window_bytes == 10_000   # counted, ignored
    echo.on_ack(1000, 10 * US, True, (), 11 * US)
    assert echo.window_bytes == pytest.approx(10_000 * 0.5)          # alpha 1: halved
    cnp = make(feedback="cnp")
    cnp.on_ack(1000, 10 * US, True, (), 11 * US)                     # the echo is ignored
    assert cnp.window_bytes == pytest.approx(11_000)


@pytest.mark.parametrize("kw", [{"g": 0}, {"g": 1.5}, {"alpha_initial": -0.1}, {"mtu_bytes": 0},
                                {"base_rtt_s": math.inf}, {"initial_window_bytes": -1},
                                {"feedback": "ack"}])
def test_bad_parameters_are_refused(kw: dict[str, float]):
    with pytest.raises(ParameterError):
        Dctcp(100e9, **kw)


def test_default_window_is_one_bdp():
    cc = Dctcp(400e9)
    assert cc.window_bytes == pytest.approx(400e9 * 10e-6 / 8)   # 500 kB at 400G and 10 us
