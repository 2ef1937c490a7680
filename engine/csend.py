"""The send path in C: ``SendPath`` with its per-NIC loop in csrc/roce_tx.c.

Every NIC is served by ``tx_service``, which picks the due QP, takes its frames from
go-back-N, sends the burst, books the schedules, lags and busy period, and returns
to Python only for what Python must do: a QP gone idle, a trace that is due, an
algorithm's ``on_send``, a short send, a burst for a QP's delay line (unless the
lines are compiled too: ``use_lines``). The go-back-N
and schedule state lives in C structs (``engine.tx``) that borrow the pure classes'
Python methods for every other event, so the requester acts on ACKs, NAKs and
timers with the same code on either path.
"""

from __future__ import annotations

import ctypes
import os

from engine.books import NEVER_NS, Books, take
from engine.burst import MAX_BURST, Burst
from engine.ccview import c_twin
from engine.handover import Handover
from engine.sendpath import SendPath, fresh_transport
from engine.sources import MAX_CATCHUP_NS, Nic, SendQp
from engine.tx import (
    TX_AFTER,
    TX_ARM,
    TX_EMPTY,
    TX_GROW,
    TX_IDLE,
    TX_LAGS,
    TxCall,
    TxGbn,
    TxLib,
    TxLine,
    TxNic,
    TxQp,
    TxSr,
    attach,
    line_ring,
)
from traffic.cc import calls_on_send

_LINE_BURSTS = 64                       # a delay line's first room, in bursts (it grows)


