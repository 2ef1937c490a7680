"""Incast queueing primitives: queue distributions and latency percentiles, the
CC-off incast (a model).

Scenario: N senders, each at line rate r, send S bytes each to one receiver
behind a port of rate C with a drop-tail buffer of ``buffer_bytes``. Real units:
rates bit/s, sizes bytes, times s. `model.incast_predict` puts the pieces together.

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

DCQCN + ECN
    The marking curve p(q) (0 below Kmin, linear to Pmax at Kmax, 1 above) is the
    configuration's, `core.ecn.marking_curve`, shared with the marker's definition;
    DCQCN's fixed point and reaction point are `model.dcqcn_fluid`, its transient the
    fluid model of `model.incast_fluid`.

Latency
    one-way latency = base + q / C with base = sum over hops of (propagation +
    switch latency + packet serialization, store-and-forward) and q drawn from a packet-weighted
    queue distribution (a mixture of uniform segments and point masses).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from core.frame import FRAME_BYTES

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
                   packet_bytes: float = FRAME_BYTES) -> float:
    """One packet, empty queues: per hop propagation + serialization (store-and-forward)."""
    if len(hop_rates_bps) != len(hop_delays_s):
        raise ValueError("one delay per hop rate is needed")
    return sum(hop_delays_s) + sum(8.0 * packet_bytes / r for r in hop_rates_bps)


def path_hops(graph: nx.Graph, path: Sequence[str]) -> tuple[list[float], list[float]]:
    """(rate_bps, delay_s) of every hop of a path; a hop's delay is the link's
    ``delay_s`` (propagation) plus the ``switch_latency_s`` of the switch it leaves."""
    rates, delays = [], []
    for i, (u, v) in enumerate(zip(path[:-1], path[1:], strict=True)):
        data = graph.edges[u, v]
        rates.append(float(data["rate_bps"]))
        switch_s = float(graph.nodes[u].get("switch_latency_s", 0.0)) if i else 0.0
        delays.append(float(data.get("delay_s", 0.0)) + switch_s)
    return rates, delays


def latency_percentiles_s(base_s: float | Sequence[float], dist: QueueDist, port_rate_bps: float,
                          quantiles: Sequence[float] = (0.5, 0.99, 0.999)) -> dict[float, float]:
    """Latency quantiles: base + queue quantile / C (monotone in the quantile).

    With several bases (senders whose paths differ, each with an equal share of the
    packets, all finding the queue ``dist``), the quantiles of that mixture."""
    if isinstance(base_s, (int, float)):
        return {q: base_s + 8.0 * dist.quantile(q) / port_rate_bps for q in quantiles}
    bases = [float(b) for b in base_s]
    if not bases:
        raise ValueError("at least one base latency is needed")

    def cdf(x_s: float) -> float:
        return sum(dist.cdf((x_s - b) * port_rate_bps / 8.0) for b in bases) / len(bases)

    out = {}
    for q in quantiles:
        lo = min(bases) + 8.0 * dist.quantile(q) / port_rate_bps   # the mixture's quantile
        hi = max(bases) + 8.0 * dist.quantile(q) / port_rate_bps   # lies between these
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if cdf(mid) >= q else (mid, hi)
            if hi - lo <= 1e-12:
                break
        out[q] = hi
    return out


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
                  packet_bytes: float = FRAME_BYTES) -> IncastCcOff:
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
