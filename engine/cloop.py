"""The worker's loop per wake-up in C: csrc/roce_loop.c, where both paths are compiled.

``CompiledLoop.run`` is ``engine.worker.Worker``'s loop (same passes, same order,
same sleeps) with its hot part in C: epoll, the timerfd, reading the rings
(roce_rx.c), serving the NICs' pacing slots (roce_tx.c's ``tx_service``) and
handing over their delay lines' bursts when due (``tx_release``; the lines are in C,
``CompiledSendPath.use_lines``, and their heads are part of the loop's own wake-up
time) run in ``loop_pass``, which returns to Python only for what Python does: the events a ring
read left (ACKs for this worker's senders, completed messages, replies C could not
send), the completion eventfd, the deadlines Python keeps (QPs' start and
retransmission timers, congestion-control timers, the ACK and CNP delay lines,
delayed ACKs), a sender's answer that needs Python (a QP gone idle, an algorithm's
``on_send``, a trace, a short send, a full delay line), a NIC holding frames pushed
back, and full
sample buffers. The NICs' slots live in C's table (``Books.nic_due``), so every
part of the engine arms a NIC through ``Books.arm_nic``.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

from core.errors import CapabilityError
from emu.cbuild import compile_c
from engine.books import NEVER_NS, Books, take
from engine.csend import CompiledSendPath
from engine.recvpath import CompiledReceivePath
from engine.sources import Host, Nic, Source

# loop_pass's answers (roce_loop.c).
(LOOP_DONE, LOOP_EVENTS, LOOP_FD, LOOP_PY, LOOP_TX, LOOP_NIC, LOOP_DRAIN, LOOP_ERROR,
 LOOP_LINE) = range(9)
_MAX_READY = 256
_LAT_READS = 64                         # latency buffer: this many full reads' samples
_RX_LAG_READS = 1000                    # receive-lag buffer: (lag, frames) of this many reads
_LAT_PER_FRAME = 4


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
                ("house_ns", ctypes.c_int64),
                ("phase", ctypes.c_int64), ("n_ready", ctypes.c_int64),
                ("at_ready", ctypes.c_int64), ("fired", ctypes.c_int64), ("now", ctypes.c_int64),
                ("end", ctypes.c_int64), ("wait_ns", ctypes.c_int64),
                ("slot", ctypes.c_int64), ("tx_event", ctypes.c_int64), ("err", ctypes.c_int64),
                ("ready", ctypes.c_int32 * _MAX_READY)]


def source() -> Path:
    return Path(__file__).resolve().parent / "csrc" / "roce_loop.c"


class LoopLib:
    """roce_loop.c's ``loop_pass``."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(str(compile_c(source(), "shared", what="the engine's compiled loop")))
        lib.loop_pass.restype = ctypes.c_int
        lib.loop_pass.argtypes = [ctypes.c_void_p]
        self.loop_pass = lib.loop_pass


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
            elif answer == LOOP_FD:
                by_fd[c.slot].fire(mono())
                c.house_ns = 0  # it may have found everything acknowledged
            elif answer == LOOP_DRAIN:
                self.drain()
            else:
                raise OSError(c.err, f"worker loop: {os.strerror(c.err)}")
