"""roce_rx.c's selective-repeat responder against traffic/selective_repeat.py's
SrReceiver, frame by frame, on a hand-filled ring (as tests/unit/test_rx.py does for
go-back-N): reordered, lost, duplicated and CE-marked frames."""

from __future__ import annotations

import contextlib
import random
import socket

import pytest

from engine.rawsock import RingSpec, slot_offsets
from engine.rx import (
    ARG_COMPLETE,
    ARG_ECHO,
    EV_ACK_IN,
    EV_CNP,
    EV_DONE,
    EV_PENDING,
    EV_SR,
    RxQpSpec,
    RxRing,
    RxState,
)
from tests.unit.test_rx import CNP_INTERVAL_S, FLOW, PROTO_ACK, QPN, RESP, SCALE_NS, _fill, _lib
from traffic import gbn
from traffic.dcqcn import NotificationPoint
from traffic.roce import AETH_ACK, QpTemplate
from traffic.selective_repeat import WINDOW_PACKETS, SrReceiver


def _scenario(seed: int, ce_ack: bool) -> tuple:
    """Arrivals of one QP's frames: displaced by up to 2 x reorder, some lost, some twice;
    the events and counters SrReceiver implies, and the replies it writes."""
    rng = random.Random(seed)
    payload = rng.choice([256, 4096])
    tmpl = QpTemplate(FLOW, payload * rng.randint(2, 120), mtu_payload_bytes=payload)
    n = tmpl.n_packets
    coalesce = rng.choice([1, 4, 16])
    # Up to the largest tolerance traffic.reorder_bound derives (the bitmap less one).
    reorder = rng.choice([1, 3, 8, 64, WINDOW_PACKETS - 1])
    keys = [i + rng.uniform(0, 2 * reorder) for i in range(n)]
    order = [i for _, i in sorted(zip(keys, range(n), strict=True))]
    order = [i for i in order if rng.random() > 0.05]             # lost
    order += [rng.randrange(n) for _ in range(rng.randint(0, 5))]  # late copies
    ce = [rng.random() < 0.2 for _ in order]
    ackreq = [rng.random() < 0.1 for _ in order]
    frames = []
    for idx, marked, solicit in zip(order, ce, ackreq, strict=True):
        f = bytearray(tmpl.write(idx, idx, 1_000 + idx, 1 if solicit else None))
        if marked:
            f[15] |= 3
        frames.append(bytes(f))
    stamps = [2_000_000_000 + 1000 * k for k in range(len(frames))]
    ref = SrReceiver(n, coalesce, ce_ack=ce_ack, reorder_packets=reorder)
    np = NotificationPoint(CNP_INTERVAL_S)
    want, replies, done = [], [], False
    for k, (idx, marked, solicit) in enumerate(zip(order, ce, ackreq, strict=True)):
        act = ref.on_packet(idx, marked, solicit or idx == n - 1)  # LAST carries AckReq
        if act.flush:  # its MSN: the highest PSN held before this frame
            assert act.flush_msn == max(idx - 1, ref._high - 1 - (ref._high == idx + 1))
            want.append((EV_SR, (idx - 1) & gbn.PSN_MASK, 0 if marked else ARG_ECHO,
                         act.flush_msn))
            replies.append(bytes(RESP.write_ack(idx - 1, act.flush_msn, AETH_ACK, not marked)))
        if np.on_packet(QPN, marked, (stamps[k] - 600) / SCALE_NS):
            want.append((EV_CNP, idx, 0, 0))
            replies.append(RESP.cnp)
        if act.reply != gbn.NONE:
            want.append((EV_SR, act.psn, ARG_ECHO * act.echo | ref.complete | act.syndrome << 8,
                         act.msn))
            replies.append(bytes(RESP.write_ack(act.psn, act.msn, act.syndrome, act.echo)))
        elif ce_ack and act.deliver and ref.unacknowledged == 1:
            want.append((EV_PENDING, idx, 0, 0))
        if ref.complete and not done:
            done = True
            np.forget(QPN)
            want.append((EV_DONE, idx, 0, 0))
    return frames, stamps, n, coalesce, reorder, ref, want, replies


