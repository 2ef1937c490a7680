"""DCQCN reaction/notification points against hand-computed trajectories.

Expected values are written from the paper's equations in closed form (or as an
explicit recurrence in the test), never by calling the code under test.
"""

from __future__ import annotations

import math

import pytest

from core.errors import ParameterError
from traffic.dcqcn import (
    PARAMS,
    DcqcnParams,
    NotificationPoint,
    ReactionPoint,
    get_params,
)

PAPER = PARAMS["paper"]
NIC = PARAMS["nic"]
L = 40e9  # the paper's line rate
G = 1 / 256
K = 55e-6  # alpha timer and rate-increase timer of the paper
US = 1e-6

approx = lambda x: pytest.approx(x, rel=1e-12, abs=1e-6)  # noqa: E731


def paper(**changes: object) -> DcqcnParams:
    assert PAPER is not None
    return PAPER.with_(**changes)


# -- parameter sets -------------------------------------------------------------------

def test_paper_parameter_set() -> None:
    p = PAPER
    assert p is not None
    assert p.g == 1 / 256 and p.alpha_initial == 1.0
    assert p.alpha_timer_s == 55e-6 and p.rate_increase_timer_s == 55e-6
    assert p.byte_counter_bytes == 10 * 1024 * 1024 and p.fast_recovery_steps == 5
    assert p.rate_ai_bps == 40e6 and p.rate_hai_bps == 200e6 and p.line_rate_bps == 40e9
    assert p.cnp_interval_s == 50e-6 and p.clamp_target_rate


def test_nic_parameter_set() -> None:
    p = NIC
    assert p is not None
    assert p.rate_increase_timer_s == 300e-6 and p.byte_counter_bytes == 32767
    assert p.fast_recovery_steps == 1 and p.rate_ai_bps == 5e6 and p.rate_hai_bps == 50e6
    assert p.alpha_timer_s == 1e-6 and p.min_rate_bps == 1e6
    assert not p.clamp_target_rate and p.clamp_target_rate_after_time_inc


def test_paper_increase_steps_scale_with_line_rate_nic_steps_do_not() -> None:
    rp = ReactionPoint(PAPER, 400e9)
    assert rp.rate_ai_bps == approx(400e6) and rp.rate_hai_bps == approx(2e9)
    nic = ReactionPoint(NIC, 100e9)
    assert nic.rate_ai_bps == 5e6 and nic.rate_hai_bps == 50e6


def test_cc_off_has_no_parameters() -> None:
    assert get_params("off") is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("g", 0.0), ("g", 1.5), ("alpha_initial", -0.1), ("alpha_timer_s", 0.0),
     ("rate_increase_timer_s", float("nan")), ("byte_counter_bytes", 0),
     ("byte_counter_bytes", 1.5), ("fast_recovery_steps", -1), ("rate_ai_bps", -1.0),
     ("cnp_interval_s", float("inf")), ("min_rate_bps", 50e9)],
)
def test_invalid_parameters_name_the_parameter(field: str, value: object) -> None:
    with pytest.raises(ParameterError, match=field):
        paper(**{field: value})


def test_unknown_names_are_parameter_errors() -> None:
    with pytest.raises(ParameterError, match="cc"):
        get_params("bogus")
    with pytest.raises(ParameterError, match="line_rate_bps"):
        ReactionPoint(PAPER, 0.0)
    with pytest.raises(ParameterError, match="event kind"):
        ReactionPoint(PAPER).drive([(0.0, "nak", 0)])
    with pytest.raises(ParameterError, match="cnp_interval_s"):
        NotificationPoint(-1.0)


# -- reductions -------------------------------------------------------------------------

def test_single_cnp_with_initial_alpha_halves_rate() -> None:
    rp = ReactionPoint(PAPER, L)
    rp.on_cnp(10 * US)  # before the first alpha timer: alpha still 1
    assert rp.rate_bps == approx(L / 2)
    assert rp.target_rate_bps == approx(L)
    assert rp.alpha == approx((1 - G) * 1 + G)  # == 1
    assert rp.cnps_received == 1 and rp.rate_reductions == 1


def test_single_cnp_after_alpha_decay() -> None:
    rp = ReactionPoint(PAPER, L)
    rp.on_cnp(3.5 * K)  # three decays at K, 2K, 3K
    a0 = (1 - G) ** 3
    assert rp.rate_bps == approx(L * (1 - a0 / 2))
    assert rp.alpha == approx((1 - G) * a0 + G)


def test_cnp_train_successive_reductions_alpha_grows() -> None:
    a = 0.5
    rp = ReactionPoint(paper(alpha_initial=a), L)
    rate = L
    # CNPs every 50 us: shorter than both 55 us timers, so no decay and no increase.
    for n in range(1, 7):
        rp.on_cnp(n * 50 * US)
        target = rate
        rate = rate * (1 - a / 2)
        a = (1 - G) * a + G
        assert rp.rate_bps == approx(rate)
        assert rp.target_rate_bps == approx(target)
        assert rp.alpha == approx(a)
        # closed form of the alpha recurrence
        assert rp.alpha == approx(1 - 0.5 * (1 - G) ** n)
    assert rp.timer_stage == 0 and rp.byte_stage == 0


