"""All-reduce across two data centres over a long link, and what its round trip asks of
the transport, DCQCN and the gateway's buffer: closed forms, a priori (pure).

The DC-to-DC link is a plain link whose delay is long: 5 µs/km of fibre, so 100 km is
500 µs one way, a 1 ms round trip, and at 400G a bandwidth-delay product (BDP) of
50 MB, against the ~10 µs and ~0.5 MB inside one DC.

**Ring all-reduce** over N ranks in ring order (`traffic.collectives`): 2(N-1) steps;
each step's message from a rank depends only on the message it received in the step
before, so the completion is the longest chain of 2(N-1) consecutive ring edges, each
edge costing its message's time on its own:

    edge time = NIC overhead + path delay (one frame, idle fabric) + send time
    send time = 8 c w / r                               (window >= c or >= the BDP)
              = k RTT + 8 (c - k W) w / r,  k = ceil(c / W) - 1   (a window W below both)

with c the chunk (size / N), w the RoCE wire factor and r the bottleneck rate: a
window-limited sender sends W, then each byte one round trip after the byte W before
it (ACK-clocked), so a chunk of several windows pays a round trip per window. Two DCs in host order put two
long edges N/2 apart on the ring; a chain of 2(N-1) edges crosses them up to
``ring_crossings`` times (4 for N >= 6), and each crossing costs a one-way propagation.

**Hierarchical all-reduce** (reduce-scatter in each DC, all-reduce of each 1/L share
across, all-gather in each DC): 2(L-1) local edges and 2 long ones on the chain, the L
pairs' messages sharing the long link.

**Feedback over the long link** (`wan_feedback`). Where the long link is slower than a
sender, its gateway queue is where DCQCN marks; the first CNP takes a round trip to
reach the sender, so the queue grows by the excess rate for that long (plus the time
to reach Kmin) before any reaction: the buffer must hold that, or the gateway drops
and go-back-N resends a window. And CNPs keep arriving for a round trip after the queue
has drained below Kmin, each a cut (one per CNP interval), so the rate collapses and
then recovers on DCQCN's timers, which know nothing of the round trip.
`model.incast_fluid` integrates that loop with the round trip as its feedback delay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from core.dcqcn_params import DcqcnParams
from model.incast_fluid import DcqcnIncastFluid, Port, Sender

#: One-way propagation in fibre per metre (2/3 c).
PROPAGATION_S_PER_M = 5e-9


def bdp_bytes(rate_bps: float, rtt_s: float) -> float:
    """Bytes in flight that keep a link of ``rate_bps`` busy over a round trip."""
    return rate_bps * rtt_s / 8.0


def window_rate_bps(rate_bps: float, window_bytes: float | None, rtt_s: float) -> float:
    """A long flow's rate with at most ``window_bytes`` unacknowledged: min(rate, W / RTT)."""
    if window_bytes is None or rtt_s <= 0:
        return rate_bps
    return min(rate_bps, 8.0 * window_bytes / rtt_s)


def send_time_s(size_bytes: float, rate_bps: float, *, wire_factor: float,
                window_bytes: float | None, rtt_s: float) -> float:
    """First byte out to last byte out of one message (module docstring)."""
    wire_s = 8.0 * size_bytes * wire_factor / rate_bps
    if window_bytes is None or window_bytes >= size_bytes \
            or window_bytes >= bdp_bytes(rate_bps, rtt_s):
        return wire_s
    rounds = math.ceil(size_bytes / window_bytes) - 1
    return rounds * rtt_s + 8.0 * (size_bytes - rounds * window_bytes) * wire_factor / rate_bps


@dataclass(frozen=True)
class Edge:
    """One ring edge: its bottleneck rate, a frame's fixed path delay and round trip."""

    rate_bps: float
    delay_s: float
    rtt_s: float
    long: bool = False


