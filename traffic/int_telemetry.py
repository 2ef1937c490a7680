"""In-band network telemetry (INT) blocks for HPCC: the format of core/frame.py, pure.

A data frame's payload carries, after its send timestamp, an INT block: a header
whose first byte is the hop count, then one 24-byte record per switch egress port
the frame crossed, oldest first. Each switch port's eBPF marker (emu/bpf/marker.c)
appends its record; the responder echoes the block of the frame it acknowledges in
its ACK, after the AETH; the requester decodes it into ``IntRecord``s for its
congestion control. Records are big-endian and in real-fabric units:

======  =====  =========================================================
offset  bytes  field
======  =====  =========================================================
0       4      queue bytes in front of the frame at the port (u32)
4       4      the port's line rate, real Mb/s (u32)
8       8      bytes the port has transmitted (u64, a counter)
16      8      time the frame joined the queue, real picoseconds (u64)
======  =====  =========================================================
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from core.checksum import internet_checksum
from core.frame import (
    ICRC_BYTES,
    INT_HEADER_BYTES,
    INT_MAX_HOPS,
    INT_RECORD_BYTES,
    IP_BYTES,
    OFF_ACK_INT,
    OFF_IP,
    OFF_UDP,
)
from traffic.ccalgos.common import IntRecord
from traffic.icrc import compute_icrc

__all__ = ["IntRecord", "ack_with_int", "block_at", "decode_block", "encode_block"]

_RECORD = struct.Struct(">IIQQ")
_U16 = struct.Struct(">H")
_ICRC = struct.Struct("<I")
assert _RECORD.size == INT_RECORD_BYTES


def encode_block(records: Sequence[IntRecord]) -> bytes:
    """The INT block a frame carries after crossing ports with these ``records``."""
    if len(records) > INT_MAX_HOPS:
        raise ValueError(f"{len(records)} INT records: at most {INT_MAX_HOPS}")
    out = bytearray(INT_HEADER_BYTES)
    out[0] = len(records)
    for r in records:
        out += _RECORD.pack(min(int(r.qlen_bytes), 2**32 - 1), round(r.rate_bps / 1e6),
                            int(r.tx_bytes), round(r.ts_s * 1e12))
    return bytes(out)


def decode_block(block: bytes | bytearray | memoryview) -> tuple[IntRecord, ...]:
    """The records of an INT block, oldest hop first (a short block yields what it holds)."""
    if len(block) < INT_HEADER_BYTES:
        return ()
    hops = min(block[0], INT_MAX_HOPS, (len(block) - INT_HEADER_BYTES) // INT_RECORD_BYTES)
    out = []
    for k in range(hops):
        qlen, rate_mbps, tx, ts_ps = _RECORD.unpack_from(block, INT_HEADER_BYTES
                                                         + k * INT_RECORD_BYTES)
        out.append(IntRecord(qlen_bytes=float(qlen), tx_bytes=tx, ts_s=ts_ps * 1e-12,
                             rate_bps=rate_mbps * 1e6))
    return tuple(out)


def block_at(buf: Any, f: int, at: int, snap: int, room: int) -> bytes:
    """The INT block at offset ``at`` of the frame starting at ``buf[f]`` (``room`` bytes
    of the frame are meant for it, ``snap`` were captured), b'' if it holds no record:
    the Python receive path's copy of roce_rx.c's ``int_copy``."""
    if room < INT_HEADER_BYTES or snap < at + INT_HEADER_BYTES:
        return b""
    hops = min(buf[f + at], INT_MAX_HOPS)
    n = INT_HEADER_BYTES + hops * INT_RECORD_BYTES
    if not hops or n > room or at + n > snap:
        return b""
    return bytes(buf[f + at:f + at + n])


def ack_with_int(ack: bytes | bytearray, block: bytes | bytearray) -> bytes:
    """``ack`` (an ACK frame, ICRC last) carrying ``block`` after its AETH: IPv4 and UDP
    lengths, the IPv4 checksum and the ICRC follow."""
    frame = bytearray(ack[:OFF_ACK_INT])
    frame += block
    frame += bytes(ICRC_BYTES)
    ip_len = len(frame) - OFF_IP
    _U16.pack_into(frame, OFF_IP + 2, ip_len)
    _U16.pack_into(frame, OFF_UDP + 4, ip_len - IP_BYTES)
    _U16.pack_into(frame, OFF_IP + 10, 0)
    _U16.pack_into(frame, OFF_IP + 10, internet_checksum(frame[OFF_IP:OFF_IP + IP_BYTES]))
    _ICRC.pack_into(frame, len(frame) - ICRC_BYTES, compute_icrc(frame))
    return bytes(frame)