def test_alpha_decays_without_cnp() -> None:
    rp = ReactionPoint(PAPER, L)
    rp.advance(10.5 * K)
    assert rp.alpha == approx((1 - G) ** 10)
    rp.on_cnp(11.2 * K)  # decays at 11K first; alpha timer restarts at the CNP
    a = (1 - G) ** 11
    a = (1 - G) * a + G
    assert rp.alpha == approx(a)
    rp.advance(11.2 * K + 2.5 * K)
    assert rp.alpha == approx(a * (1 - G) ** 2)


def test_long_idle_advance_is_exact_and_cheap() -> None:
    rp = ReactionPoint(PAPER, L)
    rp.advance(1.0)
    n = math.floor(1.0 / K)  # 18181 expiries
    assert rp.alpha == pytest.approx((1 - G) ** n, rel=1e-9)
    assert rp.timer_stage == n
    assert rp.rate_bps == L


def test_min_rate_clamp() -> None:
    rp = ReactionPoint(paper(min_rate_bps=1e9), L)
    for n in range(10):  # 10 us apart: alpha stays 1, each CNP halves
        rp.on_cnp(n * 10 * US)
    assert rp.rate_bps == 1e9  # 40G / 2^10 < 1G
    assert rp.rate_reductions == 10


# -- increases ----------------------------------------------------------------------------

def test_recovery_fast_additive_hyper() -> None:
    b = 1_000_000
    rp = ReactionPoint(paper(byte_counter_bytes=b), L)
    rai, rhai = 40e6, 200e6
    rp.on_cnp(0.0)  # R_T = L, R_C = L/2
    rp.on_cnp(1 * US)  # R_T = L/2, R_C = L/4 (alpha is still 1)
    assert rp.target_rate_bps == approx(L / 2) and rp.rate_bps == approx(L / 4)
    t0 = 1 * US
    # five fast-recovery timer events: R_C_k = R_T - (R_T - R_C0) / 2^k
    for k in range(1, 6):
        rp.advance(t0 + k * K + 0.5 * US)
        assert rp.target_rate_bps == approx(L / 2)
        assert rp.rate_bps == approx(L / 2 - (L / 4) / 2**k)
        assert rp.timer_stage == k
    rt, rc = L / 2, L / 2 - (L / 4) / 32
    # T = 5 >= F, BC = 0 < F: additive increase
    for k in (6, 7):
        rp.advance(t0 + k * K + 0.5 * US)
        rt += rai
        rc = (rt + rc) / 2
        assert rp.target_rate_bps == approx(rt) and rp.rate_bps == approx(rc)
    # 7 byte-counter events at once: BC = 0..4 -> additive; BC = 5, 6 -> hyper i = 1, 2
    rp.on_bytes_sent(7 * b + 10, t0 + 7 * K + 1 * US)
    for bc in range(7):
        rt += rai if bc < 5 else (min(7, bc) - 5 + 1) * rhai
        rc = (rt + rc) / 2
    assert rp.byte_stage == 7
    assert rp.target_rate_bps == approx(rt) and rp.rate_bps == approx(rc)
    # next timer event: T = 7, BC = 7 -> hyper with i = 3
    rp.advance(t0 + 8 * K + 0.5 * US)
    rt += 3 * rhai
    rc = (rt + rc) / 2
    assert rp.target_rate_bps == approx(rt) and rp.rate_bps == approx(rc)
    assert rp.timer_stage == 8


def test_byte_counter_triggered_fast_recovery() -> None:
    b = 4096
    rp = ReactionPoint(paper(byte_counter_bytes=b), L)
    rp.on_cnp(0.0)
    rc0 = L / 2
    for i in range(1, 31):  # 30 x 410 = 12300 bytes = 3 B + 12, all before the timer
        rp.on_bytes_sent(410, i * US)
    assert rp.byte_stage == 3 and rp.timer_stage == 0
    assert rp.rate_bps == approx(L - (L - rc0) / 2**3)
    rp.on_bytes_sent(b - 12 - 1, 40 * US)  # one byte short
    assert rp.byte_stage == 3
    rp.on_bytes_sent(1, 41 * US)
    assert rp.byte_stage == 4
    assert rp.rate_bps == approx(L - (L - rc0) / 2**4)


def test_cnp_resets_counters_and_timers() -> None:
    rp = ReactionPoint(paper(byte_counter_bytes=1000), L)
    rp.on_cnp(0.0)
    rp.on_bytes_sent(2500, 1 * US)
    rp.advance(K + 1 * US)
    assert rp.byte_stage == 2 and rp.timer_stage == 1
    rp.on_cnp(60 * US)
    assert rp.byte_stage == 0 and rp.timer_stage == 0
    rp.on_bytes_sent(999, 61 * US)  # the 500 leftover bytes were discarded too
    assert rp.byte_stage == 0
    rp.advance(60 * US + K - 1 * US)  # timer restarted at the CNP
    assert rp.timer_stage == 0
    rp.advance(60 * US + K)
    assert rp.timer_stage == 1


