"""The compiled receive loop against the Python reference (gbn.GbnReceiver), on a
hand-filled TPACKET_V2 ring of header-only snaps (no kernel, no root)."""

from __future__ import annotations

import random
import struct

import pytest

from core.errors import CapabilityError
from engine.rawsock import SNAP_BYTES, RingSpec, slot_offsets
from engine.rx import (
    ARG_BECN,
    ARG_ECHO,
    EV_ACK,
    EV_ACK_IN,
    EV_CE,
    EV_CNP_IN,
    EV_DONE,
    EV_NAK,
    EV_PENDING,
    EV_UNKNOWN,
    RxLib,
    RxRing,
    RxState,
)
from traffic import gbn
from traffic.roce import Flow, QpTemplate, ResponderTemplate

FLOW = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0xC001, 5,
            ecn="ect0")
_MAC_OFF = 66


def _lib() -> RxLib:
    try:
        return RxLib("compiled")
    except CapabilityError as e:
        pytest.skip(f"compiled receive loop unavailable: {e}")


def _fill(buf: bytearray, offsets: list[int], start: int, frames: list[bytes],
          stamps_ns: list[int]) -> None:
    for k, (frame, t) in enumerate(zip(frames, stamps_ns, strict=True)):
        off = offsets[(start + k) % len(offsets)]
        snap = frame[:SNAP_BYTES]
        struct.pack_into("<IIIHHII", buf, off, 1, len(frame), len(snap), _MAC_OFF,
                         _MAC_OFF + 14, t // 1_000_000_000, t % 1_000_000_000)
        buf[off + _MAC_OFF:off + _MAC_OFF + len(snap)] = snap


@pytest.mark.parametrize("ce_ack", [False, True])   # and the delayed-ACK reports with it
@pytest.mark.parametrize("seed", range(6))
def test_c_responder_matches_gbn_receiver_frame_by_frame(seed, ce_ack):
    rng = random.Random(seed)
    payload = rng.choice([256, 1000, 4096])
    size = payload * rng.randint(3, 40) - rng.randint(0, payload - 1)
    tmpl = QpTemplate(FLOW, size, mtu_payload_bytes=payload)
    n = tmpl.n_packets
    coalesce = rng.choice([1, 4, 16])
    # Arrivals: in order, with drops (gaps), duplicates and CE marks.
    order, i = [], 0
    while i < n:
        r = rng.random()
        if r < 0.1 and i + 1 < n:
            order.append(i + 1)          # i lost for now: a gap
        elif r < 0.15 and i > 0:
            order.append(i - 1)          # duplicate
        else:
            order.append(i)
            i += 1
    ce = [rng.random() < 0.2 for _ in order]
    ackreq = [rng.random() < 0.1 for _ in order]            # ACKs the sender solicited
    frames = []
    for idx, marked, solicit in zip(order, ce, ackreq, strict=True):
        f = bytearray(tmpl.write(idx, idx, 1_000 + idx, 1 if solicit else None))
        if marked:
            f[15] |= 3
        frames.append(bytes(f))
    frames.append(bytes(ResponderTemplate(FLOW).write_ack(3, 0, echo=True)))  # to a sender
    frames.append(bytes(ResponderTemplate(FLOW).cnp))      # a CNP: passed through
    other = QpTemplate(FLOW._replace(dqpn=9), 4096, mtu_payload_bytes=4096)
    frames.append(bytes(other.write(0, 0, 0)))              # data of a QP not received here
    ring = RingSpec(192, 1 << 16, 4)
    offsets = slot_offsets(ring)
    buf = bytearray(ring.size_bytes)
    stamps = [2_000_000_000 + 1000 * k for k in range(len(frames))]
    start = len(offsets) - 5                                 # the batch wraps the ring
    _fill(buf, offsets, start, frames, stamps)

    lib = _lib()
    state = RxState(lib, 16, budget=len(frames) + 8)
    state.add_qps(0, [(5, n, coalesce)], ce_ack=ce_ack, ack_timer=ce_ack)
    rx = RxRing(buf, offsets, 0)
    rx.idx.value = start
    every = rng.choice([1, 3])
    got = state.read(rx, rt_offset_ns=500, t0_ns=100, sample_every=every)
    assert got == len(frames) and rx.idx.value == (start + len(frames)) % len(offsets)
    assert all(struct.unpack_from("<I", buf, offsets[(start + k) % len(offsets)])[0] == 0
               for k in range(len(frames)))                 # every slot handed back

    # The reference: the same frames through GbnReceiver, as the Python path does.
    ref = gbn.GbnReceiver(n, coalesce, ce_ack=ce_ack)
    want, lat, done = [], [], False
    for k, (idx, marked, solicit) in enumerate(zip(order, ce, ackreq, strict=True)):
        rx_ns = stamps[k] - 500
        act = ref.on_packet(idx, marked, solicit or idx == n - 1)  # LAST carries AckReq
        if act.flush:
            want.append((EV_ACK, idx - 1, 0 if marked else ARG_ECHO))
        if marked:
            want.append((EV_CE, idx, 0))
        if (k + 1) % every == 0:
            lat.extend([4, rx_ns - 100, rx_ns - (1_000 + idx), int(marked)])
        if act.reply != gbn.NONE:
            want.append((EV_ACK if act.reply == gbn.ACK else EV_NAK, act.psn,
                         ARG_ECHO * act.echo + ref.complete))
        elif ce_ack and act.deliver and ref.unacknowledged == 1:
            want.append((EV_PENDING, idx, 0))
        if ref.complete and not done:
            done = True
            want.append((EV_DONE, idx, 0))
    events = [(e.kind, e.psn, e.arg) for e in state.events[:state.n_events.value]]
    assert events[:len(want)] == want
    assert any(k == EV_PENDING for k, _, _ in want) == (ce_ack and coalesce > 1)
    # The ACK to a sender (its BECN is the echo), the CNP, then the stranger.
    assert [(e, a) for e, _, a in events[len(want):]][:2] == [(EV_ACK_IN, ARG_BECN), (EV_CNP_IN, 0)]
    assert events[-1][0] == EV_UNKNOWN
    assert list(state.latency[:state.n_latency.value]) == lat
    q = state.qps[5]
    assert (q.delivered, q.duplicates, q.out_of_order) == \
        (ref.delivered, ref.duplicates, ref.out_of_order)
    assert q.seen == len(order) and q.ce == sum(ce)
    assert q.bytes == size                                   # every byte delivered once
    assert q.first_rx_ns == stamps[0] - 500
    # The delayed ACK on the C state is the reference's.
    want_ack = ref.ack_pending()
    assert state.ack_pending(5) == (None if want_ack is None else (want_ack.psn, want_ack.echo))
    assert state.ack_pending(5) is None
