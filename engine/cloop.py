"""The worker's loop per wake-up in C: csrc/roce_loop.c, where both paths are compiled.

``CompiledLoop.run`` is ``engine.worker.Worker``'s loop (same passes, same order,
same sleeps) with its hot part in C: epoll, the timerfd, reading the rings
(roce_rx.c), serving the NICs' pacing slots (roce_tx.c's ``tx_service``),
handing over their delay lines' bursts when due (``tx_release``; the lines are in C,
``CompiledSendPath.use_lines``, and their heads are part of the loop's own wake-up
time) and holding the ACKs and CNPs of this worker's senders for their reply path's
delay (the control line: taken out of a read's events, handed back when due, as
``Requester.ctrl_in`` holds them on the Python loop) run in ``loop_pass``. So does
the life of a message whose congestion control is off (``engine.cpost``): its
dependencies counted down by the completions the rings read, its start at its post
time, its ACKs (cumulative, without an ECN echo), its retransmission timer, and its
count of wholly acknowledged messages. ``loop_pass`` returns to Python only for what
Python does: the events a ring read left (completions other workers wait for,
replies C could not send, ACKs and CNPs of the QPs it does not act for), an ACK or
CNP of those whose delay is up, a start Python makes (an algorithm to build), the
completion eventfd, the deadlines Python keeps (congestion-control timers, delayed
ACKs, the timers of the QPs Python acts for), a sender's answer that needs Python
(an algorithm's ``on_send``, a trace, a short send, a full delay line, a QP Python
acts for gone idle), a NIC holding frames pushed back, and full sample buffers. The
NICs' slots live in C's table (``Books.nic_due``), so every part of the engine arms
a NIC through ``Books.arm_nic``.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

from core.errors import CapabilityError
from core.frame import FIRST_QPN
from emu.cbuild import compile_c
from engine.books import NEVER_NS, Books, take
from engine.cpost import CompiledPosting
from engine.csend import CompiledSendPath
from engine.recvpath import CompiledReceivePath
from engine.sources import Host, Nic, Source

# loop_pass's answers (roce_loop.c).
(LOOP_DONE, LOOP_EVENTS, LOOP_FD, LOOP_PY, LOOP_TX, LOOP_NIC, LOOP_DRAIN, LOOP_ERROR,
 LOOP_LINE, LOOP_CTRL, LOOP_START) = range(11)
_MAX_READY = 256
_LAT_READS = 64                         # latency buffer: this many full reads' samples
_RX_LAG_READS = 1000                    # receive-lag buffer: (lag, frames) of this many reads
_LAT_PER_FRAME = 4


class _CtrlHeld(ctypes.Structure):
    """roce_loop.c's struct ctrl_held: an ACK or CNP in the control line."""

    _fields_ = [("release_ns", ctypes.c_int64), ("seq", ctypes.c_int64), ("msg", ctypes.c_int64),
                ("kind", ctypes.c_uint32), ("psn", ctypes.c_uint32), ("arg", ctypes.c_uint32),
                ("msn", ctypes.c_uint32)]


class _Loop(ctypes.Structure):
    """roce_loop.c's struct loop."""

    _fields_ = [("service", ctypes.c_void_p), ("read", ctypes.c_void_p),
                ("release", ctypes.c_void_p), ("tx", ctypes.c_void_p), ("nics", ctypes.POINTER(ctypes.c_void_p)),
                ("blocked", ctypes.c_void_p), ("due", ctypes.POINTER(ctypes.c_int64)),
                ("n_nics", ctypes.c_int64),
                ("rings", ctypes.POINTER(ctypes.c_void_p)),
                ("ring_fd", ctypes.POINTER(ctypes.c_int64)), ("n_rings", ctypes.c_int64),
                ("ep", ctypes.c_int64), ("ep_io", ctypes.c_int64), ("timer_fd", ctypes.c_int64),
                ("turn_ns", ctypes.c_int64), ("t0_ns", ctypes.c_int64), ("idle_ns", ctypes.c_int64),
                ("batch_ns", ctypes.c_int64),
                ("rx_lags", ctypes.POINTER(ctypes.c_int64)), ("rx_lags_cap", ctypes.c_int64),
                ("n_rx_lags", ctypes.c_int64),
                ("lat", ctypes.POINTER(ctypes.c_int64)), ("lat_cap", ctypes.c_int64),
                ("n_lat", ctypes.c_int64),
                ("packets_received", ctypes.c_int64), ("wakeups", ctypes.c_int64),
                ("timer_armed", ctypes.c_int64), ("py_due", ctypes.c_int64),
                ("ctrl_delay_ns", ctypes.POINTER(ctypes.c_int64)),
                ("ctrl_host", ctypes.POINTER(ctypes.c_int64)), ("n_msgs", ctypes.c_int64),
                ("heap", ctypes.c_void_p), ("heap_n", ctypes.c_int64),
                ("heap_cap", ctypes.c_int64), ("ctrl_seq", ctypes.c_int64),
                ("ctrl", _CtrlHeld), ("posts", ctypes.c_void_p),
                ("house_ns", ctypes.c_int64),
                ("phase", ctypes.c_int64), ("n_ready", ctypes.c_int64),
                ("at_ready", ctypes.c_int64), ("fired", ctypes.c_int64), ("now", ctypes.c_int64),
                ("end", ctypes.c_int64), ("wait_ns", ctypes.c_int64),
                ("slot", ctypes.c_int64), ("tx_event", ctypes.c_int64), ("err", ctypes.c_int64),
                ("ready", ctypes.c_int32 * _MAX_READY)]


