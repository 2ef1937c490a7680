"""Selective repeat's reorder tolerance, derived from the fabric and its routing mode.

Selective repeat's responder (``traffic.selective_repeat``) deems a missing PSN lost
once a PSN ``reorder_packets`` beyond it has arrived. That count must exceed the
largest displacement the fabric can cause without losing anything, or a genuine
reordering becomes a spurious retransmission. Without loss a frame of one flow is
overtaken only by frames of the same flow that took another path and arrived first:

* the frames' paths differ only on their *divergent* links (those not on every path
  of the pair; the shared first and last hops are FIFOs and cannot reorder);
* on those links a frame waits at most a full egress buffer per hop (``buffer_bytes``
  drained at the link's rate; a deeper queue drops), plus the fixed delay of the
  link (propagation and serialization), and at least that fixed delay;
* so a frame is at most ``spread`` seconds later than a frame sent at the same time
  on another path, where ``spread = max over paths (fixed + full buffers) - min over
  paths (fixed)`` of the pair's divergent links;
* during ``spread`` the sender emits at most ``spread x NIC rate / wire frame`` frames,
  which is the displacement bound in PSNs.

Which frames take different paths depends on the routing mode: ``ecmp`` keeps a flow
on one path (no displacement); per-packet modes (``spray``, ``spray-rr``,
``adaptive``) use every path of the pair at once; flowlet modes move a flow only after
an idle ``flowlet_gap_s``, so its frames are displaced only by what the gap leaves of
the spread. A mode this module does not know (e.g. a non-minimal routing whose paths
``Routes`` does not list) gets the largest tolerance the responder's bitmap allows.

The result never exceeds ``WINDOW_PACKETS - 1``: a sender never has more than the
bitmap in flight, so no frame can be overtaken by more. On deep-buffer fabrics the
bound reaches that cap, and selective repeat then detects a loss inside a window by
its timer only; that is the price of never mistaking reordering for loss. It never
goes below ``REORDER_PACKETS``, the tolerance of a single path, whose frames the
emulating host may still reorder slightly (veth receive steering).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import networkx as nx

from core.frame import WIRE_FRAME_BYTES
from topologies.routing import Routes
from traffic.selective_repeat import REORDER_PACKETS, WINDOW_PACKETS

#: Modes that keep a flow on one path.
SINGLE_PATH_MODES = frozenset({"ecmp"})
#: Modes that choose a path per frame.
PER_PACKET_MODES = frozenset({"spray", "spray-rr", "adaptive"})
#: Modes that choose a path per flowlet (after an idle gap).
FLOWLET_MODES = frozenset({"flowlet", "adaptive-flowlet"})


def reorders_by_design(routing: str) -> bool:
    """Does ``routing`` send one flow's frames over several paths?"""
    return routing not in SINGLE_PATH_MODES


def path_spread_s(graph: nx.Graph, paths: list[tuple[str, ...]]) -> float:
    """How much later (real s) a frame can arrive than one sent with it on another of
    ``paths`` (module docstring), over the paths' divergent links."""
    if len(paths) < 2:
        return 0.0
    links = [list(zip(p, p[1:], strict=False)) for p in paths]
    shared = set.intersection(*(set(ls) for ls in links))
    fixed, worst = [], []
    for ls in links:
        own = [graph.edges[u, v] for u, v in ls if (u, v) not in shared]
        base = sum(e["delay_s"] + 8 * WIRE_FRAME_BYTES / e["rate_bps"] for e in own)
        fixed.append(base)
        worst.append(base + sum(8 * e["buffer_bytes"] / e["rate_bps"] for e in own))
    return max(worst) - min(fixed)


def _spreads(graph: nx.Graph, routes: Routes, pairs: Iterable[tuple[str, str]], routing: str,
             flowlet_gap_s: float) -> Iterator[tuple[float, float]]:
    """(spread in real s, the source NIC's rate) of each pair's flows under ``routing``."""
    for src, dst in set(pairs):
        spread_s = 0.0
        if routing in PER_PACKET_MODES | FLOWLET_MODES:
            spread_s = path_spread_s(graph, routes.paths(src, dst))
        if routing in FLOWLET_MODES:
            spread_s = max(0.0, spread_s - flowlet_gap_s)
        yield spread_s, max(graph.edges[src, peer]["rate_bps"] for peer in graph[src])


def reorder_tolerance_packets(graph: nx.Graph, routes: Routes,
                              pairs: Iterable[tuple[str, str]], routing: str,
                              flowlet_gap_s: float) -> int:
    """The reorder tolerance (PSNs) for flows between ``pairs`` of hosts on the fabric
    ``graph`` (``topologies.routing.topo_graph``) routed by ``routing``."""
    if routing in SINGLE_PATH_MODES:
        return REORDER_PACKETS
    if routing not in PER_PACKET_MODES | FLOWLET_MODES:
        return WINDOW_PACKETS - 1
    displacement = max((math.ceil(spread_s * nic_bps / (8 * WIRE_FRAME_BYTES))
                         for spread_s, nic_bps in _spreads(graph, routes, pairs, routing,
                                                           flowlet_gap_s)), default=0)
    return min(WINDOW_PACKETS - 1, max(REORDER_PACKETS, displacement + 1))


def reorder_window_s(graph: nx.Graph, routes: Routes, pairs: Iterable[tuple[str, str]],
                     routing: str, flowlet_gap_s: float) -> float | None:
    """The sender's reordering window in time (real s): how long after a frame sent
    later was reported delivered a missing frame may still be reported, without loss.
    Its data frame may arrive up to the forward paths' spread late, and the reply that
    reports it up to the reverse paths' (the same links) late; plus ``REORDER_PACKETS``
    frame times of the host's own reordering. None for a mode whose paths ``routes``
    does not list (the retransmission timer is the window then). The responder's
    coalescing delay is the caller's to add."""
    if routing not in SINGLE_PATH_MODES | PER_PACKET_MODES | FLOWLET_MODES:
        return None
    return max((2 * spread_s + REORDER_PACKETS * 8 * WIRE_FRAME_BYTES / nic_bps
                for spread_s, nic_bps in _spreads(graph, routes, pairs, routing, flowlet_gap_s)),
               default=0.0)
