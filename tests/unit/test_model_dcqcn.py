"""The model's own DCQCN: parameter sets, reaction point and fluid equations against
hand computations, and the fixed point of the CoNEXT'16 fluid model."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from core.dcqcn_params import NIC, PAPER, DcqcnParams
from core.ecn import marking_curve as mark_probability
from model.dcqcn_fluid import (
    MeanFieldSender,
    ReactionPoint,
    dcqcn_fixed_point,
    dcqcn_params,
    increase_event_rates,
    mark_window_probability,
)
from model.incast_fluid import DcqcnIncastFluid, Port, Sender

G = 1e9
US = 1e-6
LINE = 400 * G
MODEL_DIR = Path(__file__).resolve().parents[2] / "model"


def test_model_imports_nothing_from_the_engine():
    paths = sorted(MODEL_DIR.glob("*.py"))
    assert len(paths) >= 5, MODEL_DIR
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith(("traffic", "emu", "engine", "experiments", "cli")), \
                    f"{path.name} imports {name}"


def test_parameter_sets():
    assert dcqcn_params("paper") is PAPER and dcqcn_params(NIC) is NIC
    with pytest.raises(ValueError):
        dcqcn_params("off")
    # the paper's increase steps are per 40G line: 400 Mb/s and 2 Gb/s at 400G
    at400 = PAPER.at_line_rate(LINE)
    assert at400.rate_ai_bps == pytest.approx(400e6) and at400.rate_hai_bps == pytest.approx(2e9)
    assert NIC.at_line_rate(100 * G) is NIC            # absolute steps on the NIC
    with pytest.raises(ValueError):
        DcqcnParams(**{**PAPER.__dict__, "g": 0.0})


def test_paper_reaction_point_by_hand():
    # line 400G, paper set (R_AI = 400 Mb/s at 400G, T = K = 55 us, F = 5)
    rp = ReactionPoint(PAPER.at_line_rate(LINE), LINE)
    # 1st CNP at 10 us, alpha = 1 (its timer is due at 55 us): R_C = 400 (1 - 1/2) = 200G,
    # R_T <- 400G; alpha <- (1 - g) 1 + g = 1.
    rp.on_cnp(10 * US)
    assert (rp.rate_bps, rp.target_bps, rp.alpha) == pytest.approx((200 * G, 400 * G, 1.0))
    # 2nd CNP at 20 us: R_T <- R_C = 200G, R_C = 100G.
    rp.on_cnp(20 * US)
    assert (rp.rate_bps, rp.target_bps) == pytest.approx((100 * G, 200 * G))
    # rate timer every 55 us from 20 us: five fast-recovery steps halve the gap to R_T:
    # 150, 175, 187.5, 193.75, 196.875 G at 75, 130, 185, 240, 295 us.
    expected = [150, 175, 187.5, 193.75, 196.875]
    for k, rate_g in enumerate(expected, start=1):
        rp.advance((20 + 55 * k + 1e-6) * US)   # just past the due time (float sums)
        assert rp.rate_bps == pytest.approx(rate_g * G)
        assert rp.target_bps == pytest.approx(200 * G)
    # 6th event (350 us): additive, R_T = 200.4G, R_C = (200.4 + 196.875)/2 = 198.6375G.
    rp.advance(350.000001 * US)
    assert rp.target_bps == pytest.approx(200.4 * G)
    assert rp.rate_bps == pytest.approx(198.6375 * G)
    # the alpha timer fired 6 times since the last CNP (75 ... 350 us)
    assert rp.alpha == pytest.approx((255 / 256) ** 6)
    # the byte counter (10 MiB) is another increase event: (200.4 + 198.6375)/2 after
    # the target moves on by R_AI again (i = 6 >= F, j = 0 < F: additive)
    rp.on_bytes(10 * 2**20)
    assert rp.target_bps == pytest.approx(200.8 * G)
    assert rp.rate_bps == pytest.approx((200.8 + 198.6375) / 2 * G)


def test_nic_reaction_point_by_hand():
    nic = NIC.at_line_rate(LINE)
    rp = ReactionPoint(nic, LINE)
    # alpha starts at 1023/1024 and decays every 1 us: 10 periods by 10.5 us.
    alpha = 1023 / 1024 * (255 / 256) ** 10
    rp.on_cnp(10.5 * US)
    rate = LINE * (1 - alpha / 2)
    assert rp.rate_bps == pytest.approx(rate)
    assert rp.target_bps == pytest.approx(LINE)           # first cut clamps R_T to R_C = line
    alpha = (1 - 1 / 256) * alpha + 1 / 256
    assert rp.alpha == pytest.approx(alpha)
    # 2nd CNP at 14.5 us with no increase since: the NIC keeps R_T (clamp_tgt_rate 0);
    # alpha decayed 4 times (its timer restarted at 10.5 us).
    alpha *= (255 / 256) ** 4
    rp.on_cnp(14.5 * US)
    rate *= 1 - alpha / 2
    assert rp.rate_bps == pytest.approx(rate)
    assert rp.target_bps == pytest.approx(LINE)
    # 32767 bytes: fast recovery (F = 1, no event yet): R_C = (R_T + R_C)/2
    rp.on_bytes(32767)
    rate = (LINE + rate) / 2
    assert rp.rate_bps == pytest.approx(rate)
    # next: additive, R_T = min(line + 5 Mb/s, line) = line, R_C halfway again
    rp.on_bytes(32767)
    rate = (LINE + rate) / 2
    assert rp.rate_bps == pytest.approx(rate) and rp.target_bps == pytest.approx(LINE)
    # a CNP after an increase clamps R_T to the current rate (clamp_tgt_rate_after_time_inc)
    rp.on_cnp(15 * US)
    assert rp.target_bps == pytest.approx(rate)


def test_mean_field_cut_is_exponential_at_full_marking():
    # p = 1: a(tau) = 1 and no increase events; alpha stays 1 (d alpha = g/K (1 - 1)),
    # so dR_C/dt = -R_C / (2 tau): R_C(t) = line exp(-t / (2 tau)); R_T follows
    # dR_T/dt = -(R_T - R_C)/tau.
    mf = MeanFieldSender(PAPER, LINE, 4154)
    h, tau = 0.05 * US, PAPER.cnp_interval_s
    for _ in range(round(tau / h)):
        mf.step(h, 1.0, mf.rate_bps)
    assert mf.alpha == pytest.approx(1.0)
    assert mf.rate_bps == pytest.approx(LINE * math.exp(-0.5), rel=2e-3)
    # R_T - R_C: d/dt (R_T - R_C) = -(R_T - R_C)/tau + R_C/(2 tau), from 0:
    # the gap is line (e^(-1/2) - e^(-1)) at t = tau.
    assert mf.target_bps - mf.rate_bps == pytest.approx(
        LINE * (math.exp(-0.5) - math.exp(-1.0)), rel=5e-3)


def test_mean_field_recovery_without_marks():
    # p = 0: alpha decays as exp(-g t / K); increase events at R/B + 1/T per second,
    # every one reaching additive increase ((1 - 0)^(F x) = 1): with R_T held at line,
    # d(R_T - R_C)/dt = -(R_T - R_C)/2 (R/B + 1/T).
    mf = MeanFieldSender(PAPER.at_line_rate(LINE), LINE, 4154)
    mf.rate_bps = 200 * G
    e_b, e_t, e_b_ai, e_t_ai = increase_event_rates(0.0, 200 * G / (8 * 4154), PAPER, 4154)
    assert e_b == pytest.approx(200 * G / (8 * 4154) / (10 * 2**20 / 4154))
    assert e_t == pytest.approx(1 / 55e-6) and (e_b_ai, e_t_ai) == (e_b, e_t)
    d_alpha, d_target, d_rate = mf.derivatives(0.0, 200 * G)
    assert d_alpha == pytest.approx(-PAPER.g / PAPER.alpha_timer_s)
    assert d_rate == pytest.approx(0.5 * 200 * G * (e_b + e_t))
    assert d_target == pytest.approx(400e6 * (e_b + e_t))


def _conext_derivatives(p, alpha, rt, rc, prm, pkt):
    """CoNEXT'16 right-hand sides written out again, packets/s (R_AI in packets/s)."""
    tau, k, b, t, f = (prm.cnp_interval_s, prm.alpha_timer_s, prm.byte_counter_bytes / pkt,
                       prm.rate_increase_timer_s, prm.fast_recovery_steps)
    r_ai = prm.rate_ai_bps / (8 * pkt)
    a_tau = 1 - (1 - p) ** (tau * rc)
    a_k = 1 - (1 - p) ** (k * rc)
    e_b = rc * p / ((1 - p) ** (-b) - 1)
    e_t = rc * p / ((1 - p) ** (-t * rc) - 1)
    d_alpha = prm.g / k * (a_k - alpha)
    d_rt = -(rt - rc) * a_tau / tau + r_ai * (e_b * (1 - p) ** (f * b) + e_t * (1 - p) ** (f * t * rc))
    d_rc = -rc * alpha * a_tau / (2 * tau) + (rt - rc) / 2 * (e_b + e_t)
    return d_alpha, d_rt, d_rc


