"""The routing modes beyond ECMP in the switches: emu/bpf/router.c, one object per switch.

Each switch gets one load of the router (its maps are that switch's tables, isolated
between switches and fabrics), attached to the clsact ingress hook of every port:

* ``cfg``: the mode, the flowlet gap in emulated ns (the real gap times S) and the
  unit adaptive routing compares queues in (`QUEUE_QUANTUM_BYTES`);
* ``ports``: each port slot's ifindex, MACs and (for adaptive) its emulated rate and
  HTB bucket depth;
* ``dests``: destination host IP -> the slots of its equal-cost next hops
  (``topologies.loadbalance.switch_tables``, from the fabric's routes);
* ``vq`` (adaptive, ugal): the switch's ECN marker ``vq`` map itself (one marker
  object per switch, each port at its ``vq_slot`` in ``ports``), reused by libbpf, so
  the switch reads its own ports' queues;
* ``to_group``, ``host_ifs`` (valiant, ugal): the slots toward each group, the host
  ports' ifindexes (``topologies.loadbalance.GroupSlots``); ``dests`` then also holds
  each destination's group and hop counts;
* ``stats``: frames routed, left to the FIB, new flowlets, frames a source switch
  sent through an intermediate group or minimally, frames per port slot.

Nothing is pinned: after attaching we keep the fds of the maps we write or read; the
filters hold the program, and the namespaces' removal drops them (as emu.ecn.bpf).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import CapabilityError
from core.frame import WIRE_FRAME_BYTES
from emu.bpfload import attach_clsact, libbpf, load_object, program_id, update_elem
from emu.cbuild import compile_c
from emu.ecn.bpf import SCALE, VqRef
from emu.ports import Port
from emu.rtnl import Rtnl
from topologies.loadbalance import (
    MAX_NEXT_HOPS,
    MAX_PORTS,
    SwitchTables,
    max_idle_ns,
)
from topologies.valiant import MAX_GROUPS

PROGRAM_NAME = "fabricemu_route"
FILTER_NAME = "fabricemu_router"
#: The maps the router keeps fds of (``vq`` is the markers' own).
MAPS = ("cfg", "ports", "dests", "stats", "to_group", "host_ifs")
#: A port's ``vq_slot`` without a marker: no entry of any ``vq``.
NO_VQ_SLOT = 0xFFFFFFFF
#: router.c's MAX_GROUPS: the size of ``to_group`` and of a destination's ``via_hops``
GROUP_SLOTS = 64
#: router.c's mode numbers
MODE_NUMBER = {"spray": 1, "spray-rr": 2, "flowlet": 3, "adaptive": 4, "adaptive-flowlet": 5,
               "valiant": 6, "ugal": 7}
#: Adaptive routing reads a port's queue in whole full-size frames, as a switch reads
#: its buffer in cells: queues less than a frame apart tie, and ties alternate.
QUEUE_QUANTUM_BYTES = WIRE_FRAME_BYTES
assert MAX_GROUPS < GROUP_SLOTS


class _Cfg(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("flowlet_gap_ns", ctypes.c_uint64), ("group", ctypes.c_uint32),
                ("groups", ctypes.c_uint32), ("queue_quantum_scaled", ctypes.c_uint64)]


class _Port(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("vq_slot", ctypes.c_uint32),
                ("rate_emu_bps", ctypes.c_uint64), ("max_delta_ns", ctypes.c_uint64),
                ("burst_scaled", ctypes.c_uint64), ("mac", ctypes.c_uint8 * 6), ("peer_mac", ctypes.c_uint8 * 6),
                ("pad2", ctypes.c_uint32)]


class _Dest(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("rr", ctypes.c_uint32),
                ("slot", ctypes.c_uint32 * MAX_NEXT_HOPS), ("group", ctypes.c_uint32),
                ("hops", ctypes.c_uint32), ("via_hops", ctypes.c_uint8 * GROUP_SLOTS)]


class _NhSet(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("slot", ctypes.c_uint32 * MAX_NEXT_HOPS)]


class _Stats(ctypes.Structure):
    _fields_ = [("routed", ctypes.c_uint64), ("passed", ctypes.c_uint64),
                ("flowlets", ctypes.c_uint64), ("valiant", ctypes.c_uint64),
                ("minimal", ctypes.c_uint64), ("per_port", ctypes.c_uint64 * MAX_PORTS)]


def router_source() -> Path:
    return Path(__file__).resolve().parent / "bpf" / "router.c"


def compile_router() -> Path:
    return compile_c(router_source(), "bpf", what="the eBPF router (routing modes)")


def _mac(text: str) -> Any:
    return (ctypes.c_uint8 * 6)(*bytes.fromhex(text.replace(":", "")))


@dataclass(frozen=True)
class RouterCounters:
    """What one switch's router did: frames it forwarded, frames it left to the FIB,
    flowlets it started, frames it sent (as their source switch) through an
    intermediate group or minimally to another group, and frames per port (by ifname)."""

    routed: int
    passed: int
    flowlets: int
    valiant: int
    minimal: int
    per_port: dict[str, int]


class SwitchRouter:
    """The router of one switch: its map fds, its tables, its counters."""

    def __init__(self, switch: str, tables: SwitchTables, fds: list[int], prog_id: int = 0
                 ) -> None:
        self.switch = switch
        self.tables = tables
        self.prog_id = prog_id  # the kernel's id of its program (run-time statistics)
        self._fds: dict[str, int] | None = dict(zip(MAPS, fds, strict=True))

    def _fd(self, name: str) -> int:
        if self._fds is None:
            raise RuntimeError(f"router of {self.switch} is closed")
        return self._fds[name]

    def configure(self, mode: str, flowlet_gap_emu_ns: int, ifindex: Mapping[str, int],
                  rate_emu_bps: Mapping[str, float], vq: Mapping[str, VqRef],
                  burst_bytes: Mapping[str, int]) -> None:
        """Write the mode, every port slot (by ifname: its ifindex, rate, marker map,
        HTB bucket depth, 0 without a marker) and the destinations (and the group tables)."""
        groups = self.tables.groups
        update_elem(self._fd("cfg"), ctypes.c_uint32(0),
                _Cfg(MODE_NUMBER[mode], 0, flowlet_gap_emu_ns,
                     0 if groups is None else groups.group, 0 if groups is None else groups.groups,
                     QUEUE_QUANTUM_BYTES * SCALE),
                "cfg")
        for slot, port in enumerate(self.tables.ports):
            rate = rate_emu_bps[port.ifname]
            update_elem(self._fd("ports"), ctypes.c_uint32(slot),
                    _Port(ifindex[port.ifname],
                          vq[port.ifname].slot if port.ifname in vq else NO_VQ_SLOT,
                          max(1, round(rate)), max_idle_ns(rate),
                          burst_bytes.get(port.ifname, 0) * SCALE, _mac(port.mac),
                          _mac(port.peer_mac), 0), "ports")
        if groups is not None:
            for slot in groups.host_slots:
                update_elem(self._fd("host_ifs"), ctypes.c_uint32(ifindex[self.tables.ports[slot].ifname]),
                        ctypes.c_uint32(1), "host_ifs")
        self.set_tables(self.tables)

    def set_tables(self, tables: SwitchTables) -> None:
        """Make ``tables``' destinations (and group next hops) the switch's, as after
        a link went down or up."""
        fd = self._fd("dests")
        groups = tables.groups
        for ip, slots in tables.dests.items():
            hops = groups.dests.get(ip) if groups is not None else None
            dest = _Dest(len(slots), 0, (ctypes.c_uint32 * MAX_NEXT_HOPS)(*slots),
                         0 if hops is None else hops.group, 0 if hops is None else hops.hops,
                         (ctypes.c_uint8 * GROUP_SLOTS)(*(hops.via_hops if hops else ())))
            update_elem(fd, ctypes.c_uint32.from_buffer_copy(socket.inet_aton(ip)), dest, "dests")
        for ip in set(self.tables.dests) - set(tables.dests):
            key = ctypes.c_uint32.from_buffer_copy(socket.inet_aton(ip))
            libbpf().lib.bpf_map_delete_elem(fd, ctypes.byref(key))
        if groups is not None:
            for grp in range(groups.groups):
                slots = groups.to_group.get(grp, ())
                update_elem(self._fd("to_group"), ctypes.c_uint32(grp),
                        _NhSet(len(slots), (ctypes.c_uint32 * MAX_NEXT_HOPS)(*slots)), "to_group")
        self.tables = tables

    def counters(self) -> RouterCounters:
        lb = libbpf()
        vals = (_Stats * lb.ncpus)()
        key = ctypes.c_uint32(0)
        if lb.lib.bpf_map_lookup_elem(self._fd("stats"), ctypes.byref(key), vals) != 0:
            raise OSError(ctypes.get_errno(), "bpf_map_lookup_elem(router stats)")
        per_port = {p.ifname: sum(v.per_port[slot] for v in vals)
                    for slot, p in enumerate(self.tables.ports)}
        return RouterCounters(sum(v.routed for v in vals), sum(v.passed for v in vals),
                              sum(v.flowlets for v in vals), sum(v.valiant for v in vals),
                              sum(v.minimal for v in vals), per_port)

    def close(self) -> None:
        if self._fds is None:
            return
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = None


def load_router(switch: str, tables: SwitchTables, mode: str, flowlet_gap_emu_ns: int,
                ifindex: Mapping[str, int], rate_emu_bps: Mapping[str, float],
                vq: Mapping[str, VqRef], burst_bytes: Mapping[str, int]
                ) -> tuple[SwitchRouter, int]:
    """Load and configure one router for ``switch`` (`SwitchRouter.configure`); returns
    it and its program's fd, which the caller attaches (or runs) and closes.
    CapabilityError when clang, libbpf or the kernel refuses."""
    # The markers' vq map is reused whole: every port of the switch must be in it.
    maps = {program_id(ref.fd) for ref in vq.values()}
    if len(maps) > 1:
        raise ValueError(f"the markers of {switch} are {len(maps)} objects: a router reads "
                         "one switch's marker object (emu.ecn.bpf.load_markers)")
    prog_fd, *fds = load_object(compile_router(), PROGRAM_NAME, MAPS, what="the eBPF router",
                                reuse_maps={"vq": next(iter(vq.values())).fd} if vq else None)
    router = SwitchRouter(switch, tables, fds, program_id(prog_fd))
    try:
        router.configure(mode, flowlet_gap_emu_ns, ifindex, rate_emu_bps, vq, burst_bytes)
    except BaseException:
        router.close()
        os.close(prog_fd)
        raise
    return router, prog_fd


def install_router(switch: str, tables: SwitchTables, rtnl: Rtnl, ifindex: Mapping[str, int],
                   mode: str, flowlet_gap_emu_ns: int, rate_emu_bps: Mapping[str, float],
                   vq: Mapping[str, VqRef], burst_bytes: Mapping[str, int]) -> SwitchRouter:
    """`load_router`, attached to every port's clsact ingress (the filters hold the program)."""
    router, prog_fd = load_router(switch, tables, mode, flowlet_gap_emu_ns, ifindex,
                                  rate_emu_bps, vq, burst_bytes)
    try:
        for port in tables.ports:
            attach_clsact(rtnl, ifindex[port.ifname], prog_fd, FILTER_NAME, ingress=True)
    except BaseException:
        router.close()
        raise
    finally:
        with contextlib.suppress(OSError):
            os.close(prog_fd)
    return router


