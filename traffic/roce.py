"""RoCEv2 packets: Scapy prototypes built once per frame shape, byte patching per packet.

Scapy (``scapy.contrib.roce``) defines the headers and builds one prototype frame
per *shape*: addresses, ECN and DSCP, opcode, payload and message length. The QPs
of a shape (a ring all-reduce posts hundreds of messages between the same two
hosts) share it: each copies it with its own UDP source port (ECMP entropy) and
destination QPN patched in, the only per-QP fields, so Scapy runs once per shape
instead of once per message. The hot path only patches the varying bytes of a
packet into its QP's frame with ``struct.pack_into`` and finishes the ICRC from
precomputed CRC state, so no Scapy code runs per packet.

Frame layout (`core.frame` declares it; IPv4, no options, UDP checksum 0)::

    off  len  field
      0   14  Ethernet (dst, src, 0x0800)
     14   20  IPv4 (TOS = DSCP<<2 | ECN, TTL 64, DF, id 0)
     34    8  UDP (sport = QP entropy, dport 4791, checksum 0)
     42   12  BTH: 42 opcode, 46 FECN/BECN (ACK: BECN = ECN echo), 47-49 dst QPN,
                 50 AckReq<<7, 51-53 PSN
     54   16  RETH (RDMA WRITE FIRST/ONLY only): VA 64, R_Key 32, DMA length 32
     54|70 8  payload starts with the send timestamp, ns of CLOCK_MONOTONIC, big-endian
     ...      payload (zeros), padded to 4 bytes (BTH PadCnt) as IBTA requires
    -4     4  ICRC (CRC-32 value stored little-endian, as Scapy encodes it)

ACK frames carry AETH (syndrome 8, MSN 24) at 54; CNPs carry 16 zero bytes at 54.
Selective repeat's NAK is such an ACK frame too: syndrome 0x40 | (run - 1), MSN the
cumulative PSN (``traffic.selective_repeat``).

ECN echo.  An ACK (or NAK) whose acknowledged frames arrived CE-marked has the BECN
bit of its BTH set (byte 46, bit 6: IBTA's backward explicit congestion notification,
unused by RoCEv2 ACKs otherwise). The ICRC masks BTH byte 4 to ones, so the bit
costs no CRC work: ``Shape.write_ack(..., echo=True)`` sets it on a sealed frame.

AckReq.  Set on LAST and ONLY; the engine also sets it on the data frame that fills
its congestion window, and the responder ACKs such a frame at once (a requester
soliciting an ACK, as IBTA defines the bit), so coalesced ACKs never stall a window.

ICRC.  `traffic.icrc` holds the ICRC and how a shape finishes it per packet from
precomputed CRC state.
"""

from __future__ import annotations

import socket
import struct
import zlib
from functools import lru_cache
from typing import NamedTuple

from scapy.contrib.roce import AETH, BTH, CNP_OPCODE, CNPPadding
from scapy.fields import IntField, XIntField, XLongField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from core.checksum import internet_checksum
from core.errors import ParameterError
from core.frame import (
    AETH_BYTES,
    CNP_PAD_BYTES,
    ICRC_BYTES,
    MIN_FRAME_BYTES,
    MTU_PAYLOAD_BYTES,
    OFF_AFTER_BTH,
    OFF_BTH,
    OFF_IP,
    OFF_PSN_WORD,
    OFF_UDP,
    RETH_BYTES,
    ROCE_UDP_PORT,
    TS_BYTES,
)
from traffic.icrc import advance_tables, compute_icrc, masked_input

WRITE_FIRST = 0x06
WRITE_MIDDLE = 0x07
WRITE_LAST = 0x08
WRITE_ONLY = 0x0A
ACKNOWLEDGE = 0x11
CNP = CNP_OPCODE  # 0x81
DATA_OPCODES = (WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY)
RETH_OPCODES = (WRITE_FIRST, WRITE_ONLY)