def edge_time_s(edge: Edge, size_bytes: float, *, wire_factor: float, overhead_s: float,
                window_bytes: float | None = None, sharing: int = 1) -> float:
    """One message alone on ``edge`` (``sharing`` messages splitting its rate)."""
    return overhead_s + edge.delay_s + send_time_s(
        size_bytes, edge.rate_bps / sharing, wire_factor=wire_factor,
        window_bytes=window_bytes, rtt_s=edge.rtt_s)


def ring_crossings(long_edges: Sequence[bool]) -> int:
    """Most long edges a chain of 2(N-1) consecutive ring edges crosses."""
    n = len(long_edges)
    steps = 2 * (n - 1)
    return max(sum(long_edges[(start + i) % n] for i in range(steps)) for start in range(n))


def ring_allreduce_s(edges: Sequence[Edge], size_bytes: float, *, wire_factor: float,
                     overhead_s: float, window_bytes: float | None = None) -> float:
    """Ring all-reduce over ``edges`` (edge i: rank i to rank i+1): the longest chain of
    2(N-1) consecutive edges, each carrying size / N."""
    n = len(edges)
    if n < 2:
        raise ValueError("a ring needs at least two ranks")
    times = [edge_time_s(e, size_bytes / n, wire_factor=wire_factor, overhead_s=overhead_s,
                         window_bytes=window_bytes) for e in edges]
    steps = 2 * (n - 1)
    return max(sum(times[(start + i) % n] for i in range(steps)) for start in range(n))


def hierarchical_allreduce_s(local: Sequence[Edge], long: Edge, size_bytes: float, *,
                             wire_factor: float, overhead_s: float,
                             window_bytes: float | None = None) -> float:
    """Reduce-scatter around each DC's ring ``local`` (L ranks), a two-rank all-reduce of
    each rank's 1/L share with its peer across ``long`` (L messages sharing it), then
    all-gather: the local ring's longest chain of L-1 edges, twice, and two crossings."""
    n = len(local)
    local_chain = 0.0
    if n > 1:
        times = [edge_time_s(e, size_bytes / n, wire_factor=wire_factor, overhead_s=overhead_s,
                             window_bytes=window_bytes) for e in local]
        local_chain = max(sum(times[(start + i) % n] for i in range(2 * (n - 1)))
                          for start in range(n))
    across = edge_time_s(long, size_bytes / n / 2, wire_factor=wire_factor,
                         overhead_s=overhead_s, window_bytes=window_bytes, sharing=n)
    return local_chain + 2 * across


def ring_long_starts_s(edges: Sequence[Edge], size_bytes: float, *, wire_factor: float,
                       overhead_s: float, window_bytes: float | None = None) -> list[float]:
    """When each step's message on the ring's first long edge can start, every message
    alone: step s's waits for the chain of the s edges before it (a slow long link sees
    the next steps' messages arrive while it still carries the first)."""
    n = len(edges)
    first = next(i for i, e in enumerate(edges) if e.long)
    times = [edge_time_s(e, size_bytes / n, wire_factor=wire_factor, overhead_s=overhead_s,
                         window_bytes=window_bytes) for e in edges]
    return [sum(times[(first - k) % n] for k in range(1, s + 1)) for s in range(2 * (n - 1))]


def burst_queue_bytes(starts_s: Sequence[float], message_bytes: float, arrive_bps: float,
                      link_bps: float, window_bytes: float | None = None) -> float:
    """The most a port of ``link_bps`` holds of messages released at ``starts_s``, each
    putting at most a window into the fabric, sent one after another at ``arrive_bps``
    (a sender's NIC) and drained at ``link_bps``. Each message is its own QP and starts
    at line rate, so a congestion control's cut on one never slows the next: a burst of
    messages shorter than the round trip is beyond DCQCN's reach, whatever its rate."""
    each = message_bytes if window_bytes is None else min(message_bytes, window_bytes)
    busy: list[list[float]] = []          # the sender's busy periods [start, end]
    for start in sorted(starts_s):
        if busy and start <= busy[-1][1]:
            busy[-1][1] += 8.0 * each / arrive_bps
        else:
            busy.append([start, start + 8.0 * each / arrive_bps])
    queue = peak = 0.0
    last_s = -math.inf
    for start, end in busy:
        queue = max(0.0, queue - link_bps / 8.0 * (start - last_s))
        queue += max(0.0, arrive_bps - link_bps) / 8.0 * (end - start)
        peak, last_s = max(peak, queue), end
    return peak


