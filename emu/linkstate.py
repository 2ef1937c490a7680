"""A live fabric's links going down and up, and its routes following them.

`emu.fabric.Fabric` takes these methods from `LinkState`: the physical state of a
link (what its two ends' kernels see at once), and the routing's view of it (which
links it routes around: `reroute`, what a routing protocol does once it has detected
a change). `emu.faultinject` drives both from its own thread, with a detection delay
between them; Mininet's CLI (`link a b down`) drives both at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core.errors import FabricEmuError
from emu.ipbatch import run_ip_batches
from emu.iproute_plan import route_specs
from topologies import loadbalance
from topologies.routing import compute_routes

if TYPE_CHECKING:
    from emu.lbrouter import SwitchRouter
    from emu.runs import NamespaceSet
    from topologies.addressing import AddressPlan
    from topologies.base import FabricTopo
    from topologies.loadbalance import SwitchTables
    from topologies.routing import Routes

_IFF_UP = 0x1


class LinkState:
    """Link state and reroute for `emu.fabric.Fabric`, whose attributes these are."""

    topo: FabricTopo
    plan: AddressPlan
    routes: Routes
    namespaces: NamespaceSet
    routers: dict[str, SwitchRouter]
    routing: str
    down_links: set[frozenset[str]]   # what the routing knows to be down
    dead_links: set[frozenset[str]]   # physically down
    _ifindex: dict[tuple[str, str], int]

    def iface_is_up(self, node: str, peer: str) -> bool:
        """Whether ``node``'s interface toward ``peer`` is administratively up (kernel state)."""
        (link,) = self.namespaces.iprs[node].get_links(self._ifindex[(node, self.plan.iface(node, peer).ifname)])
        return bool(link["flags"] & _IFF_UP)

    def set_link_up(self, a: str, b: str, up: bool) -> None:
        """Take link a-b down (both veth ends) or bring it back up, then move every
        node's routes onto the paths that remain (``compute_routes`` without the
        down links), as a converged routing protocol would: ECMP spreads over the
        surviving paths and a destination left without a path is withdrawn."""
        self.set_link_state(a, b, up)
        (self.down_links.discard if up else self.down_links.add)(frozenset((a, b)))
        self.reroute(touched={a, b})

    def set_link_state(self, a: str, b: str, up: bool) -> None:
        """Link a-b's physical state, what its two ends see at once: down, each end's
        kernel drops its next hops over the link (a route left with none goes); up,
        both ends get their routes back as the fabric's routing has them. The rest of
        the fabric keeps its routes until `reroute` (a routing protocol's detection)."""
        ends = self._link_ends(a, b)
        (self.dead_links.discard if up else self.dead_links.add)(frozenset((a, b)))
        # ip -batch, not this process's netlink sockets: a fault injector calls this
        # from its own thread, and pyroute2's sockets belong to the thread that made them.
        run_ip_batches({self.namespaces.name(node): [
            f"link set {iface.ifname} {'up' if up else 'down'}",
            # the kernel flushed the link's permanent neighbours when it went down
            *([f"neigh replace {iface.peer_ip} lladdr {iface.peer_mac} dev {iface.ifname} "
               "nud permanent"] if up else [])] for node, iface in ends})
        if up:  # and the routes whose every next hop was over the link
            self.reroute(touched={a, b})
            return
        # The ends' eBPF routers (routing modes other than ecmp) drop the dead port from
        # every destination's set at once, as the kernel does its dead next hops.
        self._refresh_routers([node for node in (a, b) if node in self.routers])

    def _link_ends(self, a: str, b: str) -> list[tuple[str, Any]]:
        try:
            return [(a, self.plan.iface(a, b)), (b, self.plan.iface(b, a))]
        except KeyError:
            raise FabricEmuError(f"no link between {a!r} and {b!r} in this fabric") from None

    def reroute(self, touched: set[str] | frozenset[str] = frozenset()) -> None:
        """Recompute the routes around ``self.down_links`` and apply the difference;
        the ``touched`` nodes (the kernel flushed routes there, or kept dead next hops
        in them) get all theirs again.
        A node never gets a next hop over a link that is physically down
        (``dead_links``) whatever the routing says: its kernel dropped those."""
        old = {node: self._route_specs(node) for node in self.topo.nodes()}
        self.routes = compute_routes(self.topo, frozenset(self.down_links))
        batches: dict[str, list[str]] = {}
        for node in self.topo.nodes():
            new = self._route_specs(node)
            batches[self.namespaces.name(node)] = [
                f"route replace {prefix} {how}" for prefix, how in new.items()
                if node in touched or old[node].get(prefix) != how]
            batches[self.namespaces.name(node)] += [
                # flush: silent where the kernel already flushed it with the link
                f"route flush exact {'0.0.0.0/0' if prefix == 'default' else prefix}"
                for prefix in old[node].keys() - new.keys()]
        run_ip_batches(batches)
        self._refresh_routers(self.routers.keys())

    def _refresh_routers(self, switches: Iterable[str]) -> None:
        """Give the ``switches``' eBPF routers their tables as the routing has them
        (around ``down_links``), without the ports whose link is physically down."""
        if not self.routers:
            return
        groups = (loadbalance.group_routes(self.topo, self.routes, frozenset(self.down_links))
                  if self.routing in loadbalance.GROUP_MODES else None)
        for switch in switches:
            tables = loadbalance.switch_tables(self.plan, self.routes, switch, groups)
            self.routers[switch].set_tables(self._without_dead_ports(switch, tables))

    def _without_dead_ports(self, switch: str, tables: SwitchTables) -> SwitchTables:
        """``tables`` without the slots whose link is physically down; a destination left
        with none is not in the table (the router leaves its frames to the kernel, which
        has no route for them either), a group left with none is routed minimally."""
        dead = {peer for link in self.dead_links if switch in link for peer in link - {switch}}

        def live(slots: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(s for s in slots if tables.ports[s].peer_node not in dead)
        dests = {ip: live(slots) for ip, slots in tables.dests.items() if live(slots)}
        groups = tables.groups and replace(
            tables.groups, to_group={g: live(slots) for g, slots in tables.groups.to_group.items()})
        return replace(tables, dests=dests, groups=groups)

    def _route_specs(self, node: str) -> dict[str, str]:
        dead = {peer for link in self.dead_links if node in link for peer in link - {node}}
        return route_specs(self.topo, self.plan, self.routes, node, dead_peers=dead)
