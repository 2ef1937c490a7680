"""Incast queueing primitives: the marking curve, queue distributions and latency
percentiles, the CC-off incast, the DCQCN fixed point (a model).

Scenario: N senders, each at line rate r, send S bytes each to one receiver
behind a port of rate C with a drop-tail buffer of ``buffer_bytes``. Real units:
rates bit/s, sizes bytes, times s. `emu.model.incast` puts the pieces together;
DCQCN's trajectory from the first byte (start-up transient included) is the fluid
model of `emu.model.incast_fluid`, and the fixed point below is where it settles.

CC off (no rate control, no PFC)
    The queue grows at ``N r - C`` while all senders transmit (``t_send = S/r``),
    so it peaks at ``(N r - C) t_send`` unless the buffer fills first, at
    ``t_fill = buffer / (N r - C)``. Without drops the port is busy from start to
    end: completion = ``N S / C + alpha``. Every packet enters a queue that grows
    linearly while packets arrive at a constant rate, so the queue a packet sees
    is uniform on [0, peak] (packet-weighted).
    With drops (a documented *estimate* of go-back-N): once the buffer is full,
    each arriving packet is dropped with probability ``p = 1 - C/(N r)``. After a
    loss the sender keeps sending at line rate until the NAK returns, one window
    ``tau = base_rtt + buffer/C`` later (the out-of-order packet waits a full
    queue), and everything it sent after the loss is discarded by the receiver.
    Each sender therefore delivers, per window, the packets before its first loss:
    ``u = min(r tau / pkt, (1-p)/p)`` (geometric), giving the goodput
    ``G = min(C, N u pkt / tau)``. Completion = ``t_fill + buffer/C + rest/G + alpha``
    with rest the bytes not yet accepted in order by ``t_fill``. The sender has no
    in-flight window and no timeout in this estimate; a windowed NIC does better.
    Packets accepted while the buffer is full see a full queue.

DCQCN + ECN (marking p(q): 0 below Kmin, linear to Pmax at Kmax, 1 above)
    Fixed point of the fluid model of Zhu et al., "ECN or Delay: Lessons Learnt
    from Analysis of DCQCN and TIMELY", CoNEXT 2016. With R_C the current rate and
    R_T the target rate (packets/s), tau' the CNP interval, B the byte counter (in
    packets), T the increase timer and R_AI the additive increase:
        a = 1 - (1-p)^(tau' R_C)        probability of >= 1 CNP per interval
        E = R_C p / ((1-p)^-B - 1) + R_C p / ((1-p)^-(T R_C) - 1)
                                        rate of increase events (byte counter, timer)
        d alpha/dt = 0  ->  alpha = a
        d R_T/dt = 0    ->  (R_T - R_C) a / tau'        = R_AI E
        d R_C/dt = 0    ->  R_C alpha a / (2 tau')      = (R_T - R_C) E / 2
    Eliminating R_T - R_C and alpha:   R_C a^3 = R_AI tau'^2 E^2,  with R_C = C/N
    (the port is fully used and the flows share it equally). The left side grows
    and the right side falls with p, so p* is unique (found by bisection on
    log p). The queue settles where the marking curve gives p*:
    ``q* = Kmin + (p*/Pmax)(Kmax - Kmin)``; if p* > Pmax the queue is pinned at
    Kmax (``saturated``). Queueing delay = q*/C.
    This is the steady state only, the mean around which the queue oscillates once
    alpha has relaxed (over ~1/g of its timer periods). The senders start at line
    rate, so shorter messages live in the transient, and the queue distribution
    comes from the fluid model of `emu.model.incast_fluid`, which settles here.

Latency
    one-way latency = base + q / C with base = sum over hops of (propagation +
    packet serialization, store-and-forward) and q drawn from a packet-weighted
    queue distribution (a mixture of uniform segments and point masses).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from emu.ecn import curve
from traffic import dcqcn

#: Default RoCEv2 packet on the wire (4096 payload + 58 bytes of headers).
DEFAULT_PACKET_BYTES = 4154


# ------------------------------------------------------------------- marking curve

def mark_probability(queue_bytes: float, kmin_bytes: float, kmax_bytes: float,
                     pmax: float) -> float:
    """The switches' marking curve (emu.ecn.curve), with thresholds as plain numbers."""
    return curve.mark_probability(queue_bytes, curve.Thresholds(kmin_bytes, kmax_bytes, pmax))


