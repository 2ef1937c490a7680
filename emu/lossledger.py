"""Frames a live fabric lost outside its queues while links went down, counted exactly.

Two places lose frames when a link dies, and the kernel counts only one of them:

* a switch with no route left for a frame drops it (IP no-route, /proc/net/snmp and
  netstat, per switch namespace);
* a port of the dead link loses what its queue held (the kernel flushes the queue
  with the link and counts nothing) and what is sent into it while it is down. These
  are counted by conservation: every frame offered to the port's egress (an eBPF
  counter on its clsact egress, before the qdisc: emu/bpf/port_count.c; a port with
  the BPF ECN marker counts them in the marker already) either left through the
  interface, was dropped by its queue (qdisc or marker) or still waits in it; the rest
  vanished at the port. Exact between two moments when nothing crosses the port's
  egress (before and after a run), whatever the timing of the failure.

`LossLedger` takes its starting point when made; `lost` reads what was lost since.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emu.bpfload import attach_counted, detach_clsact, read_u64
from emu.ports import Port
from emu.telemetry import port_stats

FILTER_NAME = "fabricemu_count"
#: The kernel's no-route drop counters: (section prefix, counter) of /proc/net/snmp
#: (forwarded frames with no route out) and /proc/net/netstat (received, none in).
_NOROUTE = (("Ip:", "OutNoRoutes"), ("IpExt:", "InNoRoutes"))


def counter_source() -> Path:
    return Path(__file__).resolve().parent / "bpf" / "port_count.c"


@dataclass(frozen=True)
class Lost:
    """Frames lost since a ledger's start: for want of a route, vanished at ports, and
    taken by loss filters (`emu.linkloss`, which count their own)."""

    no_route: int
    at_ports: int
    filtered: int = 0

    @property
    def total(self) -> int:
        return self.no_route + self.at_ports + self.filtered


class LossLedger:
    """What ``fab`` loses outside its queues from now on: no-route drops at every
    switch, and what vanishes at ``ports`` (both ends of every link that may go down).
    `clear` removes the counters it attached."""

    def __init__(self, fab: Any, ports: Iterable[Port]) -> None:
        self.fab = fab
        self.ports = list({p.name: p for p in ports}.values())
        self._maps: dict[str, int] = {}  # port name -> its counter's map (ports without a marker)
        try:
            for p in self.ports:
                if p.marker is None:
                    self._maps[p.name] = self._attach(p)
            self._start = (self._no_route(), self._unaccounted())
        except BaseException:
            self.clear()
            raise

    def lost(self) -> Lost:
        """Frames lost since the ledger was made (read it when the traffic has ended)."""
        no_route, ports = self._start
        now = self._unaccounted()
        return Lost(self._no_route() - no_route, sum(now[n] - ports[n] for n in now))

    def clear(self) -> None:
        """Remove every counter this ledger attached."""
        by_name = {p.name: p for p in self.ports}
        for name, fd in self._maps.items():
            p = by_name[name]
            with contextlib.suppress(Exception):
                detach_clsact(self.fab.rtnl(p.node), p.ifindex, ingress=False)
            os.close(fd)
        self._maps.clear()

    # ------------------------------------------------------------------ reading
    def _no_route(self) -> int:
        total = 0
        for node in self.fab.switches:
            text = self.fab.run(node, ["cat", "/proc/net/snmp", "/proc/net/netstat"]).stdout
            total += sum(snmp_counters(text, prefix).get(name, 0) for prefix, name in _NOROUTE)
        return total

    def _unaccounted(self) -> dict[str, int]:
        """Per port: frames offered to it minus those it sent, dropped and holds."""
        if not self.ports:
            return {}
        stats = port_stats(self.ports).set_index("port")
        out = {}
        for p in self.ports:
            row = stats.loc[p.name]
            offered = (read_u64(self._maps[p.name], 0, "offered") if p.name in self._maps
                       else int(row.marker_packets))
            out[p.name] = offered - int(row.tx_packets) - int(row.drops) - int(row.backlog_packets)
        return out

    def _attach(self, port: Port) -> int:
        return attach_counted(self.fab.rtnl(port.node), port.ifindex, counter_source(),
                              "port_count", "offered", FILTER_NAME, ingress=False,
                              what="the port counter")


def snmp_counters(text: str, prefix: str) -> dict[str, int]:
    """The ``prefix`` section of /proc/net/snmp or netstat: a header line, a value line."""
    lines = [line.split()[1:] for line in text.splitlines() if line.startswith(prefix)]
    if len(lines) != 2:
        return {}
    return {k: int(v) for k, v in zip(lines[0], lines[1], strict=True) if v.lstrip("-").isdigit()}
