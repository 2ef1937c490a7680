"""Address plan of a fabric (pure): host IPs, one /31 per link, MACs, ifnames.

* Host i (Mininet's natural name order, from 0) has the primary address
  10.0.0.0 + i + 1 (a /32 on its loopback), so h1 is 10.0.0.1 in most fabrics.
* Link n (``topo.fabric_links()`` order) gets 10.128.0.0 + 2n/31: end a (the
  link's node1) the even address, end b the odd one.
* Interface n (2n for end a, 2n + 1 for end b) gets the locally administered
  unicast MAC 02:fe:<n as 4 bytes>, unique within the fabric.
* Interface names are Mininet's ``<node>-eth<port>``, or ``eth<port>`` when that
  would exceed Linux's 15 characters (unique anyway: every node is its own netns).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from core.errors import ParameterError
from topologies.base import FabricTopo

HOST_NET = ipaddress.IPv4Network("10.0.0.0/16")
LINK_NET = ipaddress.IPv4Network("10.128.0.0/9")
IFNAMSIZ = 15  # Linux interface names: 16 bytes including the NUL


@dataclass(frozen=True, kw_only=True)
class Interface:
    """One end of a link, with what the other end needs to reach it."""

    node: str
    ifname: str
    port: int
    mac: str
    ip: str
    prefixlen: int = 31
    peer_node: str
    peer_ifname: str
    peer_ip: str
    peer_mac: str
    rate_bps: float
    delay_s: float
    buffer_bytes: int
    tier: str


@dataclass(frozen=True)
class AddressPlan:
    host_ip: dict[str, str]
    interfaces: dict[str, list[Interface]]  # per node, in port order
    host_by_ip: dict[str, str]
    # (node, neighbour) -> interface: the fabric looks one up per route.
    _by_link: dict[tuple[str, str], Interface] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_link", {
            (i.node, i.peer_node): i for ifaces in self.interfaces.values() for i in ifaces})

    def iface(self, node: str, neighbour: str) -> Interface:
        """The interface of ``node`` on its link to ``neighbour`` (KeyError if none)."""
        try:
            return self._by_link[node, neighbour]
        except KeyError:
            raise KeyError(f"{node} has no link to {neighbour}") from None


def interface_name(node: str, port: int) -> str:
    name = f"{node}-eth{port}"
    return name if len(name) <= IFNAMSIZ else f"eth{port}"


def mac_address(index: int) -> str:
    return "02:fe:" + ":".join(f"{byte:02x}" for byte in index.to_bytes(4, "big"))


def plan_addresses(topo: FabricTopo) -> AddressPlan:
    """Deterministic addresses for every host and link of ``topo``."""
    hosts = topo.hosts()
    if len(hosts) > HOST_NET.num_addresses - 2:
        raise ParameterError("hosts", len(hosts), f"at most {HOST_NET.num_addresses - 2} "
                                                  f"hosts fit in {HOST_NET}")
    links = topo.fabric_links()
    if 2 * len(links) > LINK_NET.num_addresses:
        raise ParameterError("links", len(links), f"at most {LINK_NET.num_addresses // 2} "
                                                  f"links fit in {LINK_NET}")
    host_ip = {host: str(HOST_NET[i + 1]) for i, host in enumerate(hosts)}
    interfaces: dict[str, list[Interface]] = {node: [] for node in topo.nodes()}
    for n, (_, _, info) in enumerate(links):
        ends = [(info["node1"], info["port1"]), (info["node2"], info["port2"])]
        ips = [str(LINK_NET[2 * n]), str(LINK_NET[2 * n + 1])]
        macs = [mac_address(2 * n), mac_address(2 * n + 1)]
        names = [interface_name(node, port) for node, port in ends]
        for me, peer in ((0, 1), (1, 0)):
            interfaces[ends[me][0]].append(Interface(
                node=ends[me][0], ifname=names[me], port=ends[me][1], mac=macs[me],
                ip=ips[me], peer_node=ends[peer][0], peer_ifname=names[peer],
                peer_ip=ips[peer], peer_mac=macs[peer], rate_bps=info["rate_bps"],
                delay_s=info["delay_s"], buffer_bytes=info["buffer_bytes"], tier=info["tier"]))
    for node_interfaces in interfaces.values():
        node_interfaces.sort(key=lambda interface: interface.port)
    return AddressPlan(host_ip=host_ip, interfaces=interfaces,
                       host_by_ip={ip: host for host, ip in host_ip.items()})
