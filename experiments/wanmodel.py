"""A collective case on two data centres over a long link (`topologies.twodc`), priced by
`model.wan`'s closed forms from the topology alone, and what the long link's
round trip asks of the gateway's buffer, beside what the case measured there.

The collective's headline model (`model.alphabeta`'s fluid over the routed paths) prices
bandwidth and propagation but no transport window; the closed form adds the window
(`window_bytes`: selective repeat's 1024-frame bitmap is 4 MiB, far below the 50 MB
BDP of 400G over 100 km; go-back-N's PSN space never binds) and is recorded as a second
prediction of the same time.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pandas as pd

from core.frame import MTU_PAYLOAD_BYTES
from model.alphabeta import DEFAULT_OVERHEAD_S, roce_wire_factor
from model.claims import WAN_CLOSED_FORM
from model.wan import (
    Edge,
    bdp_bytes,
    burst_queue_bytes,
    hierarchical_allreduce_s,
    ring_allreduce_s,
    ring_crossings,
    ring_long_starts_s,
)
from topologies.routing import topo_graph
from topologies.twodc import GATEWAY_TIER, WAN_TIER, TwoDcs
from traffic.fixeddelay import hops, mean_delay, path_delay, round_trip_s
from traffic.gbn import MAX_WINDOW
from traffic.selective_repeat import WINDOW_PACKETS

#: The collectives the closed forms price.
PRICED = ("allreduce-ring", "allreduce-hier")


def transport_window_bytes(transport: str) -> float:
    """Payload bytes a QP may have unacknowledged under ``transport``: go-back-N's half
    PSN space (2^23 packets, 32 GiB: beyond any BDP here), selective repeat's bitmap."""
    packets = MAX_WINDOW if transport == "gbn" else WINDOW_PACKETS
    return float(packets * MTU_PAYLOAD_BYTES)


def edge(fab: Any, graph: Any, src: str, dst: str) -> Edge:
    """The ring edge ``src`` -> ``dst``: its slowest link, one frame's fixed delay and
    the unloaded round trip (means over the equal-cost paths)."""
    paths = fab.routes.paths(src, dst)
    rate = min(min(graph.edges[u, v]["rate_bps"] for u, v in hops(p)) for p in paths)
    long = any(graph.edges[u, v]["tier"] == WAN_TIER for p in paths for u, v in hops(p))
    delay = mean_delay([path_delay(graph, p, MTU_PAYLOAD_BYTES) for p in paths]).total_s
    return Edge(rate, delay, round_trip_s(graph, fab.routes.paths, src, dst), long)


