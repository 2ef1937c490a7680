"""What a failure costs a collective (pure): the capacity left, detection and recovery.

* A degraded link: the collective priced as before (`model.alphabeta`'s DAG over
  fluid max-min) on the graph with that link's rate times the fraction left
  (`degraded_graph`); for a ring, also the slowest-link model
  (`ring_slowest_link_s`): the ring goes at the pace of its slowest hop.
* A link down at ``fail_at_s``: the collective runs at the no-failure pace until then
  and at the pace of the fabric without the link afterwards (`failed_fabric`: the
  graph and the routes a converged fabric has), ring steps being equal in time; a
  message caught in the black hole (sent into the dead link before the rest of the
  fabric has rerouted) is recovered by go-back-N's timeout: the sender retries every
  RTO from its last frame until one retry falls after the reroute, so
  ``ceil(detect / rto)`` timeouts (at least one), during which a ring, a chain of
  steps, waits whole; an all-to-all only waits for that message.
* The same link down with the whole fabric rerouting at once (no detection delay):
  only the frames queued at the dead port are lost with its queue; the frames after
  them take the new path, the receiver sees the gap and NAKs, and go-back-N resends
  from the first lost frame (`nak_recovery_s`: a round trip, plus the queue that was
  lost drained again at the port's rate). If the frames lost were a message's last,
  no later frame shows the gap: one timeout, whose retry takes the new path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from topologies.base import FabricTopo
from topologies.routing import DownLinks, Routes, compute_routes, topo_graph


def degraded_graph(graph: nx.Graph, link: tuple[str, str], fraction: float) -> nx.Graph:
    """``graph`` with link ``link`` at ``fraction`` of its rate (both directions)."""
    out = graph.copy()
    out.edges[link]["rate_bps"] = graph.edges[link]["rate_bps"] * fraction
    return out


def failed_fabric(topo: FabricTopo, down: DownLinks) -> tuple[nx.Graph, Routes]:
    """The graph and routes of ``topo`` once the fabric has rerouted around ``down``."""
    return topo_graph(topo, down), compute_routes(topo, down)


def recovery_timeouts(detect_s: float, rto_s: float) -> int:
    """Go-back-N timeouts a message sent into the black hole waits: its sender retries
    every ``rto_s`` until a retry goes out after the reroute (``detect_s`` after the
    failure); none when the fabric reroutes at once (the frames behind the lost ones
    arrive out of order and the receiver's NAK asks for them within a round trip)."""
    if detect_s <= 0:
        return 0
    return max(1, math.ceil(detect_s / rto_s))


def nak_recovery_s(rtt_s: float, queued_bytes: float, rate_bps: float) -> float:
    """What a message loses when ``queued_bytes`` queued at a port of ``rate_bps`` are
    dropped with the port and the next frames arrive by another path: the NAK's round
    trip (``rtt_s``), then the lost bytes sent again."""
    return rtt_s + 8.0 * queued_bytes / rate_bps


@dataclass(frozen=True)
class LinkDownModel:
    """Completion of a collective with one link down mid-run (real seconds)."""

    nofail_s: float     # the collective without failure
    after_s: float      # the whole collective on the fabric without the link
    fail_at_s: float
    detect_s: float
    rto_s: float
    lost: bool          # a message lost frames and had to resend them (read from the run)
    chained: bool       # every step waits for the previous one (a ring)
    nak_s: float = 0.0  # recovery by NAK when the fabric reroutes at once (nak_recovery_s)
    #: Rerouted at once but the lost frames were a message's last: no later frame for
    #: the receiver to see the gap by, so one timeout (its retry takes the new path).
    timed_out: bool = False

    @property
    def capacity_s(self) -> float:
        """Completion from the capacity alone: the no-failure pace up to the failure,
        the rerouted fabric's pace for the rest."""
        if self.fail_at_s >= self.nofail_s:
            return self.nofail_s
        done = self.fail_at_s / self.nofail_s
        return self.fail_at_s + (1 - done) * self.after_s

    @property
    def recovery_s(self) -> float:
        """Time a lost message waits for go-back-N (0 when nothing was lost): a NAK's
        recovery when the fabric rerouted at once, else whole timeouts."""
        if not self.lost:
            return 0.0
        if self.detect_s <= 0:
            return self.rto_s if self.timed_out else self.nak_s
        return recovery_timeouts(self.detect_s, self.rto_s) * self.rto_s

    @property
    def completion_s(self) -> float:
        if self.chained:
            return self.capacity_s + self.recovery_s
        return max(self.capacity_s, self.fail_at_s + self.recovery_s)

    @property
    def reroute_s(self) -> float:
        """Failure to every route on a live path: the ends at once, the rest after the
        detection delay."""
        return self.detect_s


def ring_slowest_link_s(ranks: int, size_bytes: float, bottleneck_bps: float,
                        wire_factor: float) -> float:
    """A ring all-reduce paced by its slowest link: 2(n-1)/n of the buffer crosses every
    ring hop, at the slowest hop's rate (``bottleneck_bps``, wire bytes ``wire_factor``
    per payload byte). The latency of the ring's steps is left out: with the ring's
    segments in flight at once, the slow hop's queue is never empty and hides it."""
    return 2 * (ranks - 1) / ranks * 8.0 * size_bytes * wire_factor / bottleneck_bps
