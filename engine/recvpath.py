"""The receive path: a host's ring (``sources.Host``) and its responders' delayed ACKs
(``sources.RecvQp``).

Frames are read in batches from the TPACKET_V2 ring, headers only
(``engine.rawsock``), at most ``RX_BUDGET`` per ring per call. Data frames go to
their responder (go-back-N receive, ``traffic.gbn.GbnReceiver``; coalesced ACKs and
NAKs carrying the ECN echo; CNPs from the host's ``NotificationPoint``), ACKs and
CNPs to their requester (``engine.requester``). Each read records how long its
oldest frame waited in the ring (receive lag: a frame read late is answered late).
A fully received message is announced to the workers that wait for it and posts
its local dependants (``finished``).

``ReceivePath`` is the interface and the Python implementation;
``CompiledReceivePath`` reads the ring in C (csrc/roce_rx.c, ``engine.rx``), which
writes and sends the replies itself and returns only what Python must act on.
"""

from __future__ import annotations

import struct
import time

from core.frame import (
    ACK_FRAME_BYTES,
    ETH_BYTES,
    HEADER_BYTES,
    OFF_ACK_INT,
    OFF_INT,
    OFF_INT_RETH,
    OFF_TS,
    OFF_TS_RETH,
    RETH_BYTES,
    TS_BYTES,
)
from engine.books import Books, take
from engine.completions import Completions
from engine.handover import Handover
from engine.rawsock import TP_STATUS_USER, TPACKET2_HDR
from engine.requester import Requester
from engine.rx import (
    ARG_BECN,
    ARG_COMPLETE,
    ARG_ECHO,
    EV_ACK,
    EV_ACK_IN,
    EV_ANNOUNCE,
    EV_CNP,
    EV_CNP_IN,
    EV_DONE,
    EV_NAK,
    EV_PENDING,
    EV_SR,
    RxQpSpec,
    RxRing,
    RxState,
)
from engine.sources import Host, RecvQp
from traffic import gbn
from traffic.int_telemetry import block_at
from traffic.roce import (
    ACKNOWLEDGE,
    AETH_ACK,
    AETH_NAK_PSN_SEQ,
    CNP,
    DATA_OPCODES,
    ECN_CE,
    RETH_OPCODES,
)

RX_BUDGET = 64                          # frames per ring per call: due sends interleave
_TP_STATUS = struct.Struct("<I")
# Fixed offsets of an IHL-5 frame: TOS 15, IP total length 16, BTH opcode 42,
# flags 43, QP word 46, PSN word 50.
_ROCE = struct.Struct(">15xBH24xBB2xII")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
# IPv4, UDP, BTH and ICRC around the payload: an IP total length minus this is payload.
_IP_OVERHEAD_BYTES = HEADER_BYTES - ETH_BYTES