def closed_form_s(fab: Any, name: str, size_bytes: int, transport: str) -> float | None:
    """`model.wan`'s time of collective ``name`` over every host in host order (None for
    a collective it does not price, or one data centre)."""
    if not isinstance(fab.topo, TwoDcs) or name not in PRICED:
        return None
    graph = topo_graph(fab.topo)
    hosts = list(fab.topo.host_nodes())
    common = {"wire_factor": roce_wire_factor(), "overhead_s": DEFAULT_OVERHEAD_S,
              "window_bytes": transport_window_bytes(transport)}
    if name == "allreduce-ring":
        ring = [edge(fab, graph, a, b) for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True)]
        return ring_allreduce_s(ring, size_bytes, **common)
    local = hosts[:len(hosts) // 2]
    ring = [edge(fab, graph, a, b) for a, b in zip(local, local[1:] + local[:1], strict=True)]
    # The L pairs share the long link and nothing else: each pair's rate is the smaller
    # of its own path's and the long link's L-th (the model divides the edge's rate by L).
    across = edge(fab, graph, local[0], hosts[len(local)])
    own_bps = _own_rate_bps(fab, graph, local[0], hosts[len(local)])
    across = replace(across, rate_bps=min(own_bps * len(local), fab.topo.wan.rate_bps))
    return hierarchical_allreduce_s(ring, across, size_bytes, **common)


def _own_rate_bps(fab: Any, graph: Any, src: str, dst: str) -> float:
    """The slowest link of the path from ``src`` to ``dst`` other than the long link."""
    return min(graph.edges[u, v]["rate_bps"] for p in fab.routes.paths(src, dst)
               for u, v in hops(p) if graph.edges[u, v]["tier"] != WAN_TIER)


def gateway_row(fab: Any, name: str, size_bytes: int, transport: str, ports: pd.DataFrame,
                measured_s: float, closed_s: float | None) -> dict[str, Any]:
    """The long link's numbers for one case: round trip, BDP, the window, the closed
    form, and the gateway's long-link port: its buffer, the queue the model says the
    crossing messages build there (`model.wan.burst_queue_bytes`: the ring's, at the
    starts its closed form gives them, or the hierarchical step's L at once, each at
    most a window, arriving at the senders' rate and leaving at the long link's) and
    what it measured (most queued where a marker watched it, drops; the
    uplinks into the gateways beside it). A buffer below the burst drops, and the
    transport resends a round trip later."""
    topo: TwoDcs = fab.topo
    graph = topo_graph(topo)
    hosts = list(topo.host_nodes())
    half = len(hosts) // 2
    across = edge(fab, graph, hosts[half - 1], hosts[half])
    window = transport_window_bytes(transport)
    wan_bps = topo.wan.rate_bps
    sender_bps = _own_rate_bps(fab, graph, hosts[half - 1], hosts[half])
    if name == "allreduce-hier":
        uplinks = sum(info["rate_bps"] for a, b, info in topo.fabric_links()
                      if info["tier"] == GATEWAY_TIER and "gwa" in (a, b))
        burst = burst_queue_bytes([0.0] * half, size_bytes / half / 2,
                                  min(half * sender_bps, uplinks), wan_bps, window)
    else:
        ring = [edge(fab, graph, a, b) for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True)]
        starts = ring_long_starts_s(ring, size_bytes, wire_factor=roce_wire_factor(),
                                    overhead_s=DEFAULT_OVERHEAD_S, window_bytes=window)
        burst = burst_queue_bytes(starts, size_bytes / len(hosts), sender_bps, wan_bps, window)
    row = {"collective": name, "size_bytes": size_bytes,
           "distance_km": topo.wan.distance_m / 1e3, "wan_rate_bps": wan_bps,
           "rtt_s": across.rtt_s, "bdp_bytes": bdp_bytes(wan_bps, across.rtt_s),
           "window_bytes": window,
           "ring_crossings": (ring_crossings([i in (half - 1, len(hosts) - 1)
                                              for i in range(len(hosts))])
                              if name == "allreduce-ring" else 2),
           "time_s": measured_s, "time_closed_form_s": closed_s,
           "gateway_buffer_bytes": topo.wan.gateway_buffer_bytes,
           "gateway_burst_queue_bytes": burst}
    gateways = ("gwa", "gwb")
    for label, out in (("gateway", ports[ports.tier == WAN_TIER]),   # both directions
                       ("uplink", ports[(ports.tier == GATEWAY_TIER)
                                        & ports.peer.isin(gateways)])):
        most = (out.max_queue_hi_bytes.max() if "max_queue_hi_bytes" in out
                and out.max_queue_hi_bytes.notna().any() else math.nan)
        row[f"{label}_max_queue_bytes"] = float(most)
        row[f"{label}_drops"] = int(out.drops.sum())
    return row


def record_wan(run: Any, case: str, fab: Any, name: str, size_bytes: int, transport: str,
               measured_s: float, ports: pd.DataFrame) -> None:
    """The closed form as a second prediction of the case's time, and wan.csv's row."""
    if not isinstance(fab.topo, TwoDcs):
        return
    closed = closed_form_s(fab, name, size_bytes, transport)
    if closed is not None:
        run.metric(case, "time, two-DC closed form", "us", measured_s * 1e6, closed * 1e6,
                   WAN_CLOSED_FORM)
    run.frame("wan", pd.DataFrame([gateway_row(fab, name, size_bytes, transport, ports,
                                               measured_s, closed)]))
