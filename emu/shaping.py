"""Egress shaping of one port: HTB class at the emulated rate over a byte FIFO.

Every egress direction of every link gets

    root htb 1: (default 1:10) -> class 1:10 rate=ceil=R/S -> leaf 10: bfifo limit=buffer

so the port drains at exactly R/S and holds at most the real per-port buffer in
bytes (bytes are not dilated). The ``red`` ECN back end replaces the leaf with RED.
"""

from __future__ import annotations

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins

# pyroute2 knows pfifo but not bfifo; both take the same struct tc_fifo_qopt.
_tc_plugins.setdefault("bfifo", _tc_plugins["pfifo"])

ROOT_HANDLE = 0x10000      # 1:
CLASS_HANDLE = 0x10010     # 1:10
LEAF_HANDLE = 0x100000     # 10:
MTU_BYTES = 9000


def htb_burst_bytes(rate_emu_bps: float, mtu_bytes: int = MTU_BYTES) -> int:
    """Burst that keeps HTB on rate without letting bursts distort the queue.

    The bucket starts full, so whatever it holds crosses the port faster than line
    rate once; one MTU (the least HTB accepts) keeps that to a single frame at low
    emulated rates, and 1 ms of tokens covers timer slack at high ones.
    """
    return int(max(mtu_bytes + 100, rate_emu_bps / 8 * 1e-3))


def shape_port(ipr: IPRoute, ifindex: int, rate_emu_bps: float, buffer_bytes: int,
               leaf: str = "bfifo", leaf_options: dict | None = None) -> None:
    """Install HTB at ``rate_emu_bps`` with a ``leaf`` qdisc (bfifo of ``buffer_bytes``)."""
    rate_Bps = rate_emu_bps / 8
    burst = htb_burst_bytes(rate_emu_bps)
    ipr.tc("add", "htb", ifindex, ROOT_HANDLE, default=CLASS_HANDLE & 0xFFFF)
    ipr.tc("add-class", "htb", ifindex, CLASS_HANDLE, parent=ROOT_HANDLE,
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
