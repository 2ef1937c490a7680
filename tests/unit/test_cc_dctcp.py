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


def test_alpha_per_window_cut_once_per_round_trip_and_additive_increase_by_hand():
    cc = make()
    assert cc.g == 1 / 16 and cc.alpha == 1.0 and cc.window_bytes == 10_000
    # An unmarked ACK of 1000 B grows W by MTU * 1000 / W = 100 -> 10100. Window 0
    # ends at this first ACK (its frame left at 0 >= start 0), as in TCP:
    # F = 0 -> alpha = 15/16 * 1 = 0.9375.
    cc.on_ack(1000, 10 * US, False, (), 10 * US)
    assert cc.alpha == pytest.approx(0.9375)
    assert cc.window_bytes == pytest.approx(10_100)
    # Window 1 began at 10 us; a frame sent at 2 us stays in it. W += 1e6 / 10100.
    cc.on_ack(1000, 10 * US, False, (), 12 * US)
    w = 10_100 + 1e6 / 10_100
    assert cc.window_bytes == pytest.approx(w)
    # First mark: W = w (1 - 0.9375/2) = w * 0.53125 (alpha unchanged); no increase.
    cc.on_ack(1000, 10 * US, True, (), 14 * US)
    w *= 0.53125
    assert cc.window_bytes == pytest.approx(w)
    assert cc.alpha == pytest.approx(0.9375)
    # Until an ACK covers a frame sent after the cut (14 us): no second cut (a mark
    # of a frame sent at 6 us), no increase (a frame sent at 11 us).
    cc.on_ack(1000, 10 * US, True, (), 16 * US)
    assert cc.window_bytes == pytest.approx(w)
    # The frame sent at 11 us >= 10 us ends window 1: acked 4000, marked 2000, F = 0.5:
    # alpha = 15/16 * 0.9375 + 1/16 * 0.5 = 0.87890625 + 0.03125 = 0.91015625.
    cc.on_ack(1000, 10 * US, False, (), 21 * US)
    assert cc.alpha == pytest.approx(0.91015625)
    assert cc.window_bytes == pytest.approx(w)
    # A frame sent at 21 us is past the cut: W grows again by 1e6 / W; it also ends
    # window 2 (began at 21 us), no marks: alpha = 15/16 * 0.91015625 = 0.853271484375.
    cc.on_ack(1000, 10 * US, False, (), 31 * US)
    w += 1e6 / w
    assert cc.alpha == pytest.approx(0.853271484375)
    assert cc.window_bytes == pytest.approx(w)
    # Window control only: the engine paces at line rate.
    assert cc.rate_bps == 8e9 and math.isinf(cc.next_timer_s)
    rate, target, alpha = cc.trace()
    assert rate == pytest.approx(w * 8 / (10 * US))      # W / last RTT
    assert target == pytest.approx(w * 8 / (10 * US))    # W / base RTT (10 us default)
    assert alpha == cc.alpha


