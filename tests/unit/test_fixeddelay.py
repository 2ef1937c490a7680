"""traffic.fixeddelay and the engine's use of it (engine.run.FixedDelays) on the
topologies' own graphs; every expected value is worked by hand in the comments
(fattree,4: hosts 400G / 3 m, edge-agg 800G / 30 m, agg-core 1.6T / 100 m, 600 ns
switches; 5 ns/m of fibre)."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from engine.run import FixedDelays
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic.fixeddelay import (
    FIXED_DELAYS,
    PathDelay,
    mean_delay,
    path_delay,
)

NS = 1e-9
FRAME = 4170  # an RDMA WRITE ONLY of 4096 bytes: 58 bytes of headers + 16 of RETH
# ... and 24 more of wire time (preamble, FCS, gap): 4194 bytes, 33552 bits on the wire


def _fattree():
    topo = build_topo("fattree,4")
    return topo_graph(topo), compute_routes(topo)


def test_cross_pod_store_and_forward_by_hand():
    graph, routes = _fattree()
    path = routes.paths("h1", "h16")[0]
    assert len(path) == 7  # h1 e1 a c a e h16: 6 hops, 5 switches
    d = path_delay(graph, path, FRAME)
    # 33552 bits: 83.88 ns at 400G, 41.94 at 800G, 20.97 at 1.6T, twice each
    assert d.serialization_s == pytest.approx(2 * (83.88 + 41.94 + 20.97) * NS)
    assert d.switch_s == pytest.approx(5 * 600 * NS)
    assert d.propagation_s == pytest.approx(2 * (15 + 150 + 500) * NS)   # 1330 ns
    assert d.total_s == pytest.approx(4623.58 * NS)
    assert list(d.parts()) == list(FIXED_DELAYS[:3])


def test_same_edge_and_cut_through_by_hand():
    graph, routes = _fattree()
    (path,) = routes.paths("h1", "h2")
    d = path_delay(graph, path, FRAME)
    # 2 x 83.88 ns, one 600 ns switch, 2 x 15 ns of cable
    assert d.total_s == pytest.approx((167.76 + 600 + 30) * NS)
    # Cut-through serializes once, at the slowest hop (a 400G host link): 83.88 ns.
    cross = path_delay(graph, routes.paths("h1", "h16")[0], FRAME, "cut-through")
    assert cross.serialization_s == pytest.approx(83.88 * NS)
    assert cross.switch_s == pytest.approx(3000 * NS)


def test_ack_frames_and_netem_share():
    graph, routes = _fattree()
    d = path_delay(graph, routes.paths("h16", "h1")[0], 62)
    # 62 + 24 bytes, 688 bits: 1.72 ns at 400G, 0.86 at 800G, 0.43 at 1.6T, twice each
    assert d.serialization_s == pytest.approx(2 * (1.72 + 0.86 + 0.43) * NS)
    # netem emulating 1000 of the 1330 ns leaves 330; never below zero
    assert d.less_propagation(1000 * NS).propagation_s == pytest.approx(330 * NS)
    assert d.less_propagation(2e-6).propagation_s == 0.0
    assert d.less_propagation(2e-6).switch_s == d.switch_s


def test_mean_over_equal_cost_paths():
    graph, routes = _fattree()
    paths = routes.paths("h1", "h16")
    assert len(paths) == 4
    delays = [path_delay(graph, p, FRAME) for p in paths]
    assert mean_delay(delays).parts() == pytest.approx(delays[0].parts())  # a Clos: all equal
    # Unequal paths average part by part: (1, 2, 3) and (3, 4, 5) ns -> (2, 3, 4).
    got = mean_delay([PathDelay(1 * NS, 2 * NS, 3 * NS), PathDelay(3 * NS, 4 * NS, 5 * NS)])
    assert (got.serialization_s, got.switch_s, got.propagation_s) == pytest.approx(
        (2 * NS, 3 * NS, 4 * NS))


@pytest.mark.parametrize("spec", ["fattree,4", "leafspine,4,2,4", "railopt,4,gpus=4",
                                  "dragonfly,p=2,a=4,h=2", "torus,4,4"])
def test_every_equal_cost_path_of_a_shipped_topology_has_the_same_delay(spec):
    """The engine gives a flow the mean over its ECMP paths because it cannot know which
    one the kernel's hash picks; on every topology the project ships the equal-cost
    paths are also equal in delay (same tiers, same cables), so the mean is exact."""
    topo = build_topo(spec)
    graph, routes = topo_graph(topo), compute_routes(topo)
    hosts = topo.host_nodes()
    spreads = []
    for a in hosts:
        for b in hosts:
            if a != b:
                totals = [path_delay(graph, p, FRAME).total_s for p in routes.paths(a, b)]
                spreads.append(max(totals) - min(totals))
    assert len(spreads) == len(hosts) * (len(hosts) - 1)
    assert max(spreads) == pytest.approx(0.0, abs=1e-15)


def test_bad_input_is_refused():
    graph, _ = _fattree()
    with pytest.raises(ParameterError):
        path_delay(graph, ["h1", "e1", "h2"], FRAME, "wormhole")
    with pytest.raises(ParameterError):
        path_delay(graph, ["h1"], FRAME)
    with pytest.raises(ParameterError):
        mean_delay([])


class _Fab:
    """What engine.run.FixedDelays reads of a fabric; netem on every link: ``netem_s``."""

    def __init__(self, netem_s: float = 0.0) -> None:
        self.topo = build_topo("fattree,4")
        self.routes = compute_routes(self.topo)
        self.netem_s = netem_s

    def link_delay_s(self, a: str, b: str) -> float:
        return self.netem_s


def test_engine_adds_what_the_fabric_lacks():
    saf = FixedDelays(_Fab(), "store-and-forward")
    assert saf("h1", "h16", FRAME).total_s == pytest.approx(4623.58 * NS)  # as above
    # Cut-through: 83.88 ns of serialization instead of 293.58.
    cut = FixedDelays(_Fab(), "cut-through")
    assert cut("h1", "h16", FRAME).total_s == pytest.approx((83.88 + 3000 + 1330) * NS)
    # netem delaying each of the 6 links by 100 ns leaves 1330 - 600 ns of propagation.
    netem = FixedDelays(_Fab(100 * NS), "store-and-forward")
    assert netem("h1", "h16", FRAME).propagation_s == pytest.approx(730 * NS)
    assert netem("h1", "h16", FRAME).switch_s == pytest.approx(3000 * NS)
