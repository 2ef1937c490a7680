"""The per-host NIC model and the worker loop that runs it: the engine's kernel I/O shell.

One worker process owns the raw sockets of a set of emulated hosts. For each host
it runs the RoCEv2 NIC model:

* **requester** (one per message = one RC QP): go-back-N sequencing
  (``traffic.gbn.GbnSender``) paced at the DCQCN rate (``traffic.dcqcn``), and on
  top of that the host NIC's line rate shared by all its QPs;
* **responder**: go-back-N receive (``GbnReceiver``), coalesced ACKs and NAKs,
  CNPs from a ``NotificationPoint`` (at most one per QP per CNP interval).

Protocol decisions are all taken by those pure objects; this module only moves
frames and converts clocks. They get REAL-fabric time,
``(t_emu_ns - t0_ns) / S``, so every DCQCN and go-back-N timer is dilated by S.

Clocks. Data frames carry the send time as CLOCK_MONOTONIC ns (the layout of
``traffic.roce``). Frames are received through a TPACKET_V2 ring, whose kernel
timestamp (taken when the frame reached the host's veth) is CLOCK_REALTIME; the
parent measures ``realtime - monotonic`` once and every worker subtracts that same
offset, so one-way delay = arrival (monotonic) - send stamp, on one kernel clock.

Receive filter. A classic BPF program on each ring socket passes only IPv4 (IHL
5, not fragmented) UDP frames to port 4791 that are not PACKET_OUTGOING, so the
fixed-offset parser below (``roce.parse_frame`` is general but slower) is safe and
the worker never sees its own transmissions or unrelated traffic.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import select
import signal
import socket
import struct
import time
import traceback
from array import array
from dataclasses import dataclass
from typing import Any

from traffic import gbn
from traffic.burst import MAX_BURST, Burst
from traffic.dcqcn import NotificationPoint, make_reaction_point
from traffic.roce import (
    ACKNOWLEDGE,
    AETH_ACK,
    AETH_NAK_PSN_SEQ,
    CNP,
    DATA_OPCODES,
    ECN_CE,
    RETH_OPCODES,
    Flow,
    QpTemplate,
    ResponderTemplate,
)

# Linux constants (if_packet.h, filter.h, socket.h, prctl.h).
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
PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29
_SKF_AD_PKTTYPE = 0xFFFFF000 + 4
_PACKET_OUTGOING = 4

#: Worker state codes in the shared ``status`` array.
STARTING, READY, FINISHED, FAILED = 0, 1, 2, 3

_TP2 = struct.Struct("<IIIHHII")        # tpacket2_hdr: status, len, snaplen, mac, net, sec, nsec
_TP_STATUS = struct.Struct("<I")
# Fixed offsets of an IHL-5 frame: TOS 15, BTH opcode 42, flags 43, QP word 46, PSN word 50.
_ROCE = struct.Struct(">15xB26xBB2xII")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_TS_OFF = 54                            # timestamp right after the BTH (MIDDLE/LAST)
_TS_OFF_RETH = 70                       # after BTH + RETH (FIRST/ONLY)
_HDR_BYTES = 14 + 20 + 8 + 12 + 4       # Ethernet, IP, UDP, BTH, ICRC around the payload
# A sender that fell behind its schedule (preempted on a busy machine) catches up
# to keep the average rate exact, but never by more than this (emulated ns) or two
# frames, whichever is longer: beyond that it restarts the schedule from now.
_MAX_CATCHUP_NS = 20_000_000
_RX_BUDGET = 256                        # frames per host per loop turn: the sender must run too
_SPIN_NS = 30_000                       # below this the loop spins instead of sleeping
_MAX_SLEEP_S = 0.002                    # bound on one sleep, so stop requests are seen
_HOUSEKEEPING_NS = 2_000_000            # completion, stop and parent checks
_DEP_CHECK_NS = 50_000                  # how often pending messages re-check their deps


# ----------------------------------------------------------------------------- sockets

def _bpf_program() -> list[tuple[int, int, int, int]]:
    """Classic BPF: accept IPv4/IHL5/UDP dport 4791 unfragmented, not outgoing."""
    ld_b, ld_h, jeq, jset, ret = 0x30, 0x28, 0x15, 0x45, 0x06
    return [
        (ld_b, 0, 0, _SKF_AD_PKTTYPE),
        (jeq, 10, 0, _PACKET_OUTGOING),
        (ld_h, 0, 0, 12),
        (jeq, 0, 8, ETH_P_IP),
        (ld_b, 0, 0, 14),
        (jeq, 0, 6, 0x45),
        (ld_b, 0, 0, 23),
        (jeq, 0, 4, 17),
        (ld_h, 0, 0, 20),
        (jset, 2, 0, 0x3FFF),            # MF flag or fragment offset
        (ld_h, 0, 0, 36),
        (jeq, 1, 0, 4791),
        (ret, 0, 0, 0),
        (ret, 0, 0, 0x40000),
    ]


def attach_roce_filter(sock: socket.socket) -> None:
    prog = _bpf_program()
    insns = (ctypes.c_uint64 * len(prog))(
        *[code | jt << 16 | jf << 24 | k << 32 for code, jt, jf, k in prog])
    fprog = struct.pack("HL", len(prog), ctypes.addressof(insns))  # struct sock_fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


@dataclass
class RingSpec:
    """Geometry of a TPACKET_V2 receive ring."""

    frame_size: int
    block_size: int
    block_nr: int

    @classmethod
    def for_payload(cls, payload_bytes: int, ring_bytes: int = 4 << 20) -> RingSpec:
        frame = (payload_bytes + _HDR_BYTES + 16 + 128 + 15) & ~15  # + RETH, tpacket header
        block = max(mmap.PAGESIZE, 1 << 16)
        while block < frame:
            block <<= 1
        return cls(frame, block, max(4, ring_bytes // block))

    @property
    def frames_per_block(self) -> int:
        return self.block_size // self.frame_size

    @property
    def frame_nr(self) -> int:
        return self.frames_per_block * self.block_nr


def open_rx_ring(ring: RingSpec) -> socket.socket:
    """A filtered, timestamping TPACKET_V2 socket of the calling thread's namespace.

    ETH_P_ALL makes it a tap, served before tc ingress, so the host's RoCE sink
    (``emu.rocesink``) can drop the frames there once this socket has them.
    """
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        attach_roce_filter(sock)
        with contextlib.suppress(OSError):  # kernels before 4.20: the BPF filter suffices
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        # Makes the kernel stamp frames when they reach the interface (netif_rx),
        # rather than when they are copied into the ring.
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        sock.setsockopt(SOL_PACKET, PACKET_RX_RING, struct.pack(
            "IIII", ring.block_size, ring.block_nr, ring.frame_size, ring.frame_nr))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


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


# ----------------------------------------------------------------------------- plan

@dataclass(frozen=True)
class MsgPlan:
    """One message as a worker needs it (picklable, built by the engine)."""

    index: int              # position in the workload = QPN - 1 = shared-array slot
    msg_id: int
    src: str
    dst: str
    size_bytes: int
    deps: tuple[int, ...]   # indices
    start_emu_ns: int       # earliest start after t0
    flow: Flow              # data direction
    reply_flow: Flow        # ACK/CNP direction
    reply_ifname: str
    ifname: str


@dataclass(frozen=True)
class NicPlan:
    host: str
    ifname: str
    rate_bps: float          # real line rate of the host port


@dataclass
class WorkerPlan:
    worker: int
    cpu: int | None
    hosts: list[str]
    nics: list[NicPlan]
    sends: list[MsgPlan]
    receives: list[MsgPlan]
    n_messages: int
    n_workers: int
    scale: float
    cc: Any
    payload_bytes: int
    ack_coalesce: int
    rto_s: float
    cnp_interval_s: float
    latency_sample_every: int
    rate_trace_interval_s: float
    rt_offset_ns: int


@dataclass
class Shared:
    """Cross-process state, all lock-free: every slot has a single writer."""

    received: Any      # RawArray('b', n): message fully received (deps use this)
    acked: Any         # RawArray('q', workers): messages acknowledged, per sending worker
    status: Any        # RawArray('b', workers): STARTING/READY/FINISHED/FAILED
    t0_ns: Any         # RawValue('q'): 0 until the parent starts the clock
    stop: Any          # RawValue('b'): the parent asks every worker to stop


# ----------------------------------------------------------------------------- state

class _Nic:
    __slots__ = ("host", "ifname", "sock", "rate_emu_bps", "ns_per_bit", "next_ns", "qps",
                 "backlog")

    def __init__(self, plan: NicPlan, sock: socket.socket, scale: float):
        self.host = plan.host
        self.ifname = plan.ifname
        self.sock = sock
        self.rate_emu_bps = plan.rate_bps / scale
        self.ns_per_bit = 1e9 / self.rate_emu_bps
        self.next_ns = 0
        self.qps: list[_SendQp] = []
        self.backlog: list[bytes] = []  # frames the qdisc pushed back, sent first


class _SendQp:
    __slots__ = ("plan", "tmpl", "first", "middle", "last", "n", "gbn", "rp", "nic",
                 "next_ns", "idle", "start_ns", "acked_ns", "first_tx_ns", "last_tx_ns",
                 "bytes_sent", "next_trace_ns", "mid_bits", "bits")

    def __init__(self, plan: MsgPlan, payload_bytes: int):
        self.plan = plan
        self.tmpl = QpTemplate(plan.flow, plan.size_bytes, mtu_payload_bytes=payload_bytes)
        self.n = self.tmpl.n_packets
        if self.n >= gbn.PSN_MASK:
            raise ValueError(f"message {plan.msg_id}: {self.n} packets exceed the PSN space")
        # Frame of each index: resolved once (the hot path calls Shape.write directly).
        shapes = self.tmpl.shapes
        self.first = shapes[self.tmpl.opcode(0)]
        self.last = shapes[self.tmpl.opcode(self.n - 1)]
        self.middle = shapes.get(self.tmpl.opcode(1)) if self.n > 2 else self.last
        self.bits = [len(s.buf) * 8 for s in (self.first, self.middle, self.last)]
        self.mid_bits = self.bits[1]
        self.gbn: gbn.GbnSender | None = None
        self.rp: Any = None
        self.nic: _Nic | None = None
        self.next_ns = 0
        self.idle = False
        self.start_ns = -1
        self.acked_ns = -1
        self.first_tx_ns = -1
        self.last_tx_ns = -1
        self.bytes_sent = 0
        self.next_trace_ns = 0


class _RecvQp:
    __slots__ = ("plan", "gbn", "resp", "nic", "done_ns", "bytes", "ce", "cnps", "seen",
                 "first_rx_ns")

    def __init__(self, plan: MsgPlan, n_packets: int, ack_coalesce: int, nic: _Nic):
        self.plan = plan
        self.gbn = gbn.GbnReceiver(n_packets, ack_coalesce)
        self.resp = ResponderTemplate(plan.reply_flow)
        self.nic = nic
        self.done_ns = -1
        self.bytes = 0
        self.ce = 0
        self.cnps = 0
        self.seen = 0
        self.first_rx_ns = -1


class _Host:
    __slots__ = ("name", "sock", "mm", "offsets", "idx", "rx_qps", "tx_qps", "np", "rx_count")

    def __init__(self, name: str, sock: socket.socket, ring: RingSpec, cnp_interval_s: float):
        self.name = name
        self.sock = sock
        self.mm = mmap.mmap(sock.fileno(), ring.block_size * ring.block_nr)
        fpb = ring.frames_per_block
        self.offsets = [(i // fpb) * ring.block_size + (i % fpb) * ring.frame_size
                        for i in range(ring.frame_nr)]
        self.idx = 0
        self.rx_qps: dict[int, _RecvQp] = {}
        self.tx_qps: dict[int, _SendQp] = {}
        self.np = NotificationPoint(cnp_interval_s)
        self.rx_count = 0


# ----------------------------------------------------------------------------- worker

class _Stop(Exception):
    """SIGTERM inside a worker."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Stop()


