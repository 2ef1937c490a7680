"""DCQCN as the model sees it: parameter sets, the reaction point and the fixed point (pure).

Written from the publications, independently of the engine (`traffic/`):

* Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015:
  the algorithm and its parameters ("paper");
* Zhu, Ghobadi, Misra, Padhye, "ECN or Delay: Lessons Learnt from Analysis of DCQCN and
  TIMELY", CoNEXT 2016: the fluid model (delay-differential equations) and its fixed
  point.

Parameters: `core.dcqcn_params` (the paper's set and the ConnectX defaults), the same numbers
the engine is configured with. Not modelled: ``rate_reduce_monitor_period_s`` (NIC:
4 us), which cannot bind while a QP's CNPs are at least ``cnp_interval_s`` = 4 us apart.

Units: rates bit/s, sizes bytes, times s (real fabric). The fluid equations count
packets, so rates are turned into packets/s with the packet size.

Reaction point (sender, one per QP), per the SIGCOMM'15 algorithm
    CNP:          R_T <- R_C (see ``clamp_target_rate``); R_C <- R_C (1 - alpha/2);
                  alpha <- (1 - g) alpha + g; the alpha timer, the rate timer and the
                  byte counter restart, and both increase-event counts return to 0.
    alpha timer:  every K without a CNP, alpha <- (1 - g) alpha.
    increase event (the rate timer T expires, or B bytes were sent): with i, j the
                  timer and byte events since the cut (before this one),
                  max(i, j) < F: fast recovery   R_C <- (R_T + R_C)/2
                  min(i, j) < F: additive        R_T += R_AI, then R_C <- (R_T + R_C)/2
                  otherwise:     hyper           R_T += (min(i, j) - F + 1) R_HAI, idem
    Rates stay within [min rate, line rate].
Notification point (receiver): a marked packet triggers a CNP unless the QP got one less
than ``cnp_interval_s`` ago.

Fluid model (CoNEXT'16), for one flow with R_C, R_T in packets/s, p the marking
probability and a star for values one feedback delay tau* ago:
    a(x)    = 1 - (1 - p*)^(x R_C*)                   P(>= 1 mark in a window x)
    E_B     = R_C* p* / ((1 - p*)^-B - 1)             byte-counter events/s (B in packets)
    E_T     = R_C* p* / ((1 - p*)^-(T R_C*) - 1)      rate-timer events/s
    dalpha/dt = g/K (a(K) - alpha)
    dR_T/dt   = -(R_T - R_C) a(tau)/tau + R_AI (E_B (1 - p*)^(F B) + E_T (1 - p*)^(F T R_C*))
    dR_C/dt   = -R_C alpha a(tau)/(2 tau) + (R_T - R_C)/2 (E_B + E_T)
    dq/dt     = sum of R_C - C
with tau the CNP interval and K the alpha timer; the (1 - p*)^(F x) factors say that
R_T only grows once F events passed without a mark. Hyper increase is left out, as in
the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.dcqcn_params import PARAMETER_SETS, DcqcnParams
from core.ecn import marking_curve_queue
from core.frame import FRAME_BYTES


def dcqcn_params(spec: str | DcqcnParams) -> DcqcnParams:
    """A parameter set by name ('paper', 'nic') or as given."""
    if isinstance(spec, DcqcnParams):
        return spec
    try:
        return PARAMETER_SETS[spec]
    except KeyError:
        raise ValueError(f"DCQCN parameter set must be one of {sorted(PARAMETER_SETS)}, "
                         f"not {spec!r}") from None


# ------------------------------------------------------------ reaction point (events)

class ReactionPoint:
    """One sender's reaction point driven by events (see the module doc).

    ``params`` must be resolved for the sender (`DcqcnParams.at_line_rate`). Times are
    absolute and must not go backwards; timers run from ``start_s``.
    """

    def __init__(self, params: DcqcnParams, line_rate_bps: float, start_s: float = 0.0):
        self.p = params
        self.line_rate_bps = float(line_rate_bps)
        self.rate_bps = self.line_rate_bps        # R_C
        self.target_bps = self.line_rate_bps      # R_T
        self.alpha = params.alpha_initial
        self.timer_events = 0                     # i: rate-timer events since the cut
        self.byte_events = 0                      # j: byte-counter events since the cut
        self.bytes_counted = 0.0
        self.increased_by_bytes = False           # a byte-counter increase since the cut
        self.increased_by_timer = False           # a rate-timer increase since the cut
        self.cut_before = False
        self.next_alpha_s = start_s + params.alpha_timer_s
        self.next_rate_s = start_s + params.rate_increase_timer_s
        self.cuts = 0

    def advance(self, now_s: float) -> None:
        """Fire the alpha and rate timers due at or before ``now_s``."""
        k = self.p.alpha_timer_s
        if self.next_alpha_s <= now_s:
            n = math.floor((now_s - self.next_alpha_s) / k) + 1
            self.alpha *= (1.0 - self.p.g) ** n
            self.next_alpha_s += n * k
        period = self.p.rate_increase_timer_s
        while self.next_rate_s <= now_s:
            at_line = self.rate_bps >= self.line_rate_bps and self.target_bps >= self.line_rate_bps
            if at_line:   # increases change nothing but the count: skip them at once
                n = math.floor((now_s - self.next_rate_s) / period) + 1
                self.timer_events += n
                self.next_rate_s += n * period
                self.increased_by_timer = True
            else:
                self.next_rate_s += period
                self._increase(by_timer=True)

    def on_bytes(self, n_bytes: float) -> None:
        """``n_bytes`` were sent (call `advance` first for the timers due before)."""
        self.bytes_counted += n_bytes
        while self.bytes_counted >= self.p.byte_counter_bytes:
            self.bytes_counted -= self.p.byte_counter_bytes
            self._increase(by_timer=False)

    def on_cnp(self, now_s: float) -> None:
        """A CNP arrived at ``now_s``: timers due before it fire first, then the cut."""
        self.advance(now_s)
        p = self.p
        if p.clamp_target_rate or not self.cut_before or self.increased_by_bytes or (
                p.clamp_target_rate_after_time_inc and self.increased_by_timer):
            self.target_bps = self.rate_bps
        cut = p.rate_on_first_cnp_bps if p.rate_on_first_cnp_bps > 0 and not self.cut_before \
            else self.rate_bps * (1.0 - 0.5 * self.alpha)
        self.rate_bps = max(cut, min(p.min_rate_bps, self.line_rate_bps))
        self.alpha = (1.0 - p.g) * self.alpha + p.g
        self.timer_events = self.byte_events = 0
        self.bytes_counted = 0.0
        self.increased_by_bytes = self.increased_by_timer = False
        self.cut_before = True
        self.next_alpha_s = now_s + p.alpha_timer_s
        self.next_rate_s = now_s + p.rate_increase_timer_s
        self.cuts += 1

    def _increase(self, by_timer: bool) -> None:
        p = self.p
        lo = min(self.timer_events, self.byte_events)
        hi = max(self.timer_events, self.byte_events)
        if hi >= p.fast_recovery_steps:
            step = p.rate_ai_bps if lo < p.fast_recovery_steps else \
                (lo - p.fast_recovery_steps + 1) * p.rate_hai_bps
            self.target_bps = min(self.target_bps + step, self.line_rate_bps)
        self.rate_bps = min(0.5 * (self.target_bps + self.rate_bps), self.line_rate_bps)
        if by_timer:
            self.timer_events += 1
            self.increased_by_timer = True
        else:
            self.byte_events += 1
            self.increased_by_bytes = True


# ------------------------------------------------------------- fluid model (CoNEXT'16)

def _pow_minus_one(p: float, x: float) -> float:
    """(1-p)^(-x) - 1, accurate for small p (inf where it overflows: no event then)."""
    y = -x * math.log1p(-p)
    return math.expm1(y) if y < 700.0 else math.inf


def mark_window_probability(p: float, window_pkts: float) -> float:
    """1 - (1-p)^n: probability of at least one mark among n packets."""
    if p >= 1.0:
        return 1.0 if window_pkts > 0 else 0.0
    return -math.expm1(window_pkts * math.log1p(-p))


def increase_event_rates(p: float, rate_pps: float, params: DcqcnParams,
                         packet_bytes: float) -> tuple[float, float, float, float]:
    """(E_B, E_T, E_B (1-p)^(F B), E_T (1-p)^(F T R)): byte-counter and timer events/s,
    all of them and those that reach additive increase (module doc)."""
    if rate_pps <= 0:
        return 0.0, 0.0, 0.0, 0.0
    b_pkts = params.byte_counter_bytes / packet_bytes
    t_pkts = params.rate_increase_timer_s * rate_pps
    f = params.fast_recovery_steps
    if p <= 0.0:
        e_b, e_t = rate_pps / b_pkts, 1.0 / params.rate_increase_timer_s
        return e_b, e_t, e_b, e_t
    if p >= 1.0:
        return 0.0, 0.0, 0.0, 0.0
    e_b = rate_pps * p / _pow_minus_one(p, b_pkts)
    e_t = rate_pps * p / _pow_minus_one(p, t_pkts)
    keep = math.log1p(-p) * f
    return e_b, e_t, e_b * math.exp(keep * b_pkts), e_t * math.exp(keep * t_pkts)


class MeanFieldSender:
    """One flow of the CoNEXT'16 fluid model, stepped by explicit Euler.

    ``step`` takes the delayed marking probability and the delayed own rate the
    feedback carries; rates are bit/s, clamped to [min rate, line rate] as the
    reaction point keeps them. As published, it has the paper's algorithm: every cut
    clamps R_T (``clamp_target_rate`` is ignored) and there is no hyper increase, and
    a cut is a continuous decay (exp(-1/2) over one CNP interval at full marking, where
    the reaction point halves at once). So it gives the steady state and its
    stability; short transients and the NIC's knobs need the event reaction point.
    """

    def __init__(self, params: DcqcnParams, line_rate_bps: float, packet_bytes: float):
        self.p = params
        self.line_rate_bps = float(line_rate_bps)
        self.pkt_bits = 8.0 * packet_bytes
        self.packet_bytes = packet_bytes
        self.rate_bps = self.line_rate_bps
        self.target_bps = self.line_rate_bps
        self.alpha = params.alpha_initial

    def derivatives(self, p_delayed: float, rate_delayed_bps: float) -> tuple[float, float, float]:
        """(dalpha/dt, dR_T/dt, dR_C/dt), rates in bit/s per second."""
        prm = self.p
        rd_pps = rate_delayed_bps / self.pkt_bits
        a_cnp = mark_window_probability(p_delayed, prm.cnp_interval_s * rd_pps)
        a_alpha = mark_window_probability(p_delayed, prm.alpha_timer_s * rd_pps)
        e_b, e_t, e_b_ai, e_t_ai = increase_event_rates(p_delayed, rd_pps, prm, self.packet_bytes)
        gap = self.target_bps - self.rate_bps
        d_alpha = prm.g / prm.alpha_timer_s * (a_alpha - self.alpha)
        d_target = -gap * a_cnp / prm.cnp_interval_s + prm.rate_ai_bps * (e_b_ai + e_t_ai)
        d_rate = (-self.rate_bps * self.alpha * a_cnp / (2.0 * prm.cnp_interval_s)
                  + 0.5 * gap * (e_b + e_t))
        return d_alpha, d_target, d_rate

    def step(self, h_s: float, p_delayed: float, rate_delayed_bps: float) -> None:
        d_alpha, d_target, d_rate = self.derivatives(p_delayed, rate_delayed_bps)
        lo = min(self.p.min_rate_bps, self.line_rate_bps)
        self.alpha = min(max(self.alpha + h_s * d_alpha, 0.0), 1.0)
        self.target_bps = min(max(self.target_bps + h_s * d_target, lo), self.line_rate_bps)
        self.rate_bps = min(max(self.rate_bps + h_s * d_rate, lo), self.line_rate_bps)


# ------------------------------------------------------------------- fixed point

@dataclass(frozen=True)
class DcqcnFixedPoint:
    p_mark: float
    alpha: float
    rate_bps: float          # per-flow current rate R_C = C / N
    target_rate_bps: float   # R_T
    queue_bytes: float       # q*
    queue_delay_s: float     # q* / C
    saturated: bool          # p* > Pmax: queue pinned at Kmax


def dcqcn_fixed_point(n_flows: int, port_rate_bps: float, kmin_bytes: float,
                      kmax_bytes: float, pmax: float, params: str | DcqcnParams = "paper",
                      packet_bytes: float = FRAME_BYTES,
                      line_rate_bps: float | None = None) -> DcqcnFixedPoint:
    """Fixed point of N flows of the fluid model sharing a port of rate C.

    All derivatives zero with R_C = C/N (the port busy, the flows equal):
    alpha = a(K); from dR_C = 0, R_T - R_C = R_C alpha a(tau) / (tau (E_B + E_T)); with
    dR_T = 0 that gives R_C alpha a(tau)^2 = R_AI tau^2 (E_B + E_T) E_AI, E_AI the
    additive part. The left side grows with p and the right side falls, so p* is unique
    (bisection on log p); the queue is where the marking curve gives p*. The increase
    steps are those of a sender at ``line_rate_bps`` (default: the port rate).
    """
    if n_flows < 1:
        raise ValueError(f"n_flows must be >= 1, not {n_flows}")
    prm = dcqcn_params(params).at_line_rate(port_rate_bps if line_rate_bps is None
                                            else line_rate_bps)
    pkt_bits = 8.0 * packet_bytes
    rc = port_rate_bps / n_flows / pkt_bits                # packets/s
    r_ai = prm.rate_ai_bps / pkt_bits
    tau = prm.cnp_interval_s

    def balance(p: float) -> float:   # > 0 once decreases outweigh increases
        e_b, e_t, e_b_ai, e_t_ai = increase_event_rates(p, rc, prm, packet_bytes)
        a_cnp = mark_window_probability(p, tau * rc)
        a_alpha = mark_window_probability(p, prm.alpha_timer_s * rc)
        return rc * a_alpha * a_cnp ** 2 - r_ai * tau ** 2 * (e_b + e_t) * (e_b_ai + e_t_ai)

    lo, hi = math.log(1e-15), math.log(1.0 - 1e-12)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if balance(math.exp(mid)) > 0:
            hi = mid
        else:
            lo = mid
    p_star = math.exp(hi)
    e_b, e_t, _, _ = increase_event_rates(p_star, rc, prm, packet_bytes)
    alpha = mark_window_probability(p_star, prm.alpha_timer_s * rc)
    a_cnp = mark_window_probability(p_star, tau * rc)
    rt = rc + rc * alpha * a_cnp / (tau * (e_b + e_t))
    q_star = marking_curve_queue(p_star, kmin_bytes, kmax_bytes, pmax)
    return DcqcnFixedPoint(
        p_mark=p_star, alpha=alpha, rate_bps=rc * pkt_bits, target_rate_bps=rt * pkt_bits,
        queue_bytes=q_star, queue_delay_s=8.0 * q_star / port_rate_bps,
        saturated=p_star > pmax)
