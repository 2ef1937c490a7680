"""Kernel plumbing of the engine: packet sockets, the receive ring, clocks, timerfd.

Receive ring. Each host has one TPACKET_V2 ring socket. Its classic BPF filter
passes only IPv4 (IHL 5, not fragmented) UDP frames to port 4791 that are not
PACKET_OUTGOING, so the fixed-offset parser of the worker is safe and a worker
never sees its own transmissions. The filter snaps **headers only**
(``SNAP_BYTES``: Ethernet to the end of the send timestamp of a RETH frame):
the kernel copies ~100 bytes per frame into the ring instead of 4 KB, ring slots
are small (many frames per MB of ring), and the payload length comes from the
IPv4 total length, not from the captured length.

Clocks. The kernel stamps each frame when it reaches the host's veth
(SO_TIMESTAMPNS, CLOCK_REALTIME); ``realtime_offset_ns`` converts to the
CLOCK_MONOTONIC of the send stamps, so one-way delay is exact on one kernel clock.

Timer. ``TimerFd`` is a CLOCK_MONOTONIC timerfd armed at absolute deadlines
(Python 3.11 has no ``os.timerfd_create``): a worker sleeps in epoll until a
socket is ready or its earliest deadline passes, with ~1 us precision (the
worker sets its timer slack), which ``epoll.poll``'s millisecond timeout lacks.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from core.frame import INT_BLOCK_BYTES, OFF_INT_RETH, ROCE_UDP_PORT

# Linux constants (if_packet.h, filter.h, socket.h, timerfd.h).
ETH_P_IP = 0x0800
ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_STATISTICS = 6
PACKET_VERSION = 10
PACKET_IGNORE_OUTGOING = 23
TPACKET_V2 = 1
TP_STATUS_USER = 1
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35
SO_SNDBUFFORCE = 32
_SKF_AD_PKTTYPE = 0xFFFFF000 + 4
_PACKET_OUTGOING = 4
_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1

#: Bytes of each frame the filter lets into the ring: Ethernet + IPv4 + UDP + BTH +
#: RETH + the 8-byte send timestamp (78), rounded up; ACKs and CNPs are shorter.
SNAP_BYTES = 96
#: With in-band telemetry (HPCC): up to the end of the largest INT block of a RETH data
#: frame (core.frame), which also covers an ACK's echoed block.
SNAP_INT_BYTES = (OFF_INT_RETH + INT_BLOCK_BYTES + 15) & ~15
_TPACKET2_HDR_BYTES = 32
#: struct tpacket2_hdr: status, len, snaplen, mac, net, sec, nsec (the rest: padding)
TPACKET2_HDR = struct.Struct("<IIIHHII")
_SLL_AND_ALIGN_BYTES = 64       # sockaddr_ll and the alignment before the MAC header


def _bpf_program(snap_bytes: int, outgoing: bool = False) -> list[tuple[int, int, int, int]]:
    """Classic BPF: accept IPv4/IHL5/UDP dport 4791 unfragmented, not outgoing unless
    ``outgoing`` (the jumps are relative: the rest holds without the first two)."""
    ld_b, ld_h, jeq, jset, ret = 0x30, 0x28, 0x15, 0x45, 0x06
    incoming_only = [
        (ld_b, 0, 0, _SKF_AD_PKTTYPE),
        (jeq, 10, 0, _PACKET_OUTGOING),
    ]
    return ([] if outgoing else incoming_only) + [
        (ld_h, 0, 0, 12),
        (jeq, 0, 8, ETH_P_IP),
        (ld_b, 0, 0, 14),
        (jeq, 0, 6, 0x45),
        (ld_b, 0, 0, 23),
        (jeq, 0, 4, 17),
        (ld_h, 0, 0, 20),
        (jset, 2, 0, 0x3FFF),            # MF flag or fragment offset
        (ld_h, 0, 0, 36),
        (jeq, 1, 0, ROCE_UDP_PORT),
        (ret, 0, 0, 0),
        (ret, 0, 0, snap_bytes),         # the return value is the snap length
    ]


def attach_roce_filter(sock: socket.socket, snap_bytes: int = SNAP_BYTES,
                       outgoing: bool = False) -> None:
    prog = _bpf_program(snap_bytes, outgoing)
    insns = (ctypes.c_uint64 * len(prog))(
        *[code | jt << 16 | jf << 24 | k << 32 for code, jt, jf, k in prog])
    fprog = struct.pack("HL", len(prog), ctypes.addressof(insns))  # struct sock_fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


@dataclass(frozen=True)
class RingSpec:
    """Geometry of a TPACKET_V2 receive ring of header-only slots."""

    frame_size: int
    block_size: int
    block_nr: int
    snap_bytes: int = SNAP_BYTES

    @classmethod
    def for_headers(cls, ring_bytes: int = 4 << 20, snap_bytes: int = SNAP_BYTES) -> RingSpec:
        frame = (_TPACKET2_HDR_BYTES + _SLL_AND_ALIGN_BYTES + snap_bytes + 15) & ~15
        block = max(mmap.PAGESIZE, 1 << 16)
        return cls(frame, block, max(4, ring_bytes // block), snap_bytes)

    @property
    def frames_per_block(self) -> int:
        return self.block_size // self.frame_size

    @property
    def frame_nr(self) -> int:
        return self.frames_per_block * self.block_nr

    @property
    def size_bytes(self) -> int:
        return self.block_size * self.block_nr


def open_rx_ring(ring: RingSpec, outgoing: bool = False) -> socket.socket:
    """A filtered, timestamping TPACKET_V2 socket of the calling thread's namespace,
    on all its interfaces; the frames it sends too with ``outgoing`` (a capture).

    ETH_P_ALL makes it a tap, served before tc ingress, so the host's RoCE sink
    (``emu.rocesink``) can drop the frames there once this socket has them.
    """
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        attach_roce_filter(sock, ring.snap_bytes, outgoing)
        with contextlib.suppress(OSError):  # kernels before 4.20: the BPF filter suffices
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, int(not outgoing))
        # Makes the kernel stamp frames when they reach the interface (netif_rx),
        # rather than when they are copied into the ring.
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        _setsockopt_releasing_gil(sock, SOL_PACKET, PACKET_RX_RING, struct.pack(
            "IIII", ring.block_size, ring.block_nr, ring.frame_size, ring.frame_nr))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


@lru_cache(maxsize=1)
def _libc_setsockopt() -> Callable[..., int]:
    fn = ctypes.CDLL(None, use_errno=True).setsockopt
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    fn.restype = ctypes.c_int
    return fn


def _setsockopt_releasing_gil(sock: socket.socket, level: int, option: int,
                              value: bytes) -> None:
    """``sock.setsockopt`` through libc, which lets other threads run meanwhile:
    Python's own keeps the GIL, and setting a ring waits out a kernel grace period
    (synchronize_net, 7-8 ms here), so the threads opening a fabric's rings took
    turns (1.1 s for fattree,8's 128 hosts) instead of waiting together."""
    if _libc_setsockopt()(sock.fileno(), level, option, value, len(value)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def map_ring(sock: socket.socket, ring: RingSpec) -> mmap.mmap:
    return mmap.mmap(sock.fileno(), ring.size_bytes)


@lru_cache(maxsize=8)
def slot_offsets(ring: RingSpec) -> tuple[int, ...]:
    """Byte offset of every ring slot, in the kernel's fill order (one tuple for every
    ring of a geometry: a worker's 64 hosts took 0.4 s making it each)."""
    fpb = ring.frames_per_block
    return tuple((i // fpb) * ring.block_size + (i % fpb) * ring.frame_size
                 for i in range(ring.frame_nr))


def open_tx_socket(ifname: str) -> socket.socket:
    """A send-only packet socket on ``ifname`` (protocol 0: it never receives)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        sock.bind((ifname, 0))
        # Frames wait in the shaped qdisc charged to this socket; a few MB keeps
        # the socket from blocking before the qdisc itself pushes back.
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 4 << 20)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


T = TypeVar("T")
R = TypeVar("R")
#: Opening or closing a packet socket waits out a kernel RCU grace period
#: (synchronize_net: about 13 ms on a VM); waits made in parallel threads share them.
SOCKET_THREADS = 32


def in_threads(fn: Callable[[T], R], items: list[T]) -> list[R | BaseException]:
    """``fn`` of every item, in up to SOCKET_THREADS threads; an item's exception in
    its place, so the caller can undo what the others did."""
    def call(item: T) -> R | BaseException:
        try:
            return fn(item)
        except BaseException as e:
            return e
    if not items:
        return []
    with ThreadPoolExecutor(min(SOCKET_THREADS, len(items))) as pool:
        return list(pool.map(call, items))


def close_all(socks: list[socket.socket]) -> None:
    """Close packet sockets in parallel threads (see SOCKET_THREADS)."""
    in_threads(socket.socket.close, socks)


#: Descriptors in one SCM_RIGHTS message, at most (the kernel's SCM_MAX_FD is 253).
_FDS_PER_MESSAGE = 250
_HANDOVER_POLL_S = 0.05


def hand_over(channel: socket.socket, socks: Sequence[socket.socket]) -> None:
    """Send ``socks``' descriptors, in order, over the AF_UNIX ``channel`` to a process
    that takes them over (`take_over`; the parent keeps its own)."""
    fds = [s.fileno() for s in socks]
    for i in range(0, len(fds), _FDS_PER_MESSAGE):
        socket.send_fds(channel, [b"s"], fds[i:i + _FDS_PER_MESSAGE])


def take_over(channel: socket.socket, count: int, stopped: Callable[[], bool]
              ) -> list[socket.socket]:
    """The ``count`` sockets `hand_over` sends on ``channel``, in its order.
    ConnectionAbortedError once ``stopped()`` or the sender closed its end first."""
    socks: list[socket.socket] = []
    channel.settimeout(_HANDOVER_POLL_S)
    try:
        while len(socks) < count:
            if stopped():
                raise ConnectionAbortedError("the engine stopped before the sockets came")
            try:
                msg, fds, _, _ = socket.recv_fds(channel, 16, _FDS_PER_MESSAGE)
            except TimeoutError:
                continue
            socks.extend(socket.socket(fileno=fd) for fd in fds)
            if not msg:
                raise ConnectionAbortedError("the engine closed the sockets' channel")
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def ring_drops(sock: socket.socket) -> int:
    """Frames the kernel dropped because the ring was full (resets the counter)."""
    _, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return drops


def realtime_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC, from the tightest of a few samples."""
    best = None
    for _ in range(20):
        m0 = time.monotonic_ns()
        r = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, r - (m0 + m1) // 2)
    assert best is not None
    return best[1]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class TimerFd:
    """A non-blocking CLOCK_MONOTONIC timerfd armed at absolute deadlines (ns)."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self.fd: int = fd
        self.armed_ns = 0               # 0: disarmed
        self._spec = _Itimerspec()
        self._settime = self._libc.timerfd_settime
        self._ref = ctypes.byref(self._spec)

    def arm(self, deadline_ns: int) -> None:
        """Fire at ``deadline_ns`` (CLOCK_MONOTONIC); a past deadline fires at once."""
        if deadline_ns == self.armed_ns:
            return
        v = self._spec.it_value
        v.tv_sec, v.tv_nsec = divmod(max(deadline_ns, 1), 1_000_000_000)
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, self._ref, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self.armed_ns = deadline_ns

    def clear(self) -> None:
        """Consume an expiry (after epoll reported the fd readable)."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)
        self.armed_ns = 0

    def fired(self) -> None:
        """Note an expiry without reading it: the next ``arm`` re-arms the timer, and
        timerfd_settime(2) resets the expiry count, so the fd is no longer readable.
        A loop that always re-arms before it sleeps saves a read(2) per wake-up."""
        self.armed_ns = 0

    def close(self) -> None:
        os.close(self.fd)


#: A wake-up is priced for sleeps of a full 4 KB frame's time at 400G and S = 10000.
WAKE_SLEEP_S = 830e-6


def wakeup_cpu_us(sleep_s: float = WAKE_SLEEP_S, cycles: int = 500) -> float:
    """CPU (user + kernel) of one arm-sleep-wake cycle of the engine's timer, in µs:
    what each of the engine's wake-ups costs on this machine. Where programming the
    timer traps to a hypervisor it is tens of µs; elsewhere a few."""
    timer = TimerFd()
    ep = select.epoll()
    try:
        ep.register(timer.fd, select.EPOLLIN)
        cpu0 = time.process_time()
        for _ in range(cycles):
            timer.arm(time.monotonic_ns() + int(sleep_s * 1e9))
            ep.poll()
            timer.fired()
        return (time.process_time() - cpu0) / cycles * 1e6
    finally:
        ep.close()
        timer.close()
