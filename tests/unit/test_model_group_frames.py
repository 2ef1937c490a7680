"""The frame model's Valiant and UGAL (model/adaptive.py, router.c's group_slot
mirrored) and its window, on cases worked out by hand."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from experiments.routing_model import frame_estimate, group_shift
from model.adaptive import Flow, estimate
from model.alphabeta import roce_wire_factor
from model.busbw import busbw_bps
from model.ugal import ugal_bound
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from topologies.valiant import group_routes

# p=1, a=2, h=1: three groups of two routers, one host each (h1, h2 in group 0,
# h3, h4 in group 1, h5, h6 in group 2), one global link per pair of groups
SMALL = "dragonfly,p=1,a=2,h=1"


def _dragonfly(spec: str):
    topo = build_topo(spec)
    routes = compute_routes(topo)
    return topo, topo_graph(topo), routes, group_routes(topo, routes)


def _between(graph, groups, a: int, b: int) -> list[tuple[str, str]]:
    """The directed links from a router of group ``a`` to one of group ``b``."""
    return [(u, v) for u, v in graph.edges for u, v in ((u, v), (v, u))
            if groups.group_of.get(u) == a and groups.group_of.get(v) == b]


def test_valiant_sends_every_frame_and_ack_through_the_third_group():
    _, graph, routes, groups = _dragonfly(SMALL)
    run = estimate(graph, routes, [Flow("h1", "h3", 64 * 4096)], "valiant", groups=groups)
    direct = _between(graph, groups, 0, 1) + _between(graph, groups, 1, 0)
    assert direct and all(run.link_bytes.get(link, 0) == 0 for link in direct)
    # the frames went 0 -> 2 -> 1 and the ACKs 1 -> 2 -> 0
    for a, b in ((0, 2), (2, 1), (1, 2), (2, 0)):
        assert sum(run.link_bytes.get(link, 0) for link in _between(graph, groups, a, b)) > 0


def test_ugal_stays_minimal_while_its_queues_are_empty():
    # one frame and its ACK: every queue is empty, and ties stay minimal
    _, graph, routes, groups = _dragonfly(SMALL)
    run = estimate(graph, routes, [Flow("h1", "h3", 4096)], "ugal", groups=groups)
    assert sum(run.link_bytes.get(link, 0) for link in _between(graph, groups, 0, 1)) > 0
    assert not any(run.link_bytes.get(link, 0) for link in _between(graph, groups, 0, 2))


def test_ugal_on_a_group_shift_sits_between_minimal_and_its_bound():
    # dragonfly,2,2,2: four hosts per group into one 400G global link under minimal
    # routing (97 Gb/s each); UGAL's perfectly balanced mix gives 245 Gb/s
    topo, graph, routes, groups = _dragonfly("dragonfly,2,2,2,global_rate=400G")
    workload = group_shift(topo, 1 << 20)
    runs = frame_estimate(workload, graph, routes, "ugal", groups=groups, window=142)
    assert not isinstance(runs, str)
    rates = [busbw_bps("permutation", len(workload.ranks), workload.size_bytes, r.completion_s)
             for r in runs]
    bound = (ugal_bound(topo, [(m.src, m.dst) for m in workload.messages]).slowest_flow_bps
             / roce_wire_factor())
    assert min(rates) > 1.5 * 97e9 and max(rates) < bound


def test_a_window_below_the_round_trip_slows_a_flow_and_one_above_it_does_not():
    topo = build_topo("fattree,4,fabric_rate=400G,core_rate=400G")
    graph, routes = topo_graph(topo), compute_routes(topo)
    flow = [Flow("h1", "h16", 512 * 4096)]
    free = estimate(graph, routes, flow, "ecmp", timing_noise_s=0, start_phase=False)
    # the round trip is 9.2 us, 110 frames at 400G: 126 with the ACKs' 16 keeps it
    wide = estimate(graph, routes, flow, "ecmp", timing_noise_s=0, start_phase=False,
                    window=126)
    narrow = estimate(graph, routes, flow, "ecmp", timing_noise_s=0, start_phase=False,
                      window=32)
    assert wide.completion_s == pytest.approx(free.completion_s, rel=1e-3)
    # 32 frames per round trip instead of 110: about 3.4x as long
    assert 3.0 < narrow.completion_s / free.completion_s < 3.8


def test_bad_calls_are_refused():
    _, graph, routes, groups = _dragonfly(SMALL)
    flow = [Flow("h1", "h3", 4096)]
    with pytest.raises(ParameterError):
        estimate(graph, routes, flow, "ugal")  # no GroupRoutes
    with pytest.raises(ParameterError):
        estimate(graph, routes, flow, "valiant", groups=groups, window=8)  # below an ACK
    with pytest.raises(ParameterError):
        estimate(graph, routes, flow, "minimal")