@pytest.mark.parametrize("name", ["paper", "nic"])
@pytest.mark.parametrize("n", [2, 8])
def test_fixed_point_zeroes_the_published_equations(name, n):
    pkt, kmin, kmax, pmax = 4154, 100e3, 400e3, 0.2
    prm = dcqcn_params(name).at_line_rate(LINE)
    fp = dcqcn_fixed_point(n, LINE, kmin, kmax, pmax, name, pkt)
    assert fp.rate_bps == pytest.approx(LINE / n)
    assert mark_probability(fp.queue_bytes, kmin, kmax, pmax) == pytest.approx(
        min(fp.p_mark, pmax))
    rc, rt = fp.rate_bps / (8 * pkt), fp.target_rate_bps / (8 * pkt)
    d_alpha, d_rt, d_rc = _conext_derivatives(fp.p_mark, fp.alpha, rt, rc, prm, pkt)
    assert abs(d_alpha) < 1e-6 * prm.g / prm.alpha_timer_s
    assert abs(d_rc) < 1e-6 * rc * fp.alpha / prm.cnp_interval_s
    assert abs(d_rt) < 1e-6 * (rt - rc) / prm.cnp_interval_s
    assert fp.alpha == pytest.approx(mark_window_probability(fp.p_mark, prm.alpha_timer_s * rc))