def test_a_window_of_acks_grows_the_window_by_one_mtu_however_they_are_coalesced():
    for per_ack in (1000, 2000, 5000, 10_000):
        cc = make(alpha_initial=0.0)
        for k in range(10_000 // per_ack):
            cc.on_ack(per_ack, 10 * US, False, (), (10 + k) * US)
        # sum of MTU * a / W over one window of 10000 B: about one MTU (a bit less, as
        # W grows on the way; exactly one when one ACK covers it all)
        assert 950 <= cc.window_bytes - 10_000 <= 1000


def test_no_second_cut_until_an_ack_passes_the_first_even_when_a_window_ends_between():
    cc = make()
    cc.on_ack(1000, 10 * US, False, (), 10 * US)   # window 0 ends: alpha 0.9375, W 10100
    # Cut at 14 us (frame sent at 4 us): W = 10100 * 0.53125.
    cc.on_ack(1000, 10 * US, True, (), 14 * US)
    w = 10_100 * 0.53125
    assert cc.window_bytes == pytest.approx(w)
    # Window 1 (began 10 us) ends at 21 us: its frame left at 11 us, before the cut.
    cc.on_ack(1000, 10 * US, False, (), 21 * US)
    # A mark on a frame sent at 12 us was in flight at the cut: no second cut.
    cc.on_ack(1000, 10 * US, True, (), 22 * US)
    assert cc.window_bytes == pytest.approx(w)
    # A mark on a frame sent at 15 us, after the cut, cuts with the alpha of now:
    # window 1: acked 2000, marked 1000 -> alpha = 15/16 * 0.9375 + 1/16 * 0.5 = 0.91015625;
    # W = w (1 - 0.91015625 / 2) = w * 0.544921875.
    cc.on_ack(1000, 10 * US, True, (), 25 * US)
    assert cc.alpha == pytest.approx(0.91015625)
    assert cc.window_bytes == pytest.approx(w * 0.544921875)


def test_cnps_count_as_one_marked_frame_each():
    cc = make(alpha_initial=0.5, feedback="cnp")
    cc.on_ack(1000, 10 * US, False, (), 10 * US)   # window 0: alpha = 15/16 * 0.5 = 0.46875
    assert cc.alpha == pytest.approx(0.46875)
    assert cc.window_bytes == pytest.approx(10_100)
    # A CNP in window 1 cuts at once: W = 10100 (1 - 0.46875/2) = 7732.8125
    cc.on_cnp(11 * US)
    assert cc.cnps_received == 1
    assert cc.window_bytes == pytest.approx(7732.8125)
    for t in (12, 14, 16):                         # frames sent before the cut: no growth
        cc.on_ack(1000, 10 * US, False, (), t * US)
    assert cc.window_bytes == pytest.approx(7732.8125)
    # Ends window 1: acked 4000, marked 1000 (one CNP = one MTU), F = 0.25:
    # alpha = 15/16 * 0.46875 + 1/16 * 0.25 = 0.439453125 + 0.015625 = 0.455078125;
    # its frame (sent at 11 us) is past the cut: W += 1e6 / 7732.8125.
    cc.on_ack(1000, 10 * US, False, (), 21 * US)
    assert cc.alpha == pytest.approx(0.455078125)
    assert cc.window_bytes == pytest.approx(7732.8125 + 1e6 / 7732.8125)


def test_fraction_is_capped_at_one_and_window_floored_at_min():
    cc = make(min_window_bytes=2000, feedback="cnp")
    cc.on_ack(1000, 10 * US, False, (), 10 * US)   # alpha = 0.9375
    for k in range(10):                            # 10 CNPs = 10000 "marked" > 1000 acked
        cc.on_cnp((11 + k * 0.1) * US)
    cc.on_ack(1000, 10 * US, False, (), 21 * US)   # F = min(1, 10000/1000) = 1
    assert cc.alpha == pytest.approx(15 / 16 * 0.9375 + 1 / 16)
    # Every window marked, each ACK past the last cut: W falls to its floor.
    for start in range(21, 300, 12):
        cc.on_cnp((start + 1) * US)
        assert cc.window_bytes >= 2000
        cc.on_ack(1000, 10 * US, False, (), (start + 12) * US)   # its frame left after the cut
    cc.on_cnp(400 * US)
    assert cc.window_bytes == 2000


def test_one_feedback_at_a_time_so_no_mark_counts_twice():
    echo = make()                            # default: the ACKs' ECN echo
    echo.on_cnp(1 * US)
    assert echo.cnps_received == 1 and echo.window_bytes == 10_000   # counted, ignored
    echo.on_ack(1000, 10 * US, True, (), 11 * US)
    assert echo.window_bytes == pytest.approx(10_000 * 0.5)          # alpha 1: halved
    cnp = make(feedback="cnp")
    cnp.on_ack(1000, 10 * US, True, (), 11 * US)                     # the echo is ignored
    assert cnp.window_bytes == pytest.approx(10_100)                 # an unmarked ACK


@pytest.mark.parametrize("kw", [{"g": 0}, {"g": 1.5}, {"alpha_initial": -0.1}, {"mtu_bytes": 0},
                                {"base_rtt_s": math.inf}, {"initial_window_bytes": -1},
                                {"feedback": "ack"}])
def test_bad_parameters_are_refused(kw: dict[str, float]):
    with pytest.raises(ParameterError):
        Dctcp(100e9, **kw)


def test_default_window_is_one_bdp():
    cc = Dctcp(400e9)
    assert cc.window_bytes == pytest.approx(400e9 * 10e-6 / 8)   # 500 kB at 400G and 10 us
