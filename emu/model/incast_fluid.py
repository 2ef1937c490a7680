"""DCQCN incast as a deterministic fluid, start-up transient included (a model).

Scenario (as in `emu.model.queueing`): N senders at line rate r send S bytes each
through one bottleneck port of rate C with a drop-tail buffer; the port marks at
enqueue with the switches' curve p(q) (Kmin, Kmax, Pmax). Real units: bit/s,
bytes, s.

The N flows are identical (size, start, path, share of the marks), so one
reaction point -- `traffic.dcqcn.ReactionPoint`, the object the engine runs --
stands for every sender, with its timers and byte counter in real time: the
model is the synchronized mean trajectory (real flows spread around it because
marking is random).

Clock: the bottleneck's. The senders' first bits reach the queue at t = 0 and a
rate change reaches it one upstream delay after the sender makes it; the reaction
point runs on that shifted clock (its timers are relative, so nothing changes).

Queue and marks. Between events every rate is constant, so the queue is linear,
q' = N R_C - C (held at 0, or at the buffer while the excess is dropped), p(q(t))
is linear inside one segment of the curve, and marks integrate in closed form.
A step ends at the next reaction-point timer, byte-counter increase, CNP taking
effect, end of sending, or q reaching 0, Kmin, Kmax or the buffer.

Feedback. A packet enqueued at t leaves the queue at D(t) = t + q(t)/C; a CNP it
triggers takes effect at D + base RTT (upstream + downstream + return base delay).
D never decreases (q falls at most at C), so marks reach the receiver in enqueue
order, and a step is never longer than max(q, Kmin)/C + base RTT, the shortest
loop, so a CNP caused inside a step takes effect after it.
Notification point, per QP: after a CNP it ignores marks for ``cnp_interval_s``,
then counts the flow's *expected* marks (sum of p over its packets) and sends the
next CNP when that count reaches 1. Why 1 and not, e.g., the median of the first
mark: for a constant p the real wait for a mark is geometric with mean 1/(p R),
so the deterministic period tau' + 1/(p R) is the real mean period and the
long-run CNP rate is right; above Kmax (p = 1) it is the next packet, as real.

Outputs: completion = last byte drained + alpha; the packet-weighted queue at
enqueue (uniform within a step, binned into a `QueueDist`); peak queue; expected
marks (packets accepted, which the marker alone marks); CNPs sent; bytes dropped
at a full buffer. Dropped bytes are not resent here (go-back-N is not modelled),
so with drops the completion is a lower bound.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from emu.model.queueing import DEFAULT_PACKET_BYTES, QueueDist, mark_probability
from traffic.dcqcn import DcqcnParams, ReactionPoint

#: Bins of the packet-weighted queue distribution over [0, peak].
QUEUE_BINS = 256


@dataclass(frozen=True)
class IncastDcqcn:
    """The fluid DCQCN incast: headline numbers and the trajectories behind them."""

    completion_s: float            # last byte drained + alpha
    peak_queue_bytes: float
    marks: float                   # expected ECN marks at the port, all flows (packets)
    cnps: int                      # CNPs sent, all flows
    dropped_bytes: float           # arrivals at a full buffer (not resent here)
    queue: QueueDist               # packet-weighted queue at enqueue
    queue_trace: tuple[tuple[float, float], ...]   # (t_s, queue_bytes), linear between
    rate_trace: tuple[tuple[float, float], ...]    # (t_s, R_C per flow) at every change


class _QueueHistogram:
    """Packet-weighted queue at enqueue: uniform segments, then bins over [0, peak].

    Point masses at 0 and at the buffer (an empty or a full queue) stay exact.
    """

    def __init__(self, buffer_bytes: float):
        self.segments: list[tuple[float, float, float]] = []
        self.points = {0.0: 0.0, buffer_bytes: 0.0}

    def add(self, weight: float, q0: float, q1: float) -> None:
        if weight <= 0:
            return
        if q0 == q1 and q0 in self.points:
            self.points[q0] += weight
        else:
            self.segments.append((weight, min(q0, q1), max(q0, q1)))

    def dist(self) -> QueueDist:
        peak = max((hi for _, _, hi in self.segments), default=0.0)
        width = peak / QUEUE_BINS
        bins = [0.0] * QUEUE_BINS
        for w, lo, hi in self.segments:
            if hi == lo:
                bins[min(int(lo / width), QUEUE_BINS - 1)] += w
                continue
            density = w / (hi - lo)
            for b in range(int(lo / width), min(int(hi / width), QUEUE_BINS - 1) + 1):
                overlap = min(hi, (b + 1) * width) - max(lo, b * width)
                if overlap > 0:
                    bins[b] += density * overlap
        parts = [(w, b * width, (b + 1) * width) for b, w in enumerate(bins) if w > 0]
        parts += [(w, q, q) for q, w in self.points.items() if w > 0]
        return QueueDist(tuple(parts))


def incast_dcqcn(n_senders: int, size_bytes: float, sender_rate_bps: float,
                 port_rate_bps: float, buffer_bytes: float, kmin_bytes: float,
                 kmax_bytes: float, pmax: float, params: DcqcnParams, *,
                 base_rtt_s: float = 0.0, alpha_s: float = 0.0,
                 packet_bytes: float = DEFAULT_PACKET_BYTES) -> IncastDcqcn:
    """Integrate the DCQCN incast from the first byte to the last (see the module doc)."""
    if n_senders < 1 or not size_bytes > 0:
        raise ValueError("an incast needs at least one sender and a positive size")
    c_Bps = port_rate_bps / 8.0
    rp = ReactionPoint(params, sender_rate_bps)
    tau_s = params.cnp_interval_s
    band_bytes = kmax_bytes - kmin_bytes
    thresholds = sorted({0.0, float(kmin_bytes), float(kmax_bytes), float(buffer_bytes)})
    thresholds = [x for x in thresholds if x <= buffer_bytes]
    min_loop_s = 8.0 * packet_bytes / port_rate_bps   # floor when Kmin and the RTT are 0

    t, q, rem_bytes, carry_bytes = 0.0, 0.0, float(size_bytes), 0.0
    np_open_s, np_marks = -math.inf, 0.0      # notification point of one QP
    pending: deque[float] = deque()           # times CNPs take effect at the queue
    marks, cnps, dropped, peak = 0.0, 0, 0.0, 0.0
    hist = _QueueHistogram(float(buffer_bytes))
    queue_trace = [(0.0, 0.0)]
    rate_trace = [(0.0, rp.rate_bps)]
    while rem_bytes > 0 or q > 0:
        rate_Bps = rp.rate_bps / 8.0 if rem_bytes > 0 else 0.0
        in_Bps = n_senders * rate_Bps
        full = q >= buffer_bytes and in_Bps >= c_Bps
        slope = 0.0 if full or (q <= 0 and in_Bps <= c_Bps) else in_Bps - c_Bps
        # -- step length: the next event
        h = math.inf
        if rate_Bps > 0:
            h = min(rem_bytes / rate_Bps, (rp.bytes_to_increase - carry_bytes) / rate_Bps,
                    rp.next_event_s - t,
                    max(max(q, kmin_bytes) / c_Bps + base_rtt_s, min_loop_s))
            if pending:
                h = min(h, pending[0] - t)
        if slope > 0:
            h = min(h, (next(x for x in thresholds if x > q) - q) / slope)
        elif slope < 0:
            h = min(h, (q - next(x for x in reversed(thresholds) if x < q)) / -slope)
        h = max(h, 0.0)
        # -- integrate the step: queue, marking probability (linear), marks, CNPs
        q1 = q + slope * h
        if slope == 0:
            p0 = p1 = mark_probability(q, kmin_bytes, kmax_bytes, pmax)
        else:
            mid = q + 0.5 * slope * h
            if mid <= kmin_bytes:
                p0 = p1 = 0.0
            elif mid > kmax_bytes:
                p0 = p1 = 1.0
            else:
                p0 = pmax * (q - kmin_bytes) / band_bytes
                p1 = pmax * (q1 - kmin_bytes) / band_bytes
        accepted = c_Bps / in_Bps if full else 1.0
        flow_pps = rate_Bps * accepted / packet_bytes        # one flow's packets into the queue
        marks += n_senders * flow_pps * 0.5 * (p0 + p1) * h
        if full:
            dropped += (in_Bps - c_Bps) * h
        hist.add(in_Bps * accepted * h, q, q1)
        if flow_pps > 0 and p0 + p1 > 0:
            np_open_s, np_marks, fired = _notify(t, h, q, slope, c_Bps, p0, p1, flow_pps,
                                                 np_open_s, np_marks, tau_s)
            pending.extend(d + base_rtt_s for d in fired)
            cnps += n_senders * len(fired)
        # -- advance the clock and the reaction point
        sent = rate_Bps * h
        rem_bytes = rem_bytes - sent if rem_bytes - sent > 1e-6 * packet_bytes else 0.0
        carry_bytes += sent
        whole = math.floor(carry_bytes + 1e-6)
        carry_bytes -= whole
        rate0 = rp.rate_bps
        # The step's bytes count before the timers due at its end (none fell inside it).
        rp.on_bytes_sent(whole, t)
        t += h
        q = min(max(q1, 0.0), float(buffer_bytes))
        # A step that ends on a threshold lands on it exactly, so it is not crossed twice.
        q = next((x for x in thresholds if abs(q - x) <= 1e-9 * max(x, 1.0)), q)
        if rem_bytes > 0:   # once all is sent, the rate no longer matters
            rp.advance(t)
            while pending and pending[0] <= t:
                pending.popleft()
                rp.on_cnp(t)
            if rp.rate_bps != rate0:
                rate_trace.append((t, rp.rate_bps))
        peak = max(peak, q)
        queue_trace.append((t, q))
    return IncastDcqcn(
        completion_s=t + alpha_s, peak_queue_bytes=peak, marks=marks, cnps=cnps,
        dropped_bytes=dropped, queue=hist.dist(), queue_trace=tuple(queue_trace),
        rate_trace=tuple(rate_trace))


def _notify(t0: float, h: float, q0: float, slope: float, c_Bps: float, p0: float,
            p1: float, pps: float, open_s: float, count: float,
            interval_s: float) -> tuple[float, float, list[float]]:
    """One QP's notification point over one step; returns (open_s, count, CNP send times).

    A packet enqueued at s in [t0, t0 + h] leaves the queue at D(s) = s + q(s)/C,
    linear in s, and reaches the receiver a constant delay later (folded into the
    base RTT, so D serves as the receiver's clock); the mark density pps * p(s) is
    linear too. ``open_s`` is when the NP takes marks again, ``count`` the expected
    marks since then.
    """
    speed = 1.0 + slope / c_Bps                  # dD/ds >= 0
    d0 = t0 + q0 / c_Bps
    dp = (p1 - p0) / h if h > 0 else 0.0
    end = t0 + h
    fired: list[float] = []
    while True:
        if open_s > d0:
            if speed <= 0:
                break
            start = t0 + (open_s - d0) / speed
            if start >= end:
                break
        else:
            start = t0
        pa = p0 + dp * (start - t0)
        span = end - start
        need = (1.0 - count) / pps                # in units of "p x seconds"
        if pa * span + 0.5 * dp * span * span < need:
            count += pps * (pa * span + 0.5 * dp * span * span)
            break
        # pa x + dp x^2 / 2 = need, the root in [0, span] (stable form)
        x = 2.0 * need / (pa + math.sqrt(max(pa * pa + 2.0 * dp * need, 0.0)))
        d = d0 + speed * (start + x - t0)
        fired.append(d)
        open_s, count = d + interval_s, 0.0
    return open_s, count, fired
