"""Pcap files of RoCEv2 traffic: write, read back, and synthesize from a workload.

Files are classic pcap (Ethernet link type, nanosecond timestamps), which
Wireshark/tshark decode as RoCEv2 (UDP 4791) without configuration.  pcapng is
not read: convert it with ``editcap -F pcap in.pcapng out.pcap``.
"""

from __future__ import annotations

import heapq
import ipaddress
import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from emu.errors import FabricEmuError, ParameterError
from traffic import collectives
from traffic.messages import Workload
from traffic.roce import AETH_ACK, Flow, QpTemplate, ResponderTemplate, parse_frame

LINKTYPE_ETHERNET = 1
_MAGIC_NS = 0xA1B23C4D
_MAGIC_US = 0xA1B2C3D4
_PCAPNG_MAGIC = 0x0A0D0D0A
_GLOBAL = struct.Struct("IHHiIII")  # magic, version 2.4, tz, sigfigs, snaplen, linktype
_RECORD = struct.Struct("IIII")     # seconds, fraction, captured length, original length
_SNAPLEN = 65535
ETH_OVERHEAD_BYTES = 24  # preamble 8 + FCS 4 + inter-frame gap 12: time on the wire
QPN_BASE = 0x100


class PcapError(FabricEmuError):
    """A pcap file is missing, malformed, or holds no RoCEv2 traffic."""


