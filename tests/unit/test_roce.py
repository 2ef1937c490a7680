"""The RoCEv2 hot path against Scapy's own encoding (ICRC computed by Scapy)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.contrib.roce import AETH, BTH, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from core.errors import ParameterError
from traffic.icrc import icrc_ok
from traffic.roce import (
    ACKNOWLEDGE,
    AETH_ACK,
    AETH_NAK_PSN_SEQ,
    CNP,
    ECN_CE,
    ECN_CODES,
    RETH,
    WRITE_FIRST,
    WRITE_LAST,
    WRITE_MIDDLE,
    WRITE_ONLY,
    Flow,
    QpTemplate,
    ResponderTemplate,
    parse_frame,
)

macs = st.binary(min_size=6, max_size=6).map(lambda b: ":".join(f"{x:02x}" for x in b))
ips = st.integers(1, 2**32 - 2).map(lambda i: ".".join(str(i >> s & 255) for s in (24, 16, 8, 0)))
flows = st.builds(Flow, macs, macs, ips, ips, st.integers(0, 65535), st.integers(1, 2**24 - 1),
                  st.sampled_from(sorted(ECN_CODES)), st.integers(0, 63))
psns = st.integers(0, 2**24 - 1)
timestamps = st.integers(0, 2**64 - 1)


def scapy_data_frame(flow: Flow, opcode: int, psn: int, ackreq: int, ts_ns: int,
                     payload_bytes: int, dma_len: int, ecn_bits: int) -> bytes:
    """Reference encoding written directly against Scapy (Scapy computes the ICRC)."""
    pad = -payload_bytes % 4
    bth = BTH(opcode=opcode, padcount=pad, dqpn=flow.dqpn, psn=psn, ackreq=ackreq)
    if opcode in (WRITE_FIRST, WRITE_ONLY):
        bth = bth / RETH(dma_len=dma_len)
    payload = ts_ns.to_bytes(8, "big") + bytes(payload_bytes - 8 + pad)
    return bytes(Ether(src=flow.src_mac, dst=flow.dst_mac)
                 / IP(src=flow.src_ip, dst=flow.dst_ip, tos=flow.dscp << 2 | ecn_bits, ttl=64,
                      id=0, flags="DF")
                 / UDP(sport=flow.sport, dport=4791, chksum=0) / bth / Raw(payload))


def expected_payload(tpl: QpTemplate, index: int) -> int:
    if index < tpl.n_packets - 1:
        return tpl.mtu_payload_bytes
    return max(tpl.message_bytes - index * tpl.mtu_payload_bytes, 8)


@settings(max_examples=150, deadline=None)
@given(flow=flows, message_bytes=st.integers(1, 20_000),
       mtu=st.sampled_from([256, 1024, 4096]), data=st.data())
def test_hot_path_matches_scapy_byte_for_byte(flow, message_bytes, mtu, data):
    tpl = QpTemplate(flow, message_bytes, mtu_payload_bytes=mtu)
    for _ in range(3):  # the same preallocated buffers are patched again and again
        index = data.draw(st.integers(0, tpl.n_packets - 1))
        psn, ts_ns = data.draw(psns), data.draw(timestamps)
        ackreq = data.draw(st.sampled_from([None, 0, 1]))
        opcode = tpl.opcode(index)
        want_ack = int(opcode in (WRITE_LAST, WRITE_ONLY)) if ackreq is None else ackreq
        payload = expected_payload(tpl, index)
        frame = bytes(tpl.write(index, psn, ts_ns, ackreq))
        ecn = ECN_CODES[flow.ecn]
        assert frame == scapy_data_frame(flow, opcode, psn, want_ack, ts_ns, payload,
                                         message_bytes, ecn)
        assert parse_frame(frame) == (opcode, flow.dqpn, psn, want_ack, ecn, 0, -1, 0, ts_ns,
                                      payload, flow.sport)
        # A switch sets CE: the ICRC masks the TOS, so Scapy's ICRC is unchanged.
        marked = scapy_data_frame(flow, opcode, psn, want_ack, ts_ns, payload, message_bytes,
                                  ECN_CE)
        assert marked[-4:] == frame[-4:] and marked[15] & 3 == ECN_CE
        assert icrc_ok(marked) and parse_frame(marked).ecn == ECN_CE


def test_qps_of_one_shape_share_its_prototype_and_match_scapy():
    """QPs between any hosts (an all-to-all's) differ only in addresses, UDP source port
    and QPN: Scapy builds their shape once, and every QP's frames are still Scapy's,
    byte for byte (the IPv4 checksum included)."""
    from traffic import roce

    roce._data_prototype.cache_clear()
    roce._ack_prototype.cache_clear()
    roce._cnp_prototype.cache_clear()
    base = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0, 1)
    message_bytes = 32 << 10
    for i in (0, 1, 2, 255, 4095, 16383):
        flow = base._replace(sport=0xC000 | i, dqpn=0x100 + i,
                             src_mac=f"02:00:00:00:{i >> 8:02x}:{i & 255:02x}",
                             dst_ip=f"10.{i >> 8 & 255}.{i & 255}.{1 + i % 250}",
                             src_ip=f"192.168.{i & 255}.{254 - i % 250}")
        tpl = QpTemplate(flow, message_bytes)
        for index in (0, 1, tpl.n_packets - 1):
            frame = bytes(tpl.write(index, 1000 + i, 123456789 * i))
            assert frame == scapy_data_frame(
                flow, tpl.opcode(index), 1000 + i, int(index == tpl.n_packets - 1),
                123456789 * i, expected_payload(tpl, index), message_bytes, ECN_CODES[flow.ecn])
        reply = flow.reversed(flow.dqpn)._replace(ecn="not-ect")
        resp = ResponderTemplate(reply)
        l2 = (Ether(src=reply.src_mac, dst=reply.dst_mac)
              / IP(src=reply.src_ip, dst=reply.dst_ip, tos=reply.dscp << 2, ttl=64, id=0,
                   flags="DF")
              / UDP(sport=reply.sport, dport=4791, chksum=0))
        assert bytes(resp.write_ack(7, 3, echo=True)) == bytes(
            l2 / BTH(opcode=ACKNOWLEDGE, dqpn=reply.dqpn, psn=7, becn=1) / AETH(msn=3))
        assert resp.cnp == bytes(l2 / cnp(reply.dqpn))
    assert roce._data_prototype.cache_info().misses == 3  # FIRST, MIDDLE, LAST
    assert roce._ack_prototype.cache_info().misses == 1
    assert roce._cnp_prototype.cache_info().misses == 1


def test_segmentation_opcodes():
    flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 1, 2)
    assert [QpTemplate(flow, 4096).opcode(0)] == [WRITE_ONLY]
    tpl = QpTemplate(flow, 3 * 4096 + 1)
    assert [tpl.opcode(i) for i in range(tpl.n_packets)] == [
        WRITE_FIRST, WRITE_MIDDLE, WRITE_MIDDLE, WRITE_LAST]
    assert sorted(tpl.shapes) == [WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST]


@settings(max_examples=60, deadline=None)
@given(flow=flows, psn=psns, msn=st.integers(0, 2**24 - 1),
       syndrome=st.sampled_from([AETH_ACK, AETH_NAK_PSN_SEQ]))
def test_ack_and_cnp_match_scapy(flow, psn, msn, syndrome):
    resp = ResponderTemplate(flow)
    frame = bytes(resp.write_ack(psn, msn, syndrome))
    l2 = (Ether(src=flow.src_mac, dst=flow.dst_mac)
          / IP(src=flow.src_ip, dst=flow.dst_ip, tos=flow.dscp << 2 | ECN_CODES[flow.ecn], ttl=64,
               id=0, flags="DF")
          / UDP(sport=flow.sport, dport=4791, chksum=0))
    assert frame == bytes(l2 / BTH(opcode=ACKNOWLEDGE, dqpn=flow.dqpn, psn=psn)
                          / AETH(syndrome=syndrome, msn=msn))
    parsed = parse_frame(frame)
    assert (parsed.opcode, parsed.psn, parsed.syndrome, parsed.msn, parsed.payload_bytes) == (
        ACKNOWLEDGE, psn, syndrome, msn, 0)
    assert resp.cnp == bytes(l2 / cnp(flow.dqpn)) and len(resp.cnp) == 14 + 20 + 8 + 12 + 16 + 4
    parsed = parse_frame(resp.cnp)
    assert (parsed.opcode, parsed.becn, parsed.dqpn, parsed.payload_bytes) == (CNP, 1, flow.dqpn, 0)


def test_layout_offsets_and_scapy_dissection():
    flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 50000, 0xABCDEF)
    tpl = QpTemplate(flow, 10_000, va=0x1122334455667788, rkey=0xDEADBEEF)
    first = bytes(tpl.write(0, 0x123456, 0x0102030405060708))
    assert first[42] == WRITE_FIRST and first[51:54] == bytes.fromhex("123456")
    assert first[54:70] == bytes.fromhex("1122334455667788deadbeef00002710")
    assert first[70:78] == bytes.fromhex("0102030405060708")
    middle = bytes(tpl.write(1, 7, 0x0A0B))
    assert struct.unpack_from(">Q", middle, 54)[0] == 0x0A0B and len(middle) == 54 + 4096 + 4
    pkt = Ether(first)
    assert pkt[BTH].psn == 0x123456 and pkt[BTH].dqpn == 0xABCDEF
    assert pkt[RETH].va == 0x1122334455667788 and pkt[RETH].dma_len == 10_000


def test_icrc_check_catches_corruption_but_not_masked_fields():
    flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 1, 2)
    frame = bytearray(QpTemplate(flow, 3000).write(0, 5, 6))
    assert icrc_ok(frame)
    for off, value in ((22, 1), (46, 0xC0)):  # TTL, FECN/BECN: masked
        mutated = bytearray(frame)
        mutated[off] = value
        assert icrc_ok(mutated)
    for off in (30, 36, 51, 100, len(frame) - 5):  # dst IP, UDP dport, PSN, payload
        mutated = bytearray(frame)
        mutated[off] ^= 0x01
        assert not icrc_ok(mutated)


def test_parse_rejects_non_roce():
    flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 1, 2)
    frame = bytearray(QpTemplate(flow, 100).write(0, 0, 0))
    assert parse_frame(frame) is not None
    assert parse_frame(frame[:40]) is None
    assert parse_frame(bytes(Ether() / IP() / UDP(dport=53) / Raw(bytes(40)))) is None
    assert parse_frame(bytes(Ether(type=0x0806) / Raw(bytes(60)))) is None


@pytest.mark.parametrize("kwargs", [{"message_bytes": 0}, {"mtu_payload_bytes": 4},
                                    {"ecn": "ce"}, {"dqpn": 0}])
def test_bad_parameters(kwargs):
    flow_args = {"ecn": kwargs.pop("ecn", "ect0"), "dqpn": kwargs.pop("dqpn", 5)}
    flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 1, **flow_args)
    with pytest.raises(ParameterError):
        QpTemplate(flow, **{"message_bytes": 100, **kwargs})


def test_scapy_frames_have_the_declared_geometry():
    """core.frame is the one layout; Scapy's frames must have exactly its sizes."""
    from core.frame import (
        ACK_FRAME_BYTES,
        CNP_FRAME_BYTES,
        FRAME_BYTES,
        HEADER_BYTES,
        OFF_TS,
        OFF_TS_RETH,
        TS_BYTES,
    )
    from traffic.roce import ack_packet, cnp_packet, data_packet

    flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 49152, 7,
                "ect0", 26)
    full = bytes(data_packet(flow, WRITE_MIDDLE, 4096, ts_ns=0x0102030405060708))
    assert len(full) == FRAME_BYTES == 4154 and HEADER_BYTES == 58
    assert full[OFF_TS:OFF_TS + TS_BYTES] == bytes(range(1, 9))
    first = bytes(data_packet(flow, WRITE_FIRST, 4096, ts_ns=0x0102030405060708))
    assert first[OFF_TS_RETH:OFF_TS_RETH + TS_BYTES] == bytes(range(1, 9))
    assert len(bytes(cnp_packet(flow))) == CNP_FRAME_BYTES == 74
    assert len(bytes(ack_packet(flow))) == ACK_FRAME_BYTES == 62
    assert bytes(full)[36:38] == (4791).to_bytes(2, "big")