class ReceivePath:
    """Reads hosts' rings and acts on their frames, in Python."""

    def __init__(self, books: Books, out: Handover, requester: Requester,
                 completions: Completions, hosts: list[Host]):
        self.books = books
        self.out = out
        self.requester = requester
        self.completions = completions
        ack_delay_s = books.plan.ack_delay_s
        self.ack_delay_ns = None if ack_delay_s is None else int(ack_delay_s * books.scale_ns)
        for h in hosts:
            h.server = self
            for rq in h.rx_qps.values():
                rq.server = self

    def finish(self, hosts: list[Host]) -> None:
        """The run is over: what this path counted joins the books and the responders."""

    # -- what both paths share -------------------------------------------------------
    def finished(self, h: Host, rq: RecvQp) -> None:
        """``rq`` was fully received: announce it and start what waited for it."""
        index = rq.plan.index
        h.np.forget(index)
        self.books.shared.received[index] = 1
        self.completions.announce(index, rq.done_ns)
        self.requester.completed(index, rq.done_ns, time.monotonic_ns())

    def to_requester(self, h: Host, kind: int, qpn: int, psn: int, arg: int, rx_ns: int,
                     int_block: bytes = b"") -> None:
        """An ACK (EV_ACK_IN) or CNP (EV_CNP_IN) that arrived at ``h`` for its sending QP
        ``qpn``: to the requester, or counted as unknown if that QP has not started (no
        transport state for an ACK, no congestion control for a CNP)."""
        qp = h.tx_qps.get(qpn)
        if qp is None or not self.requester.knows(qp, kind):
            self.books.unknown_frames += 1
        else:
            self.requester.ctrl_in(qp, kind, psn, arg, rx_ns, int_block)

    def arm_delayed_ack(self, rq: RecvQp, rx_ns: int) -> None:
        """The first frame left waiting for its ACK arrived at ``rx_ns``."""
        if self.ack_delay_ns is not None:
            self.books.deadlines.arm(rq, rx_ns + self.ack_delay_ns)

    def delayed_ack(self, rq: RecvQp) -> None:
        """ACK what ``rq`` delivered and has not acknowledged yet, if anything."""
        pending = self._ack_pending(rq)
        if pending is not None:
            self.out.send_ctrl(rq.nic, rq.resp.write_ack(pending[0], pending[2], AETH_ACK,
                                                         pending[1]))

    def _ack_pending(self, rq: RecvQp) -> tuple[int, bool, int] | None:
        """The delayed ACK's (PSN, ECN echo, MSN), or None if nothing waits for one."""
        action = rq.gbn.ack_pending()
        return None if action is None else (action.psn, action.echo, action.msn)

    # -- Python ------------------------------------------------------------------------
    def receive(self, h: Host, now: int) -> None:
        """A batch from ``h``'s ring, read at ``now``."""
        mm = h.mm
        offsets = h.offsets
        n_slots = len(offsets)
        idx = h.idx
        tp2 = TPACKET2_HDR.unpack_from
        roce = _ROCE.unpack_from
        set_status = _TP_STATUS.pack_into
        rt_offset = self.books.plan.rt_offset_ns
        oldest_ns = got = 0
        for _ in range(RX_BUDGET):
            off = offsets[idx]
            status, _len, snap, mac, _net, sec, nsec = tp2(mm, off)
            if not status & TP_STATUS_USER:
                break
            rx_ns = sec * 1_000_000_000 + nsec - rt_offset
            if not got:
                oldest_ns = rx_ns
            self._frame(h, off + mac, snap, rx_ns, roce(mm, off + mac))
            set_status(mm, off, 0)
            got += 1
            idx += 1
            if idx == n_slots:
                idx = 0
        h.idx = idx
        if got:
            books = self.books
            books.packets_received += got
            books.rx_lags.extend((now - max(oldest_ns, books.t0_ns), got))

    def _frame(self, h: Host, f: int, snap: int, rx_ns: int,
               fields: tuple[int, int, int, int, int, int]) -> None:
        """Act on the frame at ``f`` in ``h``'s ring (its RoCE header ``fields``)."""
        mm = h.mm
        tos, ip_len, opcode, flags, qp_word, psn_word = fields
        qpn = qp_word & 0xFFFFFF
        psn = psn_word & 0xFFFFFF
        if opcode in DATA_OPCODES:
            rq = h.rx_qps.get(qpn)
            if rq is None:
                self.books.unknown_frames += 1
                return
            reth = opcode in RETH_OPCODES
            ts = _U64.unpack_from(mm, f + (OFF_TS_RETH if reth else OFF_TS))[0]
            payload = ip_len - _IP_OVERHEAD_BYTES - (RETH_BYTES if reth else 0) - (flags >> 4 & 3)
            self._on_data(h, rq, psn, tos & 3 == ECN_CE, psn_word >> 31, payload, ts, rx_ns,
                          block_at(mm, f, OFF_INT_RETH if reth else OFF_INT, snap,
                                   payload - TS_BYTES))
        elif opcode == ACKNOWLEDGE:  # the AETH syndrome and MSN; BTH BECN is the ECN echo
            aeth = _U32.unpack_from(mm, f + OFF_TS)[0]
            self.to_requester(h, EV_ACK_IN, qpn, psn,
                              aeth >> 24 | (aeth & 0xFFFFFF) << 16
                              | (ARG_BECN if qp_word >> 30 & 1 else 0), rx_ns,
                              block_at(mm, f, OFF_ACK_INT, snap,
                                       ip_len + ETH_BYTES - ACK_FRAME_BYTES))
        elif opcode == CNP:
            self.to_requester(h, EV_CNP_IN, qpn, psn, 0, rx_ns)
        else:
            self.books.unknown_frames += 1

    def _on_data(self, h: Host, rq: RecvQp, psn: int, ce: bool, ackreq: int, payload: int,
                 ts_ns: int, rx_ns: int, int_block: bytes) -> None:
        books = self.books
        send = self.out.send_ctrl
        action = rq.gbn.on_packet(psn, ce, bool(ackreq))
        if action.flush:  # the CE state changed: ACK the frames before with theirs
            send(rq.nic, rq.resp.write_ack((psn - 1) & gbn.PSN_MASK, action.flush_msn, AETH_ACK,
                                         not ce))
        if rq.first_rx_ns < 0:
            rq.first_rx_ns = rx_ns
        if action.deliver:
            rq.bytes += payload
        rq.seen += 1
        if ce:
            rq.ce += 1
            if h.np.on_packet(rq.plan.index, True, books.real_s(rx_ns)):
                rq.cnps += 1
                send(rq.nic, rq.resp.cnp)
        h.rx_count += 1
        if h.rx_count % books.plan.latency_sample_every == 0:
            books.lat.extend((rq.plan.index, rx_ns - books.t0_ns, rx_ns - ts_ns, ce))
        if action.reply != gbn.NONE:
            send(rq.nic, rq.resp.write_ack(action.psn, action.msn, action.syndrome, action.echo),
                 int_block)
        elif action.deliver and rq.gbn.unacknowledged == 1:
            self.arm_delayed_ack(rq, rx_ns)
        if rq.done_ns < 0 and rq.gbn.complete:
            rq.done_ns = rx_ns
            self.finished(h, rq)


