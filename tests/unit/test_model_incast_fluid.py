"""The fluid DCQCN incast: hand-worked transients, the CC-off limit, the fixed point."""

from __future__ import annotations

import math

import pytest

from emu.model.incast_fluid import incast_dcqcn
from emu.model.queueing import DcqcnParams, dcqcn_fixed_point, incast_cc_off
from traffic.dcqcn import PARAMS

G = 1e9
C = 400 * G
PKT = 4000
US = 1e-6
PAPER = PARAMS["paper"]


def rate_at(res, t_s: float) -> float:
    return [r for t, r in res.rate_trace if t <= t_s][-1]


def time_average_queue(res, t0_s: float, t1_s: float) -> float:
    """Mean of the (piecewise linear) queue trace over [t0, t1]."""
    acc = 0.0
    for (ta, qa), (tb, qb) in zip(res.queue_trace[:-1], res.queue_trace[1:], strict=True):
        lo, hi = max(ta, t0_s), min(tb, t1_s)
        if hi > lo:
            slope = (qb - qa) / (tb - ta)
            acc += (qa + slope * (0.5 * (lo + hi) - ta)) * (hi - lo)
    return acc / (t1_s - t0_s)


def test_step_marking_first_and_second_cnp_by_hand():
    # 2 senders at C into C: the queue grows at C = 50 GB/s and passes K = 100 KB at 2 us.
    # Above K every packet is marked: a flow's first expected mark is one packet later
    # (4000 B at 400G = 80 ns), enqueued at 2.08 us behind 104 KB, so it reaches the
    # receiver at 2.08 + 2.08 = 4.16 us and the CNP acts 1 us (base RTT) later, at 5.16 us:
    # alpha = 1 halves the rate to 200G. The queue (258 KB) then stays flat (2 x 200G = C).
    # The NP takes marks again at 4.16 + 50 = 54.16 us, i.e. from packets enqueued at
    # 49 us (5.16 us of queue); one packet later at 200G (160 ns) -> enqueued 49.16 us,
    # received 54.32 us, acting at 55.32 us: 100G. The rate timer (55 us after the cut,
    # 60.16 us) comes later, and alpha is still 1 (its timer too).
    res = incast_dcqcn(2, 10e6, C, C, 8e6, 100e3, 100e3, 1.0, PAPER, base_rtt_s=1 * US,
                       packet_bytes=PKT)
    (t1, r1), (t2, r2) = res.rate_trace[1:3]
    assert t1 == pytest.approx(5.16 * US) and r1 == pytest.approx(200 * G)
    assert t2 == pytest.approx(55.32 * US) and r2 == pytest.approx(100 * G)
    flat = [q for t, q in res.queue_trace if 5.16 * US <= t <= 55.32 * US]
    assert flat and all(q == pytest.approx(258e3) for q in flat)
    # The second CNP restarted the rate timer: fast recovery halfway to R_T = 200G at
    # 110.32 us. The queue drained meanwhile (2 x 100G < C) and recovery only nears
    # 200G again as the 10 MB run out, so there is no third CNP.
    assert rate_at(res, 110.3 * US) == pytest.approx(100 * G)
    assert rate_at(res, 110.33 * US) == pytest.approx(150 * G)
    assert res.cnps == 4
    assert res.dropped_bytes == 0.0 and res.peak_queue_bytes < 8e6


def test_first_cnp_inside_the_marking_band_by_hand():
    # Same ramp, Kmin 100 KB, Kmax 400 KB, Pmax 0.2: from 2 us, p = 0.2 x 50e9 (t - 2us)
    # / 300e3, a flow sends 12.5e6 packets/s, so its expected marks are
    # 12.5e6 x (1e5 / 3) x x^2 / 2 -> 1 at x = sqrt(4.8e-12) = 2.191 us after 2 us.
    # That packet waits q/C = its enqueue time (the queue is 50 GB/s x t): CNP at
    # 2 t* + 1 us.
    t_star = 2 * US + math.sqrt(4.8e-12)
    res = incast_dcqcn(2, 10e6, C, C, 8e6, 100e3, 400e3, 0.2, PAPER, base_rtt_s=1 * US,
                       packet_bytes=PKT)
    t1, r1 = res.rate_trace[1]
    assert t1 == pytest.approx(2 * t_star + 1 * US, rel=1e-9)
    assert r1 == pytest.approx(200 * G)


@pytest.mark.parametrize("size_bytes, buffer_bytes", [(1e6, 8e6), (10e6, 1e6)])
def test_marking_above_the_buffer_is_the_cc_off_incast(size_bytes, buffer_bytes):
    # No packet is ever marked, so DCQCN never acts: the CC-off incast, exactly.
    n, above = 4, 2 * buffer_bytes
    res = incast_dcqcn(n, size_bytes, C, C, buffer_bytes, above, above, 1.0, PAPER,
                       base_rtt_s=2 * US, alpha_s=1 * US, packet_bytes=PKT)
    off = incast_cc_off(n, size_bytes, C, C, buffer_bytes, alpha_s=1 * US, base_rtt_s=2 * US,
                        packet_bytes=PKT)
    assert res.marks == 0.0 and res.cnps == 0
    assert res.rate_trace == ((0.0, C),)
    assert res.peak_queue_bytes == pytest.approx(off.peak_queue_bytes)
    assert res.dropped_bytes == pytest.approx(off.dropped_bytes)   # first-pass overflow
    if not off.drops:   # with drops, go-back-N recovery is the CC-off model's alone
        assert res.completion_s == pytest.approx(off.completion_s)
        for q in (0.01, 0.5, 0.99, 0.999):
            assert res.queue.quantile(q) == pytest.approx(off.queue.quantile(q), rel=1e-6)


def test_port_keeping_up_has_no_queue():
    res = incast_dcqcn(2, 1e6, 100 * G, C, 8e6, 100e3, 400e3, 0.2, PAPER, alpha_s=1 * US)
    assert res.peak_queue_bytes == 0.0 and res.marks == 0.0 and res.cnps == 0
    assert res.completion_s == pytest.approx(8e6 / (100 * G) + 1 * US)
    assert res.queue.quantile(0.999) == 0.0


@pytest.mark.parametrize("n", [2, 4])
def test_long_messages_settle_at_the_fixed_point(n):
    # At the paper's own line rate (40G) and parameters, 64 MiB per sender lasts
    # 27 ms x N/2, several alpha relaxation times (256 x 55 us = 14 ms). Over the
    # last quarter (before the final drain) the queue averages the fixed point's q*
    # and the senders share the port at C/N.
    line, kmin, kmax, pmax = 40 * G, 40e3, 160e3, 0.2
    res = incast_dcqcn(n, 64 * 2**20, line, line, 8e6, kmin, kmax, pmax, PAPER,
                       base_rtt_s=2 * US)
    fp = dcqcn_fixed_point(n, line, kmin, kmax, pmax, DcqcnParams.of(PAPER, line))
    t_end = n * 64 * 2**20 * 8 / line
    assert not fp.saturated
    q_avg = time_average_queue(res, 0.75 * t_end, 0.95 * t_end)
    assert q_avg == pytest.approx(fp.queue_bytes, rel=0.1)
    # the port stays busy in steady state: the late queue never empties
    assert min(q for t, q in res.queue_trace if 0.75 * t_end <= t <= 0.95 * t_end) > 0
