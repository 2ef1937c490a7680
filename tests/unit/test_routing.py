"""Routes (ECMP shortest paths, torus DOR), graph export, bisection, diameter."""

from __future__ import annotations

import itertools

import pytest

from core.errors import ParameterError
from topologies.base import FabricTopo
from topologies.dragonfly import Dragonfly
from topologies.fattree import FatTree, LeafSpine
from topologies.railopt import RailOptimized
from topologies.routing import (
    bisection_bandwidth_bps,
    compute_routes,
    diameter_hops,
    topo_graph,
)
from topologies.torus import Torus


def host_pairs(topo):
    return itertools.permutations(topo.hosts(), 2)


def assert_routes_valid(topo, routes):
    """Every pair routed; paths follow links, hosts only at the ends, equal lengths."""
    hosts = set(topo.hosts())
    graph = topo_graph(topo)
    for src, dst in host_pairs(topo):
        paths = routes.paths(src, dst)
        assert paths, (src, dst)
        assert len({len(p) for p in paths}) == 1
        for path in paths:
            assert path[0] == src and path[-1] == dst
            assert not hosts & set(path[1:-1])
            assert all(graph.has_edge(a, b) for a, b in itertools.pairwise(path))
            assert len(set(path)) == len(path)


@pytest.mark.parametrize("k", [4, 6])
def test_fattree_ecmp_widths_and_hops(k):
    topo = FatTree(k)
    routes = compute_routes(topo)
    assert_routes_valid(topo, routes)
    edge = {h: topo.nodeInfo(h)["edge"] for h in topo.hosts()}
    pod = {h: topo.nodeInfo(h)["pod"] for h in topo.hosts()}
    for src, dst in host_pairs(topo):
        if pod[src] != pod[dst]:
            width, hops = (k // 2) ** 2, 6
        elif edge[src] != edge[dst]:
            width, hops = k // 2, 4
        else:
            width, hops = 1, 2
        assert routes.ecmp_width(src, dst) == width
        assert routes.hops(src, dst) == hops


def test_next_hops_are_sorted_neighbour_sets():
    topo = FatTree(4)
    routes = compute_routes(topo)
    assert routes.next_hops["h1"]["h16"] == ("e1",)
    assert routes.next_hops["e1"]["h16"] == ("a1", "a2")
    assert routes.next_hops["e1"]["h2"] == ("h2",)
    assert routes.next_hops["c1"]["h16"] == ("a7",)
    assert "h1" not in routes.next_hops["h1"]
    graph = topo_graph(topo)
    for node, table in routes.next_hops.items():
        for hops in table.values():
            assert list(hops) == sorted(hops) and all(graph.has_edge(node, h) for h in hops)


@pytest.mark.parametrize("spines", [1, 2, 3])
def test_leafspine_ecmp_width_is_spines(spines):
    topo = LeafSpine(3, spines, 2)
    routes = compute_routes(topo)
    assert_routes_valid(topo, routes)
    for src, dst in host_pairs(topo):
        same_leaf = topo.nodeInfo(src)["leaf"] == topo.nodeInfo(dst)["leaf"]
        assert routes.ecmp_width(src, dst) == (1 if same_leaf else spines)
        assert routes.hops(src, dst) == (2 if same_leaf else 4)


def test_railopt_nvlink_inside_server_rails_across():
    topo = RailOptimized(3, 4, spines=2)
    routes = compute_routes(topo)
    assert_routes_valid(topo, routes)
    assert routes.paths("h1g0", "h1g3") == [("h1g0", "nv1", "h1g3")]
    assert routes.paths("h1g2", "h3g2") == [("h1g2", "r2", "h3g2")]
    assert routes.paths("h1g0", "h2g1") == [("h1g0", "r0", "s1", "r1", "h2g1"),
                                           ("h1g0", "r0", "s2", "r1", "h2g1")]
    assert routes.next_hops["h1g0"]["h2g0"] == ("r0",)
    assert "h2g0" not in routes.next_hops["nv1"]  # an NVSwitch only reaches its own GPUs


def test_railopt_without_nvlink_uses_the_rails():
    routes = compute_routes(RailOptimized(2, 4, spines=1, nvlink=False))
    assert routes.paths("h1g0", "h1g3") == [("h1g0", "r0", "s1", "r3", "h1g3")]


@pytest.mark.parametrize("args", [(1, 2, 1), (2, 4, 2), (1, 4, 2, 5), (1, 3, 2, 3)])
def test_dragonfly_minimal_paths_local_global_local(args):
    topo = Dragonfly(*args)
    routes = compute_routes(topo)
    assert_routes_valid(topo, routes)
    for src, dst in host_pairs(topo):
        for path in routes.paths(src, dst):
            switch_hops = len(path) - 3  # minus the two host links
            assert switch_hops <= 3
            tiers = [topo_graph_tier(topo, a, b) for a, b in itertools.pairwise(path[1:-1])]
            assert tiers.count("global") <= 1


def topo_graph_tier(topo, a, b):
    return topo.linkInfo(a, b)["tier"]


def torus_distance(a, b, dims):
    return sum(min((x - y) % n, (y - x) % n) for x, y, n in zip(a, b, dims, strict=True))


@pytest.mark.parametrize("dims", [(4, 4), (3, 3, 3), (2, 2), (2, 5, 4)])
def test_torus_dor_single_path_of_torus_distance(dims):
    topo = Torus(*dims)
    routes = compute_routes(topo)
    assert routes.kind == "dor"
    assert_routes_valid(topo, routes)
    coord = {n: topo.nodeInfo(n)["coord"] for n in topo.nodes()}
    for src, dst in host_pairs(topo):
        (path,) = routes.paths(src, dst)
        assert len(path) - 1 == torus_distance(coord[src], coord[dst], dims) + 2
        # axes are corrected in order 0, 1, 2
        axes = [next(i for i in range(len(dims)) if coord[a][i] != coord[b][i])
                for a, b in itertools.pairwise(path[1:-1])]
        assert axes == sorted(axes)


def test_torus_dor_tie_goes_plus():
    topo = Torus(4, 4)
    routes = compute_routes(topo)
    src = next(h for h in topo.hosts() if topo.nodeInfo(h)["coord"] == (0, 0))
    dst = next(h for h in topo.hosts() if topo.nodeInfo(h)["coord"] == (2, 3))
    assert routes.paths(src, dst) == [(src, "t0_0", "t1_0", "t2_0", "t2_3", dst)]


def test_hosts_on_one_torus_node_meet_there():
    topo = Torus(3, 3, hosts_per_node=2)
    routes = compute_routes(topo)
    assert routes.paths("h1", "h2") == [("h1", "t0_0", "h2")]


def test_topo_graph_attributes():
    graph = topo_graph(FatTree(4))
    assert graph.nodes["e1"]["role"] == "edge" and graph.nodes["h1"]["tier"] == 0
    edge = graph.edges["a1", "c1"]
    assert edge["rate_bps"] == 1.6e12 and edge["tier"] == "agg-core"
    assert edge["delay_s"] > 0 and edge["buffer_bytes"] > 0


@pytest.mark.parametrize("topo, expected_bps", [
    (FatTree(4), 8 * 400e9),                                  # N/2 NICs
    (LeafSpine(4, 2, 4, oversub=2), 2 * 2 * 400e9),           # two leaves' uplinks
    (Torus(4, 4, host_rate="2T"), 8 * 800e9),                 # two cuts of 4 links across x
    (RailOptimized(2, 4), 4 * 400e9),                         # NVLink cannot carry it
])
def test_bisection_bandwidth(topo, expected_bps):
    assert bisection_bandwidth_bps(topo) == pytest.approx(expected_bps)


@pytest.mark.parametrize("topo, hops", [
    (FatTree(4), 6), (LeafSpine(2, 2, 2), 4), (Torus(4, 4), 6), (Torus(3, 3, 3), 5),
    (Dragonfly(1, 2, 1), 5), (RailOptimized(2, 2), 4), (LeafSpine(1, 1, 2), 2),
])
def test_diameter_hops(topo, hops):
    assert diameter_hops(topo) == hops


class _Parallel(FabricTopo):
    def build(self):
        self.add_switch("s1", "leaf", 1)
        self.add_switch("s2", "leaf", 1)
        for _ in range(2):
            self.add_link("s1", "s2", rate_bps=1e9, delay_s=0, tier="x")


def test_unknown_routing_and_parallel_links_rejected():
    topo = LeafSpine(1, 1, 2)
    topo.routing = "valiant"
    with pytest.raises(ParameterError, match="routing"):
        compute_routes(topo)
    with pytest.raises(ParameterError, match="parallel"):
        topo_graph(_Parallel())
