"""The frame-level FIFO reference of bench.pathdelay, worked by hand.

A 4 KiB message is one 4170-byte frame: 83.4 ns at 400G, 41.7 at 800G, 20.85 at 1.6T;
switches 600 ns; cables 15 ns (host), 150 ns (edge-agg, torus), 500 ns (agg-core);
every flow is posted at 0 and its NIC starts after the 1 us overhead.
"""

from __future__ import annotations

import pytest

from bench.pathdelay import frame_fifo, frame_sizes
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo

NS = 1e-9


def _setup(spec: str, flows: list[tuple[str, str]]):
    topo = build_topo(spec)
    routes = compute_routes(topo)
    return topo_graph(topo), [routes.paths(s, d)[0] for s, d in flows]


def test_frame_sizes():
    assert frame_sizes(4096) == [4170]
    assert frame_sizes(3 * 4096 - 100) == [4170, 4154, 3996 + 58]


def test_one_frame_is_the_hop_sum_either_way():
    graph, paths = _setup("fattree,4", [("h1", "h2")])
    for at_sender in (False, True):
        (t,), peak = frame_fifo(graph, paths, 4096, at_sender=at_sender)
        assert t.start_s == [pytest.approx(1e-6)]
        # 2 x 83.4 + 600 + 2 x 15 = 796.8 ns
        assert t.arrival_s[0] == pytest.approx((1000 + 797.76) * NS)
        assert peak == 0


def test_flows_meeting_at_the_last_hop_see_the_same_queue_either_way():
    # h1 and h2 (edge e1) -> h16: their first frames collide at e1's uplink (800G: the
    # second waits 41.94 ns) and again at e8 -> h16 (400G: 83.88 ns apart in all).
    graph, paths = _setup("fattree,4", [("h1", "h16"), ("h2", "h16")])
    for at_sender in (False, True):
        (a, b), peak = frame_fifo(graph, paths, 4096, at_sender=at_sender,
                                  watch=("e8", "h16"))
        assert sorted([a.latency_s[0], b.latency_s[0]]) == pytest.approx(
            [4623.58 * NS, (4623.58 + 83.88) * NS])
        assert peak == 4170


def test_flows_meeting_mid_path_with_different_remaining_paths_differ():
    # torus t0 t1 t2 t3 (400G): h1 -> h5 and h3 -> h7 share t1 -> t2. Per link, h3's
    # frame reaches that port at 1000 + 83.88 + 15 + 600 = 1698.88 ns, h1's at 1698.88 +
    # 83.88 + 150 + 600 = 2532.76: no wait. From the sender both enter the fabric after
    # their whole path delay (4 hops: 335.52 + 1800 + 330 = 2465.52 ns) and meet at once:
    # one of the two waits one frame time at 400G.
    graph, paths = _setup("torus,4,2,link_rate=400G", [("h1", "h5"), ("h3", "h7")])
    (a, b), _ = frame_fifo(graph, paths, 4096, at_sender=False)
    assert (a.latency_s[0], b.latency_s[0]) == pytest.approx((2465.52 * NS, 2465.52 * NS))
    (a, b), peak = frame_fifo(graph, paths, 4096, at_sender=True, watch=("t1_0", "t2_0"))
    assert sorted([a.latency_s[0], b.latency_s[0]]) == pytest.approx([2465.52 * NS, 2549.40 * NS])
    assert peak == 4170
