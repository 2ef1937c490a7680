"""Packet capture at hosts' NICs during a run, for pcap files (``measure(capture=...)``,
the experiments' ``capture`` option).

Each captured host gets a TPACKET_V2 ring in its namespace, on all its NICs, with a
classic BPF filter that keeps whole RoCEv2 frames (UDP port 4791) in both directions.
The kernel copies each frame into the ring as it passes (a frame leaving the host
when its NIC's shaper releases it, one arriving when it reaches the NIC); nothing
reads the ring during the run, so a capture costs the workers no wake-up, only the
kernel's copy. A full ring keeps what it has and counts the rest
(``Captured.ring_drops``).

Times are the kernel's stamps, converted to real-fabric seconds since the engine's
t0 (the time base of messages.csv): a pcap reads as the real fabric would have
timed it. Frames before t0 are not the run's and are left out.
"""

from __future__ import annotations

import mmap
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import CapabilityError
from core.frame import MTU_PAYLOAD_BYTES
from core.messages import Workload
from core.scaling import Scale
from emu.netns import in_netns
from engine.rawsock import (
    TP_STATUS_USER,
    TPACKET2_HDR,
    RingSpec,
    map_ring,
    open_rx_ring,
    ring_drops,
    slot_offsets,
)
from engine.run import LiveFabric, first_frame_bytes
from traffic.pcap import write_pcap

#: The most frames a host's ring keeps (~210 MiB of kernel memory at 4 KiB frames),
#: and the most kernel memory all rings of a run take together: what passes after a
#: full ring is counted, not kept.
MAX_CAPTURE_FRAMES = 50_000
MAX_CAPTURE_BYTES = 1 << 30
#: Room for retransmissions and CNPs beyond a data frame and an ACK per frame.
_SLACK = 1.25


@dataclass
class Captured:
    """One host's capture: ``(t_real_s, frame, frame length)`` in passing order."""

    host: str
    frames: list[tuple[float, bytes, int]] = field(default_factory=list)
    ring_drops: int = 0     # frames the full ring could not keep
    before_t0: int = 0      # frames left out: they passed before the run started

    def write(self, path: Path) -> int:
        """The capture as an Ethernet pcap (ns stamps); the count written."""
        return write_pcap(path, self.frames)


class HostCapture:
    """Capture rings on ``hosts`` of a live fabric, each sized for the frames
    ``workload`` sends to and from its host (a data frame and an ACK per frame, with
    slack; at most MAX_CAPTURE_FRAMES, and MAX_CAPTURE_BYTES for all) and whole frames
    of ``payload_bytes``: opened on entry, read by ``result()`` after the run, closed
    on exit."""

    def __init__(self, fab: LiveFabric, hosts: Sequence[str], workload: Workload,
                 payload_bytes: int = MTU_PAYLOAD_BYTES):
        self.fab = fab
        snap = first_frame_bytes(payload_bytes, payload_bytes)  # the longest frame
        block = RingSpec.for_headers(snap_bytes=snap)
        hosts = list(dict.fromkeys(hosts))
        most = min(MAX_CAPTURE_FRAMES, MAX_CAPTURE_BYTES // max(1, len(hosts))
                   // block.block_size * block.frames_per_block)
        self.rings = {}
        for h in hosts:
            packets = sum(-(-m.size_bytes // payload_bytes) for m in workload.messages
                          if h in (m.src, m.dst) and m.src != m.dst)
            frames = min(most, int(2 * packets * _SLACK) + 64)
            blocks = -(-frames // block.frames_per_block)
            self.rings[h] = RingSpec.for_headers(blocks * block.block_size, snap)
        self._socks: dict[str, tuple[socket.socket, mmap.mmap, RingSpec]] = {}

    def __enter__(self) -> HostCapture:
        try:
            for h, ring in self.rings.items():
                self._socks[h] = self._open(h, ring)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, host: str, ring: RingSpec) -> tuple[socket.socket, mmap.mmap, RingSpec]:
        try:
            with in_netns(self.fab.endpoint(host).netns_path):
                sock = open_rx_ring(ring, outgoing=True)
        except OSError as e:
            raise CapabilityError(f"cannot capture at {host}: a {ring.size_bytes >> 20} MiB "
                                  f"packet ring: {e.strerror or e}") from None
        try:
            return sock, map_ring(sock, ring), ring
        except BaseException:
            sock.close()
            raise

    def result(self, t0_realtime_ns: int, scale: Scale) -> dict[str, Captured]:
        """Read every ring (the kernel fills its slots in order and, unread, stops at
        the last), convert the stamps (CLOCK_REALTIME ns) to real-fabric seconds since
        ``t0_realtime_ns``, and close them."""
        out = {}
        try:
            for host, (sock, ring, spec) in self._socks.items():
                cap = Captured(host, ring_drops=ring_drops(sock))
                for off in slot_offsets(spec):
                    status, length, snap, mac, _, sec, nsec = TPACKET2_HDR.unpack_from(ring, off)
                    if not status & TP_STATUS_USER:
                        break
                    t_ns = sec * 1_000_000_000 + nsec - t0_realtime_ns
                    if t_ns < 0:
                        cap.before_t0 += 1
                        continue
                    cap.frames.append((scale.to_real_time_s(t_ns / 1e9),
                                       bytes(ring[off + mac:off + mac + snap]), length))
                out[host] = cap
        finally:
            self.close()
        return out

    def close(self) -> None:
        for sock, ring, _ in self._socks.values():
            ring.close()
            sock.close()
        self._socks.clear()
