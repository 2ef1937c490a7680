"""DCQCN senders into one bottleneck as a fluid from the first byte (a model).

Scenario: N senders (each with its size, line rate and start time) send through one
port of rate C with a drop-tail buffer; the port marks at enqueue with the curve p(q)
(Kmin, Kmax, Pmax). Real units: bit/s, bytes, s. DCQCN is `model.dcqcn_fluid` (written
from the publications; nothing of the engine runs here).

Clock: the bottleneck's. A sender's bytes reach the queue as it sends them (its
start time is when its first byte reaches the queue), and feedback closes the loop: a
packet enqueued at s leaves at D(s) = s + q(s)/C and a CNP it triggers changes the
sender's rate at the queue at D(s) + its base RTT (downstream, return and upstream base
delays together; each sender has its own, ``Sender.rtt_s``, else the model's).

Integration: a fixed step h (`DcqcnIncastFluid.step_s`, by default a fraction of the
fastest time scale: the CNP interval, the timers, the base RTT and the time to cross
the marking band; start times fall on the step grid). Per step: the queue
q' = sum of rates - C (held at 0, or at the buffer while the excess is dropped), p at
the step's middle, the marks of every flow (p x its packets), then the senders react.
Two reactions:

* 'events' (default): every sender is a `dcqcn_fluid.ReactionPoint` (cuts, timers, byte
  counter as discrete events). The notification point of a flow counts the flow's
  *expected* marks once it is open again (``cnp_interval_s`` after its last CNP) and
  sends a CNP when the count reaches 1: for a constant p the wait for a mark is
  geometric with mean 1/(p R), so the long-run CNP rate is the real one, and above
  Kmax (p = 1) the CNP follows the next packet, as real.
* 'mean-field': every sender follows the CoNEXT'16 delay-differential equations
  (`dcqcn_fluid.MeanFieldSender`) with the marking probability and its own rate one
  feedback delay ago: D(s) + base RTT = now, or a constant ``feedback_delay_s`` (the
  paper's tau*). It settles at `dcqcn_fluid.dcqcn_fixed_point`.

Outputs: completion (last byte drained), the packet-weighted queue at enqueue (uniform
within a step, binned into a `QueueDist`), peak queue, expected marks, CNPs, bytes
dropped at a full buffer (not resent: go-back-N is not modelled, so with drops the
completion is a lower bound), the queue and every sender's rate over time.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.ecn import marking_curve
from core.frame import FRAME_BYTES
from model.dcqcn_fluid import DcqcnParams, MeanFieldSender, ReactionPoint, dcqcn_params
from model.queueing import QueueDist, latency_percentiles_s

#: Bins of the packet-weighted queue distribution over [0, peak].
QUEUE_BINS = 256
REACTIONS = ("events", "mean-field")
#: Random marks: a probability this close to 1 stands for 1 (a finite hazard).
_P_SURE = 1.0 - 1e-9


@dataclass(frozen=True)
class Port:
    """The bottleneck: rate, drop-tail buffer and marking curve."""

    rate_bps: float
    buffer_bytes: float
    kmin_bytes: float
    kmax_bytes: float
    pmax: float

    def __post_init__(self) -> None:
        if not 0 < self.rate_bps < math.inf:
            raise ValueError(f"port rate must be positive and finite, not {self.rate_bps!r}")
        if not 0 <= self.kmin_bytes <= self.kmax_bytes:
            raise ValueError("need 0 <= Kmin <= Kmax")
        if not 0 < self.pmax <= 1:
            raise ValueError(f"Pmax must be in (0, 1], not {self.pmax!r}")
        if not self.buffer_bytes > 0:
            raise ValueError(f"buffer must be positive, not {self.buffer_bytes!r}")


@dataclass(frozen=True)
class Sender:
    """One flow: bytes to send (inf for a long-lived flow), NIC line rate, start time
    (its first byte at the queue) and its feedback loop's base RTT (None: the model's)."""

    size_bytes: float
    line_rate_bps: float
    start_s: float = 0.0
    rtt_s: float | None = None

    def __post_init__(self) -> None:
        if not self.size_bytes > 0 or not 0 < self.line_rate_bps < math.inf \
                or not 0 <= self.start_s < math.inf \
                or not (self.rtt_s is None or 0 <= self.rtt_s < math.inf):
            raise ValueError(f"a sender needs a positive size and line rate, a start "
                             f">= 0 and a finite RTT >= 0, not {self}")


@dataclass(frozen=True)
class IncastDcqcn:
    """The fluid DCQCN incast: headline numbers and the trajectories behind them."""

    completion_s: float            # last byte drained + alpha
    peak_queue_bytes: float
    marks: float                   # expected ECN marks at the port, all flows (packets)
    cnps: int                      # CNPs sent, all flows ('events')
    dropped_bytes: float           # arrivals at a full buffer (not resent here)
    queue: QueueDist               # packet-weighted queue at enqueue
    queue_trace: tuple[tuple[float, float], ...]   # (t_s, queue_bytes), linear between
    rate_traces: tuple[tuple[tuple[float, float], ...], ...]   # per sender: (t_s, R_C)
    finish_s: tuple[float, ...]    # per sender: its last byte reaches the queue (inf: not yet)
    port_rate_bps: float

    @property
    def rate_trace(self) -> tuple[tuple[float, float], ...]:
        """The first sender's (t_s, R_C) at every change."""
        return self.rate_traces[0]

    def latency_percentiles_s(self, base_s: float,
                              quantiles: Sequence[float] = (0.5, 0.99, 0.999)) -> dict[float, float]:
        """One-way latency quantiles: base + the packet-weighted queue quantile / C."""
        return latency_percentiles_s(base_s, self.queue, self.port_rate_bps, quantiles)


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
        parts: list[tuple[float, float, float]] = []
        if peak > 0:
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
        return QueueDist(tuple(parts) or ((1.0, 0.0, 0.0),))


