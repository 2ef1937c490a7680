"""DCQCN as the model sees it: parameter sets, the reaction point and the fixed point (pure).

Written from the publications, independently of the engine (`traffic/`):

* Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015:
  the algorithm and its parameters ("paper");
* Zhu, Ghobadi, Misra, Padhye, "ECN or Delay: Lessons Learnt from Analysis of DCQCN and
  TIMELY", CoNEXT 2016: the fluid model (delay-differential equations) and its fixed
  point.

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
from dataclasses import dataclass, replace

from core.ecn import marking_curve_queue
from core.frame import FRAME_BYTES


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN knobs of the reaction and notification points (real units).

    ``reference_rate_bps``: the increase steps R_AI and R_HAI are given for this line
    rate and scale with the sender's (`at_line_rate`); None = absolute steps.
    ``clamp_target_rate``: True = every cut sets R_T <- R_C (the paper); False = only a
    cut after an increase event (or the first cut) does, so back-to-back CNPs keep the
    pre-congestion target (ConnectX ``clamp_tgt_rate`` 0 with
    ``clamp_tgt_rate_after_time_inc`` 1).
    """

    g: float
    alpha_initial: float
    alpha_timer_s: float          # K
    rate_timer_s: float           # T
    byte_counter_bytes: float     # B
    fast_recovery_steps: int      # F
    rate_ai_bps: float            # R_AI
    rate_hai_bps: float           # R_HAI
    min_rate_bps: float
    cnp_interval_s: float         # tau: at most one CNP per QP per interval
    clamp_target_rate: bool = True
    reference_rate_bps: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.g <= 1.0:
            raise ValueError(f"g must be in (0, 1], not {self.g!r}")
        if not 0.0 <= self.alpha_initial <= 1.0:
            raise ValueError(f"alpha_initial must be in [0, 1], not {self.alpha_initial!r}")
        for name in ("alpha_timer_s", "rate_timer_s", "byte_counter_bytes", "cnp_interval_s",
                     "min_rate_bps"):
            value = getattr(self, name)
            if not 0.0 < value < math.inf:
                raise ValueError(f"{name} must be a positive finite number, not {value!r}")
        for name in ("rate_ai_bps", "rate_hai_bps"):
            value = getattr(self, name)
            if not 0.0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
        if self.fast_recovery_steps < 0 or int(self.fast_recovery_steps) != self.fast_recovery_steps:
            raise ValueError(f"fast_recovery_steps must be an integer >= 0, not "
                             f"{self.fast_recovery_steps!r}")

    def at_line_rate(self, line_rate_bps: float) -> DcqcnParams:
        """The same knobs with the increase steps of a sender at ``line_rate_bps``."""
        if self.reference_rate_bps is None:
            return self
        factor = line_rate_bps / self.reference_rate_bps
        return replace(self, rate_ai_bps=self.rate_ai_bps * factor,
                       rate_hai_bps=self.rate_hai_bps * factor, reference_rate_bps=None)


#: SIGCOMM'15, section 5 / table of parameters: g = 1/256, K = 55 us, T = 55 us,
#: B = 10 MB, F = 5, R_AI = 40 Mb/s and R_HAI = 200 Mb/s for its 40 Gb/s NICs, CNP
#: interval 50 us, alpha starting at 1. The increase steps are read as fractions of
#: the 40G line (line/1000, line/200), so recovery takes as many steps at 400G; the
#: paper has no minimum rate, 1 Mb/s is the NIC's.
PAPER = DcqcnParams(
    g=1 / 256, alpha_initial=1.0, alpha_timer_s=55e-6, rate_timer_s=55e-6,
    byte_counter_bytes=10 * 2**20, fast_recovery_steps=5, rate_ai_bps=40e6,
    rate_hai_bps=200e6, min_rate_bps=1e6, cnp_interval_s=50e-6, clamp_target_rate=True,
    reference_rate_bps=40e9)