def source() -> Path:
    return Path(__file__).resolve().parent / "csrc" / "roce_loop.c"


class LoopLib:
    """roce_loop.c's ``loop_pass``, ``ctrl_hold`` (a read's events into the control
    line, which ``loop_pass`` calls after each read), ``post_at`` and ``post_done``
    (``engine.cpost``) and ``loop_free``."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(str(compile_c(source(), "shared", what="the engine's compiled loop")))
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        for name, args, answer in (("loop_pass", [ptr], ctypes.c_int),
                                   ("ctrl_hold", [ptr, i64, ptr], ctypes.c_int),
                                   ("post_at", [ptr, i64, i64], ctypes.c_int),
                                   ("post_done", [ptr, i64, i64], ctypes.c_int),
                                   ("loop_free", [ptr], None)):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, answer
            setattr(self, name, fn)


def compiled_loop(books: Books, send: Any, recv: Any, hosts: list[Host], nics: list[Nic],
                  idle_ns: int) -> CompiledLoop | None:
    """The compiled loop where both paths are compiled and roce_loop.c builds, else None
    (the worker runs its Python loop)."""
    if not isinstance(send, CompiledSendPath) or not isinstance(recv, CompiledReceivePath):
        return None
    try:
        lib = LoopLib()
    except (CapabilityError, OSError):
        return None
    return CompiledLoop(lib, books, send, recv, hosts, nics, idle_ns)


class CompiledLoop:
    """A worker's loop through roce_loop.c (module doc)."""

    def __init__(self, lib: LoopLib, books: Books, send: CompiledSendPath,
                 recv: CompiledReceivePath, hosts: list[Host], nics: list[Nic], idle_ns: int):
        self.pass_ = lib.loop_pass
        self.free = lib.loop_free
        self.books = books
        self.send = send
        self.recv = recv
        self.hosts = hosts
        self.nics = sorted(nics, key=lambda n: n.slot)
        assert [n.slot for n in self.nics] == list(range(len(nics)))
        rx = recv.rx
        self.due = (ctypes.c_int64 * max(1, len(nics)))(*([NEVER_NS] * len(nics)))
        self.nic_views = (ctypes.c_void_p * max(1, len(nics)))(
            *[n.c_addr if n.c is not None else None for n in self.nics])
        self.rings = (ctypes.c_void_p * max(1, len(hosts)))()
        self.ring_fd = (ctypes.c_int64 * max(1, len(hosts)))(*[h.sock.fileno() for h in hosts])
        self.rx_lags = (ctypes.c_int64 * (2 * _RX_LAG_READS))()
        self.lat = (ctypes.c_int64 * (_LAT_READS * rx.budget * _LAT_PER_FRAME))()
        send.use_lines()
        self.c = _Loop(service=send.lib.service_address, read=rx.fn_address,
                       release=send.lib.release_address, tx=send.call_addr, nics=self.nic_views,
                       blocked=ctypes.addressof(rx.blocked), due=self.due, n_nics=len(nics),
                       rings=self.rings, ring_fd=self.ring_fd, n_rings=len(hosts),
                       turn_ns=books.turn_ns, idle_ns=idle_ns, batch_ns=books.batch_ns,
                       rx_lags=self.rx_lags, rx_lags_cap=len(self.rx_lags),
                       lat=self.lat, lat_cap=len(self.lat), wait_ns=-1)
        self.addr = ctypes.addressof(self.c)
        books.nic_due = self.due
        self._hold_ctrl(books.plan.n_messages)
        self.posting = CompiledPosting(lib, self.addr, self.requester, send)
        self.c.posts = self.posting.addr
        self.requester.posting = self.posting

    def _hold_ctrl(self, n_msgs: int) -> None:
        """The control line holds the ACKs and CNPs of each sender with a delay line
        for ``Requester.reply_delay_ns`` (as ``Requester.ctrl_in`` does), when they
        arrive on its host's ring."""
        self.requester = requester = self.recv.requester
        self.ctrl_delay_ns = (ctypes.c_int64 * max(1, n_msgs))()
        self.ctrl_host = (ctypes.c_int64 * max(1, n_msgs))()
        for k, h in enumerate(self.hosts):
            for qpn, qp in h.tx_qps.items():
                self.ctrl_host[qpn - FIRST_QPN] = k  # where its replies arrive
                if qp.delay is not None:
                    self.ctrl_delay_ns[qpn - FIRST_QPN] = requester.reply_delay_ns(qp)
        c = self.c
        c.ctrl_delay_ns, c.ctrl_host, c.n_msgs = self.ctrl_delay_ns, self.ctrl_host, n_msgs

    def start(self, ep: Any, ep_io: Any, timer_fd: int) -> None:
        """The run starts (``books.t0_ns`` is set): the rings' argument blocks and the
        file descriptors the loop waits on."""
        books = self.books
        plan = books.plan
        rx = self.recv.rx
        for k, h in enumerate(self.hosts):
            assert h.ring is not None and h.ring.host_id == k
            self.rings[k] = rx.call_address(h.ring, plan.rt_offset_ns, books.t0_ns,
                                            plan.latency_sample_every)
        c = self.c
        c.t0_ns = books.t0_ns
        c.ep, c.ep_io, c.timer_fd = ep.fileno(), ep_io.fileno(), timer_fd

    def drain(self) -> None:
        """The samples C kept go to the books."""
        c = self.c
        books = self.books
        if c.n_lat:
            take(books.lat, self.lat, c.n_lat)
            c.n_lat = 0
        if c.n_rx_lags:
            take(books.rx_lags, self.rx_lags, c.n_rx_lags)
            c.n_rx_lags = 0
        books.packets_received += c.packets_received
        c.packets_received = 0
        self.posting.drain()

    def close(self) -> None:
        """The run is over: what the control line still holds is dropped, as the
        Python loop's delay lines are."""
        self.posting.finish()
        self.free(self.addr)

    @property
    def wakeups(self) -> int:
        return self.c.wakeups

    def run_pass(self, by_fd: dict[int, Source], house_ns: int) -> int:
        """Passes of the loop until one ends at or after ``house_ns`` (wall ns), when
        Python's housekeeping is due; returns the time it ended."""
        c = self.c
        c.house_ns = house_ns
        addr = self.addr
        pass_ = self.pass_
        deadlines = self.books.deadlines
        mono = time.monotonic_ns
        while True:
            due = deadlines.next_ns()
            c.py_due = NEVER_NS if due is None else due
            answer = pass_(addr)
            if answer == LOOP_DONE:
                self.posting.drain()
                return c.now
            if answer == LOOP_EVENTS:
                self.recv.act(self.hosts[c.slot])
            elif answer == LOOP_PY:
                now = c.now
                source = deadlines.pop_next()
                source.fire(now)  # type: ignore[union-attr]
                if due > now and deadlines.armed(source) == due:
                    # Fired early, it armed itself for the same time again (a timer
                    # that has not expired yet): the worker sleeps until then.
                    c.wait_ns = due
                    c.phase = 0
                    return now
            elif answer == LOOP_TX:
                self.send.resume(self.nics[c.slot], c.tx_event)
            elif answer == LOOP_NIC:
                self.nics[c.slot].fire(c.now)
            elif answer == LOOP_LINE:
                self.send.release(self.nics[c.slot], c.now, c.tx_event)
            elif answer == LOOP_CTRL:
                held = c.ctrl
                self.requester.released(held.msg, held.kind, held.psn,
                                        held.arg | held.msn << 16, held.release_ns)
            elif answer == LOOP_START:
                self.posting.start(c.slot, c.now)
            elif answer == LOOP_FD:
                by_fd[c.slot].fire(mono())
                c.house_ns = 0  # it may have found everything acknowledged
            elif answer == LOOP_DRAIN:
                self.drain()
            else:
                raise OSError(c.err, f"worker loop: {os.strerror(c.err)}")