#: The per-QP fields of a frame (`_with_qp`): Ethernet destination and source, IPv4
#: source and destination (and so its header checksum), UDP source port, BTH
#: destination QPN.
OFF_DST_MAC, OFF_SRC_MAC = 0, 6
OFF_SRC_IP, OFF_DST_IP, OFF_IP_CHECKSUM = OFF_IP + 12, OFF_IP + 16, OFF_IP + 10
OFF_SPORT = OFF_UDP
OFF_DQPN = OFF_BTH + 5
#: Prototypes kept per process: one per frame kind, size and ECN marking, whatever the
#: addresses (a fattree,8 all-to-all's 16,256 host pairs share a handful).
_PROTOTYPES = 1 << 12

#: BTH byte 4 (FECN 0x80, BECN 0x40): on an ACK, BECN is the ECN echo.
OFF_BECN = OFF_BTH + 4
BECN_BIT = 0x40

AETH_ACK = 0x00          # syndrome: ACK, credit field 0
AETH_NAK_PSN_SEQ = 0x60  # syndrome: NAK, PSN sequence error

ECN_CODES = {"not-ect": 0b00, "ect1": 0b01, "ect0": 0b10}
ECN_CE = 0b11



class RETH(Packet):
    """RDMA Extended Transport Header (IBTA 9.3.3), absent from scapy.contrib.roce."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_len", 0)]


for _op in RETH_OPCODES:
    bind_layers(BTH, RETH, opcode=_op)


def _tos(dscp: int, ecn: str) -> int:
    if ecn not in ECN_CODES:
        raise ParameterError("ecn", ecn, f"expected one of {sorted(ECN_CODES)}")
    if not 0 <= dscp < 64:
        raise ParameterError("dscp", dscp, "expected 0..63")
    return dscp << 2 | ECN_CODES[ecn]


class Flow(NamedTuple):
    """Addresses of one direction of a queue pair; ``sport`` is the ECMP entropy."""

    src_mac: str
    dst_mac: str
    src_ip: str
    dst_ip: str
    sport: int
    dqpn: int
    ecn: str = "ect0"
    dscp: int = 26

    def reversed(self, dqpn: int) -> Flow:
        """The responder's direction (ACKs, CNPs) towards the requester QP ``dqpn``."""
        return self._replace(src_mac=self.dst_mac, dst_mac=self.src_mac,
                             src_ip=self.dst_ip, dst_ip=self.src_ip, dqpn=dqpn)

    def scapy(self, bth: BTH) -> Packet:
        """Ether/IP/UDP around ``bth`` (Scapy computes lengths, checksum and ICRC)."""
        return (Ether(src=self.src_mac, dst=self.dst_mac)
                / IP(src=self.src_ip, dst=self.dst_ip, tos=_tos(self.dscp, self.ecn),
                     ttl=64, id=0, flags="DF")
                / UDP(sport=self.sport, dport=ROCE_UDP_PORT, chksum=0)
                / bth)


_crc32 = zlib.crc32
_pack_le32 = struct.Struct("<I").pack_into
_pack_be32 = struct.Struct(">I").pack_into
_pack_be64 = struct.Struct(">Q").pack_into


class ShapeLayout(NamedTuple):
    """A shape's frame length and ICRC state, offsets in bytes from the frame start."""

    frame_bytes: int
    ts_off: int
    window_end: int
    icrc_off: int
    prefix_crc: int
    rest_crc: int
    ackreq: int
    advance_tables: tuple[tuple[int, ...], ...]


class _ShapeFixed(NamedTuple):
    """What every QP's frame of one prototype shares (`_fixed`): its opcode, AckReq,
    offsets, BECN byte, payload, and the ICRC state of the bytes after the window."""

    opcode: int
    ackreq: int
    icrc_off: int
    ts_off: int
    becn: int
    payload_bytes: int
    advance_tables: tuple[tuple[int, ...], ...]
    rest_crc: int


#: Bytes between BTH and the timestamp, by opcode (RETH or AETH).
_BEFORE_TS = {ACKNOWLEDGE: AETH_BYTES, WRITE_FIRST: RETH_BYTES, WRITE_ONLY: RETH_BYTES}
#: Where `masked_input`'s output holds the UDP source port and the destination QPN.
_MASKED_SPORT, _MASKED_DQPN = 8 - OFF_IP + OFF_SPORT, 8 - OFF_IP + OFF_DQPN