def _port_step(q: float, in_bytes: float, c_Bps: float, h: float,
               buffer_bytes: float) -> tuple[float, float, float | None]:
    """The bottleneck queue over one step of ``h`` s from ``q`` bytes with ``in_bytes``
    arriving and C draining: (queue after, bytes dropped at the full buffer, when
    after the step's start it emptied, or None if it did not)."""
    q1 = q + in_bytes - c_Bps * h
    drop = 0.0
    if q1 > buffer_bytes:
        drop, q1 = q1 - buffer_bytes, float(buffer_bytes)
    if q1 > 0:
        return q1, drop, None
    return 0.0, drop, 0.0 if q <= 0 else q / (c_Bps - in_bytes / h)


@dataclass
class _FeedbackHistory:
    """Mean-field reaction: every step's departure time D(s), marking probability and
    senders' rates, for the feedback one RTT later."""

    depart_s: list[float] = field(default_factory=list)
    p_mark: list[float] = field(default_factory=list)
    rates_bps: list[list[float]] = field(default_factory=list)

    def record(self, depart_s: float, p_mark: float, rates_bps: list[float]) -> None:
        self.depart_s.append(depart_s)
        self.p_mark.append(p_mark)
        self.rates_bps.append(list(rates_bps))


class DcqcnIncastFluid:
    """Fixed-step integration of DCQCN senders into one port (see the module doc)."""

    def __init__(self, port: Port, senders: Sequence[Sender], params: str | DcqcnParams, *,
                 base_rtt_s: float = 0.0, packet_bytes: float = FRAME_BYTES,
                 reaction: str = "events", step_s: float | None = None,
                 feedback_delay_s: float | None = None, seed: int | None = None):
        if not senders:
            raise ValueError("an incast needs at least one sender")
        if reaction not in REACTIONS:
            raise ValueError(f"reaction must be one of {REACTIONS}, not {reaction!r}")
        if not 0 <= base_rtt_s < math.inf or not packet_bytes > 0:
            raise ValueError("base RTT must be >= 0 and the packet size positive")
        self.port = port
        self.senders = tuple(senders)
        self.params = dcqcn_params(params)
        self.base_rtt_s = float(base_rtt_s)
        self.rtts_s = tuple(self.base_rtt_s if s.rtt_s is None else s.rtt_s for s in self.senders)
        self.packet_bytes = float(packet_bytes)
        self.reaction = reaction
        self.feedback_delay_s = feedback_delay_s
        self.rng = None if seed is None else random.Random(seed)
        self.step_s = self.default_step_s() if step_s is None else float(step_s)
        if not self.step_s > 0:
            raise ValueError(f"step must be positive, not {self.step_s!r}")

    def default_step_s(self) -> float:
        """A tenth of the CNP interval and timers, a quarter of the feedback loop, a
        fiftieth of the time the senders' excess takes to cross the marking band."""
        prm, port = self.params, self.port
        pkt_s = 8.0 * self.packet_bytes / port.rate_bps
        loop_s = max(min(self.rtts_s) if self.feedback_delay_s is None else self.feedback_delay_s,
                     pkt_s)
        band_bytes = max(port.kmax_bytes - port.kmin_bytes, self.packet_bytes)
        fill_s = 8.0 * band_bytes / sum(s.line_rate_bps for s in self.senders)
        return min(prm.cnp_interval_s / 10, prm.alpha_timer_s / 10, prm.rate_increase_timer_s / 10,
                   loop_s / 4, fill_s / 50)

    def run(self, until_s: float = math.inf) -> IncastDcqcn:
        """Integrate until every byte has drained (or ``until_s``)."""
        port, h, pkt = self.port, self.step_s, self.packet_bytes
        if any(math.isinf(s.size_bytes) for s in self.senders) and math.isinf(until_s):
            raise ValueError("long-lived senders need a finite until_s")
        c_Bps = port.rate_bps / 8.0
        n = len(self.senders)
        events = self.reaction == "events"
        rps, mfs = self._reaction_points()
        rate = [s.line_rate_bps for s in self.senders]
        remaining = [float(s.size_bytes) for s in self.senders]
        finish = [math.inf] * n
        pending: list[deque[float]] = [deque() for _ in range(n)]   # CNPs take effect at
        np_open = [-math.inf] * n
        np_count = [0.0] * n
        np_need = [self._marks_to_cnp() for _ in range(n)]
        history = _FeedbackHistory()      # mean-field only
        hist = _QueueHistogram(float(port.buffer_bytes))
        queue_trace = [(0.0, 0.0)]
        rate_traces = [[(0.0, r)] for r in rate]
        t = q = marks = dropped = peak = clear_s = 0.0   # clear_s: when the queue last emptied
        cnps = 0
        while True:
            if all(r <= 0 for r in remaining):
                if q > 0:   # the port drains the rest at C
                    t += q / c_Bps
                    queue_trace.append((t, 0.0))
                else:       # the last byte left as it arrived, or as the queue emptied
                    t = max(clear_s, max(finish))
                break
            if t >= until_s:
                break
            sent = [min(rate[i] * h / 8.0, remaining[i]) if t >= s.start_s else 0.0
                    for i, s in enumerate(self.senders)]
            in_bytes = sum(sent)
            q1, drop, emptied_after_s = _port_step(q, in_bytes, c_Bps, h, port.buffer_bytes)
            if emptied_after_s is not None:
                clear_s = t + emptied_after_s
            accepted = 1.0 - drop / in_bytes if in_bytes > 0 else 1.0
            dropped += drop
            q_mid = 0.5 * (q + q1)
            p_mid = marking_curve(q_mid, port.kmin_bytes, port.kmax_bytes, port.pmax)
            depart_s = t + h / 2 + q_mid / c_Bps
            hist.add(in_bytes * accepted, q, q1)
            for i in range(n):
                if sent[i] <= 0:
                    continue
                flow_marks = p_mid * sent[i] * accepted / pkt
                marks += flow_marks
                if events and flow_marks > 0:
                    # Random marks: the hazard of a packet marked with probability p.
                    hazard = flow_marks if self.rng is None else \
                        -math.log1p(-min(p_mid, _P_SURE)) * sent[i] * accepted / pkt
                    cnp_s = self._notify(i, t, q / c_Bps, t + h + q1 / c_Bps, hazard,
                                         np_open, np_count, np_need)
                    if cnp_s is not None:
                        pending[i].append(cnp_s + self.rtts_s[i])
                        cnps += 1
                remaining[i] -= sent[i]
                if remaining[i] <= 1e-9 * pkt:
                    remaining[i] = 0.0
                    finish[i] = t + 8.0 * sent[i] / rate[i]
            t += h
            q = q1
            peak = max(peak, q)
            queue_trace.append((t, q))
            if events:
                new = self._react_events(t, rps, pending, sent)
            else:
                history.record(depart_s, p_mid, rate)
                new = self._react_mean_field(t, mfs, history, remaining)
            for i in range(n):
                if new[i] != rate[i] and remaining[i] > 0:
                    rate[i] = new[i]
                    rate_traces[i].append((t, rate[i]))
        return IncastDcqcn(
            completion_s=t, peak_queue_bytes=peak, marks=marks, cnps=cnps,
            dropped_bytes=dropped, queue=hist.dist(), queue_trace=tuple(queue_trace),
            rate_traces=tuple(tuple(tr) for tr in rate_traces), finish_s=tuple(finish),
            port_rate_bps=port.rate_bps)

    def _marks_to_cnp(self) -> float:
        """Expected marks (or, random, hazard) that make the next CNP: 1, or Exp(1)."""
        return 1.0 if self.rng is None else self.rng.expovariate(1.0)

    def _notify(self, i: int, t: float, d0_s: float, d1_s: float, flow_marks: float,
                np_open: list[float], np_count: list[float],
                np_need: list[float]) -> float | None:
        """Flow i's notification point over one step whose packets reach it from
        ``t + d0_s`` to ``d1_s`` (D is linear in the step): counts the flow's expected
        marks (or hazard) while it is open; returns when the count reaches its need (a
        CNP), if it does."""
        d0_s += t
        if d1_s < np_open[i] or d1_s <= d0_s:
            return None
        start = max(0.0, (np_open[i] - d0_s) / (d1_s - d0_s))   # open part of the step
        need = np_need[i]
        if np_count[i] + flow_marks * (1.0 - start) < need:
            np_count[i] += flow_marks * (1.0 - start)
            return None
        frac = start + (need - np_count[i]) / flow_marks
        cnp_s = d0_s + frac * (d1_s - d0_s)
        np_open[i], np_count[i] = cnp_s + self.params.cnp_interval_s, 0.0
        np_need[i] = self._marks_to_cnp()
        return cnp_s

    def _reaction_points(self) -> tuple[list[ReactionPoint], list[MeanFieldSender]]:
        """One reaction point per sender, of the kind ``reaction`` chose (the other list
        empty)."""
        if self.reaction == "events":
            return [ReactionPoint(self.params.at_line_rate(s.line_rate_bps), s.line_rate_bps,
                                  s.start_s) for s in self.senders], []
        return [], [MeanFieldSender(self.params.at_line_rate(s.line_rate_bps), s.line_rate_bps,
                                    self.packet_bytes) for s in self.senders]

    def _react_events(self, t: float, rps: list[ReactionPoint], pending: list[deque[float]],
                      sent: list[float]) -> list[float]:
        """Apply the step that ended at ``t``: CNPs at their times, the step's bytes
        counted before or after each CNP as they were sent (the byte counter restarts
        with a cut), then the timers due; returns the new rates."""
        h = self.step_s
        for i, rp in enumerate(rps):
            counted = 0.0
            while pending[i] and pending[i][0] <= t:
                cnp_s = pending[i].popleft()
                before = sent[i] * min(1.0, max(0.0, (cnp_s - (t - h)) / h))
                if before > counted:
                    rp.advance(cnp_s)
                    rp.on_bytes(before - counted)
                    counted = before
                rp.on_cnp(cnp_s)
            rp.advance(t)
            if sent[i] > counted:
                rp.on_bytes(sent[i] - counted)
        return [rp.rate_bps for rp in rps]

    def _react_mean_field(self, t: float, mfs: list[MeanFieldSender],
                          history: _FeedbackHistory, remaining: list[float]) -> list[float]:
        """Step each mean-field sender on the feedback of the step one RTT (or the
        constant feedback delay) ago; returns the new rates."""
        hist_d, hist_p, hist_rate = history.depart_s, history.p_mark, history.rates_bps
        for i, mf in enumerate(mfs):
            if remaining[i] <= 0 or t < self.senders[i].start_s:
                continue
            if self.feedback_delay_s is None:   # the packets whose feedback arrives now
                k = bisect_right(hist_d, t - self.rtts_s[i]) - 1
            else:                               # the step one constant delay ago
                k = len(hist_d) - 1 - round(self.feedback_delay_s / self.step_s)
            p_d, r_d = (hist_p[k], hist_rate[k][i]) if k >= 0 else (0.0, mf.line_rate_bps)
            mf.step(self.step_s, p_d, r_d)
        return [mf.rate_bps for mf in mfs]


