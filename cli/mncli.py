"""Mininet's own CLI on a fabricemu fabric.

Every node is a Mininet node whose shell runs inside the node's namespace
(entered with nsenter), every link a Mininet link over the fabric's veth pair,
so the CLI's commands behave as on a Mininet network: ``nodes``, ``net``,
``dump``, ``links``, ``intfs``, ``ports``, ``pingall``, ``pingpair``, ``iperf``,
``iperfudp``, ``link X Y down|up``, ``switch X stop|start``, ``py``, ``px``,
``sh``, ``noecho``, ``h1 ping h2`` ...

Where an L3 fabric differs from Mininet's L2 one:

* a host's address (``h1.IP()``, what ``h2 ping h1`` pings) is the /32 on its
  loopback; its NICs carry one /31 per link;
* ``link X Y down`` takes both veth ends down and reroutes every node around the
  link, as a converged routing protocol would (``up`` restores both);
  ``switch X stop|start`` does that for all of a switch's links;
* ``iperf`` runs iperf3 with bounded start-up and run time and reports the
  emulated rates (what the flow sees) in Mininet's format, then the real ones;
* there is no OpenFlow: ``dpctl`` says so.

The fabric stays owned by fabricemu, which removes it when the CLI exits.
"""

from __future__ import annotations

import signal
from typing import Any

from mininet.cli import CLI
from mininet.link import Intf, Link
from mininet.log import error, output
from mininet.net import Mininet
from mininet.node import Node

from core.errors import FabricEmuError
from emu.fabric import Fabric
from emu.netcheck import run_iperf3
from emu.reachability import ping_all

#: How soon a SIGTERM/SIGHUP that arrived at an unlucky instant is acted upon.
_SIGNAL_POLL_S = 0.2
_IPERF_UNITS = {"k": 1e3, "m": 1e6, "g": 1e9, "K": 8 * 1024, "M": 8 * 1024**2, "G": 8 * 1024**3}


def iperf_rate(rate_bps: float, fmt: str | None = None) -> str:
    """A rate as iperf prints it: '94.1 Mbits/sec' (adaptive), or in ``fmt``'s
    unit (iperf's -f letters: k/m/g bits, K/M/G bytes)."""
    def digits(value: float) -> str:  # 3 significant digits, never an exponent
        return f"{value:.3g}" if value < 1000 else f"{value:.0f}"

    if fmt in _IPERF_UNITS:
        kind = "bits" if fmt.islower() else "Bytes"
        return f"{digits(rate_bps / _IPERF_UNITS[fmt])} {fmt.upper()}{kind}/sec"
    for prefix, factor in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if rate_bps >= factor:
            return f"{digits(rate_bps / factor)} {prefix}bits/sec"
    return f"{digits(rate_bps)} bits/sec"


class NamespaceNode(Node):
    """A Mininet node bound to a fabric node's existing namespace."""

    def __init__(self, name: str, fab: Fabric, **params: Any) -> None:
        self.fab = fab
        super().__init__(name, inNamespace=False, **params)

    def _popen(self, cmd: list[str], **params: Any):  # type: ignore[override]
        # Mininet starts the shell with mnexec; entering our namespace first makes
        # the shell (and everything `mnexec -a` attaches to it later) live there.
        return super()._popen(["nsenter", f"--net={self.fab.netns_path(self.name)}", *cmd],
                              **params)


class FabricHost(NamespaceNode):
    """A host: its address is the /32 on its loopback, reached through any NIC."""

    def IP(self, intf: Any = None) -> str | None:  # noqa: N802 - Mininet's API name
        return self.fab.plan.host_ip[self.name] if intf is None else super().IP(intf)

    def __repr__(self) -> str:
        intfs = ",".join([f"lo:{self.IP()}"] + [f"{i.name}:{i.IP()}" for i in self.intfList()])
        return f"<{type(self).__name__} {self.name}: {intfs} pid={self.pid}> "