def _setup_process(cpu: int | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    # Die with the engine process, even if it is SIGKILLed: no orphans.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # Sleeps end within ~1 us of the deadline instead of the default 50 us slack.
    libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent coordinates Ctrl-C
    signal.signal(signal.SIGTERM, _on_sigterm)
    if cpu is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})


def worker_main(plan: WorkerPlan, shared: Shared, conn: Any,
                rx_socks: dict[str, socket.socket], tx_socks: dict[tuple[str, str], socket.socket],
                ring: RingSpec, burst: Burst, parent_pid: int) -> None:
    """Entry point of a forked worker: run the NIC models, send the results on ``conn``."""
    _setup_process(plan.cpu)
    w = plan.worker
    try:
        loop = _WorkerLoop(plan, shared, rx_socks, tx_socks, ring, burst, parent_pid)
        shared.status[w] = READY
        loop.run()
        conn.send(loop.results(None))
        shared.status[w] = FINISHED
    except BaseException as e:  # report anything, also SIGTERM, then leave
        shared.status[w] = FAILED
        shared.stop.value = 1
        reason = "terminated" if isinstance(e, _Stop) else traceback.format_exc(limit=8)
        with contextlib.suppress(Exception):
            conn.send({"worker": w, "error": f"worker {w}: {reason}"})
    finally:
        conn.close()