@lru_cache(maxsize=_PROTOTYPES)
def _fixed(prototype: bytes, window_end: int) -> _ShapeFixed:
    """``prototype``'s `_ShapeFixed`: read once, shared by its QPs' shapes."""
    opcode = prototype[OFF_BTH]
    icrc_off = len(prototype) - ICRC_BYTES
    ts_off = OFF_AFTER_BTH + _BEFORE_TS.get(opcode, 0)
    rest = prototype[window_end:icrc_off]
    return _ShapeFixed(opcode, prototype[OFF_PSN_WORD] >> 7, icrc_off, ts_off,
                       prototype[OFF_BECN], icrc_off - ts_off - (prototype[OFF_BTH + 1] >> 4 & 3),
                       advance_tables(len(rest)), zlib.crc32(rest, 0))


@lru_cache(maxsize=_PROTOTYPES)
def _masked_prefix(prototype: bytes, src_mac: str, dst_mac: str, src_ip: str,
                   dst_ip: str) -> bytes:
    """The ICRC input before the PSN word (`masked_input`) of ``prototype`` with a host
    pair's addresses (`_addressed`), its UDP source port and destination QPN still zero:
    a QP's differs in those alone."""
    return bytes(masked_input(_addressed(prototype, src_mac, dst_mac, src_ip, dst_ip),
                              OFF_PSN_WORD))


class Shape:
    """One QP's frame of a prototype (built for `_shape_key`) plus the precomputed ICRC
    state; patches its own buffer.

    ``buf`` is preallocated and reused: send it (or copy it) before the next call.
    What does not depend on the QP is read from the prototype once (`_fixed`,
    `_masked_prefix`): a fattree,8 ring builds four shapes for each of its 32,512
    messages.
    """

    __slots__ = ("buf", "opcode", "payload_bytes", "ackreq", "_ts_off", "_aeth_off", "_becn",
                 "_prefix_crc", "_t0", "_t1", "_t2", "_t3", "_k", "_window", "_icrc_off")

    def __init__(self, prototype: bytes, flow: Flow, window_end: int):
        self.buf = buf = _with_qp(prototype, flow)
        # The host pair's masked prefix with this QP's port and QPN copied in.
        masked = bytearray(_masked_prefix(prototype, flow.src_mac, flow.dst_mac, flow.src_ip,
                                          flow.dst_ip))
        masked[_MASKED_SPORT:_MASKED_SPORT + 2] = buf[OFF_SPORT:OFF_SPORT + 2]
        masked[_MASKED_DQPN:_MASKED_DQPN + 3] = buf[OFF_DQPN:OFF_DQPN + 3]
        # The prefix ends at the PSN word: everything before it is constant per QP.
        self._prefix_crc = _crc32(masked)
        (self.opcode, self.ackreq, self._icrc_off, self._ts_off, self._becn,
         self.payload_bytes, (self._t0, self._t1, self._t2, self._t3),
         self._k) = _fixed(prototype, window_end)
        self._aeth_off = OFF_AFTER_BTH
        self._window = memoryview(buf)[OFF_PSN_WORD:window_end]

    def layout(self) -> ShapeLayout:
        """What a compiled hot path needs to patch this shape (see engine/burst.py)."""
        return ShapeLayout(len(self.buf), self._ts_off, OFF_PSN_WORD + len(self._window),
                           self._icrc_off, self._prefix_crc, self._k, self.ackreq,
                           (self._t0, self._t1, self._t2, self._t3))

    def _seal(self) -> None:
        c = _crc32(self._window, self._prefix_crc)
        _pack_le32(self.buf, self._icrc_off,
                   self._t0[c & 0xFF] ^ self._t1[(c >> 8) & 0xFF]
                   ^ self._t2[(c >> 16) & 0xFF] ^ self._t3[c >> 24] ^ self._k)

    def write(self, psn: int, ts_ns: int, ackreq: int | None = None) -> bytearray:
        """Data frame: patch AckReq (default: the shape's), PSN, send timestamp, ICRC."""
        a = self.ackreq if ackreq is None else ackreq
        _pack_be32(self.buf, OFF_PSN_WORD, a << 31 | psn & 0xFFFFFF)
        _pack_be64(self.buf, self._ts_off, ts_ns)
        self._seal()
        return self.buf

    def write_ack(self, psn: int, syndrome: int, msn: int, echo: bool = False) -> bytearray:
        """ACK frame: patch PSN, AETH syndrome and MSN, ICRC; ``echo`` sets BECN (ECN echo)."""
        self.buf[OFF_BECN] = self._becn | BECN_BIT if echo else self._becn
        _pack_be32(self.buf, OFF_PSN_WORD, psn & 0xFFFFFF)
        _pack_be32(self.buf, self._aeth_off, syndrome << 24 | msn & 0xFFFFFF)
        self._seal()
        return self.buf