def write_pcap(path: str | Path, frames_with_times: Iterable[tuple[float, bytes]]) -> int:
    """Write ``(t_s, frame)`` pairs as an Ethernet pcap with ns timestamps; returns the count."""
    count = 0
    try:
        with open(path, "wb") as f:
            f.write(_GLOBAL.pack(_MAGIC_NS, 2, 4, 0, 0, _SNAPLEN, LINKTYPE_ETHERNET))
            for t_s, frame in frames_with_times:
                t_ns = round(t_s * 1e9)
                f.write(_RECORD.pack(t_ns // 10**9, t_ns % 10**9, len(frame), len(frame)))
                f.write(frame)
                count += 1
    except OSError as e:
        raise PcapError(f"cannot write pcap {path}: {e.strerror or e}") from e
    return count


def _read_pcap(path: Path) -> list[tuple[float, bytes]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise PcapError(f"pcap file {path} does not exist") from None
    except OSError as e:
        raise PcapError(f"cannot read pcap {path}: {e.strerror or e}") from e
    if len(data) < _GLOBAL.size:
        raise PcapError(f"{path} is truncated: {len(data)} bytes, shorter than a pcap header")
    for order in "<>":
        magic = struct.unpack_from(order + "I", data)[0]
        if magic in (_MAGIC_NS, _MAGIC_US):
            break
    else:
        if struct.unpack_from("<I", data)[0] == _PCAPNG_MAGIC:
            raise PcapError(f"{path} is pcapng; convert it with 'editcap -F pcap {path} out.pcap'")
        raise PcapError(f"{path} is not a pcap file (magic {data[:4].hex()})")
    glob = struct.Struct(order + _GLOBAL.format)
    rec = struct.Struct(order + _RECORD.format)
    linktype = glob.unpack_from(data)[6] & 0xFFFF
    if linktype != LINKTYPE_ETHERNET:
        raise PcapError(f"{path} has link type {linktype}; only Ethernet (1) carries RoCEv2 here")
    scale = 1e-9 if magic == _MAGIC_NS else 1e-6
    frames = []
    off = _GLOBAL.size
    while off < len(data):
        if off + rec.size > len(data):
            raise PcapError(f"{path} is truncated: record {len(frames) + 1} header at byte "
                            f"{off} has {len(data) - off} of {rec.size} bytes")
        sec, frac, caplen, _ = rec.unpack_from(data, off)
        off += rec.size
        if caplen > _SNAPLEN or off + caplen > len(data):
            raise PcapError(f"{path} is truncated or malformed: record {len(frames) + 1} at byte "
                            f"{off - rec.size} claims {caplen} bytes, {len(data) - off} remain")
        frames.append((sec + frac * scale, data[off:off + caplen]))
        off += caplen
    return frames


def _describe(frame: bytes) -> str:
    """A short protocol name for a non-RoCEv2 frame (for error messages)."""
    if len(frame) < 14:
        return "runt"
    ethertype = struct.unpack_from(">H", frame, 12)[0]
    if ethertype != 0x0800:
        return {0x0806: "ARP", 0x86DD: "IPv6", 0x8915: "RoCEv1"}.get(ethertype,
                                                                      f"ethertype 0x{ethertype:04x}")
    if len(frame) < 34:
        return "truncated IPv4"
    proto = frame[23]
    if proto == 17 and len(frame) >= 14 + (frame[14] & 0x0F) * 4 + 4:
        dport = struct.unpack_from(">H", frame, 14 + (frame[14] & 0x0F) * 4 + 2)[0]
        return f"UDP port {dport}"
    return {1: "ICMP", 6: "TCP"}.get(proto, f"IP protocol {proto}")


def read_roce_pcap(path: str | Path) -> list[tuple[float, bytes]]:
    """The RoCEv2 frames of a pcap as ``(t_s, frame)``; other frames are skipped.

    Raises PcapError for a missing, truncated or malformed file, or one with no
    RoCEv2 frame at all (naming what it holds instead).
    """
    path = Path(path)
    frames = _read_pcap(path)
    roce = [(t, f) for t, f in frames if parse_frame(f) is not None]
    if not roce:
        if not frames:
            raise PcapError(f"{path} holds no frames")
        found = Counter(_describe(f) for _, f in frames)
        summary = ", ".join(f"{count} {what}" for what, count in found.most_common(5))
        raise PcapError(f"{path} holds no RoCEv2 (UDP port 4791) frames; found "
                        f"{len(frames)} frames: {summary}")
    return roce


def host_addresses(hosts: list[str]) -> dict[str, tuple[str, str]]:
    """Fabric-less addresses: host i -> (MAC 02:00:00:00:xx:xx, IP 10.0.0.0 + i + 1)."""
    out = {}
    for i, host in enumerate(hosts, start=1):
        out[host] = (f"02:00:00:00:{i >> 8 & 0xFF:02x}:{i & 0xFF:02x}",
                     str(ipaddress.IPv4Address(0x0A000000 + i)))
    return out


def workload_to_frames(workload: Workload, *, rate_bps: float, mtu_payload_bytes: int = 4096,
                       ecn: str = "ect0") -> list[tuple[float, bytes]]:
    """The RoCEv2 frames a fabric would carry for ``workload``, with real-time stamps.

    Schedule (fabric-less, zero propagation delay): a message is ready when its
    ``start_s`` has passed and its deps have been fully received; each host NIC
    sends one message at a time at ``rate_bps`` (frame + 24 bytes of Ethernet
    overhead per packet), ready messages first come first served.  Each message is
    one QP (QPN 0x100 + msg_id on both hosts, its own UDP source port) starting at
    PSN 0; the receiver ACKs the last packet when it has fully arrived.  Receiver
    and fabric contention are not modelled.
    """
    if not rate_bps > 0:
        raise ParameterError("rate_bps", rate_bps, "must be positive")
    addr = host_addresses(list(dict.fromkeys(
        [*workload.ranks, *(h for m in workload.messages for h in (m.src, m.dst))])))
    by_id = {m.msg_id: m for m in workload.messages}
    dependents: dict[int, list[int]] = {m.msg_id: [] for m in workload.messages}
    missing = {m.msg_id: len(m.deps) for m in workload.messages}
    for m in workload.messages:
        for d in m.deps:
            dependents[d].append(m.msg_id)
    ready = [(m.start_s, m.msg_id) for m in workload.messages if not m.deps]
    heapq.heapify(ready)
    done_s: dict[int, float] = {}
    nic_free_s: dict[str, float] = {}
    frames: list[tuple[float, bytes]] = []
    while ready:
        ready_s, msg_id = heapq.heappop(ready)
        m = by_id[msg_id]
        qpn = QPN_BASE + msg_id % ((1 << 24) - QPN_BASE)
        (src_mac, src_ip), (dst_mac, dst_ip) = addr[m.src], addr[m.dst]
        flow = Flow(src_mac, dst_mac, src_ip, dst_ip, 49152 + msg_id * 7919 % 16384, qpn, ecn)
        tpl = QpTemplate(flow, m.size_bytes, mtu_payload_bytes=mtu_payload_bytes)
        t_s = max(ready_s, nic_free_s.get(m.src, 0.0))
        for i in range(tpl.n_packets):
            frame = bytes(tpl.write(i, i, round(t_s * 1e9)))
            frames.append((t_s, frame))
            t_s += (len(frame) + ETH_OVERHEAD_BYTES) * 8 / rate_bps
        nic_free_s[m.src] = done_s[msg_id] = t_s
        ack = ResponderTemplate(flow.reversed(qpn)).write_ack(tpl.n_packets - 1, 1, AETH_ACK)
        frames.append((t_s, bytes(ack)))
        for nxt in dependents[msg_id]:
            missing[nxt] -= 1
            if not missing[nxt]:
                n = by_id[nxt]
                heapq.heappush(ready, (max([n.start_s, *(done_s[d] for d in n.deps)]), nxt))
    frames.sort(key=lambda tf: tf[0])  # stable: a message's packets keep their order
    return frames


@dataclass(frozen=True)
class PcapSummary:
    path: Path
    n_frames: int
    n_messages: int
    duration_s: float


def collective_pcap(collective_name: str, ranks: int, size_bytes: int, path: str | Path, *,
                    rate_bps: float = 400e9, mtu_payload_bytes: int = 4096,
                    **opts: object) -> PcapSummary:
    """Write the pcap of one collective over hosts h1..h<ranks>; ``opts`` go to
    ``collectives.build`` (chunk_bytes, root, seed, gpus_per_server...)."""
    hosts = [f"h{i}" for i in range(1, ranks + 1)]
    workload = collectives.build(collective_name, hosts, size_bytes, **opts)
    frames = workload_to_frames(workload, rate_bps=rate_bps, mtu_payload_bytes=mtu_payload_bytes)
    n = write_pcap(path, frames)
    return PcapSummary(Path(path), n, len(workload.messages), frames[-1][0] if frames else 0.0)
