"""One marker object serves a switch's ports (emu.ecn.bpf.load_markers): each port
keeps its own queue, counters and thresholds in its slot, found by its ifindex, as
if it had an object of its own; a port without a slot passes untouched."""

from __future__ import annotations

import os
import socket
import time

import pytest

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds a network namespace"),
]

RATE_EMU_BPS = 1e6   # a frame drains in 8 ms: a stalled sender still finds a queue
BUFFER_BYTES = 1_000_000


def _ect_frame(ip_id: int) -> bytes:
    """An IPv4 UDP frame of 1000 bytes, ECT(0)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    return bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
                 / IP(src="10.0.0.1", dst="10.0.0.2", id=ip_id, tos=2) / UDP(sport=1, dport=2)
                 / bytes(1000 - 42))


def test_the_ports_of_one_object_keep_their_own_state():
    from core.ecn import Thresholds
    from emu.ecn.bpf import attach_bpf_marker, compile_marker, load_markers
    from emu.netns import in_netns
    from emu.runs import NamespaceSet
    from emu.shaping import port_qdisc_stats, shape_port

    with NamespaceSet("marker slots test") as scratch:
        ipr = scratch.create("sw", {"net.ipv6.conf.all.disable_ipv6": 1,
                                    "net.ipv6.conf.default.disable_ipv6": 1})
        ports = {}
        for name in ("p0", "p1", "p2"):
            ports[name], _ = scratch.veth("sw", name, "sw", "q" + name[1])
            shape_port(ipr, ports[name], RATE_EMU_BPS, BUFFER_BYTES)
        loaded = load_markers(compile_marker(), 2)
        assert loaded[0].prog_id == loaded[1].prog_id and [x.slot for x in loaded] == [0, 1]
        scratch.rtnls["sw"].add_clsact(ports["p2"])
        scratch.rtnls["sw"].add_bpf_filter(ports["p2"], loaded[0].prog_fd, "no slot",
                                           ingress=False, prio=2)
        marks_all = attach_bpf_marker(scratch.path("sw"), "p0", RATE_EMU_BPS, BUFFER_BYTES,
                                      Thresholds.step(1), rtnl=scratch.rtnls["sw"],
                                      ifindex=ports["p0"], loaded=loaded[0])
        marks_none = attach_bpf_marker(scratch.path("sw"), "p1", RATE_EMU_BPS, BUFFER_BYTES,
                                       Thresholds.step(BUFFER_BYTES), rtnl=scratch.rtnls["sw"],
                                       ifindex=ports["p1"], loaded=loaded[1])
        try:
            frames = [_ect_frame(i) for i in range(40)]  # built first: Scapy takes ms each
            sent_p2 = port_qdisc_stats(ipr, ports["p2"])["tx_packets"]
            with in_netns(scratch.path("sw")):
                raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            with raw:
                for name, count in (("p0", 40), ("p1", 30), ("p2", 20)):
                    raw.bind((name, 0))
                    for frame in frames[:count]:
                        raw.send(frame)
            busy, calm = marks_all.read_counters(), marks_none.read_counters()
            assert (busy.packets, busy.ect_packets) == (40, 40)
            assert (calm.packets, calm.ect_packets, calm.ce_marked) == (30, 30, 0)
            # The bucket (500 bytes) sends less than a frame at once: every frame after
            # the first finds a queue of more than 1 byte, but for those after a
            # stall of the sender long enough to drain it.
            assert busy.ce_marked >= 20
            assert marks_all.slot != marks_none.slot
            # p2 runs the same program without a slot: its frames pass, counted by no one.
            deadline = time.monotonic() + 5
            while port_qdisc_stats(ipr, ports["p2"])["tx_packets"] - sent_p2 < 20:
                assert time.monotonic() < deadline, "p2's frames never left"
                time.sleep(0.01)
            assert (marks_all.read_counters().packets, marks_none.read_counters().packets) == (
                40, 30)
        finally:
            marks_all.close()
            marks_none.close()
