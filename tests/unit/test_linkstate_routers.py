"""The local fast reroute of the eBPF routers (emu.linkstate): a switch at a dead
link's end takes the dead port out of every destination's set at once, whatever the
routing still says; a destination left with no live port leaves the table (its frames
go to the kernel, which has no route either). No kernel: the tables only."""

from __future__ import annotations

from emu.linkstate import LinkState
from topologies import loadbalance
from topologies.addressing import plan_addresses
from topologies.routing import compute_routes
from topologies.spec import build_topo


def state(spec: str, dead: set[frozenset[str]]) -> LinkState:
    s = LinkState()
    s.topo = build_topo(spec)
    s.plan = plan_addresses(s.topo)
    s.routes = compute_routes(s.topo)  # the routing has not learned anything yet
    s.dead_links = dead
    return s


def live_dests(s: LinkState, switch: str) -> dict[str, tuple[int, ...]]:
    tables = loadbalance.switch_tables(s.plan, s.routes, switch)
    return s._without_dead_ports(switch, tables).dests


def peers(s: LinkState, switch: str, slots: tuple[int, ...]) -> set[str]:
    return {s.plan.interfaces[switch][k].peer_node for k in slots}


def test_the_dead_port_leaves_every_multipath_set_of_its_ends():
    s = state("leafspine,2,2,2", {frozenset({"l1", "s1"})})
    live = live_dests(s, "l1")
    assert all(peers(s, "l1", live[s.plan.host_ip[h]]) == {"s2"}
                          for h in ("h3", "h4"))
    # s1 reaches l1's hosts over the dead link only: they leave its table.
    assert all(s.plan.host_ip[h] not in live_dests(s, "s1") for h in ("h1", "h2"))
    assert all(s.plan.host_ip[h] in live_dests(s, "s1") for h in ("h3", "h4"))
    # A switch away from the link keeps what the routing says until it learns.
    assert peers(s, "l2", live_dests(s, "l2")[s.plan.host_ip["h1"]]) == {"s1", "s2"}


def test_nothing_dead_keeps_the_routing_tables():
    s = state("fattree,4", set())
    for switch in s.topo.switch_nodes():
        assert live_dests(s, switch) == loadbalance.switch_tables(s.plan, s.routes, switch).dests


def test_a_dead_global_link_leaves_the_group_next_hops_of_its_ends():
    s = state("dragonfly,p=1,a=2,h=1", set())
    groups = loadbalance.group_routes(s.topo, s.routes, frozenset())
    before = loadbalance.switch_tables(s.plan, s.routes, "g0r0", groups)
    assert before.groups is not None
    global_link = next(frozenset({"g0r0", p}) for slots in before.groups.to_group.values()
                       for p in peers(s, "g0r0", slots) if not p.startswith("g0"))
    s.dead_links = {global_link}
    after = s._without_dead_ports("g0r0", before).groups
    assert after is not None and after.to_group.keys() == before.groups.to_group.keys()
    dead_peer = next(iter(global_link - {"g0r0"}))
    assert all(dead_peer not in peers(s, "g0r0", slots) for slots in after.to_group.values())
    assert any(dead_peer in peers(s, "g0r0", slots) for slots in before.groups.to_group.values())
