"""The iproute2 commands that configure a node of the fabric: its addresses, permanent
neighbours and routes, from the address plan and the computed routes (pure; the
fabric applies them with `emu.ipbatch`, and again after a link goes down or up)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Set as AbstractSet

from topologies.addressing import AddressPlan
from topologies.base import FabricTopo
from topologies.routing import Routes


def nexthops(plan: AddressPlan, node: str, hops: tuple[str, ...]) -> str:
    """``via ... dev ...`` for one next hop, ``nexthop via ...`` for each of several (ECMP)."""
    ifaces = [plan.iface(node, hop) for hop in hops]
    if len(ifaces) == 1:
        return f"via {ifaces[0].peer_ip} dev {ifaces[0].ifname}"
    return " ".join(f"nexthop via {i.peer_ip} dev {i.ifname}" for i in ifaces)


def route_specs(topo: FabricTopo, plan: AddressPlan, routes: Routes, node: str,
                dead_peers: AbstractSet[str] = frozenset()) -> dict[str, str]:
    """``node``'s routes per ``routes``: prefix -> next hops (and source), without the
    next hops toward ``dead_peers`` (links down that routing does not know of yet)."""
    table = {dst: kept for dst, hops in routes.next_hops[node].items()
             if (kept := tuple(h for h in hops if h not in dead_peers))}
    is_host = topo.role(node) == "host"
    src = f" src {plan.host_ip[node]}" if is_host else ""
    specs = {}
    default_hops: tuple[str, ...] | None = None
    if is_host and table:
        # Hosts: one default route toward their usual first hop, exceptions
        # (e.g. NVLink peers of a multi-homed GPU) as /32s.
        default_hops = Counter(table.values()).most_common(1)[0][0]
        specs["default"] = f"{nexthops(plan, node, default_hops)}{src}"
    for dst, hops in table.items():
        if dst != node and hops != default_hops:
            specs[f"{plan.host_ip[dst]}/32"] = f"{nexthops(plan, node, hops)}{src}"
    return specs


def node_config(topo: FabricTopo, plan: AddressPlan, routes: Routes, node: str) -> list[str]:
    """Every command that configures ``node`` on a new fabric, for ``ip -batch``: a
    host's own /32 on its loopback first (its routes name it as their source)."""
    lines = ([f"addr add {plan.host_ip[node]}/32 dev lo"] if topo.role(node) == "host"
             else [])
    for iface in plan.interfaces[node]:
        lines += [
            f"addr add {iface.ip}/{iface.prefixlen} dev {iface.ifname}",
            f"link set {iface.ifname} up",
            f"neigh add {iface.peer_ip} lladdr {iface.peer_mac} dev {iface.ifname} "
            "nud permanent",
        ]
    return lines + [f"route add {prefix} {how}"
                    for prefix, how in route_specs(topo, plan, routes, node).items()]