def _read(frames: list[bytes], stamps: list[int], n: int, coalesce: int, reorder: int,
          ce_ack: bool, fd: int, blocked: bool) -> RxState:
    ring = RingSpec(192, 1 << 16, 4)
    offsets = slot_offsets(ring)
    buf = bytearray(ring.size_bytes)
    _fill(buf, offsets, 0, frames, stamps)
    state = RxState(_lib(), 16, budget=len(frames), n_nics=2, scale_ns=SCALE_NS,
                    cnp_interval_s=CNP_INTERVAL_S)
    state.add_qps(0, [RxQpSpec(QPN, n, coalesce, fd, 1, PROTO_ACK, RESP.cnp)],
                  ce_ack=ce_ack, ack_timer=ce_ack, reorder_packets=reorder)
    state.blocked[1] = int(blocked)
    assert state.read(RxRing(buf, offsets, 0), rt_offset_ns=500, t0_ns=100,
                      sample_every=1) == len(frames)
    return state


@pytest.mark.parametrize("ce_ack", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_c_selective_responder_matches_sr_receiver_frame_by_frame(seed, ce_ack):
    """Its reply NIC blocked, the C loop hands every reply to Python, as events."""
    frames, stamps, n, coalesce, reorder, ref, want, _ = _scenario(seed, ce_ack)
    state = _read(frames, stamps, n, coalesce, reorder, ce_ack, -1, blocked=True)
    events = [(e.kind, e.psn, e.arg, e.msn) for e in state.events[:state.n_events.value]]
    assert events == want
    assert any(e[0] == EV_SR for e in want) or ref.naks_sent == 0
    q = state.qp(QPN)
    assert (q.delivered, q.duplicates, q.out_of_order, q.beyond, q.expected) == \
        (ref.delivered, ref.duplicate_request, ref.out_of_sequence, ref.beyond_window,
         ref._expected)
    assert list(q.got) == ref._got
    want_ack = ref.ack_pending()
    assert state.ack_pending(QPN) == (None if want_ack is None else
                                      (want_ack.psn, want_ack.echo, want_ack.msn))


@pytest.mark.parametrize("seed", range(4))
def test_c_writes_the_selective_naks_python_would(seed):
    frames, stamps, n, coalesce, reorder, ref, want, replies = _scenario(seed, False)
    assert ref.naks_sent
    tx, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with tx, peer:
        state = _read(frames, stamps, n, coalesce, reorder, False, tx.fileno(), blocked=False)
        peer.setblocking(False)
        sent = []
        with contextlib.suppress(BlockingIOError):
            while True:
                sent.append(peer.recv(4096))
    assert sent == replies
    assert [e.kind for e in state.events[:state.n_events.value]] == \
        [EV_DONE] * any(e[0] == EV_DONE for e in want)


def test_an_ack_to_a_sender_hands_its_msn_over():
    """A selective NAK arriving for one of the host's senders: syndrome and MSN reach Python."""
    frame = bytes(RESP.write_ack(40, 37, 0x40 | 4))
    ring = RingSpec(192, 1 << 16, 4)
    offsets = slot_offsets(ring)
    buf = bytearray(ring.size_bytes)
    _fill(buf, offsets, 0, [frame], [2_000_000_000])
    state = RxState(_lib(), 16, budget=4, n_nics=1, scale_ns=SCALE_NS,
                    cnp_interval_s=CNP_INTERVAL_S)
    state.read(RxRing(buf, offsets, 0), rt_offset_ns=0, t0_ns=0, sample_every=1)
    e = state.events[0]
    assert (e.psn, e.arg & 0xFF, e.msn, e.arg & ARG_COMPLETE) == (40, 0x44, 37, 0)
    assert (e.kind, e.qpn) == (EV_ACK_IN, 77)
