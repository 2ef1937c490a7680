"""Egress shaping of one port: HTB class at the emulated rate over a byte FIFO.

Every egress direction of every link gets

    root htb 1: (default 1:10) -> class 1:10 rate=ceil=R/S -> leaf 10: bfifo limit=buffer

so the port drains at exactly R/S and holds at most the real per-port buffer in
bytes (bytes are not dilated). The ``red`` ECN back end replaces the leaf with RED.
With link delay (``emu.delay``: where the kernel has sch_netem), a netem delay line
goes in front as the root and the tree above hangs under it, unchanged:

    root netem 2: delay=d*S -> htb 1: -> class 1:10 -> leaf 10: bfifo | red

The bpf ECN marker (clsact egress) runs before the root qdisc, so before the delay:
its virtual queue is the HTB bucket drained at R/S as packets arrive, which is the
real queue at leaf 10: shifted by the constant delay d. Marks are thus those the
port's queue gives, and the marker needs no change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import TC_H_ROOT
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins

if TYPE_CHECKING:
    from core.scaling import Scale

# pyroute2 knows pfifo but not bfifo; both take the same struct tc_fifo_qopt.
_tc_plugins.setdefault("bfifo", _tc_plugins["pfifo"])

HTB_HANDLE = 0x10000       # 1: (the root without delay)
CLASS_HANDLE = 0x10010     # 1:10
LEAF_HANDLE = 0x100000     # 10: the port's queue, with or without delay
DELAY_HANDLE = 0x20000     # 2: netem, the root with delay
MTU_BYTES = 9000
#: The shortest Ethernet frame without its FCS (shorter ones are padded on a real wire).
MIN_FRAME_BYTES = 60
#: How late a dequeue may be and still be made up for (see htb_burst_bytes).
HTB_CATCH_UP_S = 1e-3
HTB_CATCH_UP_MAX_S = 4e-3
#: pyroute2's netem plugin takes the delay in whole microseconds (it truncates).
NETEM_RESOLUTION_S = 1e-6


@dataclass(frozen=True)
class NetemOptions:
    """The netem qdisc of one port: emulated delay in whole µs and limit in packets."""

    delay_us: int
    limit: int

    def tc_kwargs(self) -> dict[str, int]:
        """Keyword arguments of ``ipr.tc('add', 'netem', ...)`` (pyroute2: delay in µs)."""
        return {"delay": self.delay_us, "limit": self.limit}

    def real_delay_s(self, scale: Scale) -> float:
        """The real one-way delay this delay line emulates (after rounding)."""
        return scale.to_real_time_s(self.delay_us * NETEM_RESOLUTION_S)


def htb_burst_bytes(rate_emu_bps: float, mtu_bytes: int = MTU_BYTES) -> int:
    """HTB's bucket depth: enough tokens to make up for late dequeues, no more.

    HTB sends while its tokens are >= 0, so any depth works one frame at a time; the
    depth is how late a dequeue timer may fire and still be made up for. It is also a
    free burst: an idle port sends its full bucket at once (`emu.wirerate` measures
    it: the bucket plus about one frame beyond R x t), which a real link cannot, and
    which shows as a rate above capacity in short runs. So the depth is a time:
    HTB_CATCH_UP_S (timer slack at high rates), and up to HTB_CATCH_UP_MAX_S at low
    rates while that stays under one MTU. A loaded 2-core machine fires dequeue timers
    late by up to a few ms at low rates, so a shorter catch-up loses rate there; a
    floor of one MTU at any rate would instead give a slow port tens of ms of free
    tokens per busy period (figures: docs/validation.md).
    """
    rate_Bps = rate_emu_bps / 8
    return int(max(rate_Bps * HTB_CATCH_UP_S, min(mtu_bytes + 100, rate_Bps * HTB_CATCH_UP_MAX_S)))


def shape_port(ipr: IPRoute, ifindex: int, rate_emu_bps: float, buffer_bytes: int,
               leaf: str = "bfifo", leaf_options: dict | None = None,
               delay: NetemOptions | None = None, overhead_bytes: int = 0) -> None:
    """Install HTB at ``rate_emu_bps`` with a ``leaf`` qdisc (bfifo of ``buffer_bytes``),
    under a netem root carrying ``delay`` when given (see ``emu.delay``). HTB charges
    each frame its length (no FCS) plus ``overhead_bytes``, at least a minimum-size
    frame's (60 + overhead) when an overhead is given."""
    htb_parent = TC_H_ROOT
    if delay is not None:
        ipr.tc("add", "netem", ifindex, DELAY_HANDLE, **delay.tc_kwargs())
        htb_parent = DELAY_HANDLE | 1  # netem's single child slot (any minor is accepted)
    ipr.tc("add", "htb", ifindex, HTB_HANDLE, parent=htb_parent, default=CLASS_HANDLE & 0xFFFF)
    ipr.tc("add-class", "htb", ifindex, CLASS_HANDLE, **_class_options(rate_emu_bps, overhead_bytes))
    if leaf == "bfifo":
        ipr.tc("add", "bfifo", ifindex, LEAF_HANDLE, parent=CLASS_HANDLE, limit=int(buffer_bytes))
    else:
        ipr.tc("add", leaf, ifindex, LEAF_HANDLE, parent=CLASS_HANDLE, **(leaf_options or {}))