def test_rate_never_exceeds_line_rate() -> None:
    rp = ReactionPoint(paper(byte_counter_bytes=1000), L)
    rp.on_cnp(0.0)
    for i in range(1, 300):
        rp.on_bytes_sent(1500, i * 10 * US)
        assert rp.rate_bps <= L and rp.target_rate_bps <= L
    assert rp.target_rate_bps == L
    assert rp.rate_bps == pytest.approx(L, rel=1e-12)


# -- NIC variants ---------------------------------------------------------------------------

def test_no_clamp_keeps_target_over_back_to_back_cnps() -> None:
    p = paper(clamp_target_rate=False, clamp_target_rate_after_time_inc=True)
    rp = ReactionPoint(p, L)
    rp.on_cnp(0.0)
    rp.on_cnp(10 * US)  # no increase in between: R_T stays L
    assert rp.target_rate_bps == approx(L) and rp.rate_bps == approx(L / 4)
    rp.advance(10 * US + K)  # one timer increase (fast recovery toward L)
    rc = (L + L / 4) / 2
    assert rp.rate_bps == approx(rc)
    rp.on_cnp(10 * US + K + 1 * US)  # after a timer increase: R_T <- R_C
    assert rp.target_rate_bps == approx(rc)


def test_no_clamp_after_time_inc_off_ignores_timer_increases() -> None:
    p = paper(clamp_target_rate=False, clamp_target_rate_after_time_inc=False,
              byte_counter_bytes=1000)
    rp = ReactionPoint(p, L)
    rp.on_cnp(0.0)
    rp.advance(K)  # timer increase only
    rp.on_cnp(K + 1 * US)
    assert rp.target_rate_bps == approx(L)
    rp.on_bytes_sent(1000, K + 2 * US)  # a byte-counter increase
    rc = rp.rate_bps
    rp.on_cnp(K + 3 * US)
    assert rp.target_rate_bps == approx(rc)


def test_rate_reduce_monitor_period_merges_cnps() -> None:
    rp = ReactionPoint(paper(rate_reduce_monitor_period_s=4 * US), L)
    rp.on_cnp(0.0)
    assert rp.rate_bps == approx(L / 2)
    rp.on_cnp(1 * US)
    rp.on_cnp(2 * US)
    assert rp.rate_bps == approx(L / 2) and rp.next_event_s == approx(4 * US)
    rp.advance(3.9 * US)
    assert rp.rate_reductions == 1
    rp.advance(5 * US)  # one merged reduction at t = 4 us
    assert rp.rate_reductions == 2 and rp.cnps_received == 3
    assert rp.rate_bps == approx(L / 4)
    rp.on_cnp(20 * US)  # outside the period: immediate
    assert rp.rate_reductions == 3


def test_rate_on_first_cnp() -> None:
    rp = ReactionPoint(paper(rate_on_first_cnp_bps=5e9), L)
    rp.on_cnp(0.0)
    assert rp.rate_bps == 5e9 and rp.target_rate_bps == L
    rp.on_cnp(1 * US)
    assert rp.rate_bps == approx(2.5e9)


def test_drive_returns_trace() -> None:
    rp = ReactionPoint(paper(byte_counter_bytes=1000), L)
    trace = rp.drive([(0.0, "cnp", 0), (1 * US, "bytes", 1000), (3.5 * K, "advance", 0)])
    assert len(trace) == 3
    t, rate, target, alpha = trace[0]
    assert (t, rate, target, alpha) == (0.0, approx(L / 2), approx(L), approx(1.0))
    assert trace[1][1] == approx(3 * L / 4)
    # three timer events (all fast recovery) and three alpha decays by 3.5 K
    assert trace[2][1] == approx(L - (L / 2) / 2**4)
    assert trace[2][3] == approx((1 - G) ** 3)


# -- notification point -----------------------------------------------------------------------

def test_notification_point_rate_limits_per_qp() -> None:
    np_ = NotificationPoint(50 * US)
    assert np_.on_packet("a", False, 0.0) is False
    assert np_.on_packet("a", True, 1 * US) is True
    assert np_.on_packet("a", True, 10 * US) is False
    assert np_.on_packet("b", True, 10 * US) is True  # other QP: independent
    assert np_.on_packet("a", True, 50 * US) is False  # 49 us after its last CNP
    assert np_.on_packet("a", True, 51 * US) is True
    assert np_.on_packet("b", True, 59 * US) is False
    assert np_.on_packet("b", True, 60 * US) is True
    assert np_.cnps_sent == 4 and np_.ce_packets == 7
    np_.forget("a")
    assert np_.on_packet("a", True, 52 * US) is True


def test_notification_point_zero_interval_answers_every_ce() -> None:
    np_ = NotificationPoint(0.0)
    assert all(np_.on_packet(7, True, 1e-6) for _ in range(5))