@dataclass(frozen=True)
class WanFeedback:
    """What a sender faster than the long link asks of DCQCN and the gateway's buffer."""

    rtt_s: float
    bdp_bytes: float             # of the long link
    excess_bps: float            # the senders' rate above the long link's
    buffer_bytes: float          # configured at the gateway's long-link port
    buffer_needed_bytes: float   # Kmin + the excess over the first loop, or the burst
    first_reaction_s: float      # from the first byte to the first rate cut
    cuts_per_rtt: float          # CNPs a sender takes while its feedback is in flight
    peak_queue_bytes: float      # the DCQCN fluid's peak (capped at the buffer)
    dropped_bytes: float         # the fluid's drops at the full buffer
    starved_s: float             # time a sender's rate spent below 90 % of its share
    completion_s: float          # the fluid's last byte out (a lower bound with drops)


def wan_feedback(senders: int, sender_bps: float, wan_bps: float, rtt_s: float,
                 buffer_bytes: float, kmin_bytes: float, kmax_bytes: float, pmax: float,
                 params: DcqcnParams, size_bytes: float) -> WanFeedback:
    """DCQCN senders of ``size_bytes`` each, all starting at once, through the long
    link's port: closed-form buffer need beside `model.incast_fluid`'s integration with
    the round trip as the feedback delay."""
    excess = max(0.0, senders * sender_bps - wan_bps)
    fill_s = 8.0 * kmin_bytes / excess if excess > 0 else math.inf
    # A message shorter than the loop has arrived whole before any CNP can act.
    burst = senders * size_bytes * (1.0 - wan_bps / (senders * sender_bps)) if excess else 0.0
    need = min(burst, kmin_bytes + excess * rtt_s / 8.0) if excess > 0 else 0.0
    fluid = DcqcnIncastFluid(
        Port(wan_bps, int(buffer_bytes), kmin_bytes, kmax_bytes, pmax),
        [Sender(size_bytes, sender_bps) for _ in range(senders)], params,
        base_rtt_s=rtt_s).run()
    return WanFeedback(
        rtt_s=rtt_s, bdp_bytes=bdp_bytes(wan_bps, rtt_s), excess_bps=excess,
        buffer_bytes=buffer_bytes, buffer_needed_bytes=need,
        first_reaction_s=fill_s + rtt_s, cuts_per_rtt=rtt_s / params.cnp_interval_s,
        peak_queue_bytes=fluid.peak_queue_bytes, dropped_bytes=fluid.dropped_bytes,
        starved_s=_starved_s(fluid.rate_traces, wan_bps / senders, fluid.finish_s),
        completion_s=fluid.completion_s)


def _starved_s(traces: Sequence[Sequence[tuple[float, float]]], fair_bps: float,
               finish_s: Sequence[float]) -> float:
    """Mean over senders of the time, before its last byte, that its rate (a step
    function) spent below 90 % of its fair share of the long link: DCQCN's over-cut
    and slow recovery, which a long feedback loop makes longer."""
    out = []
    for trace, end_s in zip(traces, finish_s, strict=True):
        below = 0.0
        for (t, rate), (t_next, _) in zip(trace, [*trace[1:], (end_s, 0.0)], strict=True):
            if rate < 0.9 * fair_bps and t < end_s:
                below += min(t_next, end_s) - t
        out.append(below)
    return sum(out) / len(out)