def data_packet(flow: Flow, opcode: int, payload_bytes: int, *, psn: int = 0, ts_ns: int = 0,
                ackreq: int = 0, va: int = 0, rkey: int = 0, dma_len: int = 0) -> Packet:
    """Scapy RDMA WRITE packet: RETH on FIRST/ONLY, payload = timestamp + zeros.

    The payload is padded to a multiple of 4 bytes and BTH PadCnt says by how much.
    """
    pad = -payload_bytes % 4
    pkt = BTH(opcode=opcode, padcount=pad, dqpn=flow.dqpn, psn=psn, ackreq=ackreq)
    if opcode in RETH_OPCODES:
        pkt = pkt / RETH(va=va, rkey=rkey, dma_len=dma_len)
    payload = struct.pack(">Q", ts_ns) + bytes(payload_bytes - TS_BYTES + pad)
    return flow.scapy(pkt / Raw(payload))


def ack_packet(flow: Flow, *, psn: int = 0, syndrome: int = AETH_ACK, msn: int = 0,
               echo: bool = False) -> Packet:
    """Scapy ACKNOWLEDGE packet (BTH + AETH); ``echo`` sets BECN (ECN echo)."""
    return flow.scapy(BTH(opcode=ACKNOWLEDGE, dqpn=flow.dqpn, psn=psn, becn=int(echo))
                      / AETH(syndrome=syndrome, msn=msn))


def cnp_packet(flow: Flow) -> Packet:
    """Scapy RoCEv2 CNP: opcode 0x81, BECN set, 16 zero bytes."""
    return flow.scapy(BTH(opcode=CNP, becn=1, dqpn=flow.dqpn) / CNPPadding())


_NO_MAC, _NO_IP = "00:00:00:00:00:00", "0.0.0.0"


def _shape_key(flow: Flow) -> Flow:
    """``flow`` without its per-QP fields: what its QPs' prototypes are built for.
    Scapy takes about a millisecond a frame, so a prototype per host pair would cost an
    all-to-all's workers tens of seconds; the addresses are patched in by `_with_qp`."""
    return flow._replace(src_mac=_NO_MAC, dst_mac=_NO_MAC, src_ip=_NO_IP, dst_ip=_NO_IP,
                         sport=0, dqpn=0)


def _with_qp(prototype: bytes, flow: Flow) -> bytearray:
    """A copy of ``prototype`` (built for `_shape_key`) carrying ``flow``'s addresses,
    UDP source port and destination QPN: the bytes Scapy builds for ``flow`` itself."""
    frame = bytearray(_addressed(prototype, flow.src_mac, flow.dst_mac, flow.src_ip,
                                 flow.dst_ip))
    struct.pack_into(">H", frame, OFF_SPORT, flow.sport)
    frame[OFF_DQPN:OFF_DQPN + 3] = flow.dqpn.to_bytes(3, "big")
    return frame