def test_fixed_point_grows_with_flows_and_saturates():
    qs = [dcqcn_fixed_point(n, LINE, 5e3, 200e3, 0.01).queue_bytes for n in (2, 4, 8, 16)]
    assert qs == sorted(qs) and qs[0] < qs[-1]
    fp = dcqcn_fixed_point(64, LINE, 5e3, 200e3, 1e-4)
    assert fp.saturated and fp.queue_bytes == pytest.approx(200e3)


def time_average(trace, t0_s, t1_s):
    acc = 0.0
    for (ta, qa), (tb, qb) in zip(trace[:-1], trace[1:], strict=True):
        lo, hi = max(ta, t0_s), min(tb, t1_s)
        if hi > lo:
            acc += (qa + (qb - qa) / (tb - ta) * (0.5 * (lo + hi) - ta)) * (hi - lo)
    return acc / (t1_s - t0_s)


@pytest.mark.parametrize("n", [2, 4])
def test_mean_field_integration_settles_at_the_fixed_point(n):
    # The paper's setting: 40G, long-lived flows, a 4 us feedback delay. The DDE,
    # integrated from line rate, ends at the fixed point: the queue's time average over
    # the last 10 ms at q*, every flow at C/N, alpha at a(K).
    line, kmin, kmax, pmax, pkt = 40 * G, 40e3, 160e3, 0.2, 4154
    model = DcqcnIncastFluid(Port(line, 8e6, kmin, kmax, pmax),
                             [Sender(math.inf, line)] * n, "paper", packet_bytes=pkt,
                             reaction="mean-field", feedback_delay_s=4 * US, step_s=0.5 * US)
    res = model.run(until_s=60e-3)
    fp = dcqcn_fixed_point(n, line, kmin, kmax, pmax, "paper", pkt)
    assert not fp.saturated
    assert time_average(res.queue_trace, 50e-3, 60e-3) == pytest.approx(fp.queue_bytes, rel=0.02)
    for trace in res.rate_traces:
        assert time_average(trace, 50e-3, 60e-3) == pytest.approx(line / n, rel=0.01)