def queue_for_mark_probability(p: float, kmin_bytes: float, kmax_bytes: float,
                               pmax: float) -> float:
    """Inverse of the curve on [Kmin, Kmax]; p above Pmax pins the queue at Kmax."""
    if p <= 0:
        return float(kmin_bytes)
    if p >= pmax or kmax_bytes == kmin_bytes:
        return float(kmax_bytes)
    return kmin_bytes + (p / pmax) * (kmax_bytes - kmin_bytes)


# ------------------------------------------------------------- queue distribution

@dataclass(frozen=True)
class QueueDist:
    """Packet-weighted distribution of the queue (bytes) a packet finds.

    ``parts`` = (weight, lo_bytes, hi_bytes): uniform on [lo, hi], a point mass
    when lo == hi. Weights need not sum to one.
    """

    parts: tuple[tuple[float, float, float], ...]

    @staticmethod
    def point(queue_bytes: float = 0.0) -> QueueDist:
        return QueueDist(((1.0, float(queue_bytes), float(queue_bytes)),))

    @staticmethod
    def uniform(lo_bytes: float, hi_bytes: float) -> QueueDist:
        return QueueDist(((1.0, float(lo_bytes), float(hi_bytes)),))

    def _total(self) -> float:
        total = sum(w for w, _, _ in self.parts)
        if not total > 0:
            raise ValueError("queue distribution has no weight")
        return total

    def cdf(self, queue_bytes: float) -> float:
        acc = 0.0
        for w, lo, hi in self.parts:
            if queue_bytes >= hi:
                acc += w
            elif queue_bytes > lo:
                acc += w * (queue_bytes - lo) / (hi - lo)
        return acc / self._total()

    def quantile(self, q: float) -> float:
        """Smallest queue x with cdf(x) >= q."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], not {q}")
        lo = min(p[1] for p in self.parts)
        hi = max(p[2] for p in self.parts)
        if self.cdf(lo) >= q:
            return lo
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if self.cdf(mid) >= q:
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1e-9 * max(1.0, hi):
                break
        return hi

    @property
    def mean_bytes(self) -> float:
        return sum(w * 0.5 * (lo + hi) for w, lo, hi in self.parts) / self._total()

    @property
    def max_bytes(self) -> float:
        return max(hi for w, _, hi in self.parts if w > 0)


# ----------------------------------------------------------------------- latency

def base_latency_s(hop_rates_bps: Sequence[float], hop_delays_s: Sequence[float],
                   packet_bytes: float = DEFAULT_PACKET_BYTES) -> float:
    """One packet, empty queues: per hop propagation + serialization (store-and-forward)."""
    if len(hop_rates_bps) != len(hop_delays_s):
        raise ValueError("one delay per hop rate is needed")
    return sum(hop_delays_s) + sum(8.0 * packet_bytes / r for r in hop_rates_bps)


def path_hops(graph: nx.Graph, path: Sequence[str]) -> tuple[list[float], list[float]]:
    """(rate_bps, delay_s) of every hop of a path."""
    rates, delays = [], []
    for u, v in zip(path[:-1], path[1:], strict=True):
        data = graph.edges[u, v]
        rates.append(float(data["rate_bps"]))
        delays.append(float(data.get("delay_s", 0.0)))
    return rates, delays


def latency_percentiles_s(base_s: float, dist: QueueDist, port_rate_bps: float,
                          quantiles: Sequence[float] = (0.5, 0.99, 0.999)) -> dict[float, float]:
    """Latency quantiles: base + queue quantile / C (monotone in the quantile)."""
    return {q: base_s + 8.0 * dist.quantile(q) / port_rate_bps for q in quantiles}


# ----------------------------------------------------------------- incast, CC off

def incast_backlog_growth_bps(n_senders: int, sender_rate_bps: float,
                              port_rate_bps: float) -> float:
    """Rate at which the bottleneck queue grows: ``max(0, N r - C)``."""
    return max(0.0, n_senders * sender_rate_bps - port_rate_bps)


def time_to_fill_s(buffer_bytes: float, n_senders: int, sender_rate_bps: float,
                   port_rate_bps: float) -> float:
    """Time for the backlog to reach ``buffer_bytes`` (inf if it never grows)."""
    growth = incast_backlog_growth_bps(n_senders, sender_rate_bps, port_rate_bps)
    return math.inf if growth == 0 else 8.0 * buffer_bytes / growth


def incast_completion_time_s(n_senders: int, size_bytes: float, port_rate_bps: float,
                             alpha_s: float = 0.0,
                             sender_rate_bps: float | None = None) -> float:
    """Lossless incast: ``N S / C + alpha`` (or ``S / r + alpha`` if the port is not
    the bottleneck)."""
    t_s = 8.0 * n_senders * size_bytes / port_rate_bps
    if sender_rate_bps is not None:
        t_s = max(t_s, 8.0 * size_bytes / sender_rate_bps)
    return t_s + alpha_s


@dataclass(frozen=True)
class IncastCcOff:
    """CC-off incast: queue build-up, drops and the go-back-N completion estimate."""

    backlog_growth_bps: float
    fill_time_s: float            # inf when the buffer never fills
    peak_queue_bytes: float
    drops: bool
    dropped_bytes: float          # first-pass overflow (fluid), before any retransmission
    goodput_after_fill_bps: float  # GBN estimate while the buffer is full (C if no drops)
    completion_s: float
    queue: QueueDist
    queue_trace: tuple[tuple[float, float], ...]  # (t_s, queue_bytes) corners, linear between


def incast_cc_off(n_senders: int, size_bytes: float, sender_rate_bps: float,
                  port_rate_bps: float, buffer_bytes: float, *, alpha_s: float = 0.0,
                  base_rtt_s: float = 0.0,
                  packet_bytes: float = DEFAULT_PACKET_BYTES) -> IncastCcOff:
    """Incast without congestion control (see the module doc for the GBN estimate)."""
    n, r, c = n_senders, sender_rate_bps, port_rate_bps
    growth = incast_backlog_growth_bps(n, r, c)
    lossless_s = incast_completion_time_s(n, size_bytes, c, alpha_s, sender_rate_bps=r)
    # Trajectory (t = 0: first bits at the port): a ramp while everyone sends, then
    # the drain; with drops the queue sits at the buffer until it can drain by the end.
    if growth == 0:
        return IncastCcOff(0.0, math.inf, 0.0, False, 0.0, c, lossless_s, QueueDist.point(0.0),
                           ((0.0, 0.0), (lossless_s - alpha_s, 0.0)))
    t_send_s = 8.0 * size_bytes / r
    peak_bytes = growth * t_send_s / 8.0
    if peak_bytes <= buffer_bytes:
        return IncastCcOff(growth, math.inf if peak_bytes < buffer_bytes else t_send_s,
                           peak_bytes, False, 0.0, c, lossless_s,
                           QueueDist.uniform(0.0, peak_bytes),
                           ((0.0, 0.0), (t_send_s, peak_bytes), (lossless_s - alpha_s, 0.0)))
    t_fill_s = 8.0 * buffer_bytes / growth
    dropped_bytes = growth * (t_send_s - t_fill_s) / 8.0
    p_drop = 1.0 - c / (n * r)
    window_s = base_rtt_s + 8.0 * buffer_bytes / c
    sent_pkts = r * window_s / (8.0 * packet_bytes)
    useful_pkts = min(sent_pkts, (1.0 - p_drop) / p_drop)
    goodput_bps = min(c, n * useful_pkts * 8.0 * packet_bytes / window_s)
    in_order_bytes = c * t_fill_s / 8.0 + buffer_bytes
    rest_bytes = max(0.0, n * size_bytes - in_order_bytes)
    completion_s = t_fill_s + 8.0 * buffer_bytes / c + 8.0 * rest_bytes / goodput_bps + alpha_s
    full_weight = buffer_bytes + rest_bytes * c / goodput_bps   # bytes carried at a full queue
    queue = QueueDist(((in_order_bytes, 0.0, float(buffer_bytes)),
                       (full_weight, float(buffer_bytes), float(buffer_bytes))))
    drained_s = completion_s - alpha_s
    return IncastCcOff(growth, t_fill_s, float(buffer_bytes), True, dropped_bytes,
                       goodput_bps, completion_s, queue,
                       ((0.0, 0.0), (t_fill_s, float(buffer_bytes)),
                        (drained_s - 8.0 * buffer_bytes / c, float(buffer_bytes)),
                        (drained_s, 0.0)))


# -------------------------------------------------------------------------- DCQCN

@dataclass(frozen=True)
class DcqcnParams:
    """The fixed point's view of the reaction point (defaults: the DCQCN paper, SIGCOMM 2015)."""

    g: float = 1.0 / 256
    cnp_interval_s: float = 50e-6     # tau': one CNP per flow per interval at most
    rate_ai_bps: float = 40e6         # additive increase R_AI
    byte_counter_bytes: float = 10e6  # B
    timer_s: float = 55e-6            # T

    @classmethod
    def of(cls, params: dcqcn.DcqcnParams, line_rate_bps: float) -> DcqcnParams:
        """The fixed point's view of a `traffic.dcqcn` parameter set at this line rate."""
        factor = line_rate_bps / params.line_rate_bps if params.scale_increase_with_line_rate \
            else 1.0
        return cls(g=params.g, cnp_interval_s=params.cnp_interval_s,
                   rate_ai_bps=params.rate_ai_bps * factor,
                   byte_counter_bytes=params.byte_counter_bytes,
                   timer_s=params.rate_increase_timer_s)


