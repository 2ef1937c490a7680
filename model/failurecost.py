"""What a failure costs a collective (pure): the capacity left, detection and recovery.

* A degraded link: the collective priced as before (`model.alphabeta`'s DAG over
  fluid max-min) on the graph with that link's rate times the fraction left
  (`degraded_graph`); for a ring, also the slowest-link model
  (`ring_slowest_link_s`): the ring goes at the pace of its slowest hop.
* A link down at ``fail_at_s``: the collective runs at the no-failure pace until then
  and at the pace of the fabric without the link afterwards (`failed_fabric`: the
  graph and the routes a converged fabric has), ring steps being equal in time; plus
  what the messages the failure hit are held back (`late_of`), as the collective's
  DAG carries it on: their successors wait for them, and a late message shares its
  NIC with the ones that were posted on time meanwhile (a ring's host sends its late
  chunk and its next one at once), so a delay can grow along a ring.
* A message caught in the black hole (sent into the dead link before the rest of the
  fabric has rerouted, or its last frames lost with nothing behind them to show the
  gap) is recovered by go-back-N's timeout: its ACKs stop at the failure (or it is
  sent after it), the sender retries every RTO until one retry falls after the
  reroute, ``ceil((fail + detect - sent) / rto)`` timeouts (at least one), then
  sends again what was not delivered before the failure.
* Rerouted at once (no detection delay), only the frames queued at the dead port are
  lost with its queue; the frames after them take the new path, the receiver sees the
  gap and NAKs a round trip later, and go-back-N resends from the first lost frame:
  the lost frames and all the sender sent during the round trip
  (`nak_resent_bits`), more bytes on the sender's NIC.
* With a detection delay, a message still sending when the rest of the fabric
  reroutes it is recovered the same way, by the gap its rerouted frames show: what
  it sent into the black hole until the reroute is lost too, and sent again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from model.alphabeta import Late
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


def nak_resent_bits(rtt_s: float, queued_bytes: float, rate_bps: float,
                    blackhole_s: float = 0.0) -> float:
    """Bits a message sends again when its ``queued_bytes`` queued at a dead port are
    dropped with it and its next frames arrive by another path: the lost bytes, what
    it sent at ``rate_bps`` into the black hole for ``blackhole_s`` (sending on until
    the fabric rerouted it), and what it sent during the NAK's round trip (``rtt_s``),
    discarded by the receiver until the resend."""
    return (rtt_s + blackhole_s) * rate_bps + 8.0 * queued_bytes


def late_of(timed_out: bool, fail_at_s: float, detect_s: float, rto_s: float,
            nak_bits: float, acked_bits: float, sent_s: float) -> Late:
    """How a message the failure hit is held back (module doc): after a timeout, its
    sender (sending from ``sent_s``, its post or the failure if later) retries every
    RTO until one falls after the reroute, the NIC idle for it meanwhile, then sends
    all but what was delivered before the failure (``acked_bits``); after a NAK,
    ``nak_bits`` (`nak_resent_bits`) more to send."""
    if timed_out:
        start_s = max(sent_s, fail_at_s)
        timeouts = max(1, recovery_timeouts(fail_at_s + detect_s - start_s, rto_s))
        return Late(not_before_s=fail_at_s, wait_s=timeouts * rto_s, acked_bits=acked_bits)
    return Late(extra_bits=nak_bits)


def sent_by(ready_s: float, finish_s: float, at_s: float) -> float:
    """Fraction of a message that a model's timing (posted at ``ready_s``, completed at
    ``finish_s``, at an even pace between) has sent by ``at_s``."""
    if finish_s <= ready_s:
        return 1.0 if at_s >= finish_s else 0.0
    return min(1.0, max(0.0, (at_s - ready_s) / (finish_s - ready_s)))


@dataclass(frozen=True)
class LinkDownModel:
    """Completion of a collective with one link down mid-run (real seconds)."""

    nofail_s: float     # the collective without failure
    after_s: float      # the whole collective on the fabric without the link
    fail_at_s: float
    detect_s: float
    #: The collective's DAG with the hit messages held back (`late_of`) minus without:
    #: the recovery as the collective feels it (0 when nothing was hit).
    late_s: float = 0.0

    @property
    def capacity_s(self) -> float:
        """Completion from the capacity alone: the no-failure pace up to the failure,
        the rerouted fabric's pace for the rest."""
        if self.fail_at_s >= self.nofail_s:
            return self.nofail_s
        done = self.fail_at_s / self.nofail_s
        return self.fail_at_s + (1 - done) * self.after_s

    @property
    def completion_s(self) -> float:
        return self.capacity_s + max(0.0, self.late_s)

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
