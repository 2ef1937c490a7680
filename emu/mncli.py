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

    def defaultIntf(self) -> None:  # noqa: N802 - interfaces are fabricemu's, not Mininet's
        return None


def run_mininet_cli(fab: Fabric) -> None:
    net = Mininet(topo=None, build=False, controller=None)
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