@dataclass(frozen=True)
class DcqcnFixedPoint:
    p_mark: float
    alpha: float
    rate_bps: float          # per-flow current rate R_C = C / N
    target_rate_bps: float   # R_T
    queue_bytes: float       # q*
    queue_delay_s: float     # q* / C
    saturated: bool          # p* > Pmax: queue pinned at Kmax


def _pow_minus_one(p: float, x: float) -> float:
    """(1-p)^(-x) - 1, accurate for small p."""
    return math.expm1(-x * math.log1p(-p))


def dcqcn_fixed_point(n_flows: int, port_rate_bps: float, kmin_bytes: float,
                      kmax_bytes: float, pmax: float, params: DcqcnParams = DcqcnParams(),
                      packet_bytes: float = DEFAULT_PACKET_BYTES) -> DcqcnFixedPoint:
    """Fixed point of N DCQCN flows sharing a port of rate C (Zhu et al. 2016)."""
    if n_flows < 1:
        raise ValueError(f"n_flows must be >= 1, not {n_flows}")
    pkt_bits = 8.0 * packet_bytes
    rc = port_rate_bps / n_flows / pkt_bits                # packets/s
    r_ai = params.rate_ai_bps / pkt_bits
    tau = params.cnp_interval_s
    b_pkts = params.byte_counter_bytes / packet_bytes
    t_pkts = params.timer_s * rc

    def cnp_prob(p: float) -> float:
        return -math.expm1(tau * rc * math.log1p(-p))

    def increase_events(p: float) -> float:
        return rc * p / _pow_minus_one(p, b_pkts) + rc * p / _pow_minus_one(p, t_pkts)

    def balance(p: float) -> float:   # > 0 once decreases outweigh increases
        return rc * cnp_prob(p) ** 3 - r_ai * tau ** 2 * increase_events(p) ** 2

    lo, hi = math.log(1e-15), math.log(1.0 - 1e-12)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if balance(math.exp(mid)) > 0:
            hi = mid
        else:
            lo = mid
    p_star = math.exp(hi)
    a = cnp_prob(p_star)
    rt = rc + r_ai * increase_events(p_star) * tau / a
    q_star = queue_for_mark_probability(p_star, kmin_bytes, kmax_bytes, pmax)
    return DcqcnFixedPoint(
        p_mark=p_star, alpha=a, rate_bps=rc * pkt_bits, target_rate_bps=rt * pkt_bits,
        queue_bytes=q_star, queue_delay_s=8.0 * q_star / port_rate_bps,
        saturated=p_star > pmax,
    )
