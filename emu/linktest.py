"""Measure what one shaped port of a fabric really carries: a bulk raw-frame flow on a link.

Frames are sent from inside the port's own namespace straight to the peer's MAC with a
local-experimental EtherType (0x88B5), which the peer's kernel ignores. The rate is
read from the peer interface's own receive byte counter, on the far side of the
shaper and independent of the qdisc's counters, bracketed by clock reads as in
``emu.wirerate``; no user-space receiver has to keep up.
"""

from __future__ import annotations

import threading
import time

from scapy.utils import mac2str

from core.frame import MTU_PAYLOAD_BYTES, WIRE_OVERHEAD_BYTES
from emu.fabric import Fabric
from emu.wirerate import read_rx_bytes, start_sender

ETHERTYPE_TEST = 0x88B5
#: The test frame: Ethernet header and a full RoCE MTU of payload.
TEST_FRAME_BYTES = 14 + MTU_PAYLOAD_BYTES
#: Bytes the sender may have in flight (8 MiB: 170 ms of a 400 Mb/s port), so a stall
#: of the sending thread shorter than that leaves the port busy.
_SNDBUF_BYTES = 1 << 23


def measure_port_rate(fab: Fabric, node: str, peer: str, duration_s: float = 2.0,
                      warmup_s: float = 0.3) -> float:
    """Achieved emulated rate (bit/s, Ethernet frame bytes, no FCS) of port ``node`` -> ``peer``.

    A port's shaper charges each frame its wire overhead too, so a backlogged port
    shows `expected_rate_bps` of it."""
    tx_if, rx_if = fab.plan.iface(node, peer), fab.plan.iface(peer, node)
    frame = (mac2str(rx_if.mac) + mac2str(tx_if.mac)
             + ETHERTYPE_TEST.to_bytes(2, "big") + bytes(TEST_FRAME_BYTES - 14))
    # Capped at the port's buffer so the queue seldom overflows; a frame it refuses
    # anyway (a host port's small buffer) is retried by start_sender.
    sndbuf = min(_SNDBUF_BYTES, fab.port(node, peer).buffer_bytes)
    stop = threading.Event()
    thread = start_sender(fab.netns_path(node), tx_if.ifname, frame, stop, sndbuf_bytes=sndbuf)
    try:
        time.sleep(warmup_s)  # past the idle port's burst: the queue is full
        ipr, ifindex = fab.ipr(peer), fab.port(peer, node).ifindex
        s0, b0, e0 = read_rx_bytes(ipr, ifindex)
        time.sleep(duration_s)
        s1, b1, e1 = read_rx_bytes(ipr, ifindex)
    finally:
        stop.set()
        thread.join(timeout=5)
    return 8 * (b1 - b0) * 2e9 / ((s1 + e1) - (s0 + e0))


def expected_rate_bps(rate_emu_bps: float) -> float:
    """What `measure_port_rate` reads on a port shaped to ``rate_emu_bps``: the test
    frames' share of the wire, L / (L + overhead)."""
    return rate_emu_bps * TEST_FRAME_BYTES / (TEST_FRAME_BYTES + WIRE_OVERHEAD_BYTES)
