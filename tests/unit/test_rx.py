"""The compiled receive loop against the Python reference (gbn.GbnReceiver), on a
hand-filled TPACKET_V2 ring of header-only snaps (no kernel, no root)."""

from __future__ import annotations

import contextlib
import random
import socket
import struct
from typing import NamedTuple

import pytest

from core.errors import CapabilityError
from core.frame import FIRST_QPN
from engine.rawsock import SNAP_BYTES, RingSpec, slot_offsets
from engine.rx import (
    ARG_BECN,
    ARG_COMPLETE,
    ARG_ECHO,
    EV_ACK,
    EV_ACK_IN,
    EV_CNP,
    EV_CNP_IN,
    EV_DONE,
    EV_NAK,
    EV_PENDING,
    EV_UNKNOWN,
    RxLib,
    RxQpSpec,
    RxRing,
    RxState,
)
from traffic import gbn
from traffic.dcqcn import NotificationPoint
from traffic.roce import AETH_ACK, AETH_NAK_PSN_SEQ, Flow, QpTemplate, ResponderTemplate

QPN = FIRST_QPN + 4             # the QP received here: slot 4
SCALE_NS = 1e9                  # S = 1: real seconds are emulated ones
CNP_INTERVAL_S = 2.5e-6         # frames arrive 1 us apart: CNPs are held back
FLOW = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0xC001, QPN,
            ecn="ect0")
RESP = ResponderTemplate(FLOW._replace(dqpn=77))   # where the replies go
PROTO_ACK = bytes(RESP.ack.buf)
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


class _Scenario(NamedTuple):
    """Random arrivals of one QP's frames (gaps, duplicates, CE marks, solicited ACKs),
    then an ACK and a CNP for a sender and two strangers' frames, in a ring whose batch
    wraps; ``want``: the events the Python reference (gbn.GbnReceiver) implies."""

    buf: bytearray
    offsets: list[int]
    start: int
    n_frames: int
    n_packets: int
    size: int
    coalesce: int
    every: int
    stamps: list[int]
    order: list[int]
    ce: list[bool]
    want: list[tuple[int, int, int]]
    lat: list[int]
    ref: gbn.GbnReceiver


def _scenario(seed: int, ce_ack: bool) -> _Scenario:
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
    for stranger in (FIRST_QPN + 9, 1):                     # a QP not received here, GSI
        other = QpTemplate(FLOW._replace(dqpn=stranger), 4096, mtu_payload_bytes=4096)
        frames.append(bytes(other.write(0, 0, 0)))
    ring = RingSpec(192, 1 << 16, 4)
    offsets = slot_offsets(ring)
    buf = bytearray(ring.size_bytes)
    stamps = [2_000_000_000 + 1000 * k for k in range(len(frames))]
    start = len(offsets) - 5                                 # the batch wraps the ring
    _fill(buf, offsets, start, frames, stamps)
    every = rng.choice([1, 3])

    # The reference: the same frames through GbnReceiver and NotificationPoint, as
    # the Python path does.
    ref = gbn.GbnReceiver(n, coalesce, ce_ack=ce_ack)
    np = NotificationPoint(CNP_INTERVAL_S)
    want, lat, done = [], [], False
    for k, (idx, marked, solicit) in enumerate(zip(order, ce, ackreq, strict=True)):
        rx_ns = stamps[k] - 500
        act = ref.on_packet(idx, marked, solicit or idx == n - 1)  # LAST carries AckReq
        if act.flush:
            want.append((EV_ACK, idx - 1, 0 if marked else ARG_ECHO))
        if np.on_packet(QPN, marked, (rx_ns - 100) / SCALE_NS):
            want.append((EV_CNP, idx, 0))
        if (k + 1) % every == 0:
            lat.extend([QPN - FIRST_QPN, rx_ns - 100, rx_ns - (1_000 + idx), int(marked)])
        if act.reply != gbn.NONE:
            want.append((EV_ACK if act.reply == gbn.ACK else EV_NAK, act.psn,
                         ARG_ECHO * act.echo + ref.complete))
        elif ce_ack and act.deliver and ref.unacknowledged == 1:
            want.append((EV_PENDING, idx, 0))
        if ref.complete and not done:
            done = True
            np.forget(QPN)
            want.append((EV_DONE, idx, 0))
    return _Scenario(buf, offsets, start, len(frames), n, size, coalesce, every, stamps, order,
                     ce, want, lat, ref)


