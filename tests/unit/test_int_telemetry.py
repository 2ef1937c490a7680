"""In-band telemetry blocks (traffic.int_telemetry) and how both receive paths hand them on:
the compiled loop's reply and ACK blocks (roce_rx.c) and the Python path's
(traffic.int_telemetry.block_at), on a hand-filled ring (no kernel, no root)."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from core.errors import CapabilityError
from core.frame import FIRST_QPN, INT_MAX_HOPS, OFF_ACK_INT, OFF_INT, OFF_INT_RETH, TS_BYTES
from engine.rawsock import SNAP_INT_BYTES, RingSpec, slot_offsets
from engine.rx import EV_ACK, EV_ACK_IN, RxLib, RxQpSpec, RxRing, RxState
from traffic.icrc import icrc_ok
from traffic.int_telemetry import IntRecord, ack_with_int, block_at, decode_block, encode_block
from traffic.roce import (
    AETH_ACK,
    AETH_NAK_PSN_SEQ,
    Flow,
    QpTemplate,
    ResponderTemplate,
    parse_frame,
)

FLOW = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0xC001,
            FIRST_QPN + 5)
HOPS = [IntRecord(0.0, 4170, 1.0e-3, 400e9), IntRecord(18434.0, 18984, 1.0e-3 + 92e-12, 100e9)]
_MAC_OFF = 66


def test_a_block_round_trips_in_real_units():
    block = encode_block(HOPS)
    assert len(block) == 8 + 2 * 24 and block[0] == 2
    assert decode_block(block) == tuple(HOPS)
    assert decode_block(b"") == () and decode_block(bytes(8)) == ()
    assert decode_block(block[:-1]) == tuple(HOPS[:1])       # a cut block yields what it holds
    with pytest.raises(ValueError, match="at most"):
        encode_block([HOPS[0]] * (INT_MAX_HOPS + 1))


def test_an_ack_carrying_a_block_is_a_valid_frame():
    ack = ResponderTemplate(FLOW).write_ack(7, 3, echo=True)
    frame = ack_with_int(ack, encode_block(HOPS))
    assert len(frame) == len(ack) + 8 + 2 * 24 and icrc_ok(frame)
    p = Ether(frame)
    checksum = p[IP].chksum
    del p[IP].chksum
    assert Ether(bytes(p))[IP].chksum == checksum and p[IP].len == len(frame) - 14
    f = parse_frame(frame)
    assert (f.psn, f.msn, f.becn) == (7, 3, 1)
    assert decode_block(frame[OFF_ACK_INT:]) == tuple(HOPS)


@pytest.mark.parametrize("hops", [0, 1, 2, INT_MAX_HOPS])
def test_the_compiled_loop_writes_the_replies_python_writes(hops):
    """roce_rx.c's own ACKs and NAKs (sent from C) against write_ack and ack_with_int."""
    try:
        lib = RxLib("compiled")
    except CapabilityError as e:
        pytest.skip(f"compiled receive loop unavailable: {e}")
    block = encode_block((HOPS * INT_MAX_HOPS)[:hops]) if hops else b""
    for flow in (FLOW, FLOW._replace(ecn="ect1", src_ip="10.9.8.7", sport=0xFFFF, dqpn=0xFFFFFF)):
        resp = ResponderTemplate(flow)
        prototype = bytes(resp.ack.buf)
        for psn, msn, syndrome, echo in [(0, 0, AETH_ACK, False), (0xFFFFFF, 1, AETH_ACK, True),
                                         (12345, 0, AETH_NAK_PSN_SEQ, True)]:
            want = bytes(resp.write_ack(psn, msn, syndrome, echo))
            if block:
                want = ack_with_int(want, block)
            got = lib.ack_frame(prototype, psn, syndrome, msn, echo, block)
            assert got == want and icrc_ok(got)


def _with_int(frame: bytes, at: int, block: bytes) -> bytes:
    f = bytearray(frame)
    f[at:at + len(block)] = block
    return bytes(f)


def test_both_receive_paths_echo_a_data_frames_block_and_hand_an_acks_on():
    try:
        lib = RxLib("compiled")
    except CapabilityError as e:
        pytest.skip(f"compiled receive loop unavailable: {e}")
    block = encode_block(HOPS)
    tmpl = QpTemplate(FLOW, 3 * 4096, mtu_payload_bytes=4096)
    frames = [_with_int(tmpl.write(0, 0, 10), OFF_INT_RETH, block),   # FIRST: after RETH
              _with_int(tmpl.write(1, 1, 11), OFF_INT, block),        # MIDDLE
              tmpl.write(2, 2, 12),                                   # LAST, no INT
              ack_with_int(ResponderTemplate(FLOW._replace(dqpn=FIRST_QPN + 6)).write_ack(4, 0), block),
              bytes(ResponderTemplate(FLOW._replace(dqpn=FIRST_QPN + 6)).write_ack(5, 0))]
    ring = RingSpec.for_headers(1 << 20, SNAP_INT_BYTES)
    offsets = slot_offsets(ring)
    buf = bytearray(ring.size_bytes)
    for k, frame in enumerate(frames):
        snap = bytes(frame[:SNAP_INT_BYTES])
        struct.pack_into("<IIIHHII", buf, offsets[k], 1, len(frame), len(snap), _MAC_OFF,
                         _MAC_OFF + 14, 2, k)
        buf[offsets[k] + _MAC_OFF:offsets[k] + _MAC_OFF + len(snap)] = snap
    # The Python path's reading of the same slots.
    def py(k: int, at: int, room: int) -> bytes:
        snap_len = struct.unpack_from("<I", buf, offsets[k] + 8)[0]
        return block_at(buf, offsets[k] + _MAC_OFF, at, snap_len, room)
    ip_len = [struct.unpack_from(">H", f, 16)[0] for f in frames]
    payload = [4096 - TS_BYTES] * 3
    assert [py(0, OFF_INT_RETH, payload[0]), py(1, OFF_INT, payload[1]),
            py(2, OFF_INT, payload[2])] == [block, block, b""]
    assert py(3, OFF_ACK_INT, ip_len[3] + 14 - 62) == block
    assert py(4, OFF_ACK_INT, ip_len[4] + 14 - 62) == b""
    assert py(1, OFF_INT, 8) == b""                       # no room: a tiny payload

    state = RxState(lib, 16, budget=16, n_nics=1, scale_ns=1e9, cnp_interval_s=0.0)
    resp = ResponderTemplate(FLOW)
    state.add_qps(0, [RxQpSpec(FLOW.dqpn, 3, 1, -1, 0, bytes(resp.ack.buf), resp.cnp)])  # ACK each
    state.blocked[0] = 1                                   # the replies come back as events
    assert state.read(RxRing(buf, offsets, 0), 0, 0, 1) == len(frames)
    events = state.events[:state.n_events.value]
    got = [(e.kind, e.psn, state.int_block(k)) for k, e in enumerate(events)
           if e.kind in (EV_ACK, EV_ACK_IN)]
    assert got == [(EV_ACK, 0, block), (EV_ACK, 1, block), (EV_ACK, 2, b""),
                   (EV_ACK_IN, 4, block), (EV_ACK_IN, 5, b"")]
