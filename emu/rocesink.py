"""Where RoCEv2 frames end at a host: in the NIC model, never in the host's IP stack.

The engine reads frames from a packet socket (a tap that sees them first); after
that the host kernel must discard them. Two ways, best first:

* ``bpf``: emu/bpf/roce_sink.c on every host interface's clsact ingress drops
  UDP 4791, as a RoCE NIC consumes RoCE itself; the IP receive path never runs.
* ``udp-socket`` (no clang/libbpf, or the kernel refuses the program): a UDP
  socket bound to 4791 in each host makes the kernel swallow the frames
  silently instead of answering each with an ICMP port-unreachable; it costs
  the IP/UDP receive path per frame.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import CapabilityError
from core.frame import ROCE_UDP_PORT
from emu import netns as ns
from emu.bpfload import attach_clsact, load_object
from emu.cbuild import compile_c
from emu.rtnl import Rtnl

FILTER_NAME = "fabricemu_roce_sink"


@dataclass
class HostPorts:
    """The interfaces of one host: its namespace, a netlink socket in it, ifindexes."""

    netns_path: str
    rtnl: Rtnl
    ifindexes: list[int]


@dataclass
class RoceSinks:
    kind: str = "none"
    detail: str = ""
    _sockets: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        """Close fallback sockets; BPF filters go with their namespaces."""
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()


def sink_source() -> Path:
    return Path(__file__).resolve().parent / "bpf" / "roce_sink.c"


def install_roce_sinks(hosts: Iterable[HostPorts]) -> RoceSinks:
    """Install a sink on every host: the BPF program if possible, else UDP sockets."""
    hosts = list(hosts)
    sinks = RoceSinks()
    try:
        _attach_bpf(hosts)
        sinks.kind = "bpf"
    except CapabilityError as e:
        sinks.kind, sinks.detail = "udp-socket", str(e).splitlines()[0]
        try:
            for host in hosts:
                with ns.in_netns(host.netns_path):
                    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sinks._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.bind(("0.0.0.0", ROCE_UDP_PORT))
        except BaseException:
            sinks.close()
            raise
    return sinks


def _attach_bpf(hosts: list[HostPorts]) -> None:
    obj = compile_c(sink_source(), "bpf", what="the RoCEv2 sink")
    (prog_fd,) = load_object(obj, "roce_sink", what="the RoCEv2 sink")
    try:  # one program, one filter per host interface; each filter holds the program
        for host in hosts:
            for ifindex in host.ifindexes:
                attach_clsact(host.rtnl, ifindex, prog_fd, FILTER_NAME, ingress=True)
    finally:
        with contextlib.suppress(OSError):
            os.close(prog_fd)