def _class_options(rate_emu_bps: float, overhead_bytes: int) -> dict:
    """The HTB class 1:10 of a port at ``rate_emu_bps``: rate = ceil, its burst."""
    burst = htb_burst_bytes(rate_emu_bps)
    return {"parent": HTB_HANDLE, "rate": f"{rate_emu_bps:.0f}bit", "ceil": f"{rate_emu_bps:.0f}bit",
            "burst": burst, "cburst": burst, "mtu": MTU_BYTES + 100, "overhead": overhead_bytes,
            "mpu": MIN_FRAME_BYTES + overhead_bytes if overhead_bytes else 0}


def port_lines(ifname: str, rate_emu_bps: float, buffer_bytes: int,
               overhead_bytes: int = 0) -> list[str]:
    """The ``tc -batch`` lines of ``shape_port``'s tree with a bfifo leaf and no delay
    line: the same qdiscs and class as its netlink calls, field for field in the
    kernel (``tc -d``; tests/integration/test_shaping_lines.py). A fabric shapes most
    of its ports so: one tc process per namespace applies them at C speed (0.07-0.09
    ms a port, against 2.8-3.0 ms through pyroute2 on this project's VM: 2 s of a
    fattree,8's build)."""
    return [f"qdisc add dev {ifname} root handle {_tc_handle(HTB_HANDLE)} htb "
            f"default {CLASS_HANDLE & 0xFFFF:x}",
            _class_line("add", ifname, rate_emu_bps, overhead_bytes),
            f"qdisc add dev {ifname} parent {_tc_handle(CLASS_HANDLE)} "
            f"handle {_tc_handle(LEAF_HANDLE)} bfifo limit {int(buffer_bytes)}"]


def rate_change(ifname: str, rate_emu_bps: float, overhead_bytes: int = 0) -> str:
    """The ``tc -batch`` line that changes a shaped port's rate in place (its queue and
    what it holds stay): a link degraded to a fraction of its rate, or restored. A
    line for tc, not a netlink call: a fault injector changes rates from its own
    thread, and pyroute2's sockets belong to the thread that made them."""
    return _class_line("change", ifname, rate_emu_bps, overhead_bytes)


def _class_line(verb: str, ifname: str, rate_emu_bps: float, overhead_bytes: int) -> str:
    """``tc class VERB`` of a port's HTB class 1:10 (``_class_options``)."""
    o = _class_options(rate_emu_bps, overhead_bytes)
    return (f"class {verb} dev {ifname} parent {_tc_handle(HTB_HANDLE)} "
            f"classid {_tc_handle(CLASS_HANDLE)} htb rate {o['rate']} "
            f"ceil {o['ceil']} burst {o['burst']} cburst {o['cburst']} mtu {o['mtu']} "
            f"overhead {o['overhead']} mpu {o['mpu']}")


def _tc_handle(handle: int) -> str:
    """tc's spelling of a handle: major:minor in hex, the minor left out when 0."""
    major, minor = handle >> 16, handle & 0xFFFF
    return f"{major:x}:{minor:x}" if minor else f"{major:x}:"


def port_qdisc_stats(ipr: IPRoute, ifindex: int) -> dict[str, int]:
    """Counters of the port's leaf qdisc: bytes/packets sent, drops, backlog."""
    for msg in ipr.get_qdiscs(index=ifindex):
        if msg["handle"] != LEAF_HANDLE:
            continue
        basic = msg.get_nested("TCA_STATS2", "TCA_STATS_BASIC") or {}
        queue = msg.get_nested("TCA_STATS2", "TCA_STATS_QUEUE") or {}
        return {
            "tx_bytes": int(basic.get("bytes", 0)),
            "tx_packets": int(basic.get("packets", 0)),
            "drops": int(queue.get("drops", 0)),
            "backlog_bytes": int(queue.get("backlog", 0)),
            "backlog_packets": int(queue.get("qlen", 0)),
        }
    raise LookupError(f"no shaped leaf qdisc on ifindex {ifindex}")
