"""RFC 1071's Internet checksum, the one home of it: the IPv4 headers that
`traffic.roce` and `traffic.int_telemetry` patch and `emu.ecn.rig` builds. Pure."""

from __future__ import annotations

import struct


def internet_checksum(data: bytes | bytearray | memoryview) -> int:
    """The ones' complement of the ones' complement sum of ``data``'s 16-bit big-endian
    words (an odd length is padded with a zero byte). Over a header whose checksum
    field is zero it is the value to write there; over one that carries it, 0."""
    data = bytes(data)
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
