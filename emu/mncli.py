"""Mininet's own CLI on a fabricemu fabric.

Each node gets a Mininet ``Node`` whose shell runs inside the node's existing
namespace (entered with nsenter), so every Mininet CLI command works: ``h1 ping
h2``, ``pingall``, ``s1 ip route``, ``h1 iperf3 -s &``, ``xterm h1`` ...
The fabric stays owned by fabricemu, which removes it when the CLI exits.
"""

from __future__ import annotations

from typing import Any

from mininet.cli import CLI
from mininet.net import Mininet
from mininet.node import Node

from emu.fabric import Fabric
from emu.reachability import ping_all


class NamespaceNode(Node):
    """A Mininet node bound to a namespace that already exists."""

    def __init__(self, name: str, netns_path: str, primary_ip: str | None = None,
                 **params: Any) -> None:
        self.netns_path = netns_path
        self.primary_ip = primary_ip
        super().__init__(name, inNamespace=False, **params)

    def _popen(self, cmd: list[str], **params: Any):  # type: ignore[override]
        # Mininet starts the shell with mnexec; entering our namespace first makes
        # the shell (and everything `mnexec -a` attaches to it later) live there.
        return super()._popen(["nsenter", f"--net={self.netns_path}", *cmd], **params)

    def IP(self, intf: Any = None) -> str | None:  # noqa: N802 - Mininet's API name
        return self.primary_ip

    def defaultIntf(self) -> _PrimaryAddress:  # noqa: N802 - Mininet's API name
        # The CLI substitutes node names with defaultIntf().updateIP(); the links
        # themselves are fabricemu's, so only the address is exposed.
        return _PrimaryAddress(self.primary_ip)


class _PrimaryAddress:
    """What Mininet's CLI asks of a default interface: its address."""

    def __init__(self, ip: str | None) -> None:
        self.ip = ip

    def updateIP(self) -> str | None:  # noqa: N802 - Mininet's API name
        return self.ip

    IP = updateIP


class FabricNet(Mininet):
    """Mininet's network object over a fabricemu fabric (it owns no links itself)."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        super().__init__(topo=None, build=False, controller=None)

    def pingAll(self, timeout: Any = None) -> float:  # noqa: N802 - Mininet's API name
        # Mininet pings only hosts with Mininet-owned interfaces; fabricemu owns the
        # links, so its own all-pairs ICMP check answers, in Mininet's format.
        result = ping_all([(h.name, h.netns_path, h.primary_ip) for h in self.hosts])
        print("*** Ping: testing ping reachability")
        for src in self.hosts:
            row = [dst.name if result[(src.name, dst.name)] else "X"
                   for dst in self.hosts if dst is not src]
            print(f"{src.name} -> {' '.join(row)}")
        lost = sum(not ok for ok in result.values())
        loss = 100.0 * lost / max(len(result), 1)
        print(f"*** Results: {loss:.0f}% dropped ({len(result) - lost}/{len(result)} received)")
        return loss


def run_mininet_cli(fab: Fabric) -> None:
    net = FabricNet(fab)
    try:
        for host in fab.hosts:
            net.addHost(host, cls=NamespaceNode, netns_path=fab.netns_path(host),
                        primary_ip=fab.plan.host_ip[host])
        for switch in fab.switches:
            node = NamespaceNode(switch, fab.netns_path(switch))
            net.switches.append(node)
            net.nameToNode[switch] = node
        print(f"*** fabricemu fabric {fab.topo.describe()} (S = {fab.scale.factor:g}); "
              "switches are L3 routers. Type 'help'; 'exit' tears the fabric down.")
        CLI(net)
    finally:
        for node in net.hosts + net.switches:
            node.terminate()
