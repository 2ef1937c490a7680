"""HPCC against steps computed by hand from Li et al., SIGCOMM 2019, Algorithm 1."""

from __future__ import annotations

import math

import pytest

from core.errors import ParameterError
from traffic.ccalgos import Hpcc, IntRecord

US = 1e-6
T = 10 * US     # base RTT
B = 100e9       # NIC and link rate: B T = 1e6 bits = 125000 bytes


def make() -> Hpcc:
    return Hpcc(B, 0.0, base_rtt_s=T, w_ai_bytes=1000)


def test_defaults():
    cc = Hpcc(400e9)
    assert (cc.eta, cc.max_stage) == (0.95, 5) and cc.target_utilisation == 0.95
    assert cc.window_bytes == pytest.approx(500_000)              # W_init = B T
    assert cc.w_ai_bytes == pytest.approx(500_000 * 0.05 / 100)   # 250 bytes
    assert cc.rate_bps == pytest.approx(400e9) and math.isinf(cc.next_timer_s)


def test_utilisation_and_window_by_hand():
    cc = make()
    assert cc.window_bytes == pytest.approx(125_000)
    # First ACK: nothing to compare with, the records are only stored.
    cc.on_ack(4096, T, False, [IntRecord(40_000, 0, 0.0, B)], 10 * US)
    assert cc.window_bytes == pytest.approx(125_000) and cc.utilisation == 1.0
    # ACK at 12 us for a frame sent at 2 us (after the last update at 0): a reference update.
    # tau = 2 us, txRate = 25000 B * 8 / 2 us = 100 Gb/s -> 1.0; queue min(50000, 40000) B
    # * 8 / (B T) = 0.32; u = 1.32. U = (1 - 0.2) 1 + 0.2 * 1.32 = 1.064 >= eta:
    # W = 125000 * 0.95 / 1.064 + 1000 = 112607.142857; W_c = W, incStage = 0.
    cc.on_ack(4096, T, False, [IntRecord(50_000, 25_000, 2 * US, B)], 12 * US)
    assert cc.utilisation == pytest.approx(1.064)
    assert cc.window_bytes == pytest.approx(112_607.142857)
    assert cc.reference_window == pytest.approx(112_607.142857)
    assert cc.rate_bps == pytest.approx(112_607.142857 * 8 / T)
    # ACK at 14 us for a frame sent at 4 us (< 12 us): same RTT, W_c unchanged.
    # tau = 2 us, txRate = 20000 B * 8 / 2 us = 80 Gb/s -> 0.8; queue min(30000, 50000) -> 0.24
    # u = 1.04; U = 0.8 * 1.064 + 0.2 * 1.04 = 1.0592; W = 112607.142857 * 0.95 / 1.0592 + 1000
    # = 101997.720652
    cc.on_ack(4096, T, False, [IntRecord(30_000, 45_000, 4 * US, B)], 14 * US)
    assert cc.utilisation == pytest.approx(1.0592)
    assert cc.window_bytes == pytest.approx(101_997.720652)
    assert cc.reference_window == pytest.approx(112_607.142857)
    assert cc.trace() == pytest.approx((cc.rate_bps, 112_607.142857 * 8 / T, 1.0592))


def test_additive_stages_then_multiplicative_increase():
    cc = make()
    ts, tx = 0.0, 0
    cc.on_ack(4096, T, False, [IntRecord(0, tx, ts, B)], 10 * US)
    for stage in range(1, 6):
        # one ACK per RTT (frame sent after the previous update); tau = T, 5000 B per T:
        # u = 5000 * 8 / 10 us / 100 Gb/s = 0.04 = U (weight tau/T = 1) < eta -> W = W_c + W_AI
        ts += T
        tx += 5000
        now = (10 + 10 * stage) * US
        cc.on_ack(4096, T, False, [IntRecord(0, tx, ts, B)], now)
        assert cc.utilisation == pytest.approx(0.04)
        assert cc.inc_stage == stage
    # W was clamped to B T on every stage (W_c + W_AI > 125000): the rate never exceeds B.
    assert cc.window_bytes == pytest.approx(125_000)
    # Stage 5 reached: the next update multiplies, W = W_c * 0.95 / 0.04 + W_AI -> clamped.
    ts += T
    tx += 5000
    cc.on_ack(4096, T, False, [IntRecord(0, tx, ts, B)], 70 * US)
    assert cc.inc_stage == 0 and cc.window_bytes == pytest.approx(125_000)


