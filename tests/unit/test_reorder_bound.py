"""Selective repeat's reorder tolerance from the fabric (traffic.reorder_bound), by hand."""

from __future__ import annotations

import math

from core.frame import WIRE_FRAME_BYTES
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic.reorder_bound import (
    path_spread_s,
    reorder_tolerance_packets,
    reorder_window_s,
    reorders_by_design,
)
from traffic.selective_repeat import REORDER_PACKETS, WINDOW_PACKETS


def _fabric(spec: str):
    topo = build_topo(spec)
    return topo_graph(topo), compute_routes(topo)


def test_leafspine_spread_is_the_two_divergent_buffers_and_no_fixed_difference():
    graph, routes = _fabric("leafspine,2,2,1,host_rate=10G,fabric_rate=10G")
    paths = routes.paths("h1", "h2")
    assert len(paths) == 2  # through either spine
    # Divergent links: leaf -> spine and spine -> leaf; each drains its buffer at its
    # rate, plus a frame's serialization and propagation on both, on every path alike.
    leaf, spine = paths[0][1], paths[0][2]
    edge = graph.edges[leaf, spine]
    want = 2 * 8 * edge["buffer_bytes"] / edge["rate_bps"]
    assert math.isclose(path_spread_s(graph, paths), want, rel_tol=1e-9)
    nic = graph.edges["h1", leaf]["rate_bps"]
    displacement = math.ceil(want * nic / (8 * WIRE_FRAME_BYTES))
    got = reorder_tolerance_packets(graph, routes, [("h1", "h2")], "spray", 10e-6)
    assert REORDER_PACKETS < got == displacement + 1 < WINDOW_PACKETS - 1


def test_single_path_pairs_and_ecmp_keep_the_floor():
    graph, routes = _fabric("leafspine,2,2,2")
    assert path_spread_s(graph, routes.paths("h1", "h2")) == 0.0  # same leaf: one path
    assert reorder_tolerance_packets(graph, routes, [("h1", "h2")], "spray", 0) == REORDER_PACKETS
    assert reorder_tolerance_packets(graph, routes, [("h1", "h3")], "ecmp", 0) == REORDER_PACKETS


def test_deep_buffers_reach_the_window_cap_and_flowlet_gaps_shrink_it():
    graph, routes = _fabric("fattree,4,fabric_rate=400G,core_rate=400G")
    pair = [("h1", "h16")]  # cross-pod: 4 paths, 4 divergent hops of 8 MiB each
    assert reorder_tolerance_packets(graph, routes, pair, "spray", 0) == WINDOW_PACKETS - 1
    spread = path_spread_s(graph, routes.paths("h1", "h16"))
    assert spread > 4 * 8 * 8e6 / 400e9  # four full 8 MiB buffers at 400G
    assert reorder_tolerance_packets(graph, routes, pair, "flowlet", spread) == REORDER_PACKETS
    # An unknown (non-minimal) mode gets the most the bitmap allows.
    assert reorder_tolerance_packets(graph, routes, pair, "valiant", 0) == WINDOW_PACKETS - 1


def test_which_modes_reorder():
    assert not reorders_by_design("ecmp")
    assert all(reorders_by_design(m) for m in ("spray", "spray-rr", "flowlet", "adaptive",
                                               "adaptive-flowlet", "valiant", "ugal"))


def test_the_senders_window_in_time_is_both_directions_spread_plus_the_floor():
    graph, routes = _fabric("leafspine,2,2,1,host_rate=10G,fabric_rate=10G")
    floor_s = REORDER_PACKETS * 8 * WIRE_FRAME_BYTES / 10e9
    spread = path_spread_s(graph, routes.paths("h1", "h2"))
    assert math.isclose(reorder_window_s(graph, routes, [("h1", "h2")], "spray", 0),
                        2 * spread + floor_s, rel_tol=1e-9)
    assert math.isclose(reorder_window_s(graph, routes, [("h1", "h2")], "ecmp", 0), floor_s)
    assert reorder_window_s(graph, routes, [("h1", "h2")], "valiant", 0) is None
