"""Measure what one shaped port really carries: a bulk raw-frame flow on a link.

Frames are sent from inside the port's own namespace straight to the peer's MAC
with a local-experimental EtherType (0x88B5), which the peer's kernel ignores; the
peer's AF_PACKET socket timestamps arrivals, so the rate is measured on the far
side of the shaper, independently of the qdisc's own counters.
"""

from __future__ import annotations

import socket
import time

from scapy.utils import mac2str

from core.frame import MTU_PAYLOAD_BYTES
from emu.fabric import Fabric
from emu.netns import in_netns

ETHERTYPE_TEST = 0x88B5


def measure_port_rate(fab: Fabric, node: str, peer: str, duration_s: float = 2.0,
                      warmup_s: float = 0.3) -> float:
    """Achieved emulated rate (bit/s, Ethernet frame bytes) of port ``node`` -> ``peer``."""
    tx_if, rx_if = fab.plan.iface(node, peer), fab.plan.iface(peer, node)
    with in_netns(fab.netns_path(node)):
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    with in_netns(fab.netns_path(peer)):
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE_TEST))
    try:
        tx.bind((tx_if.ifname, 0))
        rx.bind((rx_if.ifname, 0))
        tx.setblocking(False)
        rx.setblocking(False)
        frame = (mac2str(rx_if.mac) + mac2str(tx_if.mac)
                 + ETHERTYPE_TEST.to_bytes(2, "big") + bytes(MTU_PAYLOAD_BYTES))
        start = time.monotonic()
        first_t = last_t = 0.0
        counted_bytes = 0
        while time.monotonic() - start < warmup_s + duration_s:
            try:
                for _ in range(8):  # keep the shaper's queue full; the socket buffer
                    tx.send(frame)  # limits how far ahead we get
            except (BlockingIOError, OSError):
                time.sleep(0.0002)
            while True:
                try:
                    n = len(rx.recv(16384))
                except BlockingIOError:
                    break
                now = time.monotonic()
                if now - start < warmup_s:
                    continue
                if not first_t:
                    first_t = now  # bytes of the first frame arrived before this instant
                else:
                    counted_bytes += n
                last_t = now
        if last_t <= first_t:
            return 0.0
        return counted_bytes * 8 / (last_t - first_t)
    finally:
        tx.close()
        rx.close()