def _read(sc: _Scenario, state: RxState) -> list[tuple[int, int, int]]:
    """One batch of the whole scenario: its events, after checking the ring handed back."""
    rx = RxRing(sc.buf, sc.offsets, 0)
    rx.idx.value = sc.start
    got = state.read(rx, rt_offset_ns=500, t0_ns=100, sample_every=sc.every)
    n_slots = len(sc.offsets)
    assert got == sc.n_frames and rx.idx.value == (sc.start + sc.n_frames) % n_slots
    assert all(struct.unpack_from("<I", sc.buf, sc.offsets[(sc.start + k) % n_slots])[0] == 0
               for k in range(sc.n_frames))                 # every slot handed back
    assert state.oldest_ns.value == sc.stamps[0] - 500      # the first frame's arrival
    return [(e.kind, e.psn, e.arg) for e in state.events[:state.n_events.value]]


def _state(sc: _Scenario, ce_ack: bool, fd: int, blocked: bool) -> RxState:
    state = RxState(_lib(), 16, budget=sc.n_frames + 8, n_nics=2, scale_ns=SCALE_NS,
                    cnp_interval_s=CNP_INTERVAL_S)
    state.add_qps(0, [RxQpSpec(QPN, sc.n_packets, sc.coalesce, fd, 1, PROTO_ACK, RESP.cnp)],
                  ce_ack=ce_ack, ack_timer=ce_ack)
    state.blocked[1] = int(blocked)
    return state


@pytest.mark.parametrize("ce_ack", [False, True])   # and the delayed-ACK reports with it
@pytest.mark.parametrize("seed", range(6))
def test_c_responder_matches_gbn_receiver_frame_by_frame(seed, ce_ack):
    """Its reply NIC blocked, the C loop hands every ACK, NAK and CNP to Python."""
    sc = _scenario(seed, ce_ack)
    state = _state(sc, ce_ack, -1, blocked=True)
    events = _read(sc, state)
    want, ref = sc.want, sc.ref
    assert events[:len(want)] == want
    assert any(k == EV_PENDING for k, _, _ in want) == (ce_ack and sc.coalesce > 1)
    # The ACK to a sender (its BECN is the echo), the CNP, then the strangers.
    assert [(e, a) for e, _, a in events[len(want):]][:2] == [(EV_ACK_IN, ARG_BECN), (EV_CNP_IN, 0)]
    assert [e for e, _, _ in events[-2:]] == [EV_UNKNOWN, EV_UNKNOWN]
    assert list(state.latency[:state.n_latency.value]) == sc.lat
    q = state.qp(QPN)
    assert (q.delivered, q.duplicates, q.out_of_order) == \
        (ref.delivered, ref.duplicates, ref.out_of_order)
    assert q.seen == len(sc.order) and q.ce == sum(sc.ce)
    assert q.cnps == sum(1 for e in want if e[0] == EV_CNP)
    assert q.bytes == sc.size                                # every byte delivered once
    assert q.first_rx_ns == sc.stamps[0] - 500
    assert state.ctrl_sent.value == 0
    # The delayed ACK on the C state is the reference's.
    want_ack = ref.ack_pending()
    assert state.ack_pending(QPN) == (None if want_ack is None else
                                      (want_ack.psn, want_ack.echo, want_ack.msn))
    assert state.ack_pending(QPN) is None


@pytest.mark.parametrize("refused", [False, True])
@pytest.mark.parametrize("ce_ack", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_c_sends_the_control_frames_python_would_in_its_order(seed, ce_ack, refused):
    """With its NIC free, C writes and sends the ACKs, NAKs and CNPs itself, the frames
    ResponderTemplate writes, in the reference's order; once the socket refuses one,
    it and everything after it in the batch go to Python as events."""
    sc = _scenario(seed, ce_ack)
    tx, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with tx, peer:
        if refused:
            peer.close()                                    # sends fail: ECONNREFUSED
        state = _state(sc, ce_ack, tx.fileno(), blocked=False)
        events = _read(sc, state)
        sent = []
        if not refused:
            peer.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while True:
                    sent.append(peer.recv(4096))
    ctrl = [(k, e) for k, e in enumerate(sc.want) if e[0] in (EV_ACK, EV_NAK, EV_CNP)]
    in_c = set() if refused else {k for k, _ in ctrl}
    assert sent == [RESP.cnp if kind == EV_CNP else bytes(RESP.write_ack(
        psn, arg & ARG_COMPLETE, AETH_ACK if kind == EV_ACK else AETH_NAK_PSN_SEQ,
        bool(arg & ARG_ECHO))) for k, (kind, psn, arg) in ctrl if k in in_c]
    rest = [e for k, e in enumerate(sc.want) if k not in in_c]
    assert events[:len(rest)] == rest
    assert state.ctrl_sent.value == len(in_c) and (refused or ctrl == [] or sent)
    assert state.qp(QPN).cnps == sum(1 for e in sc.want if e[0] == EV_CNP)