class _WorkerLoop:
    def __init__(self, plan: WorkerPlan, shared: Shared, rx_socks: dict[str, socket.socket],
                 tx_socks: dict[tuple[str, str], socket.socket], ring: RingSpec, burst: Burst,
                 parent_pid: int):
        self.plan = plan
        self.burst = burst
        self.shared = shared
        self.parent_pid = parent_pid
        self.scale = plan.scale
        self.nics = {(n.host, n.ifname): _Nic(n, tx_socks[(n.host, n.ifname)], plan.scale)
                     for n in plan.nics}
        self.hosts = {h: _Host(h, rx_socks[h], ring, plan.cnp_interval_s) for h in plan.hosts}
        self.senders = [_SendQp(m, plan.payload_bytes) for m in plan.sends]
        for qp in self.senders:
            qp.nic = self.nics[(qp.plan.src, qp.plan.ifname)]
            self.hosts[qp.plan.src].tx_qps[qp.plan.index + 1] = qp
        for m in plan.receives:
            n_packets = -(-m.size_bytes // plan.payload_bytes)
            rq = _RecvQp(m, n_packets, plan.ack_coalesce, self.nics[(m.dst, m.reply_ifname)])
            self.hosts[m.dst].rx_qps[m.index + 1] = rq
        self.pending = sorted(self.senders, key=lambda q: q.plan.start_emu_ns)
        self.dep_pos = {id(q): 0 for q in self.senders}
        self.acked_here = 0
        self.t0_ns = 0
        # Results.
        self.lat = array("q")          # (index, rx_ns, one_way_ns, ce) flattened
        self.rates: list[tuple[int, int, float, float, float]] = []
        self.lags = array("q")
        self.packets_sent = 0
        self.data_sent = 0
        self.ctrl_sent = 0
        self.packets_received = 0
        self.push_backs = 0
        self.unknown_frames = 0
        self.cpu0 = 0.0
        self.wall_ns = 0
        self.drops = {h: 0 for h in self.hosts}
        self.stop_reason: str | None = None

    # -- time ------------------------------------------------------------------------
    def real_s(self, now_ns: int) -> float:
        return (now_ns - self.t0_ns) / (self.scale * 1e9)

    # -- main loop -------------------------------------------------------------------
    def run(self) -> None:
        shared = self.shared
        while not shared.t0_ns.value:
            if shared.stop.value:
                self.stop_reason = "stopped before start"
                return
            time.sleep(0.0005)
        self.t0_ns = t0 = shared.t0_ns.value
        for h in self.hosts.values():
            self.drops[h.name] += ring_drops(h.sock)  # frames before t0 are not ours to judge
        while time.monotonic_ns() < t0:
            time.sleep(0.0002)
        self.cpu0 = time.process_time()
        mono = time.monotonic_ns
        hosts = list(self.hosts.values())
        nics = list(self.nics.values())
        rx_fds = [h.sock for h in hosts]
        total = self.plan.n_messages
        acked = shared.acked
        next_house = 0
        next_deps = 0
        while True:
            now = mono()
            for h in hosts:
                self._receive(h, now)
            if self.pending and now >= next_deps:
                # A fresh clock: receiving may have completed a dependency after ``now``.
                now = mono()
                self._start_ready(now)
                next_deps = now + _DEP_CHECK_NS
            wake = now + int(_MAX_SLEEP_S * 1e9)
            for nic in nics:
                if nic.qps or nic.backlog:
                    t = self._service(nic)
                    if t < wake:
                        wake = t
            if self.pending:
                t = max(self.pending[0].plan.start_emu_ns + t0, now + _DEP_CHECK_NS)
                if t < wake:
                    wake = t
            now = mono()
            if now >= next_house:
                next_house = now + _HOUSEKEEPING_NS
                if sum(acked) >= total:
                    break
                if shared.stop.value:
                    self.stop_reason = "stopped"
                    break
                if os.getppid() != self.parent_pid:
                    self.stop_reason = "engine process died"
                    break
            sleep_ns = wake - now
            if sleep_ns > _SPIN_NS:
                select.select(rx_fds, [], [], min(sleep_ns - _SPIN_NS // 2, 2e6) / 1e9)
        self.wall_ns = mono() - t0

    # -- starting messages ---------------------------------------------------------------
    def _start_ready(self, now: int) -> None:
        received = self.shared.received
        still = []
        for qp in self.pending:
            if now < self.t0_ns + qp.plan.start_emu_ns:
                still.append(qp)
                continue
            deps = qp.plan.deps
            pos = self.dep_pos[id(qp)]
            while pos < len(deps) and received[deps[pos]]:
                pos += 1
            self.dep_pos[id(qp)] = pos
            if pos < len(deps):
                still.append(qp)
                continue
            self._start(qp, now)
        self.pending = still

    def _start(self, qp: _SendQp, now: int) -> None:
        p = self.plan
        nic = qp.nic
        assert nic is not None
        t = self.real_s(now)
        qp.gbn = gbn.GbnSender(qp.n, timeout_s=p.rto_s)
        qp.rp = make_reaction_point(p.cc, nic.rate_emu_bps * self.scale, start_s=t)
        qp.start_ns = now
        qp.next_ns = now
        qp.next_trace_ns = now
        nic.qps.append(qp)

    # -- sending -----------------------------------------------------------------------
    def _service(self, nic: _Nic) -> int:
        """Send every frame of ``nic`` that is due; return when it next has work."""
        mono = time.monotonic_ns
        burst = self.burst
        if nic.backlog and not self._flush_backlog(nic):
            return mono() + int(nic.ns_per_bit * 8 * 1500)
        qps = nic.qps
        scale_ns = self.scale * 1e9
        t0 = self.t0_ns
        lags = self.lags
        while qps:
            now = mono()
            # The QP with the earliest schedule; retransmission timers of idle QPs fire here.
            best = None
            best_t = timer_t = 1 << 62
            for qp in qps:
                if qp.idle:
                    deadline = qp.gbn.deadline_s
                    if deadline is None:
                        continue
                    due = t0 + int(deadline * scale_ns)
                    if due > now:
                        if due < timer_t:
                            timer_t = due
                        continue
                    qp.gbn.advance((now - t0) / scale_ns)
                    self._wake(qp, now)
                if qp.next_ns < best_t:
                    best, best_t = qp, qp.next_ns
            start = best_t if best_t > nic.next_ns else nic.next_ns
            if best is None or start > now:
                return start if start < timer_t else timer_t
            # Send from ``best`` while it stays the only candidate and is due: every
            # frame whose slot has passed goes in one burst (one sendmmsg).
            g = best.gbn
            rp = best.rp
            last_index = best.n - 1
            alone = len(qps) == 1
            while True:
                t_real = (now - t0) / scale_ns
                g.advance(t_real)
                index = g.next_index  # start PSN 0 and < 2**24 packets: the PSN is the index
                if 0 < index < last_index:
                    shape, bits, limit = best.middle, best.mid_bits, last_index - index
                elif index == 0:
                    shape, bits, limit = best.first, best.bits[0], 1
                else:
                    shape, bits, limit = best.last, best.bits[2], 1
                interval = int(bits * scale_ns / rp.rate_bps)
                line = int(bits * nic.ns_per_bit)
                step = interval if interval > line else line
                sched = best.next_ns if best.next_ns > nic.next_ns else nic.next_ns
                lag = now - sched
                due = 1 + lag // step if alone and step and 0 <= lag < _MAX_CATCHUP_NS else 1
                run = g.take(t_real, min(due, limit, MAX_BURST))
                if run is None:
                    best.idle = True
                    break
                psn, n = run
                sent = 0 if nic.backlog else burst.send(nic.sock, shape, psn, n, now)
                self.packets_sent += sent
                if sent < n:  # the NIC queue is full: keep the rest, stop after the bookkeeping
                    self._push_back(nic, [burst.frame(i) for i in range(sent, n)],
                                    counted=bool(nic.backlog))
                    alone = False
                if n == 1 or not step:
                    lags.append(lag)
                else:
                    lags.extend(range(lag, lag - n * step, -step))
                base = best.next_ns if now - best.next_ns < max(2 * interval, _MAX_CATCHUP_NS) \
                    else now
                best.next_ns = base + n * interval
                base = nic.next_ns if now - nic.next_ns < max(2 * line, _MAX_CATCHUP_NS) else now
                nic.next_ns = base + n * line
                sent_bytes = n * (bits >> 3)
                rp.on_bytes_sent(sent_bytes, t_real)
                best.bytes_sent += sent_bytes
                if best.first_tx_ns < 0:
                    best.first_tx_ns = now
                best.last_tx_ns = now
                self.data_sent += n
                if now >= best.next_trace_ns:
                    self._trace(best, now)
                if not alone:
                    break
                now = mono()
                if best.next_ns > now or nic.next_ns > now:
                    break
        return mono() + int(_MAX_SLEEP_S * 1e9)

    def _wake(self, qp: _SendQp, now: int) -> None:
        if qp.idle:
            qp.idle = False
            if qp.next_ns < now:
                qp.next_ns = now

    def _trace(self, qp: _SendQp, now: int) -> None:
        rp = qp.rp
        self.rates.append((qp.plan.index, now - self.t0_ns, rp.rate_bps, rp.target_rate_bps,
                           rp.alpha))
        qp.next_trace_ns = now + int(self.plan.rate_trace_interval_s * self.scale * 1e9)

    def _send_data(self, nic: _Nic, frame: bytes | bytearray) -> bool:
        """Hand a frame to the NIC; False if its queue (the shaped qdisc) pushed back.

        A pushed-back frame is kept and sent before anything else (never dropped):
        ENOBUFS means the qdisc refused it, EAGAIN that the socket's share of the
        queue is full.
        """
        if nic.backlog:
            self._push_back(nic, [bytes(frame)], counted=True)
            return False
        try:
            nic.sock.send(frame)
        except OSError as e:
            if not (isinstance(e, BlockingIOError) or e.errno == errno.ENOBUFS):
                raise
            self._push_back(nic, [bytes(frame)], counted=False)
            return False
        self.packets_sent += 1
        return True

    def _push_back(self, nic: _Nic, frames: list[bytes], counted: bool) -> None:
        """Queue ``frames`` behind the NIC's backlog; ``counted``: the push-back was already."""
        if not counted:
            self.push_backs += 1
        nic.backlog.extend(frames)

    def _send_ctrl(self, nic: _Nic, frame: bytes | bytearray) -> None:
        if self._send_data(nic, frame):
            self.ctrl_sent += 1

    def _flush_backlog(self, nic: _Nic) -> bool:
        backlog = nic.backlog
        while backlog:
            try:
                nic.sock.send(backlog[0])
            except BlockingIOError:
                return False
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                return False
            backlog.pop(0)
            self.packets_sent += 1
        return True

    # -- receiving ----------------------------------------------------------------------
    def _receive(self, h: _Host, now: int) -> None:
        mm = h.mm
        offsets = h.offsets
        n_slots = len(offsets)
        idx = h.idx
        tp2 = _TP2.unpack_from
        roce = _ROCE.unpack_from
        set_status = _TP_STATUS.pack_into
        rt_offset = self.plan.rt_offset_ns
        for _ in range(_RX_BUDGET):
            off = offsets[idx]
            status, length, snaplen, mac, _net, sec, nsec = tp2(mm, off)
            if not status & TP_STATUS_USER:
                break
            f = off + mac
            tos, opcode, flags, qp_word, psn_word = roce(mm, f)
            rx_ns = sec * 1_000_000_000 + nsec - rt_offset
            qpn = qp_word & 0xFFFFFF
            psn = psn_word & 0xFFFFFF
            if opcode in DATA_OPCODES:
                rq = h.rx_qps.get(qpn)
                if rq is None:
                    self.unknown_frames += 1
                else:
                    reth = opcode in RETH_OPCODES
                    ts = _U64.unpack_from(mm, f + (_TS_OFF_RETH if reth else _TS_OFF))[0]
                    payload = snaplen - _HDR_BYTES - (16 if reth else 0) - (flags >> 4 & 3)
                    self._on_data(h, rq, psn, tos & 3 == ECN_CE, payload, ts, rx_ns)
            elif opcode == ACKNOWLEDGE:
                qp = h.tx_qps.get(qpn)
                if qp is None or qp.gbn is None:
                    self.unknown_frames += 1
                else:
                    self._on_ack(qp, psn, _U32.unpack_from(mm, f + _TS_OFF)[0] >> 24, rx_ns)
            elif opcode == CNP:
                qp = h.tx_qps.get(qpn)
                if qp is None or qp.rp is None:
                    self.unknown_frames += 1
                else:
                    qp.rp.on_cnp(self.real_s(rx_ns))
                    self._trace(qp, rx_ns)
            else:
                self.unknown_frames += 1
            set_status(mm, off, 0)
            self.packets_received += 1
            idx += 1
            if idx == n_slots:
                idx = 0
        h.idx = idx

    def _on_data(self, h: _Host, rq: _RecvQp, psn: int, ce: bool, payload: int, ts_ns: int,
                 rx_ns: int) -> None:
        action = rq.gbn.on_packet(psn)
        if rq.first_rx_ns < 0:
            rq.first_rx_ns = rx_ns
        if action.deliver:
            rq.bytes += payload
        rq.seen += 1
        if ce:
            rq.ce += 1
            if h.np.on_packet(rq.plan.index, True, self.real_s(rx_ns)):
                rq.cnps += 1
                self._send_ctrl(rq.nic, rq.resp.cnp)
        h.rx_count += 1
        if h.rx_count % self.plan.latency_sample_every == 0:
            self.lat.extend((rq.plan.index, rx_ns - self.t0_ns, rx_ns - ts_ns, ce))
        if action.reply != gbn.NONE:
            complete = rq.gbn.complete
            syndrome = AETH_ACK if action.reply == gbn.ACK else AETH_NAK_PSN_SEQ
            self._send_ctrl(rq.nic, rq.resp.write_ack(action.psn, int(complete), syndrome))
        if rq.done_ns < 0 and rq.gbn.complete:
            rq.done_ns = rx_ns
            h.np.forget(rq.plan.index)
            self.shared.received[rq.plan.index] = 1

    def _on_ack(self, qp: _SendQp, psn: int, syndrome: int, rx_ns: int) -> None:
        g = qp.gbn
        t = self.real_s(rx_ns)
        progress = g.on_nak(psn, t) if syndrome & 96 == AETH_NAK_PSN_SEQ else g.on_ack(psn, t)
        if not progress:
            return
        if g.done:
            if qp.acked_ns < 0:
                qp.acked_ns = rx_ns
                qp.nic.qps.remove(qp)
                self.acked_here += 1
                self.shared.acked[self.plan.worker] = self.acked_here
            return
        self._wake(qp, time.monotonic_ns())

    # -- results ------------------------------------------------------------------------
    def results(self, error: str | None) -> dict:
        """Counters and samples; times in emulated ns after t0 (-1: never happened)."""
        def rel(t_ns: int) -> int:
            return t_ns - self.t0_ns if t_ns >= 0 else -1

        for h in self.hosts.values():
            self.drops[h.name] += ring_drops(h.sock)
        sends = [{
            "index": q.plan.index, "start_ns": rel(q.start_ns), "acked_ns": rel(q.acked_ns),
            "first_tx_ns": rel(q.first_tx_ns), "last_tx_ns": rel(q.last_tx_ns),
            "packets": q.n, "bytes_sent": q.bytes_sent,
            "packets_sent": q.gbn.packets_sent if q.gbn else 0,
            "retransmitted": q.gbn.retransmitted if q.gbn else 0,
            "naks": q.gbn.naks if q.gbn else 0,
            "timeouts": q.gbn.timeouts if q.gbn else 0,
            "cnps_received": q.rp.cnps_received if q.rp else 0,
        } for q in self.senders]
        receives = [{
            "index": rq.plan.index, "received_ns": rel(rq.done_ns), "first_rx_ns": rel(rq.first_rx_ns),
            "bytes_received": rq.bytes, "ce_marked": rq.ce, "cnps_sent": rq.cnps,
            "data_packets_received": rq.seen, "duplicates": rq.gbn.duplicates,
            "out_of_order": rq.gbn.out_of_order,
        } for h in self.hosts.values() for rq in h.rx_qps.values()]
        return {
            "worker": self.plan.worker, "error": error, "stop_reason": self.stop_reason,
            "hosts": list(self.hosts), "sends": sends, "receives": receives,
            "latency": self.lat, "rates": self.rates, "lags": self.lags,
            "packets_sent": self.packets_sent, "data_packets_sent": self.data_sent,
            "ctrl_packets_sent": self.ctrl_sent, "packets_received": self.packets_received,
            "push_backs": self.push_backs, "unknown_frames": self.unknown_frames,
            "ring_drops": sum(self.drops.values()),
            "cpu_s": time.process_time() - self.cpu0 if self.cpu0 else 0.0,
            "wall_s": self.wall_ns / 1e9,
        }
