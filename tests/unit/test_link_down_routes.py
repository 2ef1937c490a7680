"""Routes around links taken down (`link X Y down` in the Mininet CLI), and the
CLI's iperf rate format."""

from __future__ import annotations

import itertools

from topologies.fattree import FatTree, LeafSpine
from topologies.routing import compute_routes
from topologies.torus import Torus


def down(*links: tuple[str, str]) -> frozenset[frozenset[str]]:
    return frozenset(frozenset(link) for link in links)


def crosses(path: tuple[str, ...], a: str, b: str) -> bool:
    return any({x, y} == {a, b} for x, y in itertools.pairwise(path))


def test_nothing_down_gives_the_normal_routes():
    topo = FatTree(4)
    assert compute_routes(topo, frozenset()).next_hops == compute_routes(topo).next_hops


def test_ecmp_spreads_over_the_paths_that_remain():
    topo = LeafSpine(2, 2, 2)
    routes = compute_routes(topo, down(("l1", "s1")))
    assert routes.next_hops["l2"]["h1"] == ("s2",)  # the other leaf stops sending via s1
    assert routes.next_hops["l1"]["h3"] == ("s2",)
    for src, dst in itertools.permutations(topo.hosts(), 2):
        paths = routes.paths(src, dst)
        assert paths and not any(crosses(p, "l1", "s1") for p in paths)
    # Up again: the original ECMP sets.
    assert compute_routes(topo, frozenset()).next_hops["l2"]["h1"] == ("s1", "s2")


def test_fat_tree_keeps_every_pair_and_all_shortest_paths_left():
    topo = FatTree(4)
    full = compute_routes(topo)
    routes = compute_routes(topo, down(("a1", "c1")))
    for src, dst in itertools.permutations(topo.hosts(), 2):
        left = [p for p in full.paths(src, dst) if not crosses(p, "a1", "c1")]
        if left:  # shortest paths survive: exactly those are used
            assert routes.paths(src, dst) == left
        else:
            assert routes.paths(src, dst)  # a longer detour, never the down link
            assert not any(crosses(p, "a1", "c1") for p in routes.paths(src, dst))


def test_a_cut_off_host_is_withdrawn_everywhere():
    topo = LeafSpine(2, 2, 2)
    routes = compute_routes(topo, down(("h1", "l1")))
    assert not routes.next_hops["h1"]
    assert all("h1" not in table for table in routes.next_hops.values())
    assert routes.paths("h2", "h3")


def test_dor_withdraws_routes_over_the_down_link_and_keeps_the_rest():
    topo = Torus(3, 3)
    full = compute_routes(topo)
    routes = compute_routes(topo, down(("t0_0", "t0_1")))
    for src, dst in itertools.permutations(topo.hosts(), 2):
        before = full.paths(src, dst)
        if crosses(before[0], "t0_0", "t0_1"):
            assert not routes.paths(src, dst)  # DOR has no other path
        else:
            assert routes.paths(src, dst) == before


def test_iperf_rate_reads_like_iperf():
    from cli.mncli import iperf_rate

    assert iperf_rate(99.2e6) == "99.2 Mbits/sec"
    assert iperf_rate(397e9) == "397 Gbits/sec"
    assert iperf_rate(12e3) == "12 Kbits/sec"
    assert iperf_rate(8 * 1024**2, "M") == "1 MBytes/sec"
    assert iperf_rate(5e6, "k") == "5000 Kbits/sec"
    assert iperf_rate(1.6e12) == "1600 Gbits/sec"


def test_iproute_commands_follow_the_routes():
    """A host gets one default route and its address; a leaf spreads a remote host over
    both spines (ECMP) and drops a spine a down link leaves unreachable."""
    from emu.iproute_plan import node_config, route_specs
    from topologies.addressing import plan_addresses

    topo = LeafSpine(2, 2, 2)
    plan, routes = plan_addresses(topo), compute_routes(topo)
    host = node_config(topo, plan, routes, "h1")
    assert [c for c in host if c.startswith("route")] == [
        f"route add default via {plan.iface('h1', 'l1').peer_ip} dev "
        f"{plan.iface('h1', 'l1').ifname} src {plan.host_ip['h1']}"]
    assert any(c.startswith(f"addr add {plan.iface('h1', 'l1').ip}/") for c in host)
    assert host[0] == f"addr add {plan.host_ip['h1']}/32 dev lo"
    assert not any("dev lo" in c for c in node_config(topo, plan, routes, "l1"))
    remote = f"{plan.host_ip['h1']}/32"
    assert route_specs(topo, plan, routes, "l2")[remote].count("nexthop via") == 2
    cut = compute_routes(topo, down(("l1", "s1")))
    assert route_specs(topo, plan, cut, "l2")[remote] == (
        f"via {plan.iface('l2', 's2').peer_ip} dev {plan.iface('l2', 's2').ifname}")