def install_routers(mode: str, flowlet_gap_emu_ns: int, tables: Mapping[str, SwitchTables],
                    ports: list[Port], rtnls: Mapping[str, Rtnl], marking: str
                    ) -> dict[str, SwitchRouter]:
    """A router in every switch of ``tables`` (its ports among ``ports``, its netlink
    socket in ``rtnls``). Adaptive routing reads the ECN markers' queues, so it needs
    ``marking`` 'bpf'. A one-line CapabilityError when a router cannot be installed
    (the fabric then stops: never a silent ECMP)."""
    if (mode.startswith("adaptive") or mode == "ugal") and marking != "bpf":
        raise CapabilityError(f"routing={mode} reads each port's queue from the eBPF ECN "
                              f"marker, and this fabric marks with {marking!r}: build it with "
                              "marking='bpf' (or 'auto' where bpf works)")
    routers: dict[str, SwitchRouter] = {}
    try:
        for switch, table in tables.items():
            own = [p for p in ports if p.node == switch]
            routers[switch] = install_router(
                switch, table, rtnls[switch], {p.ifname: p.ifindex for p in own}, mode,
                flowlet_gap_emu_ns, {p.ifname: p.rate_emu_bps for p in own},
                {p.ifname: p.marker.vq_ref() for p in own if p.marker is not None},
                {p.ifname: p.marker.burst_bytes for p in own if p.marker is not None})
    except BaseException as e:
        for router in routers.values():
            router.close()
        if isinstance(e, CapabilityError):
            raise CapabilityError(f"routing={mode} needs the eBPF router in every switch: "
                                  f"{str(e).splitlines()[0]}") from None
        raise
    return routers


def probe_router() -> tuple[bool, str]:
    """Whether this machine compiles the router and the kernel's verifier accepts it
    (attaching is the marker's clsact + cls_bpf, probed with it)."""
    try:
        fds = load_object(compile_router(), PROGRAM_NAME, MAPS, what="the eBPF router")
    except CapabilityError as e:
        return False, str(e).splitlines()[0]
    for fd in fds:
        os.close(fd)
    return True, ("the kernel loads it: routing=spray | spray-rr | flowlet | valiant work, "
                  "the adaptive ones and ugal with the bpf marker")
