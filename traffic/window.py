"""The requester's window in frames: how many a QP may have unacknowledged. Pure.

Without a window (``None``, the transports' own largest: ``WINDOW_PACKETS``, the
responder's bitmap, 4 MiB of full frames) a QP with congestion control off sends a
whole message at line rate. Where several such QPs share a link slower than their
sum, the link's buffer overflows, and every retransmission meets the same full queue
(a dragonfly's global link under group shift, 4 flows into one 400G link, cc off:
24 Gb/s measured against the 97 Gb/s fair share).

**BDP** (IRN's BDP-FC, Mittal et al., SIGCOMM 2018): a QP keeps at most the frames
that fill the longest round trip it can take at its NIC's line rate, so an idle path
still runs at line rate and a shared link's queue holds at most a window per flow:

    window = ceil(rtt_s x nic_bps / (8 x wire frame)) + frames per ACK

* ``rtt_s``: the unloaded round trip (`traffic.fixeddelay.round_trip_s`: a full frame
  there, its ACK back), the longest over the run's pairs; twice that for a routing
  mode that detours through another group (Valiant, UGAL: a path to the intermediate
  group, then one from it);
* plus the responder's ACK coalescing (``acks_every`` frames): a sender learns of its
  frames only an ACK at a time.

Queueing delay is not in it: a flow whose path queues gets its window per round trip,
below line rate. That is the price of a lossless window without a congestion control.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import networkx as nx

from core.errors import ParameterError
from core.frame import WIRE_FRAME_BYTES
from topologies.loadbalance import GROUP_MODES
from topologies.routing import Routes
from traffic.fixeddelay import FORWARDING, round_trip_s
from traffic.selective_repeat import WINDOW_PACKETS


def check_window(value: object) -> int | str | None:
    """``value`` as a window setting: None ('none'), 'bdp', or frames in [1, WINDOW_PACKETS]."""
    if value is None or value == "none":
        return None
    if value == "bdp":
        return "bdp"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= WINDOW_PACKETS:
        raise ParameterError("window", value,
                             f"expected none, bdp or a frame count in [1, {WINDOW_PACKETS}]")
    return value


def bdp_window_packets(graph: nx.Graph, routes: Routes, pairs: Iterable[tuple[str, str]],
                       routing: str, acks_every: int,
                       forwarding: str = FORWARDING[0]) -> int:
    """IRN's BDP window (module docstring) for flows between ``pairs`` of hosts."""
    pairs = set(pairs)
    if not pairs:
        raise ParameterError("pairs", pairs, "needs at least one flow")
    frames = max(math.ceil(round_trip_s(graph, routes.paths, src, dst, forwarding)
                           * _nic_bps(graph, src) / (8 * WIRE_FRAME_BYTES))
                 for src, dst in pairs)
    if routing in GROUP_MODES:  # their paths detour through an intermediate group
        frames *= 2
    return min(WINDOW_PACKETS, frames + max(0, acks_every))


def _nic_bps(graph: nx.Graph, host: str) -> float:
    return max(graph.edges[host, peer]["rate_bps"] for peer in graph[host])
