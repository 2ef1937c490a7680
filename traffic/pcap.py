"""Pcap files of RoCEv2 traffic: the file format, written and read back as streams.

Files are classic pcap (Ethernet link type, nanosecond timestamps), which
Wireshark/tshark decode as RoCEv2 (UDP 4791) without configuration.  pcapng is
not read: convert it with ``editcap -F pcap in.pcapng out.pcap``.

Both directions stream, with stated caps so that no input exhausts memory:
* writing: frames go to disk as they are generated (a temporary file renamed into
  place when complete), at most ``DEFAULT_MAX_PCAP_BYTES`` (1 GiB) unless the caller
  raises it (`traffic.workload_pcap` synthesizes a collective's frames for it);
* reading: only regular files, at most ``DEFAULT_MAX_PCAP_BYTES``, one record at a
  time (a FIFO, a device or a directory is refused before a byte is read).
"""

from __future__ import annotations

import itertools
import os
import stat
import struct
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from core.errors import FabricEmuError
from core.frame import ROCE_UDP_PORT
from core.safefile import WriteError, open_atomic
from core.units import format_size
from traffic.roce import parse_frame

LINKTYPE_ETHERNET = 1
_MAGIC_NS = 0xA1B23C4D
_MAGIC_US = 0xA1B2C3D4
_PCAPNG_MAGIC = 0x0A0D0D0A
GLOBAL_HEADER = struct.Struct("IHHiIII")  # magic, version 2.4, tz, sigfigs, snaplen, linktype
RECORD_HEADER = struct.Struct("IIII")     # seconds, fraction, captured length, original length
_SNAPLEN = 65535
DEFAULT_MAX_PCAP_BYTES = 1 << 30


class PcapError(FabricEmuError):
    """A pcap file is missing, malformed, too large, or holds no RoCEv2 traffic."""


def check_output(path: Path) -> None:
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
    check_output(path)
    count = 0
    try:
        with open_atomic(path) as f:
            written = f.write(GLOBAL_HEADER.pack(_MAGIC_NS, 2, 4, 0, 0, _SNAPLEN, LINKTYPE_ETHERNET))
            for t_s, frame, *original in frames_with_times:
                written += RECORD_HEADER.size + len(frame)
                if max_bytes is not None and written > max_bytes:
                    raise PcapError(f"pcap {path} would exceed {format_size(max_bytes)} "
                                    f"after {count} frames; nothing was written")
                t_ns = round(t_s * 1e9)
                if not 0 <= t_ns < 2**32 * 10**9:
                    raise PcapError(f"cannot write pcap {path}: frame {count + 1} is stamped "
                                    f"{t_s:g} s; a pcap holds times from 0 to 2^32 s")
                f.write(RECORD_HEADER.pack(t_ns // 10**9, t_ns % 10**9, len(frame),
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
        head = f.read(GLOBAL_HEADER.size)
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
        if len(head) < GLOBAL_HEADER.size:
            raise PcapError(f"{path} is truncated: {len(head)} bytes, shorter than a pcap header")
        rec = struct.Struct(order + RECORD_HEADER.format)
        linktype = struct.unpack_from(order + GLOBAL_HEADER.format, head)[6] & 0xFFFF
        if linktype != LINKTYPE_ETHERNET:
            raise PcapError(f"{path} has link type {linktype}; only Ethernet (1) carries "
                            "RoCEv2 here")
        units_per_s = 10**9 if magic == _MAGIC_NS else 10**6
        off = GLOBAL_HEADER.size
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


