"""How many file descriptors a fabric holds, and RLIMIT_NOFILE raised to fit, up front.

A fabric keeps open, for as long as it runs: one pyroute2 IPRoute per namespace
(a netlink socket on a shared event loop, ``emu.netns.open_iproute``; counted by
opening one, so a pyroute2 version with another count is measured, not assumed)
and one raw rtnetlink socket (``emu.rtnl.Rtnl``), the map fds of every eBPF-marked port (``emu.ecn.bpf.MARKER_MAPS``) and of every
switch's router under a routing mode beyond ECMP (``emu.lbrouter.MAPS``),
and per host the sockets of its checks and of the traffic (a raw ICMP socket for
pingall, a RoCEv2 sink or capture socket). A k=12 fat-tree needs ~8,000, a
2,048-host leaf-spine ~18,600: above a usual soft limit of 1,024, and near some
hard limits. ``ensure_fd_limit`` raises the soft limit, and as root the hard
one (with CAP_SYS_RESOURCE, up to the kernel's ceiling: fs.nr_open and what
fs.file-max leaves free), to the need; where that cannot be done it refuses before
anything is built, saying the need, the limit and the largest number of hosts of
this shape that fits.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
from dataclasses import dataclass

from core.errors import CapabilityError
from emu.ecn.bpf import MARKER_MAPS
from emu.ipbatch import MAX_CONCURRENT
from emu.lbrouter import MAPS as ROUTER_MAPS
from emu.netns import open_iproute
from topologies.base import FabricTopo

log = logging.getLogger(__name__)

#: Sockets a host may hold beyond its namespace's netlink socket: pingall's raw
#: ICMP socket and the RoCEv2 sink (UDP fallback) or the engine's capture.
HOST_SOCKETS = 2
#: The raw rtnetlink socket of each namespace (``emu.runs.NamespaceSet.rtnls``).
RTNL_FDS = 1
#: Open at once only while building: the pipes of the concurrent `ip -batch`
#: processes, a BPF object being loaded (its maps and program) and the interpreter's own;
#: beside them, each marked port's program and slot map until it is attached
#: (`ATTACH_FDS`, `emu.ecn.preload`).
TRANSIENT_FDS = 2 * MAX_CONCURRENT + 64
ATTACH_FDS = 2


@functools.cache
def iproute_fds() -> int:
    """File descriptors one pyroute2 IPRoute holds (measured once by opening one)."""
    open_iproute().close()  # the shared loop's own descriptors are not per namespace
    before = _open_fds()
    ipr = open_iproute()
    try:
        return max(1, _open_fds() - before)
    finally:
        ipr.close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir itself holds


@dataclass(frozen=True)
class FdNeed:
    """The descriptors a fabric of this shape keeps open, item by item."""

    hosts: int
    switches: int
    marked_ports: int
    per_namespace: int
    routed_switches: int = 0
    per_marked_port: int = len(MARKER_MAPS)
    per_routed_switch: int = len(ROUTER_MAPS)
    per_host: int = HOST_SOCKETS
    transient: int = TRANSIENT_FDS

    @classmethod
    def of(cls, topo: FabricTopo, bpf_marking: bool, bpf_routing: bool = False) -> FdNeed:
        """``bpf_routing``: every switch runs the router (a routing mode beyond ECMP)."""
        marked = 0
        if bpf_marking:
            marked = sum((topo.role(a) != "host") + (topo.role(b) != "host")
                         for a, b in topo.links())
        switches = len(topo.switch_nodes())
        return cls(len(topo.host_nodes()), switches, marked, iproute_fds() + RTNL_FDS,
                   switches if bpf_routing else 0, transient=TRANSIENT_FDS + ATTACH_FDS * marked)

    @property
    def fabric(self) -> int:
        return ((self.hosts + self.switches) * self.per_namespace
                + self.marked_ports * self.per_marked_port
                + self.routed_switches * self.per_routed_switch + self.hosts * self.per_host)

    def total(self, already_open: int) -> int:
        return already_open + self.fabric + self.transient

    def describe(self) -> str:
        return (f"{self.hosts + self.switches} namespaces x {self.per_namespace} (netlink) + "
                f"{self.marked_ports} marked ports x {self.per_marked_port} (eBPF maps) + "
                f"{self.routed_switches} routers x {self.per_routed_switch} (eBPF maps) + "
                f"{self.hosts} hosts x {self.per_host} (sockets) + {self.transient} while building")

    def largest_hosts(self, budget: int) -> int:
        """Hosts of a fabric of this shape (the same fds per host, switches and ports
        included) that fit in ``budget`` descriptors for the fabric."""
        if self.hosts == 0 or budget <= 0:
            return 0
        return int(budget * self.hosts // self.fabric)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kernel_fd_ceiling() -> int:
    """The most descriptors one process can get: fs.nr_open, and no more than the
    system's fs.file-max leaves free now."""
    nr_open = _read_int("/proc/sys/fs/nr_open") or resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    try:
        with open("/proc/sys/fs/file-nr") as f:
            allocated, _, file_max = (int(x) for x in f.read().split())
        return min(nr_open, file_max - allocated)
    except (OSError, ValueError):
        return nr_open


def ensure_fd_limit(need: FdNeed) -> int:
    """Raise RLIMIT_NOFILE so that a fabric of ``need`` fits; returns the soft limit.

    CapabilityError, before anything is built, if the hard limit is too low and
    cannot be raised (no CAP_SYS_RESOURCE), or the kernel's ceiling is below the need."""
    already = _open_fds()
    total = need.total(already)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = hard == resource.RLIM_INFINITY
    if total <= soft:
        return soft
    if unlimited or total <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if unlimited else max(total, soft), hard))
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    ceiling = kernel_fd_ceiling()
    why = f"this fabric needs {total:,} open files ({need.describe()}, {already} open now)"
    if total <= ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (total, total))
        except (ValueError, OSError):  # no CAP_SYS_RESOURCE
            pass
        else:
            log.info("raised the open-file limit from %d/%d to %d: %s", soft, hard, total, why)
            return total
        limit, what = hard, "the hard limit (ulimit -Hn; raising it needs CAP_SYS_RESOURCE)"
    else:
        limit, what = ceiling, "the kernel's ceiling (fs.nr_open, fs.file-max)"
    fits = need.largest_hosts(limit - already - need.transient)
    raise CapabilityError(f"{why}, over {what} of {limit:,}: the largest fabric of this shape "
                          f"that fits has about {fits:,} hosts")