#: NVIDIA ConnectX-4/5/6 firmware defaults as `mlxconfig -d <dev> query` lists them
#: (same knob names in Linux drivers/infiniband/hw/mlx5, ``roce_rp``/``roce_np``):
#: RPG_TIME_RESET 300 us, RPG_BYTE_RESET 32767 B, RPG_THRESHOLD 1, RPG_AI_RATE 5 Mb/s,
#: RPG_HAI_RATE 50 Mb/s, RPG_MIN_RATE 1 Mb/s, RPG_GD 11 (cut by alpha/2),
#: DCE_TCP_RTT 1 us (alpha timer), INITIAL_ALPHA_VALUE 1023 (of 1024),
#: MIN_TIME_BETWEEN_CNPS 4 us, CLAMP_TGT_RATE 0, CLAMP_TGT_RATE_AFTER_TIME_INC 1,
#: RATE_TO_SET_ON_FIRST_CNP 0 (plain cut), RPG_MIN_DEC_FAC 50 (never binds: a cut is at
#: most 1/2). Not modelled: RATE_REDUCE_MONITOR_PERIOD 4 us, which cannot bind when CNPs
#: of a QP are >= 4 us apart, as here. DCE_TCP_G 1019 encodes the alpha gain by a
#: formula NVIDIA does not publish; g = 1/256 (the paper's) stands for it (the literal
#: (1024 - 1019)/1024 = 1/204.8 is within 25 %).
NIC = DcqcnParams(
    g=1 / 256, alpha_initial=1023 / 1024, alpha_timer_s=1e-6, rate_timer_s=300e-6,
    byte_counter_bytes=32767, fast_recovery_steps=1, rate_ai_bps=5e6, rate_hai_bps=50e6,
    min_rate_bps=1e6, cnp_interval_s=4e-6, clamp_target_rate=False, reference_rate_bps=None)

PARAMETER_SETS: dict[str, DcqcnParams] = {"paper": PAPER, "nic": NIC}


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
        self.increased = False                    # an increase event since the last cut
        self.cut_before = False
        self.next_alpha_s = start_s + params.alpha_timer_s
        self.next_rate_s = start_s + params.rate_timer_s
        self.cuts = 0

    def advance(self, now_s: float) -> None:
        """Fire the alpha and rate timers due at or before ``now_s``."""
        k = self.p.alpha_timer_s
        if self.next_alpha_s <= now_s:
            n = math.floor((now_s - self.next_alpha_s) / k) + 1
            self.alpha *= (1.0 - self.p.g) ** n
            self.next_alpha_s += n * k
        period = self.p.rate_timer_s
        while self.next_rate_s <= now_s:
            at_line = self.rate_bps >= self.line_rate_bps and self.target_bps >= self.line_rate_bps
            if at_line:   # increases change nothing but the count: skip them at once
                n = math.floor((now_s - self.next_rate_s) / period) + 1
                self.timer_events += n
                self.next_rate_s += n * period
                self.increased = True
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
        if p.clamp_target_rate or self.increased or not self.cut_before:
            self.target_bps = self.rate_bps
        self.rate_bps = max(self.rate_bps * (1.0 - 0.5 * self.alpha),
                            min(p.min_rate_bps, self.line_rate_bps))
        self.alpha = (1.0 - p.g) * self.alpha + p.g
        self.timer_events = self.byte_events = 0
        self.bytes_counted = 0.0
        self.increased = False
        self.cut_before = True
        self.next_alpha_s = now_s + p.alpha_timer_s
        self.next_rate_s = now_s + p.rate_timer_s
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
        else:
            self.byte_events += 1
        self.increased = True


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
    t_pkts = params.rate_timer_s * rate_pps
    f = params.fast_recovery_steps
    if p <= 0.0:
        e_b, e_t = rate_pps / b_pkts, 1.0 / params.rate_timer_s
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
