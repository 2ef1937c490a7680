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

from typing import TYPE_CHECKING

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import TC_H_ROOT
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins

if TYPE_CHECKING:
    from emu.delay import NetemOptions

# pyroute2 knows pfifo but not bfifo; both take the same struct tc_fifo_qopt.
_tc_plugins.setdefault("bfifo", _tc_plugins["pfifo"])

HTB_HANDLE = 0x10000       # 1: (the root without delay)
CLASS_HANDLE = 0x10010     # 1:10
LEAF_HANDLE = 0x100000     # 10: the port's queue, with or without delay
DELAY_HANDLE = 0x20000     # 2: netem, the root with delay
MTU_BYTES = 9000


def htb_burst_bytes(rate_emu_bps: float, mtu_bytes: int = MTU_BYTES) -> int:
    """Burst that keeps HTB on rate without letting bursts distort the queue.

    The bucket starts full, so whatever it holds crosses the port faster than line
    rate once; one MTU (the least HTB accepts) keeps that to a single frame at low
    emulated rates, and 1 ms of tokens covers timer slack at high ones.
    """
    return int(max(mtu_bytes + 100, rate_emu_bps / 8 * 1e-3))


def shape_port(ipr: IPRoute, ifindex: int, rate_emu_bps: float, buffer_bytes: int,
               leaf: str = "bfifo", leaf_options: dict | None = None,
               delay: NetemOptions | None = None) -> None:
    """Install HTB at ``rate_emu_bps`` with a ``leaf`` qdisc (bfifo of ``buffer_bytes``),
    under a netem root carrying ``delay`` when given (see ``emu.delay``)."""
    rate_Bps = rate_emu_bps / 8
    burst = htb_burst_bytes(rate_emu_bps)
    htb_parent = TC_H_ROOT
    if delay is not None:
        ipr.tc("add", "netem", ifindex, DELAY_HANDLE, **delay.tc_kwargs())
        htb_parent = DELAY_HANDLE | 1  # netem's single child slot (any minor is accepted)
    ipr.tc("add", "htb", ifindex, HTB_HANDLE, parent=htb_parent, default=CLASS_HANDLE & 0xFFFF)
    ipr.tc("add-class", "htb", ifindex, CLASS_HANDLE, parent=HTB_HANDLE,
           rate=f"{rate_Bps * 8:.0f}bit", ceil=f"{rate_Bps * 8:.0f}bit",
           burst=burst, cburst=burst, mtu=MTU_BYTES + 100)
    if leaf == "bfifo":
        ipr.tc("add", "bfifo", ifindex, LEAF_HANDLE, parent=CLASS_HANDLE, limit=int(buffer_bytes))
    else:
        ipr.tc("add", leaf, ifindex, LEAF_HANDLE, parent=CLASS_HANDLE, **(leaf_options or {}))


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
