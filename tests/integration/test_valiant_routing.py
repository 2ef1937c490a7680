"""routing=valiant and ugal on a live dragonfly (p=1, a=2, h=1: three groups of two
routers, one host each): where a flow's frames go, and what the hosts receive.

One UDP socket is one flow; its frames go to UDP 4791 with UDP checksum 0
(SO_NO_CHECK) and a zero BTH, as a RoCEv2 NIC sends them, so the switches' router
(emu/bpf/router.c) may tag them. h1 (g0r0) sends to h3 (g1r0), its adversarial
partner; with three groups the only intermediate group is 2.
"""

from __future__ import annotations

import select
import socket
import time

import pytest

from core.frame import OFF_BTH
from topologies.valiant import TAG_MASK, TAG_OFFSET

pytestmark = pytest.mark.root
SPEC = "dragonfly,p=1,a=2,h=1"
SO_NO_CHECK = 11  # <asm-generic/socket.h>: send UDP checksum 0
SO_RCVBUFFORCE = 33
ETH_P_ALL = 0x0003


def _fabric(routing: str):
    from core.scaling import Scale
    from emu.fabric import Fabric
    from topologies.spec import build_topo

    return Fabric(build_topo(SPEC), Scale(4000), marking="auto", in_order=True, routing=routing)


def _socket(fab, node: str, *args: int) -> socket.socket:
    from emu.netns import in_netns

    with in_netns(fab.netns_path(node)):
        return socket.socket(*args)


def _send(fab, src: str, dst: str, frames: int, gap_s: float = 0.0) -> list[bytes]:
    """``frames`` RoCE-like frames of one flow, ``gap_s`` apart (0: as fast as the loop
    goes, which queues them); the frames ``dst`` received."""
    tap = _socket(fab, dst, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock = _socket(fab, src, socket.AF_INET, socket.SOCK_DGRAM)
    with tap, sock:
        tap.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)  # every frame kept
        sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
        sock.bind((fab.plan.host_ip[src], 30000))
        for _ in range(frames):
            sock.sendto(bytes(200), (fab.plan.host_ip[dst], 4791))
            if gap_s:
                time.sleep(gap_s)
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < frames and time.monotonic() < deadline:
            if select.select([tap], [], [], 0.2)[0]:
                frame = tap.recv(4096)
                if len(frame) > TAG_OFFSET and frame[OFF_BTH - 6:OFF_BTH - 4] == b"\x12\xb7":
                    got.append(frame)  # UDP destination port 4791
        return got


def _through(fab, group: int) -> int:
    return sum(r.counters().routed for s, r in fab.routers.items()
               if s.startswith(f"g{group}r"))


def test_valiant_sends_every_frame_through_the_intermediate_group_and_delivers_it():
    with _fabric("valiant") as fab:
        assert fab.summary()["routing"] == "valiant"
        got = _send(fab, "h1", "h3", 200)
        # every frame arrived, untagged, after crossing group 2
        assert len(got) == 200, {s: r.counters() for s, r in fab.routers.items()}
        assert all(f[TAG_OFFSET] & TAG_MASK == 0 for f in got)
        assert fab.routers["g0r0"].counters().valiant == 200
        assert _through(fab, 2) >= 200
        assert fab.routers["g1r0"].counters().per_port["g1r0-eth1"] == 200  # h3's port
        # The intermediate group's direct link goes down: through group 2 is now via
        # group 1, the destination's, where the tag is dropped; nothing is lost.
        (link,) = [(a, b) for a, b in fab.topo.links()
                   if {a[:2], b[:2]} == {"g0", "g2"}]
        fab.set_link_up(*link, False)
        before = _through(fab, 2)
        got = _send(fab, "h1", "h3", 50)
        assert len(got) == 50 and all(f[TAG_OFFSET] & TAG_MASK == 0 for f in got)
        assert _through(fab, 2) == before


def test_ugal_stays_minimal_on_idle_queues():
    """Frames far apart (1 ms, 50 frame times of the host's emulated 100 Mb/s): no port
    ever holds a frame for the next, so UGAL never leaves the minimal path. Sent back
    to back, they do queue, and UGAL rightly diverts some."""
    with _fabric("ugal") as fab:
        got = _send(fab, "h1", "h3", 100, gap_s=1e-3)
        assert len(got) == 100 and all(f[TAG_OFFSET] & TAG_MASK == 0 for f in got)
        counters = fab.routers["g0r0"].counters()
        assert counters.valiant == 0 and counters.minimal == 100
        assert _through(fab, 2) == 0
