"""Pcap files of RoCEv2 traffic: write, read back, and synthesize from a workload.

Files are classic pcap (Ethernet link type, nanosecond timestamps), which
Wireshark/tshark decode as RoCEv2 (UDP 4791) without configuration.  pcapng is
not read: convert it with ``editcap -F pcap in.pcapng out.pcap``.

Both directions stream, with stated caps so that no input exhausts memory:
* writing: frames go to disk as they are generated (a temporary file renamed into
  place when complete).  ``collective_pcap`` computes the file's exact size and the
  collective's DAG size from the schedule *before* building anything, and refuses
  more than ``DEFAULT_MAX_PCAP_BYTES`` (1 GiB) or ``DEFAULT_MAX_MESSAGES`` (20,000
  messages; the per-QP Scapy templates cost ~2.5 ms each) unless the caller raises
  them;
* reading: only regular files, at most ``DEFAULT_MAX_PCAP_BYTES``, one record at a
  time (a FIFO, a device or a directory is refused before a byte is read).
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import os
import stat
import struct
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

from core.errors import FabricEmuError, ParameterError
from core.frame import MTU_PAYLOAD_BYTES, ROCE_UDP_PORT, WIRE_OVERHEAD_BYTES
from core.messages import Message, Workload
from core.safefile import WriteError, open_atomic
from core.units import format_size
from traffic import collectives
from traffic.roce import AETH_ACK, Flow, QpTemplate, ResponderTemplate, parse_frame

LINKTYPE_ETHERNET = 1
_MAGIC_NS = 0xA1B23C4D
_MAGIC_US = 0xA1B2C3D4
_PCAPNG_MAGIC = 0x0A0D0D0A
_GLOBAL = struct.Struct("IHHiIII")  # magic, version 2.4, tz, sigfigs, snaplen, linktype
_RECORD = struct.Struct("IIII")     # seconds, fraction, captured length, original length
_SNAPLEN = 65535
QPN_BASE = 0x100
DEFAULT_MAX_PCAP_BYTES = 1 << 30
DEFAULT_MAX_MESSAGES = 20_000
# The DAG builder keeps a rank x unit table of pointers (8 bytes each, against
# ~230 bytes per message), so this many table entries per allowed message.
TABLE_CELLS_PER_MESSAGE = 8
MAX_MESSAGE_BYTES = (1 << 32) - 1  # RETH's DMA length field is 32 bits


class PcapError(FabricEmuError):
    """A pcap file is missing, malformed, too large, or holds no RoCEv2 traffic."""


def _check_output(path: Path) -> None:
    """Refuse an output path that is not (or cannot become) a regular file."""
    if path.exists() and not path.is_file():
        raise PcapError(f"cannot write pcap {path}: it exists and is not a regular file")
    if not path.parent.is_dir():
        raise PcapError(f"cannot write pcap {path}: directory {path.parent} does not exist")


def write_pcap(path: str | Path,
               frames_with_times: Iterable[tuple[float, bytes] | tuple[float, bytes, int]], *,
               max_bytes: int | None = None) -> int:
    """Write ``(t_s, frame)`` pairs as an Ethernet pcap with ns timestamps; returns the count.
    A frame captured cut short comes as ``(t_s, head, original length)``.

    Frames are written as the iterable yields them (core.safefile): a failure, a
    Ctrl-C or more than ``max_bytes`` leaves no partial file behind.
    """
    path = Path(path)
    _check_output(path)
    count = 0
    try:
        with open_atomic(path) as f:
            written = f.write(_GLOBAL.pack(_MAGIC_NS, 2, 4, 0, 0, _SNAPLEN, LINKTYPE_ETHERNET))
            for t_s, frame, *original in frames_with_times:
                written += _RECORD.size + len(frame)
                if max_bytes is not None and written > max_bytes:
                    raise PcapError(f"pcap {path} would exceed {format_size(max_bytes)} "
                                    f"after {count} frames; nothing was written")
                t_ns = round(t_s * 1e9)
                if not 0 <= t_ns < 2**32 * 10**9:
                    raise PcapError(f"cannot write pcap {path}: frame {count + 1} is stamped "
                                    f"{t_s:g} s; a pcap holds times from 0 to 2^32 s")
                f.write(_RECORD.pack(t_ns // 10**9, t_ns % 10**9, len(frame),
                                     original[0] if original else len(frame)))
                f.write(frame)
                count += 1
    except WriteError as e:
        raise PcapError(str(e)) from None
    return count


def _open_regular(path: Path, max_bytes: int) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file of at most ``max_bytes``.

    O_NONBLOCK makes opening a FIFO return at once instead of waiting for a writer;
    the type is then checked on the open descriptor, so no rename can slip past it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise PcapError(f"pcap file {path} does not exist") from None
    except OSError as e:
        raise PcapError(f"cannot read pcap {path}: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else
                    "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a character device" if stat.S_ISCHR(st.st_mode) else
                    "a block device" if stat.S_ISBLK(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise PcapError(f"{path} is {kind}; a pcap must be a regular file")
        if st.st_size > max_bytes:
            raise PcapError(f"{path} is {format_size(st.st_size)}, above the "
                            f"{format_size(max_bytes)} limit for a pcap (raise it with --max-size)")
        os.set_blocking(fd, True)
        return open(fd, "rb", buffering=1 << 20)
    except BaseException:
        os.close(fd)
        raise


def iter_pcap(path: str | Path, *, max_bytes: int = DEFAULT_MAX_PCAP_BYTES
              ) -> Iterator[tuple[float, bytes]]:
    """Every frame of a classic Ethernet pcap as ``(t_s, frame)``, read one record at a time.

    Raises PcapError for anything but a regular file of at most ``max_bytes``, a
    pcapng or foreign file, another link type, and truncated or malformed records.
    """
    path = Path(path)
    with _open_regular(path, max_bytes) as f:
        head = f.read(_GLOBAL.size)
        for order in "<>":
            magic = struct.unpack_from(order + "I", head)[0] if len(head) >= 4 else None
            if magic in (_MAGIC_NS, _MAGIC_US):
                break
        else:
            if len(head) >= 4 and struct.unpack_from("<I", head)[0] == _PCAPNG_MAGIC:
                raise PcapError(f"{path} is pcapng; convert it with "
                                f"'editcap -F pcap {path} out.pcap'")
            if len(head) >= 4:
                raise PcapError(f"{path} is not a pcap file (magic {head[:4].hex()})")
        if len(head) < _GLOBAL.size:
            raise PcapError(f"{path} is truncated: {len(head)} bytes, shorter than a pcap header")
        rec = struct.Struct(order + _RECORD.format)
        linktype = struct.unpack_from(order + _GLOBAL.format, head)[6] & 0xFFFF
        if linktype != LINKTYPE_ETHERNET:
            raise PcapError(f"{path} has link type {linktype}; only Ethernet (1) carries "
                            "RoCEv2 here")
        units_per_s = 10**9 if magic == _MAGIC_NS else 10**6
        off = _GLOBAL.size
        for n in itertools.count(1):
            header = f.read(rec.size)
            if not header:
                return
            if len(header) < rec.size:
                raise PcapError(f"{path} is truncated: record {n} header at byte {off} has "
                                f"{len(header)} of {rec.size} bytes")
            sec, frac, caplen, _ = rec.unpack(header)
            if frac >= units_per_s:
                raise PcapError(f"{path} is malformed: record {n} at byte {off} has a "
                                f"sub-second timestamp of {frac} (at most {units_per_s - 1})")
            if caplen > _SNAPLEN:
                raise PcapError(f"{path} is malformed: record {n} at byte {off} claims "
                                f"{caplen} bytes, above the {_SNAPLEN}-byte snapshot limit")
            frame = f.read(caplen)
            if len(frame) < caplen:
                raise PcapError(f"{path} is truncated: record {n} at byte {off} claims "
                                f"{caplen} bytes, {len(frame)} remain")
            off += rec.size + caplen
            if off > max_bytes:  # the file grew while being read
                raise PcapError(f"{path} grew above the {format_size(max_bytes)} limit "
                                "while being read")
            yield sec + frac / units_per_s, frame


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
        if dport == ROCE_UDP_PORT:  # the RoCEv2 port, yet parse_frame refused it
            return ("malformed RoCEv2 (UDP port 4791 but IP options, a length that "
                    "disagrees with the frame, or shorter than a BTH and ICRC)")
        return f"UDP port {dport}"
    return {1: "ICMP", 6: "TCP"}.get(proto, f"IP protocol {proto}")


def iter_roce_pcap(path: str | Path, *, max_bytes: int = DEFAULT_MAX_PCAP_BYTES
                   ) -> Iterator[tuple[float, bytes]]:
    """The RoCEv2 frames of a pcap as ``(t_s, frame)``, streamed; other frames are skipped.

    Raises PcapError as ``iter_pcap`` does, and, once the file is exhausted, if it
    held no RoCEv2 frame at all (naming what it holds instead).
    """
    others: Counter = Counter()
    n_roce = 0
    for t_s, frame in iter_pcap(path, max_bytes=max_bytes):
        if parse_frame(frame) is None:
            others[_describe(frame)] += 1
        else:
            n_roce += 1
            yield t_s, frame
    if not n_roce:
        if not others:
            raise PcapError(f"{path} holds no frames")
        summary = ", ".join(f"{count} {what}" for what, count in others.most_common(5))
        total = sum(others.values())
        raise PcapError(f"{path} holds no valid RoCEv2 (UDP port {ROCE_UDP_PORT}) frames; "
                        f"its {total} frame{'s' if total != 1 else ''}: {summary}")


def read_roce_pcap(path: str | Path, *, max_bytes: int = DEFAULT_MAX_PCAP_BYTES
                   ) -> list[tuple[float, bytes]]:
    """The RoCEv2 frames of a pcap as a list (see ``iter_roce_pcap``)."""
    return list(iter_roce_pcap(path, max_bytes=max_bytes))


def host_addresses(hosts: list[str]) -> dict[str, tuple[str, str]]:
    """Fabric-less addresses: host i -> (MAC 02:00:00:00:xx:xx, IP 10.0.0.0 + i + 1)."""
    out = {}
    for i, host in enumerate(hosts, start=1):
        out[host] = (f"02:00:00:00:{i >> 8 & 0xFF:02x}:{i & 0xFF:02x}",
                     str(ipaddress.IPv4Address(0x0A000000 + i)))
    return out


_DUMMY_FLOW = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
                   49152, QPN_BASE, "ect0")


@lru_cache(maxsize=256)
def _frame_bytes(message_bytes: int, mtu_payload_bytes: int) -> tuple[tuple[int, ...], int]:
    """Frame lengths of one message's packets (first, middle, last) and of its ACK.

    Lengths do not depend on addresses, so one template per message size answers
    for every message of that size.
    """
    tpl = QpTemplate(_DUMMY_FLOW, message_bytes, mtu_payload_bytes=mtu_payload_bytes)
    lengths = tuple(len(tpl.write(i, 0, 0)) for i in sorted({0, min(1, tpl.n_packets - 1),
                                                              tpl.n_packets - 1}))
    ack = ResponderTemplate(_DUMMY_FLOW).write_ack(0, 1, AETH_ACK)
    return lengths, len(ack)


def _packet_lengths(message_bytes: int, mtu_payload_bytes: int) -> Iterator[int]:
    lengths, _ = _frame_bytes(message_bytes, mtu_payload_bytes)
    n_packets = -(-message_bytes // mtu_payload_bytes)
    yield lengths[0]
    if n_packets > 1:
        yield from itertools.repeat(lengths[1], n_packets - 2)
        yield lengths[-1]


def _schedule(workload: Workload, rate_bps: float, mtu_payload_bytes: int
              ) -> dict[str, list[tuple[float, int, Message]]]:
    """Per sending host, its messages in send order as ``(start_s, seq, message)``."""
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
    per_nic: dict[str, list[tuple[float, int, Message]]] = {}
    for seq in itertools.count():
        if not ready:
            break
        ready_s, msg_id = heapq.heappop(ready)
        m = by_id[msg_id]
        t_s = start_s = max(ready_s, nic_free_s.get(m.src, 0.0))
        for frame_bytes in _packet_lengths(m.size_bytes, mtu_payload_bytes):
            t_s += (frame_bytes + WIRE_OVERHEAD_BYTES) * 8 / rate_bps
        per_nic.setdefault(m.src, []).append((start_s, seq, m))
        nic_free_s[m.src] = done_s[msg_id] = t_s
        for nxt in dependents[msg_id]:
            missing[nxt] -= 1
            if not missing[nxt]:
                n = by_id[nxt]
                heapq.heappush(ready, (max([n.start_s, *(done_s[d] for d in n.deps)]), nxt))
    return per_nic


def iter_workload_frames(workload: Workload, *, rate_bps: float, mtu_payload_bytes: int = MTU_PAYLOAD_BYTES,
                         ecn: str = "ect0") -> Iterator[tuple[float, bytes]]:
    """The RoCEv2 frames a fabric would carry for ``workload``, in time order, streamed.

    Schedule (fabric-less, zero propagation delay): a message is ready when its
    ``start_s`` has passed and its deps have been fully received; each host NIC
    sends one message at a time at ``rate_bps`` (frame + 24 bytes of Ethernet
    overhead per packet), ready messages first come first served.  Each message is
    one QP (QPN 0x100 + msg_id on both hosts, its own UDP source port) starting at
    PSN 0; the receiver ACKs the last packet when it has fully arrived.  Receiver
    and fabric contention are not modelled.  Frames at the same instant come in
    the order their messages were scheduled.

    The schedule is computed first (times only); frames are then made per NIC, one
    message at a time, and merged by time, so memory holds one template per NIC.
    """
    if not rate_bps > 0:
        raise ParameterError("rate_bps", rate_bps, "must be positive")
    addr = host_addresses(list(dict.fromkeys(
        [*workload.ranks, *(h for m in workload.messages for h in (m.src, m.dst))])))
    per_nic = _schedule(workload, rate_bps, mtu_payload_bytes)

    def message_frames(start_s: float, seq: int, m: Message
                       ) -> Iterator[tuple[float, int, int, bytes]]:
        qpn = QPN_BASE + m.msg_id % ((1 << 24) - QPN_BASE)
        (src_mac, src_ip), (dst_mac, dst_ip) = addr[m.src], addr[m.dst]
        flow = Flow(src_mac, dst_mac, src_ip, dst_ip, 49152 + m.msg_id * 7919 % 16384, qpn, ecn)
        tpl = QpTemplate(flow, m.size_bytes, mtu_payload_bytes=mtu_payload_bytes)
        t_s = start_s
        for i in range(tpl.n_packets):
            frame = bytes(tpl.write(i, i, round(t_s * 1e9)))
            yield t_s, seq, i, frame
            t_s += (len(frame) + WIRE_OVERHEAD_BYTES) * 8 / rate_bps
        ack = ResponderTemplate(flow.reversed(qpn)).write_ack(tpl.n_packets - 1, 1, AETH_ACK)
        yield t_s, seq, tpl.n_packets, bytes(ack)

    # (t, seq, index) is unique, so the merge never compares frames.
    streams = [itertools.chain.from_iterable(itertools.starmap(message_frames, sends))
               for sends in per_nic.values()]
    for t_s, _, _, frame in heapq.merge(*streams):
        yield t_s, frame


def workload_to_frames(workload: Workload, *, rate_bps: float, mtu_payload_bytes: int = MTU_PAYLOAD_BYTES,
                       ecn: str = "ect0") -> list[tuple[float, bytes]]:
    """``iter_workload_frames`` as a list (small workloads and tests)."""
    return list(iter_workload_frames(workload, rate_bps=rate_bps,
                                     mtu_payload_bytes=mtu_payload_bytes, ecn=ecn))


@dataclass(frozen=True)
class CollectiveShape:
    """What a collective's DAG and pcap will hold, computed without building either."""

    message_sizes: dict[int, int]  # message size in bytes -> number of messages
    table_cells: int               # entries of the DAG builder's rank x unit table

    @property
    def n_messages(self) -> int:
        return sum(self.message_sizes.values())

    def n_frames(self, mtu_payload_bytes: int = MTU_PAYLOAD_BYTES) -> int:
        """Data packets plus one ACK per message."""
        return sum(count * (-(-size // mtu_payload_bytes) + 1)
                   for size, count in self.message_sizes.items())

    def pcap_bytes(self, mtu_payload_bytes: int = MTU_PAYLOAD_BYTES) -> int:
        """Exact size of the pcap file ``write_pcap`` makes of these messages."""
        total = _GLOBAL.size
        for size, count in self.message_sizes.items():
            (first, *rest), ack_bytes = _frame_bytes(size, mtu_payload_bytes)
            n_packets = -(-size // mtu_payload_bytes)
            frames = first + (rest[-1] if n_packets > 1 else 0)
            if n_packets > 2:
                frames += (n_packets - 2) * rest[0]
            total += count * ((n_packets + 1) * _RECORD.size + frames + ack_bytes)
        return total


def collective_shape(name: str, ranks: int, size_bytes: int, *,
                     chunk_bytes: int | None = None, gpus_per_server: int | None = None,
                     server_of: object = None, **_: object) -> CollectiveShape:
    """Message sizes and table size of ``collectives.build(name, ...)``, in O(log n) time.

    Mirrors the unit arithmetic and the transfers of ``collectives`` (tested against
    it), so that a size check costs nothing even for 10^5 ranks.
    """
    if name not in collectives.NAMES:
        raise ParameterError("collective", name, f"known collectives: {', '.join(collectives.NAMES)}")
    n = ranks
    if n < 2:
        raise ParameterError("ranks", n, "a collective needs at least 2 ranks")
    if not size_bytes > 0 or int(size_bytes) != size_bytes:
        raise ParameterError("size_bytes", size_bytes, "must be a positive integer")
    if chunk_bytes is not None and chunk_bytes <= 0:
        raise ParameterError("chunk_bytes", chunk_bytes, "must be positive (or None)")
    p = 1 << (n.bit_length() - 1)
    blocks = 1 if name in ("broadcast", "incast", "permutation") else p if name == "allreduce-hd" else n
    block_bytes = -(-size_bytes // blocks)
    k = 1 if chunk_bytes is None else -(-block_bytes // chunk_bytes)
    unit_bytes = -(-size_bytes // (blocks * k))
    sends: Counter = Counter()  # units per transfer -> number of transfers
    if name == "allreduce-ring":
        sends[k] = 2 * (n - 1) * n
    elif name in ("allgather", "reducescatter", "alltoall"):
        sends[k] = n * (n - 1)
    elif name in ("broadcast", "incast"):
        sends[k] = n - 1
    elif name == "permutation":
        sends[k] = n
    elif name == "allreduce-hd":
        if p < n:
            sends[p * k] = 2 * (n - p)  # fold in, unfold out
        owned = Counter({p * k: p})  # units owned -> ranks; pairs own the same range
        for _ in range(p.bit_length() - 1):  # halving; doubling sends the same sizes back
            halves: Counter = Counter()
            for units, count in owned.items():
                halves[units // 2] += count // 2
                halves[units - units // 2] += count // 2
            for units, count in halves.items():
                sends[units] += 2 * count
            owned = halves
    else:  # allreduce-hier
        if gpus_per_server is not None and server_of is None:
            if gpus_per_server < 1 or n % gpus_per_server:
                raise ParameterError("gpus_per_server", gpus_per_server,
                                     f"must be >= 1 and divide the number of ranks {n}")
            local, servers = gpus_per_server, n // gpus_per_server
        else:  # an explicit placement (O(n), as build() checks it), or the error for none
            placement = collectives._servers(range(n), server_of, gpus_per_server)  # type: ignore[arg-type]
            local, servers = len(placement[0]), len(placement)
        if local > 1:
            sends[servers * k] = 2 * servers * local * (local - 1)
        if servers > 1:
            sends[k] += 2 * (servers - 1) * servers * local
    sizes: Counter = Counter()
    for units, count in sends.items():
        if count and units:
            if chunk_bytes is None:
                sizes[units * unit_bytes] += count
            else:
                sizes[unit_bytes] += count * units
    return CollectiveShape(dict(sizes), n * blocks * k)


def check_collective_size(shape: CollectiveShape, *, max_bytes: int, max_messages: int,
                          mtu_payload_bytes: int = MTU_PAYLOAD_BYTES) -> None:
    """Refuse a collective whose DAG or pcap would exceed the caps (before building it)."""
    if shape.n_messages > max_messages:
        raise PcapError(f"this collective is {shape.n_messages:,} messages, above the limit of "
                        f"{max_messages:,} (--max-messages; each takes ~2.5 ms to build): use "
                        "fewer ranks or larger chunks, or raise --max-messages")
    max_cells = TABLE_CELLS_PER_MESSAGE * max_messages
    if shape.table_cells > max_cells:
        raise PcapError(f"building this collective needs a rank x unit table of "
                        f"{shape.table_cells:,} entries, above the limit of {max_cells:,} "
                        f"({TABLE_CELLS_PER_MESSAGE} x --max-messages): use fewer ranks or "
                        "larger chunks, or raise --max-messages")
    largest = max(shape.message_sizes)
    if largest > MAX_MESSAGE_BYTES:
        raise PcapError(f"one message would be {format_size(largest)}, above the "
                        f"{format_size(MAX_MESSAGE_BYTES)} an RDMA WRITE can carry (32-bit DMA "
                        "length): use a smaller --size")
    pcap_bytes = shape.pcap_bytes(mtu_payload_bytes)
    if pcap_bytes > max_bytes:
        raise PcapError(f"the pcap would be {format_size(pcap_bytes)} "
                        f"({shape.n_frames(mtu_payload_bytes):,} frames), above the "
                        f"{format_size(max_bytes)} limit (--max-size): use fewer ranks or a "
                        "smaller --size, or raise --max-size")


@dataclass(frozen=True)
class PcapSummary:
    path: Path
    n_frames: int
    n_messages: int
    duration_s: float


def collective_pcap(collective_name: str, ranks: int, size_bytes: int, path: str | Path, *,
                    rate_bps: float = 400e9, mtu_payload_bytes: int = MTU_PAYLOAD_BYTES,
                    max_bytes: int = DEFAULT_MAX_PCAP_BYTES,
                    max_messages: int = DEFAULT_MAX_MESSAGES, **opts: object) -> PcapSummary:
    """Write the pcap of one collective over hosts h1..h<ranks>, streaming it to disk.

    ``opts`` go to ``collectives.build`` (chunk_bytes, root, seed, gpus_per_server...).
    The file size and DAG size are computed and checked against ``max_bytes`` and
    ``max_messages`` before anything is built (ParameterError/PcapError).
    """
    if not rate_bps > 0:
        raise ParameterError("rate_bps", rate_bps, "must be positive")
    if not 8 <= mtu_payload_bytes <= 8192:
        raise ParameterError("mtu_payload_bytes", mtu_payload_bytes, "expected 8..8192")
    check_collective_size(collective_shape(collective_name, ranks, size_bytes, **opts),
                          max_bytes=max_bytes, max_messages=max_messages,
                          mtu_payload_bytes=mtu_payload_bytes)
    path = Path(path)
    _check_output(path)
    hosts = [f"h{i}" for i in range(1, ranks + 1)]
    workload = collectives.build(collective_name, hosts, size_bytes, **opts)
    last_s = 0.0

    def frames() -> Iterator[tuple[float, bytes]]:
        nonlocal last_s
        for t_s, frame in iter_workload_frames(workload, rate_bps=rate_bps,
                                               mtu_payload_bytes=mtu_payload_bytes):
            last_s = t_s
            yield t_s, frame

    n = write_pcap(path, frames(), max_bytes=max_bytes)
    return PcapSummary(path, n, len(workload.messages), last_s)