class CompiledReceivePath(ReceivePath):
    """``ReceivePath`` through roce_rx.c: Python acts on the events a read returns."""

    def __init__(self, books: Books, out: Handover, requester: Requester,
                 completions: Completions, hosts: list[Host], rx: RxState):
        super().__init__(books, out, requester, completions, hosts)
        self.rx = rx
        plan = books.plan
        for host_id, h in enumerate(hosts):
            h.ring = RxRing(h.mm, h.offsets, host_id)
            rx.add_qps(host_id, [
                RxQpSpec(qpn, rq.gbn.total_packets, rq.gbn.ack_coalesce,
                         rq.nic.sock.fileno(), rq.nic.slot, bytes(rq.resp.ack.buf),
                         rq.resp.cnp)
                for qpn, rq in h.rx_qps.items()], plan.ce_ack,
                ack_timer=plan.ack_delay_s is not None,
                reorder_packets=plan.reorder_packets if plan.transport == "sr" else None)

    def _ack_pending(self, rq: RecvQp) -> tuple[int, bool, int] | None:
        return self.rx.ack_pending(rq.plan.flow.dqpn)

    def receive(self, h: Host, now: int) -> None:
        rx = self.rx
        books = self.books
        plan = books.plan
        n = rx.read(h.ring, plan.rt_offset_ns, books.t0_ns, plan.latency_sample_every)
        if n:
            books.packets_received += n
            # What arrived before the run's start waited for the start, not for a read.
            books.rx_lags.extend((now - max(rx.oldest_ns.value, books.t0_ns), n))
        if rx.n_latency.value:
            take(books.lat, rx.latency, rx.n_latency.value)
        self.act(h)

    def act(self, h: Host) -> None:
        """Act on the events of the last read of ``h``'s ring."""
        rx = self.rx
        events = rx.events
        for k in range(rx.n_events.value):
            e = events[k]
            self._event(h, k, e.kind, e.qpn, e.psn, e.arg, e.msn, e.rx_ns)

    def _event(self, h: Host, k: int, kind: int, qpn: int, psn: int, arg: int, msn: int,
               rx_ns: int) -> None:
        """Act on event ``k`` of the last read."""
        rx = self.rx
        if kind in (EV_ACK, EV_NAK):
            rq = h.rx_qps[qpn]
            syndrome = AETH_ACK if kind == EV_ACK else AETH_NAK_PSN_SEQ
            self.out.send_ctrl(rq.nic, rq.resp.write_ack(psn, arg & ARG_COMPLETE, syndrome,
                                                         bool(arg & ARG_ECHO)),
                               rx.int_block(k))
        elif kind == EV_SR:  # selective repeat's ACK or NAK, with its own syndrome and MSN
            rq = h.rx_qps[qpn]
            self.out.send_ctrl(rq.nic, rq.resp.write_ack(psn, msn, arg >> 8,
                                                         bool(arg & ARG_ECHO)),
                               rx.int_block(k))
        elif kind == EV_PENDING:
            self.arm_delayed_ack(h.rx_qps[qpn], rx_ns)
        elif kind == EV_CNP:  # decided (and counted) in C, sent here
            rq = h.rx_qps[qpn]
            self.out.send_ctrl(rq.nic, rq.resp.cnp)
        elif kind == EV_DONE:
            rq = h.rx_qps[qpn]
            rq.done_ns = rx_ns
            self.finished(h, rq)
        elif kind == EV_ANNOUNCE:
            self.completions.announce(h.rx_qps[qpn].plan.index, rx_ns)
        elif kind == EV_ACK_IN:
            self.to_requester(h, EV_ACK_IN, qpn, psn, arg | msn << 16, rx_ns, rx.int_block(k))
        elif kind == EV_CNP_IN:
            self.to_requester(h, EV_CNP_IN, qpn, psn, 0, rx_ns)
        else:
            self.books.unknown_frames += 1

    def finish(self, hosts: list[Host]) -> None:
        rx = self.rx
        for h in hosts:
            for qpn, rq in h.rx_qps.items():
                c = rx.qp(qpn)
                rq.bytes, rq.ce, rq.seen = c.bytes, c.ce, c.seen
                rq.first_rx_ns = c.first_rx_ns
                rq.done_ns = c.done_ns  # also where the compiled loop took its EV_DONE
                rq.gbn.duplicates, rq.gbn.out_of_order = c.duplicates, c.out_of_order
                rq.cnps = c.cnps
        books = self.books
        books.packets_sent += rx.ctrl_sent.value  # the replies it sent
        books.ctrl_sent += rx.ctrl_sent.value
        rx.ctrl_sent.value = 0
