"""The local fast reroute of the eBPF routers (emu.linkstate): a switch at a dead
link's end takes the dead port out of every destination's set at once, whatever the
routing still says; a destination left with no live port leaves the table (its frames
go to the kernel, which has no route either). No kernel: the tables only."""

from __future__ import annotations

from emu.linkstate import LinkState
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


def peers(s: LinkState, switch: str, slots: tuple[int, ...]) -> set[str]:
    return {s.plan.interfaces[switch][k].peer_node for k in slots}


def test_the_dead_port_leaves_every_multipath_set_of_its_ends():
    s = state("leafspine,2,2,2", {frozenset({"l1", "s1"})})
    live = s._live_dests("l1")
    assert all(peers(s, "l1", live[s.plan.host_ip[h]]) == {"s2"}
                          for h in ("h3", "h4"))
    # s1 reaches l1's hosts over the dead link only: they leave its table.
    assert all(s.plan.host_ip[h] not in s._live_dests("s1") for h in ("h1", "h2"))
    assert all(s.plan.host_ip[h] in s._live_dests("s1") for h in ("h3", "h4"))
    # A switch away from the link keeps what the routing says until it learns.
    assert peers(s, "l2", s._live_dests("l2")[s.plan.host_ip["h1"]]) == {"s1", "s2"}


def test_nothing_dead_keeps_the_routing_tables():
    from topologies import loadbalance

    s = state("fattree,4", set())
    for switch in s.topo.switch_nodes():
        assert s._live_dests(switch) == loadbalance.switch_tables(s.plan, s.routes, switch).dests