def incast_dcqcn(n_senders: int, size_bytes: float, sender_rate_bps: float,
                 port_rate_bps: float, buffer_bytes: float, kmin_bytes: float,
                 kmax_bytes: float, pmax: float, params: str | DcqcnParams = "paper", *,
                 base_rtt_s: float = 0.0, alpha_s: float = 0.0,
                 packet_bytes: float = FRAME_BYTES, reaction: str = "events",
                 step_s: float | None = None,
                 paths_s: Sequence[tuple[float, float]] = (),
                 seed: int | None = None) -> IncastDcqcn:
    """N senders of ``size_bytes`` at ``sender_rate_bps``, all from t = 0 with the RTT
    ``base_rtt_s``, or each (start, RTT) of ``paths_s``; completion includes ``alpha_s``;
    random marks drawn from ``seed`` (None: expected marks; see the module doc)."""
    if n_senders < 1 or not size_bytes > 0:
        raise ValueError("an incast needs at least one sender and a positive size")
    if paths_s and len(paths_s) != n_senders:
        raise ValueError("paths_s needs one (start, RTT) per sender")
    senders = [Sender(size_bytes, sender_rate_bps, start, rtt) for start, rtt in paths_s] \
        or [Sender(size_bytes, sender_rate_bps)] * n_senders
    model = DcqcnIncastFluid(
        Port(port_rate_bps, buffer_bytes, kmin_bytes, kmax_bytes, pmax),
        senders, params, base_rtt_s=base_rtt_s,
        packet_bytes=packet_bytes, reaction=reaction, step_s=step_s, seed=seed)
    res = model.run()
    return IncastDcqcn(
        completion_s=res.completion_s + alpha_s, peak_queue_bytes=res.peak_queue_bytes,
        marks=res.marks, cnps=res.cnps, dropped_bytes=res.dropped_bytes, queue=res.queue,
        queue_trace=res.queue_trace, rate_traces=res.rate_traces, finish_s=res.finish_s,
        port_rate_bps=res.port_rate_bps)