def test_additive_stages_from_a_reduced_window():
    cc = Hpcc(B, 0.0, base_rtt_s=T, w_ai_bytes=1000, initial_window_bytes=50_000)
    cc.on_ack(4096, T, False, [IntRecord(0, 0, 0.0, B)], 10 * US)
    for stage in range(1, 6):       # U = 0.04 < eta: W_c grows by W_AI per RTT
        cc.on_ack(4096, T, False, [IntRecord(0, 5000 * stage, stage * T, B)],
                  (10 + 10 * stage) * US)
        assert cc.window_bytes == pytest.approx(50_000 + 1000 * stage)
        assert cc.inc_stage == stage
    # incStage = maxStage: W = 55000 * 0.95 / 0.04 + 1000 = 1307250 -> clamped to B T
    cc.on_ack(4096, T, False, [IntRecord(0, 30_000, 6 * T, B)], 70 * US)
    assert cc.window_bytes == pytest.approx(125_000) and cc.inc_stage == 0


def test_bottleneck_hop_sets_u_and_tau_and_stale_hops_are_skipped():
    cc = make()
    first = [IntRecord(0, 0, 0.0, B), IntRecord(0, 0, 0.0, 2 * B), IntRecord(0, 0, 0.0, B)]
    cc.on_ack(4096, T, False, first, 10 * US)
    # hop 0: 2 us, 12500 B -> 50 Gb/s / 100 Gb/s = 0.5
    # hop 1: 4 us, 60000 B -> 120 Gb/s / 200 Gb/s = 0.6, queue min(0, 80000) = 0 -> u = 0.6
    # hop 2: same timestamp as before -> no sample
    # u = 0.6, tau = 4 us: U = 0.6 * 1 + 0.4 * 0.6 = 0.84
    second = [IntRecord(0, 12_500, 2 * US, B), IntRecord(80_000, 60_000, 4 * US, 2 * B),
              IntRecord(0, 0, 0.0, B)]
    cc.on_ack(4096, T, False, second, 12 * US)
    assert cc.utilisation == pytest.approx(0.84)
    # 0.84 < eta, stage 0: W = W_c + W_AI = 125000 + 1000 -> clamped to 125000
    assert cc.inc_stage == 1 and cc.window_bytes == pytest.approx(125_000)


def test_new_path_resets_and_other_signals_are_ignored():
    cc = make()
    cc.on_ack(4096, T, False, [IntRecord(0, 0, 0.0, B)], 10 * US)
    cc.on_ack(4096, T, False, [IntRecord(0, 0, 1 * US, B)] * 2, 12 * US)   # 2 hops now
    assert cc.utilisation == 1.0 and len(cc.last_records) == 2
    cc.on_ack(4096, T, True, (), 14 * US)       # no INT: nothing changes
    cc.on_cnp(15 * US)
    assert cc.window_bytes == pytest.approx(125_000) and cc.cnps_received == 1


@pytest.mark.parametrize("kw", [{"eta": 0}, {"eta": 1.2}, {"max_stage": -1},
                                {"base_rtt_s": 0}, {"w_ai_bytes": -5}, {"expected_flows": 0}])
def test_bad_parameters_are_refused(kw: dict[str, float]):
    with pytest.raises(ParameterError):
        Hpcc(B, **kw)
