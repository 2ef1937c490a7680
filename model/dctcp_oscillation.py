"""DCTCP's steady-state queue oscillation (a model, from the configuration alone).

The analysis of Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010, section
3.3: ``n`` long-lived flows with the same round trip share one bottleneck of
capacity C (packets per second) that marks every packet arriving to a queue above
K packets (step marking, Kmin = Kmax = K, Pmax = 1). The flows' windows grow by
one packet per round trip and are synchronised by the shared marks, so the queue
is a sawtooth:

* the queue reaches K when every window is ``W* = (C * RTT + K) / n``;
* marks arrive one round trip later, when every window is W* + 1: the fraction of
  a window that is marked, which alpha converges to, solves
  ``alpha^2 (1 - alpha / 4) = (2 W* + 1) / (W* + 1)^2`` (about sqrt(2 / W*));
* each window then shrinks by ``D = (W* + 1) alpha / 2`` packets, so the queue
  falls by the amplitude ``A = n D`` from ``Q_max = n (W* + 1) - C * RTT = K + n``
  to ``Q_min = Q_max - A``;
* it climbs back at n packets per round trip, so one period is D round trips.

When A exceeds Q_max (K below the paper's guideline of about C * RTT / 7) the
queue empties every period and the link idles; the amplitude is then Q_max.

RTT here is the unloaded round trip (propagation, switching, serialization of a
frame and its ACK) and C counts packets on the wire (frame plus Ethernet overhead),
while the queue holds frames; the queue figures are returned in frame bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ParameterError

#: Bisection steps for alpha on [0, 1]: 2^-60 is far below any measurable difference.
_BISECTION_STEPS = 60


@dataclass(frozen=True)
class DctcpOscillation:
    """The sawtooth of the bottleneck queue: bytes are frame bytes in the queue."""

    n_flows: int
    window_packets: float       # W*: every flow's window when the queue reaches K
    alpha: float                # the marked fraction alpha converges to
    cut_packets: float          # D: one window's decrease per period
    q_max_bytes: float
    q_min_bytes: float
    amplitude_bytes: float      # A = Q_max - Q_min
    period_s: float             # D round trips (at the round trip of a queue at K)

    @property
    def mean_bytes(self) -> float:
        """Time average of the sawtooth (linear climb, instantaneous fall)."""
        return self.q_max_bytes - self.amplitude_bytes / 2


def steady_alpha(window_packets: float) -> float:
    """The alpha that solves ``alpha^2 (1 - alpha/4) = (2W+1)/(W+1)^2`` on [0, 1];
    1 when the window is so small that even alpha = 1 falls short (W < ~1.3)."""
    if window_packets <= 0:
        raise ParameterError("window_packets", window_packets, "must be > 0")
    target = (2 * window_packets + 1) / (window_packets + 1) ** 2
    lo, hi = 0.0, 1.0
    if hi * hi * (1 - hi / 4) <= target:
        return 1.0
    for _ in range(_BISECTION_STEPS):  # the left side grows on [0, 1]
        mid = (lo + hi) / 2
        if mid * mid * (1 - mid / 4) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def dctcp_oscillation(n_flows: int, capacity_bps: float, rtt_s: float, k_bytes: float,
                      wire_packet_bytes: float, queue_packet_bytes: float) -> DctcpOscillation:
    """The queue sawtooth of ``n_flows`` synchronised DCTCP flows (see the module doc).

    ``capacity_bps``: the bottleneck's line rate; ``rtt_s``: the unloaded round trip;
    ``k_bytes``: the step-marking threshold (frame bytes in the queue);
    ``wire_packet_bytes``: a full packet on the wire (what the line rate carries);
    ``queue_packet_bytes``: the same packet in the queue (no preamble or gap).
    """
    if n_flows < 1:
        raise ParameterError("n_flows", n_flows, "must be >= 1")
    for name, value in (("capacity_bps", capacity_bps), ("rtt_s", rtt_s),
                        ("wire_packet_bytes", wire_packet_bytes),
                        ("queue_packet_bytes", queue_packet_bytes)):
        if not value > 0:
            raise ParameterError(name, value, "must be > 0")
    if not k_bytes >= 0:
        raise ParameterError("k_bytes", k_bytes, "must be >= 0")
    c_pps = capacity_bps / (8 * wire_packet_bytes)
    bdp_packets = c_pps * rtt_s
    k_packets = k_bytes / queue_packet_bytes
    w_star = (bdp_packets + k_packets) / n_flows
    alpha = steady_alpha(w_star)
    cut = (w_star + 1) * alpha / 2
    q_max = k_packets + n_flows
    amplitude = min(n_flows * cut, q_max)  # a queue cannot fall below empty
    rtt_at_k_s = rtt_s + k_packets / c_pps
    return DctcpOscillation(n_flows, w_star, alpha, cut, q_max * queue_packet_bytes,
                            (q_max - amplitude) * queue_packet_bytes,
                            amplitude * queue_packet_bytes, cut * rtt_at_k_s)