class FabricRouter(NamespaceNode):
    """A switch of the fabric: an L3 router with static ECMP routes, no OpenFlow."""

    def start(self, _controllers: list) -> None:
        """``switch X start``: bring all the router's links back up."""
        for intf in self.intfList():
            self.fab.set_link_up(self.name, intf.peer_node, True)

    def stop(self, deleteIntfs: bool = False) -> None:  # noqa: N803 - Mininet's API
        """``switch X stop``: the router fails, i.e. all its links go down."""
        for intf in self.intfList():
            self.fab.set_link_up(self.name, intf.peer_node, False)

    def connected(self) -> bool:
        return True  # no controller to wait for

    def dpctl(self, *_args: str) -> str:
        return (f"{self.name} is an L3 router with no OpenFlow tables; "
                f"try '{self.name} ip route' or '{self.name} tc -s qdisc'\n")


class FabricIntf(Intf):
    """One end of a fabric link, as the fabric configured it (nothing is run)."""

    def __init__(self, node: NamespaceNode, peer_node: str) -> None:
        plan = node.fab.plan.iface(node.name, peer_node)
        self.peer_node = peer_node
        super().__init__(plan.ifname, node=node, port=plan.port, mac=plan.mac)
        self.ip, self.prefixLen = plan.ip, plan.prefixlen

    def config(self, **_params: Any) -> dict:
        return {}  # the fabric has addressed, shaped and raised the interface

    def status(self) -> str:
        """'OK' while administratively up, 'DOWN' once taken down."""
        return "OK" if self.node.fab.iface_is_up(self.node.name, self.peer_node) else "DOWN"


class FabricLink(Link):
    """A fabric link (a veth pair the fabric created) seen as a Mininet link."""

    def __init__(self, intf1: FabricIntf, intf2: FabricIntf) -> None:
        # Mininet's Link.__init__ would create a veth pair; ours exists already.
        self.intf1, self.intf2 = intf1, intf2
        intf1.link = intf2.link = self


class FabricNet(Mininet):
    """Mininet's network object over a fabricemu fabric."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        super().__init__(topo=fab.topo, build=False, controller=None)

    def add_fabric_nodes(self) -> None:
        """One Mininet node per fabric node (a shell each), then the links."""
        for host in self.fab.hosts:
            self.hosts.append(FabricHost(host, self.fab))
        for switch in self.fab.switches:
            self.switches.append(FabricRouter(switch, self.fab))
        for node in self.hosts + self.switches:
            self.nameToNode[node.name] = node
        intfs: dict[tuple[str, str], FabricIntf] = {}
        for node in self.hosts + self.switches:
            for plan in self.fab.plan.interfaces[node.name]:
                intfs[node.name, plan.peer_node] = FabricIntf(node, plan.peer_node)
        for a, b in self.fab.topo.links():
            self.links.append(FabricLink(intfs[a, b], intfs[b, a]))

    def ping(self, hosts: list | None = None, timeout: Any = None) -> float:
        """Mininet's ping report, from fabricemu's all-pairs ICMP check (raw sockets,
        all pairs at once, no process per pair)."""
        if not hosts:
            hosts = self.hosts
            output("*** Ping: testing ping reachability\n")
        try:
            timeout_s = float(timeout) if timeout else 3.0
        except ValueError:
            error(f"*** invalid ping timeout {timeout!r}: give seconds, e.g. 'pingall 1'\n")
            return 100.0
        result = ping_all([(h.name, self.fab.netns_path(h.name), h.IP()) for h in hosts],
                          timeout_s=timeout_s)
        for src in hosts:
            row = "".join(f"{dst.name if result[src.name, dst.name] else 'X'} "
                          for dst in hosts if dst is not src)
            output(f"{src.name} -> {row}\n")
        lost = sum(not ok for ok in result.values())
        loss = 100.0 * lost / max(len(result), 1)
        output(f"*** Results: {loss:.0f}% dropped ({len(result) - lost}/{len(result)} received)\n")
        return loss

    def iperf(self, hosts: list | None = None, l4Type: str = "TCP",  # noqa: N803
              udpBw: str = "10M", fmt: str | None = None, seconds: float = 5,  # noqa: N803
              port: int = 5001) -> list[str]:
        """Mininet's iperf: [server rate, client rate] (UDP: [udpBw, server, client]),
        measured with iperf3 within a bounded time."""
        client, server = hosts or [self.hosts[0], self.hosts[-1]]
        if l4Type not in ("TCP", "UDP"):
            raise FabricEmuError(f"unexpected l4 type {l4Type!r}: TCP or UDP")
        output(f"*** Iperf: testing {l4Type} bandwidth between {client} and {server} \n")
        try:
            res = run_iperf3(self.fab, client.name, server.name, seconds, port=port,
                             udp_rate=udpBw if l4Type == "UDP" else None)
        except FabricEmuError as e:
            error(f"*** {e}\n")
            return []
        result = [iperf_rate(res.received_bps, fmt), iperf_rate(res.sent_bps, fmt)]
        if l4Type == "UDP":
            result.insert(0, udpBw)
        output(f"*** Results: {result}\n")
        real = self.fab.scale.to_real_rate_bps
        lost = f"; {res.lost_percent:.1f}% of datagrams lost" if l4Type == "UDP" else ""
        output(f"*** Real rates (emulated x S = {self.fab.scale.factor:g}): server "
               f"{iperf_rate(real(res.received_bps), fmt)}, client "
               f"{iperf_rate(real(res.sent_bps), fmt)}{lost}\n")
        return result

    def configLinkStatus(self, src: str, dst: str, status: str) -> None:  # noqa: N802
        """``link src dst up|down``: both ends of the link, and the fabric's routes."""
        for name in (src, dst):
            if name not in self.nameToNode:
                error(f"node not in network: {name}\n")
                return
        if status not in ("up", "down"):
            error(f"invalid link status {status!r}: up or down\n")
            return
        try:
            self.fab.set_link_up(src, dst, status == "up")
        except FabricEmuError as e:
            error(f"*** {e}\n")

    def waitConnected(self, timeout: Any = None, delay: float = 0.5) -> bool:  # noqa: N802
        return True  # routers need no controller

    def stop_shells(self) -> None:
        for node in self.hosts + self.switches:
            node.terminate()


