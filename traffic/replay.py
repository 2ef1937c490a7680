"""Replay a RoCEv2 pcap into a fabric, open loop, with its original timing dilated by S.

Addresses in the pcap must be host addresses of the fabric (pcaps written by
`emu pcap` use the same plan: host i = 10.0.0.0 + i + 1). Only the Ethernet
addresses are rewritten to each first hop's; the ICRC does not cover them, so
every frame stays valid RoCEv2.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from scapy.utils import mac2str

from emu.fabric import Fabric
from emu.netns import in_netns
from traffic.pcap import PcapError, read_roce_pcap

_IP_SRC, _IP_DST = 26, 30  # offsets in an Ethernet + IPv4 frame


@dataclass(frozen=True)
class ReplayResult:
    frames: int
    duration_s: float        # real seconds spanned by the pcap
    wall_emu_s: float        # how long the replay took here
    late_p99_s: float        # real-unit lateness of sends against the dilated schedule
    per_host_frames: dict[str, int]


def _host_of(fab: Fabric, frame: bytes, offset: int) -> str:
    ip = socket.inet_ntoa(frame[offset:offset + 4])
    try:
        return fab.plan.host_by_ip[ip]
    except KeyError:
        raise PcapError(f"pcap address {ip} is not a host of this fabric "
                        f"({len(fab.hosts)} hosts, {fab.plan.host_ip[fab.hosts[0]]} .. "
                        f"{fab.plan.host_ip[fab.hosts[-1]]}); use a topology with enough hosts"
                        ) from None


def replay_pcap(fab: Fabric, path: str | Path) -> ReplayResult:
    frames = read_roce_pcap(path)
    t0 = frames[0][0]
    schedule: list[tuple[float, socket.socket, bytes]] = []
    socks: dict[tuple[str, str], socket.socket] = {}
    sent: dict[str, int] = {}
    try:
        for t_s, frame in frames:
            src, dst = _host_of(fab, frame, _IP_SRC), _host_of(fab, frame, _IP_DST)
            eg = fab.egress(src, dst)
            if (src, eg.ifname) not in socks:
                with in_netns(fab.netns_path(src)):
                    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                sock.bind((eg.ifname, 0))
                socks[(src, eg.ifname)] = sock
            rewritten = mac2str(eg.dst_mac) + mac2str(eg.src_mac) + frame[12:]
            schedule.append((fab.scale.time_emu_s(t_s - t0), socks[(src, eg.ifname)], rewritten))
            sent[src] = sent.get(src, 0) + 1
        lateness = []
        start = time.monotonic()
        for due_s, sock, frame in schedule:
            now = time.monotonic() - start
            if due_s > now:
                time.sleep(due_s - now)
            lateness.append(max(0.0, time.monotonic() - start - due_s))
            sock.send(frame)  # blocks while the NIC queue is full, as a NIC would
        wall = time.monotonic() - start
    finally:
        for sock in socks.values():
            sock.close()
    lateness.sort()
    return ReplayResult(len(frames), frames[-1][0] - t0, wall,
                        fab.scale.to_real_time_s(lateness[int(0.99 * (len(lateness) - 1))]), sent)
