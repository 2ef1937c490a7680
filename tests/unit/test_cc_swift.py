"""Swift against steps computed by hand from Kumar et al., SIGCOMM 2020, Algorithm 1."""

from __future__ import annotations

import math

import pytest

from core.errors import ParameterError
from traffic.ccalgos import IntRecord, Swift

US = 1e-6

# Flow scaling with fs_range = 5 us over [0.1, 100] packets:
#   a = 5 / (1/sqrt(0.1) - 1/sqrt(100)) = 5 / (3.16227766 - 0.1) = 1.63277160 us
#   b = -a / sqrt(100) = -0.16327716 us
A_US = 1.6327716016858758
B_US = -0.16327716016858757


def make() -> Swift:
    # 8 Gb/s and 1000-byte packets (1 packet per us); base target 10 us + 2 hops x 1 us
    return Swift(8e9, 0.0, mtu_bytes=1000, base_target_s=10 * US, hop_scale_s=1 * US, hops=2,
                 fs_range_s=5 * US, fs_min_cwnd=0.1, fs_max_cwnd=100, ai_packets=1.0,
                 beta=0.8, max_mdf=0.5, initial_cwnd_packets=4)


def test_target_delay_is_base_plus_hops_plus_flow_scaling():
    cc = make()
    # cwnd 4: fs = a/2 + b = 0.81638580 - 0.16327716 = 0.65310864 us -> 12.65310864 us
    assert cc.target_for(4, 2) == pytest.approx(12.65310864 * US)
    assert cc.target_for(0.1, 0) == pytest.approx(15 * US)   # fs = fs_range at fs_min_cwnd
    assert cc.target_for(100, 0) == pytest.approx(10 * US)   # fs = 0 at fs_max_cwnd
    assert cc.target_for(0.01, 0) == pytest.approx(15 * US)  # clamped to fs_range
    assert cc.target_for(1e4, 0) == pytest.approx(10 * US)   # clamped to 0


def test_ai_md_once_per_rtt_and_pacing_below_one_packet_by_hand():
    cc = make()
    # 1. delay 11 us < target 12.653 us: cwnd = 4 + ai * 2 packets / 4 = 4.5
    cc.on_ack(2000, 11 * US, False, (), 11 * US)
    assert cc.cwnd == pytest.approx(4.5)
    assert cc.window_bytes == pytest.approx(4500) and cc.rate_bps == 8e9
    # 2. delay 20 us; target(4.5) = 12 + a/sqrt(4.5) + b = 12 + 0.76969711 - 0.16327716
    #    = 12.60641875 us; factor = max(1 - 0.8 (20 - 12.60641875)/20, 0.5) = 0.70425675
    #    cwnd = 4.5 * 0.70425675 = 3.16915538
    cc.on_ack(1000, 20 * US, False, (), 20 * US)
    assert cc.target_delay_s == pytest.approx(12.60641875 * US)
    assert cc.cwnd == pytest.approx(3.16915538)
    # 3. 10 us after that decrease (< the 20 us RTT): no second decrease
    cc.on_ack(1000, 20 * US, False, (), 30 * US)
    assert cc.cwnd == pytest.approx(3.16915538)
    # 4. at 130 us, delay 100 us (110 us since the decrease >= 100 us): target(3.169) =
    #    12.75390093 us; 1 - 0.8 (100 - 12.754)/100 = 0.30203 < 1 - max_mdf -> factor 0.5
    cc.on_ack(1000, 100 * US, False, (), 130 * US)
    assert cc.cwnd == pytest.approx(1.58457769)
    # 5. at 300 us, delay 100 us again: factor 0.5 -> cwnd 0.79228884 < 1 packet:
    #    the window stays one packet, the rate paces at cwnd * 1000 B * 8 / 100 us
    cc.on_ack(1000, 100 * US, False, (), 300 * US)
    assert cc.cwnd == pytest.approx(0.79228884)
    assert cc.window_bytes == 1000
    assert cc.rate_bps == pytest.approx(0.79228884 * 8000 / (100 * US))   # 63.38 Mb/s
    # 6. below one packet the increase is ai * num_acked: 0.79228884 + 1 = 1.79228884
    cc.on_ack(1000, 11 * US, False, (), 310 * US)
    assert cc.cwnd == pytest.approx(1.79228884)
    assert cc.rate_bps == 8e9


def test_hops_come_from_int_records_when_present():
    cc = make()
    recs = [IntRecord(0, 0, 0.0, 8e9)] * 3
    cc.on_ack(1000, 11 * US, False, recs, 11 * US)
    # 3 hops: 10 + 3 + fs(4) = 13.65310864 us (fs of the cwnd before the update)
    assert cc.target_delay_s == pytest.approx(13.65310864 * US)


def test_window_is_clamped_and_cnps_ignored():
    cc = Swift(8e9, mtu_bytes=1000, min_cwnd=0.5, max_cwnd_packets=5, initial_cwnd_packets=4)
    for k in range(100):
        cc.on_ack(1000, 1 * US, False, (), k * US)
    assert cc.cwnd == 5
    for k in range(1, 20):
        cc.on_ack(1000, 1000 * US, False, (), k * 2000 * US)
    assert cc.cwnd == 0.5
    cc.on_cnp(1.0)
    assert cc.cwnd == 0.5 and cc.cnps_received == 1 and math.isinf(cc.next_timer_s)


@pytest.mark.parametrize("kw", [{"beta": 0}, {"max_mdf": 1.5}, {"fs_min_cwnd": 200},
                                {"hops": -1}, {"hop_scale_s": -1e-6}, {"ai_packets": 0},
                                {"min_cwnd": 10, "max_cwnd_packets": 1}])
def test_bad_parameters_are_refused(kw: dict[str, float]):
    with pytest.raises(ParameterError):
        Swift(100e9, **kw)