class FabricCLI(CLI):
    """Mininet's CLI; node names become host addresses (the /32, not a NIC's /31),
    and a failing command prints one line instead of ending the session."""

    def default(self, line: str) -> None:
        first, args, line = self.parseline(line)
        if first in self.mn and args:
            words = [self.mn[w].IP() or w if w in self.mn else w for w in args.split(" ")]
            line = f"{first} {' '.join(words)}"
        super().default(line)

    def onecmd(self, line: str) -> bool:
        try:
            return super().onecmd(line)
        except Exception as e:  # noqa: BLE001 - the session (and its fabric) outlives a bad command
            error(f"*** {type(e).__name__}: {e}\n")
            return False


class _SessionEnd(BaseException):
    """SIGTERM or SIGHUP during the CLI. Mininet's loop catches KeyboardInterrupt (Ctrl-C
    stops the running command, not the CLI), so ending the session needs its own exception."""


def _end_session(signum: int, _frame: object) -> None:
    raise _SessionEnd(signum)


def run_mininet_cli(fab: Fabric) -> None:
    """Mininet's CLI on ``fab`` until 'exit' (or EOF); SIGTERM/SIGHUP end it as Ctrl-C
    ends any other emu command (KeyboardInterrupt), so the fabric is removed."""
    previous = {sig: signal.signal(sig, _end_session) for sig in (signal.SIGTERM, signal.SIGHUP)}
    # Python runs a handler only when a blocking call returns: a signal that lands
    # between the prompt and readline's select() would wait for the next key. A
    # periodic no-op SIGALRM interrupts the wait (EINTR) so a pending one runs.
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, lambda _signum, _frame: None)
    signal.setitimer(signal.ITIMER_REAL, _SIGNAL_POLL_S, _SIGNAL_POLL_S)
    net = FabricNet(fab)
    try:
        net.add_fabric_nodes()
        output(f"*** fabricemu fabric {fab.topo.describe()} (S = {fab.scale.factor:g}); "
               "switches are L3 routers. Type 'help'; 'exit' tears the fabric down.\n")
        FabricCLI(net)
    except _SessionEnd as e:
        raise KeyboardInterrupt(f"signal {e.args[0]}") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        net.stop_shells()