@lru_cache(maxsize=_PROTOTYPES)
def _addressed(prototype: bytes, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str) -> bytes:
    """``prototype`` with a host pair's MACs and IPs (and so its IP checksum): shared by
    the pair's QPs, which differ in UDP source port and QPN alone (a ring's 254
    messages a pair on fattree,8)."""
    frame = bytearray(prototype)
    frame[OFF_DST_MAC:OFF_DST_MAC + 6] = bytes.fromhex(dst_mac.replace(":", ""))
    frame[OFF_SRC_MAC:OFF_SRC_MAC + 6] = bytes.fromhex(src_mac.replace(":", ""))
    frame[OFF_SRC_IP:OFF_SRC_IP + 4] = socket.inet_aton(src_ip)
    frame[OFF_DST_IP:OFF_DST_IP + 4] = socket.inet_aton(dst_ip)
    struct.pack_into(">H", frame, OFF_IP_CHECKSUM, 0)
    ihl_bytes = (frame[OFF_IP] & 0x0F) * 4
    struct.pack_into(">H", frame, OFF_IP_CHECKSUM,
                     internet_checksum(frame[OFF_IP:OFF_IP + ihl_bytes]))
    return bytes(frame)


@lru_cache(maxsize=_PROTOTYPES)
def _data_prototype(key: Flow, opcode: int, payload_bytes: int, ackreq: int, va: int,
                    rkey: int, dma_len: int) -> bytes:
    """Scapy's data frame of this shape for QP fields zero, ICRC zero (Shape seals it)."""
    pkt = data_packet(key, opcode, payload_bytes, ackreq=ackreq, va=va, rkey=rkey,
                      dma_len=dma_len)
    pkt[BTH].icrc = 0  # Shape.write fills it in; Scapy's own ICRC is slow
    return bytes(pkt)


@lru_cache(maxsize=_PROTOTYPES)
def _ack_prototype(key: Flow) -> bytes:
    """Scapy's ACK for QP fields zero, ICRC zero (Shape.write_ack seals it)."""
    ack = ack_packet(key)
    ack[BTH].icrc = 0
    return bytes(ack)


@lru_cache(maxsize=_PROTOTYPES)
def _cnp_prototype(key: Flow) -> bytes:
    return bytes(cnp_packet(key))