class CompiledSendPath(SendPath):
    """``SendPath`` through roce_tx.c: Python acts only on what ``tx_service`` returns."""

    def __init__(self, books: Books, out: Handover, lib: TxLib, burst: Burst,
                 senders: list[SendQp], nics: list[Nic]):
        super().__init__(books, out)
        self.lib = lib
        self.burst = burst
        self.senders = senders
        self.nics = nics
        qps = (TxQp * max(1, len(senders)))()
        self.tx_qps = qps
        by_nic: dict[int, list[SendQp]] = {}
        for slot, qp in enumerate(senders):
            qp.slot = slot
            by_nic.setdefault(id(qp.nic), []).append(qp)
        for nic in nics:
            mine = by_nic.get(id(nic), [])
            if mine:
                self._compile_nic(nic, mine, qps)
        self.lags = (ctypes.c_int64 * (16 * MAX_BURST))()
        self.call = TxCall(qps=ctypes.cast(qps, ctypes.POINTER(TxQp)),
                           buf=burst.buffer_address,
                           lags=ctypes.cast(self.lags, ctypes.POINTER(ctypes.c_int64)),
                           lags_cap=len(self.lags), scale_ns=books.scale_ns,
                           payload_bytes=books.plan.payload_bytes,
                           max_catchup_ns=MAX_CATCHUP_NS)
        self.call_addr = ctypes.addressof(self.call)
        self.lines: list[ctypes.Array] = []             # every NIC's TxLines
        self.rings: dict[int, ctypes.Array] = {}        # each TxLine's ring, by its address

    def _compile_nic(self, nic: Nic, mine: list[SendQp], qps: ctypes.Array) -> None:
        """Give ``nic`` and its QPs ``mine`` C views (their schedules move into them)."""
        c = TxNic(fd=nic.sock.fileno(), fwd_ns=nic.fwd_ns, ns_per_bit=nic.ns_per_bit,
                  period_start=-1, line_due=NEVER_NS, rate_period_ns=nic.rate_period_ns)
        c.sched.max_catchup_ns = MAX_CATCHUP_NS
        nic.active = (ctypes.c_int32 * len(mine))()
        c.active = ctypes.cast(nic.active, ctypes.POINTER(ctypes.c_int32))
        nic.c, nic.c_addr, nic.sched = c, ctypes.addressof(c), c.sched
        for qp in mine:
            q = qp.c = qps[qp.slot]
            q.sched.max_catchup_ns = MAX_CATCHUP_NS
            qp.sched = q.sched
            for k, shape in enumerate((qp.first, qp.middle, qp.last)):
                q.shape[k] = self.burst.shape_address(shape)
                q.bits[k] = qp.bits[k]
            q.first_tx_ns = q.last_tx_ns = -1
            q.size_bytes = qp.plan.size_bytes
            q.line_ns = qp.line_ns
            q.idle = True
            self._prepare(qp, q)

    def use_lines(self) -> None:
        """The delay lines of data bursts go into C (roce_tx.c's struct tx_line, one per
        NIC and path delay), released by the compiled loop (engine.cloop) through
        ``tx_release``; without this call they are Python's (``sources.DelayLine``)."""
        classes: dict[int, dict[int, list[SendQp]]] = {}
        for qp in self.senders:
            if qp.c is not None and qp.line_ns > 0:
                by_delay = classes.setdefault(id(qp.nic), {})
                by_delay.setdefault(qp.plan.fwd_delay_emu_ns, []).append(qp)
        for nic in self.nics:
            by_delay = classes.get(id(nic))
            if not by_delay or nic.c is None:
                continue
            lines = (TxLine * len(by_delay))()
            self.lines.append(lines)
            for line, (delay_ns, qps) in zip(lines, by_delay.items(), strict=True):
                line.delay_ns = delay_ns
                self.rings[ctypes.addressof(line)] = line_ring(line, _LINE_BURSTS)
                for qp in qps:
                    qp.c.line = ctypes.pointer(line)  # type: ignore[union-attr]
            nic.c.n_lines = len(lines)
            nic.c.lines = ctypes.cast(lines, ctypes.POINTER(TxLine))

    def _grow(self, qp: SendQp) -> None:
        """``qp``'s line is full (TX_GROW): twice the room."""
        line = qp.c.line.contents  # type: ignore[union-attr]
        key = ctypes.addressof(line)
        self.rings[key] = line_ring(line, 2 * line.cap, self.rings[key])

    def release(self, nic: Nic, now: int, event: int = -1) -> None:
        """Hand over ``nic``'s earliest delay-line burst if it is due within a turn of
        ``now`` (wall), from ``event``, tx_release's answer (-1: not called yet): Python's
        part is the backlog (engine.handover) its frames wait behind, and what the kernel
        refused. The compiled loop comes back for the next burst."""
        call = self.call
        if event < 0:
            call.nic = nic.c_addr
            call.now = now
            call.horizon = now + self.books.turn_ns
        while True:
            if event < 0:
                call.build_only = bool(nic.backlog) and not self.out.flush_backlog(nic)
                event = self.lib.release(self.call_addr)
            if event == TX_ARM:
                return
            if event == TX_LAGS:
                self.drain_lags()
            elif event == TX_AFTER:  # the kernel refused some of a burst: kept, retried
                self._keep_refused(nic, bool(call.build_only), now)
            else:  # TX_ERROR
                raise OSError(call.err, f"sendmmsg: {os.strerror(call.err)}")
            event = -1

    def start_clock(self, t0_ns: int) -> None:
        self.call.t0 = t0_ns

    def _prepare(self, qp: SendQp, c: TxQp) -> None:
        """Go-back-N's fresh state and the send-time array, made at set-up (before the
        run) instead of when ``qp`` starts: a start is Python's work in the run, and a
        fattree,8 ring starts 64 of a worker's QPs at once, 8 frames each. Selective
        repeat's state (16 KB a QP) waits for the start."""
        if self.books.plan.transport == "gbn":
            self._into_c(qp, c)

    def _into_c(self, qp: SendQp, c: TxQp) -> TxGbn | TxSr:
        """A fresh sender for ``qp`` with its state in ``c`` (go-back-N or selective
        repeat) and its send-time array lent to ``c``: the view to use as its sender."""
        sender, qp.tx_ns = fresh_transport(self.books.plan, qp.n)
        c.tx_ns = ctypes.cast(qp.tx_ns.buffer_info()[0], ctypes.POINTER(ctypes.c_int64))
        return attach(c, sender)

    def begin(self, qp: SendQp, now: int) -> None:
        c = qp.c
        if c is None:
            super().begin(qp, now)
            return
        # The compiled sender keeps the transport's state; made at set-up if tx_ns is set.
        qp.gbn = c.gbn if c.tx_ns else self._into_c(qp, c)
        # An algorithm with a C twin is acted on in C (tx_service, the compiled loop's
        # ACKs); Python's on_send is called only for the others that have one.
        qp.cc, twin = c_twin(qp.cc)
        if twin is not None:
            setattr(c, twin.QP_FIELD, ctypes.addressof(twin))
        c.calls_on_send = twin is None and calls_on_send(qp.cc)
        self.sync_cc(qp)

    def sync_cc(self, qp: SendQp) -> None:
        c = qp.c
        if c is None:
            return
        rate, window = self.books.pace_of(qp.cc)
        c.rate_bps = rate
        c.window_bytes = -1.0 if window is None else window

    # A compiled NIC's busy QPs are C's (``nic.active``, ``n_active``): tx_service
    # takes a QP off when it runs out of frames, and the compiled loop puts the QPs
    # it starts on.
    def activate(self, qp: SendQp) -> None:
        nic = qp.nic
        if nic.c is None:
            super().activate(qp)
            return
        nic.active[nic.c.n_active] = qp.slot
        nic.c.n_active += 1

    def deactivate(self, qp: SendQp) -> None:
        nic = qp.nic
        if nic.c is None:
            super().deactivate(qp)
            return
        n = nic.c.n_active
        k = nic.active[:n].index(qp.slot)
        nic.active[k:n - 1] = nic.active[k + 1:n]
        nic.c.n_active = n - 1

    def busy(self, nic: Nic) -> bool:
        return nic.qps != [] if nic.c is None else nic.c.n_active > 0

    def end_period(self, nic: Nic) -> None:
        if nic.c is None:
            super().end_period(nic)
        else:  # tx_service closes it when the NIC runs out of frames; the run's end here
            self.lib.close_period(nic.c_addr)

    def drain_lags(self) -> None:
        call = self.call
        if call.n_lags:
            take(self.books.lags, self.lags, call.n_lags)
            call.n_lags = 0

    def _serve(self, nic: Nic, now: int) -> None:
        if nic.c is None:  # no QP of this worker sends on it: nothing to send
            self.end_period(nic)
            return
        call = self.call
        call.nic = nic.c_addr
        call.now = now
        call.horizon = now + self.books.turn_ns
        self.resume(nic, self.lib.service(self.call_addr))

    def resume(self, nic: Nic, event: int) -> None:
        """Go on serving ``nic`` from ``event``, tx_service's answer (its call block
        holds the service's NIC time and horizon): until the NIC is armed or empty."""
        call = self.call
        now = call.now
        service = self.lib.service
        addr = self.call_addr
        while True:
            if event == TX_ARM:
                self.books.arm_nic(nic, call.arm_ns)
                return
            if event == TX_EMPTY:  # tx_service closed its busy period
                return
            if event == TX_LAGS:
                self.drain_lags()
            elif event == TX_GROW:
                self._grow(self.senders[call.qp])
            elif event not in (TX_IDLE, TX_AFTER):  # TX_ERROR
                raise OSError(call.err, f"sendmmsg: {os.strerror(call.err)}")
            elif event == TX_IDLE:  # window full or everything sent: wait for ACKs or the RTO
                self.books.arm_rto(self.senders[call.qp])  # tx_service made it idle
            elif self._after(nic, self.senders[call.qp], now):
                return
            event = service(addr)

    def _after(self, nic: Nic, qp: SendQp, now: int) -> bool:
        """Python's part of a burst ``tx_service`` returned with (TX_AFTER); True if the
        NIC's queue refused some of it (retried shortly)."""
        call = self.call
        books = self.books
        if call.hold:  # decided and booked; the delay line hands it over
            shape = (qp.first, qp.middle, qp.last)[call.which]
            qp.delay.hold(qp.delay.frames,  # type: ignore[union-attr]
                          (now + qp.plan.fwd_delay_emu_ns, shape, call.psn, call.count,
                           call.lag, call.step, bool(call.solicit)), books.deadlines)
        if qp.c.calls_on_send:  # type: ignore[union-attr]
            qp.cc.on_send(call.sent_bytes, call.t_real)
            self.sync_cc(qp)
        if now >= qp.c.next_trace_ns:  # type: ignore[union-attr]
            books.trace(qp, now)
        if call.sent < call.count:  # the NIC queue is full: keep the rest, retry
            self._keep_refused(nic, False, now + nic.fwd_ns)
            return True
        return False

    def _keep_refused(self, nic: Nic, counted: bool, retry_ns: int) -> None:
        """The frames of the call's burst the kernel did not take wait in ``nic``'s
        backlog (``counted``: already in the books), retried at ``retry_ns``."""
        call = self.call
        self.burst.wrote(call.count, call.frame_len)
        self.out.push_back(nic, [self.burst.frame(i) for i in range(call.sent, call.count)],
                           counted=counted)
        self.out.retry_at(nic, retry_ns)

    def finish(self) -> None:
        self.drain_lags()
        books = self.books
        call = self.call
        books.data_sent += call.data_sent
        books.packets_sent += call.packets_sent
        books.lag_total_ns += call.lag_total_ns
        for q in self.senders:
            if q.c is not None:
                q.bytes_sent, q.first_tx_ns, q.last_tx_ns = \
                    q.c.bytes_sent, q.c.first_tx_ns, q.c.last_tx_ns
        for nic in self.nics:
            if nic.c is not None:
                c = nic.c
                nic.bits_sent, nic.busy_ns, nic.ideal_ns, nic.dropped = \
                    c.bits_sent, c.busy_ns, c.ideal_ns, c.dropped_ns