class QpTemplate:
    """Frames of one RDMA WRITE of ``message_bytes`` on one QP, from its shape's prototypes.

    A message of P packets is ONLY (P = 1) or FIRST, MIDDLE*, LAST, cut at
    ``mtu_payload_bytes``.  Payloads shorter than the 8-byte timestamp (messages
    < 8 bytes) are padded to 8 bytes so every data packet carries it; RETH still
    states the real DMA length.  AckReq is set on LAST and ONLY.
    """

    def __init__(self, flow: Flow, message_bytes: int, *, mtu_payload_bytes: int = MTU_PAYLOAD_BYTES,
                 va: int = 0, rkey: int = 0):
        if message_bytes <= 0:
            raise ParameterError("message_bytes", message_bytes, "must be positive")
        if not TS_BYTES <= mtu_payload_bytes <= 8192:
            raise ParameterError("mtu_payload_bytes", mtu_payload_bytes, "expected 8..8192")
        if not 0 < flow.dqpn < 1 << 24:
            raise ParameterError("dqpn", flow.dqpn, "expected 1..2^24-1")
        self.flow = flow
        self.message_bytes = message_bytes
        self.mtu_payload_bytes = mtu_payload_bytes
        self.n_packets = -(-message_bytes // mtu_payload_bytes)
        last_bytes = max(message_bytes - (self.n_packets - 1) * mtu_payload_bytes, TS_BYTES)
        if self.n_packets == 1:
            wanted = {WRITE_ONLY: last_bytes}
        else:
            wanted = {WRITE_FIRST: mtu_payload_bytes, WRITE_LAST: last_bytes}
            if self.n_packets > 2:
                wanted[WRITE_MIDDLE] = mtu_payload_bytes
        self.shapes: dict[int, Shape] = {}
        key = _shape_key(flow)
        for opcode, payload_bytes in wanted.items():
            prototype = _data_prototype(key, opcode, payload_bytes,
                                        int(opcode in (WRITE_LAST, WRITE_ONLY)), va, rkey,
                                        message_bytes)
            ts_end = OFF_AFTER_BTH + (RETH_BYTES if opcode in RETH_OPCODES else 0) + TS_BYTES
            self.shapes[opcode] = Shape(prototype, flow, ts_end)

    def opcode(self, index: int) -> int:
        """Opcode of packet ``index`` (0-based) of the message."""
        if self.n_packets == 1:
            return WRITE_ONLY
        if index == 0:
            return WRITE_FIRST
        return WRITE_LAST if index == self.n_packets - 1 else WRITE_MIDDLE

    def write(self, index: int, psn: int, ts_ns: int, ackreq: int | None = None) -> bytearray:
        """The ready frame of packet ``index`` with ``psn`` and send time ``ts_ns``."""
        return self.shapes[self.opcode(index)].write(psn, ts_ns, ackreq)


class ResponderTemplate:
    """ACK/NAK and CNP frames from the responder back to requester QP ``flow.dqpn``."""

    def __init__(self, flow: Flow):
        key = _shape_key(flow)
        self.ack = Shape(_ack_prototype(key), flow, OFF_AFTER_BTH + AETH_BYTES)
        cnp = _with_qp(_cnp_prototype(key), flow)  # nothing in a CNP varies: sealed here
        _pack_le32(cnp, len(cnp) - ICRC_BYTES, compute_icrc(cnp))
        self.cnp = bytes(cnp)

    def write_ack(self, psn: int, msn: int, syndrome: int = AETH_ACK,
                  echo: bool = False) -> bytearray:
        """ACK (or NAK with ``syndrome=AETH_NAK_PSN_SEQ``) for ``psn``; ``echo``: the
        frames it acknowledges arrived CE-marked (BECN set)."""
        return self.ack.write_ack(psn, syndrome, msn, echo)


class RoceFrame(NamedTuple):
    """What the receiver needs from a RoCEv2 frame (``ts_ns``/``syndrome`` -1 if absent)."""

    opcode: int
    dqpn: int
    psn: int
    ackreq: int
    ecn: int
    becn: int
    syndrome: int
    msn: int
    ts_ns: int
    payload_bytes: int
    sport: int


# Ethernet type, IP ver/IHL, TOS, total length, protocol, UDP ports, BTH opcode,
# SE/M/PadCnt/TVer, FECN/BECN/dst QPN word, AckReq/PSN word: one unpack for all.
_HEADERS = struct.Struct(">12xHBBH5xB10xHH4xBB2xII")
_U32 = struct.Struct(">I").unpack_from
_U64 = struct.Struct(">Q").unpack_from


def parse_frame(frame: bytes | bytearray | memoryview) -> RoceFrame | None:
    """Decode an Ethernet/IPv4/UDP-4791 RoCEv2 frame; None for anything else.

    IPv4 options are not expected (RoCEv2 NICs send none): such frames give None.
    """
    if len(frame) < MIN_FRAME_BYTES:
        return None
    (ethertype, verihl, tos, ip_bytes, proto, sport, dport, opcode, flags, qp_word,
     psn_word) = _HEADERS.unpack_from(frame)
    if ethertype != 0x0800 or verihl != 0x45 or proto != 17 or dport != ROCE_UDP_PORT:
        return None
    if OFF_IP + ip_bytes > len(frame) or ip_bytes < MIN_FRAME_BYTES - OFF_IP:
        return None
    end = OFF_IP + ip_bytes - ICRC_BYTES - (flags >> 4 & 3)  # minus ICRC and pad bytes
    after = OFF_AFTER_BTH
    syndrome, msn, ts_ns = -1, 0, -1
    if opcode == CNP:
        after += CNP_PAD_BYTES
    elif opcode == ACKNOWLEDGE:
        word = _U32(frame, after)[0]
        syndrome, msn = word >> 24, word & 0xFFFFFF
        after += AETH_BYTES
    elif opcode in DATA_OPCODES:
        if opcode in RETH_OPCODES:
            after += RETH_BYTES
        if end - after >= TS_BYTES:
            ts_ns = _U64(frame, after)[0]
    return RoceFrame(opcode, qp_word & 0xFFFFFF, psn_word & 0xFFFFFF, psn_word >> 31, tos & 3,
                     qp_word >> 30 & 1, syndrome, msn, ts_ns, max(end - after, 0), sport)
