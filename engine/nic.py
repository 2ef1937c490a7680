"""The engine worker: the RoCEv2 NIC models of a set of hosts, driven by events.

One worker process owns the raw sockets of a set of emulated hosts. For each host
it runs the RoCEv2 NIC model:

* **requester** (one per message = one RC QP): go-back-N sequencing
  (``traffic.gbn.GbnSender``) paced at the rate of its congestion control and held
  to its window (one object per QP from the plan's ``traffic.ccload.CcFactory``,
  fed sends, ACKs with their RTT and ECN echo, CNPs and its own timer), and on top
  of that the host NIC's line rate shared by its QPs. The frame that fills the
  window carries AckReq, so the responder ACKs it at once;
* **responder**: go-back-N receive (``GbnReceiver``), coalesced ACKs and NAKs
  carrying the ECN echo in BTH BECN, a delayed ACK when a delivered frame has
  waited ``ack_delay_s`` for its ACK, CNPs from a ``NotificationPoint`` (at most
  one per QP per CNP interval).

Protocol decisions are all taken by those pure objects; this module moves frames
and converts clocks. They get REAL-fabric time, ``(t_emu_ns - t0_ns) / S``.

Event loop. The CPU cost follows frames and events, never the wall clock:

* the worker sleeps in ``epoll`` on its hosts' receive rings, one eventfd and a
  timerfd armed at the earliest deadline of a heap (``traffic.pacing.Deadlines``):
  a NIC's next pacing slot, a message's start time, a retransmission timer. Only
  ready rings are read; only due NICs are served. Deadlines within a quarter frame
  time of the wake-up are served in the same turn, so close deadlines of several
  NICs cost one wake-up, and a ring that becomes ready within a quarter frame time
  before a deadline waits for that deadline's wake-up (``_TURN_FRAMES``);
* dependencies are counters (``traffic.pacing.DepCounter``) decremented on
  completion; completions of other workers arrive through the completion rings of
  ``engine.plan`` and wake this worker through its eventfd;
* frames are received in batches from the TPACKET_V2 ring, headers only
  (``engine.rawsock``), and sent in compiled ``sendmmsg`` bursts (``engine.burst``).
  Each read records how long its oldest frame waited in the ring (receive lag: a
  frame read late is answered late), which the gate judges beside the send lag.

Pacing. Each QP and each NIC keeps a ``Schedule`` of absolute due times; the
lag of every frame behind its due time is recorded, and a stall that drops
schedule debt is counted (resets, dropped ns). Per NIC, the time it was busy (first
frame out to last frame out of each busy period of at least _RATE_PERIOD_FRAMES full
frames) is compared with the time its schedule allotted the same frames (rate check).
The wait before a period's first frame, and short periods, are wake-up lag, judged by
the lag checks: counted here they would fail every small message on wake latency.
Where clang works, these decisions run in C (``engine.tx``, csrc/roce_tx.c): every NIC
is served by ``tx_service`` (``_service_compiled``), which picks the due QP, takes its
frames from go-back-N, sends the burst, books the schedules, lags and busy period, and
returns to Python only for what Python must do (a QP gone idle, a trace that is due,
an algorithm's ``on_send``, a short send, a burst for a QP's delay line). The go-back-N
and schedule state lives in C structs that borrow the pure classes' Python methods for
every other event; ``_service`` in Python is the same loop for machines without a
compiler (and ``send_path="python"``).

Fixed delays. A QP's frames enter the fabric the real fabric's fixed path delay
(``MsgPlan.fwd_delay_emu_ns``, dilated by S, engine/run.py) after the time they
would leave a real NIC, stamped with their hand-over time less that delay, so the
receiver's one-way latency includes it. Rather than hold every decided frame, the NIC
model runs on a **NIC clock** ``fwd_ns`` behind the wall clock, ``fwd_ns`` the smallest
path delay of its QPs: it decides, paces and books a frame at its slot on that clock, i.e. at
the wall time its frame is due on the fabric, and hands it over at once. A QP whose
path delay is longer has a **delay line** for the difference: the burst waits in a
FIFO and goes to the fabric stamped with its hand-over time less the whole delay.
ACKs and CNPs reach the requester the ACK path's delay after they arrive, on its
NIC's clock (``fwd_ns`` later on the wall clock: a second FIFO). Every sender-side
time (slots, send stamps, RTT samples, the CC's clock, retransmission and CC timers,
a message's post) is NIC time; the deadline heap holds wall times. Both delays are
constant per QP, so either FIFO releases in order; a frame's pacing lag includes how
late its hand-over was. A message's first frame is due ``nic_overhead_s`` after it
is posted. (The clock saves a deadline, a hold and a release per burst where a NIC's
QPs share one path, as in a ring all-reduce: 30 % fewer Python calls per frame,
docs/design.md.)

Clocks. Data frames carry the send time as CLOCK_MONOTONIC ns (``traffic.roce``);
receive times are the ring's kernel timestamps converted with the parent's
``realtime - monotonic`` offset.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import math
import os
import select
import signal
import socket
import struct
import time
import traceback
from array import array
from collections import deque
from typing import Any

from core.errors import CapabilityError
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
    WIRE_FRAME_BYTES,
    WIRE_OVERHEAD_BYTES,
)
from core.scaling import Scale
from engine.burst import MAX_BURST, Burst
from engine.plan import FAILED, FINISHED, READY, STUCK_S, MsgPlan, NicPlan, Shared, WorkerPlan
from engine.rawsock import (
    TP_STATUS_USER,
    TPACKET2_HDR,
    RingSpec,
    TimerFd,
    map_ring,
    ring_drops,
    slot_offsets,
)
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
    RxLib,
    RxQpSpec,
    RxRing,
    RxState,
)
from engine.stats import NicRecord, ReceiveRecord, SendRecord, WorkerCounters, WorkerStats
from engine.tx import (
    TX_AFTER,
    TX_ARM,
    TX_EMPTY,
    TX_IDLE,
    TX_LAGS,
    TxCall,
    TxGbn,
    TxLib,
    TxNic,
    TxQp,
)
from traffic import gbn
from traffic.cc import calls_on_send
from traffic.ccload import check_read_back, run_fault
from traffic.dcqcn import NotificationPoint
from traffic.int_telemetry import ack_with_int, block_at, decode_block
from traffic.pacing import Deadlines, DepCounter, Schedule
from traffic.roce import (
    ACKNOWLEDGE,
    AETH_ACK,
    AETH_NAK_PSN_SEQ,
    CNP,
    DATA_OPCODES,
    ECN_CE,
    RETH_OPCODES,
    QpTemplate,
    ResponderTemplate,
)

PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29

_TP_STATUS = struct.Struct("<I")
# Fixed offsets of an IHL-5 frame: TOS 15, IP total length 16, BTH opcode 42,
# flags 43, QP word 46, PSN word 50.
_ROCE = struct.Struct(">15xBH24xBB2xII")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
# IPv4, UDP, BTH and ICRC around the payload: an IP total length minus this is payload.
_IP_OVERHEAD_BYTES = HEADER_BYTES - ETH_BYTES
# A sender that fell behind its schedule (preempted on a busy machine) catches up
# to keep the average rate exact, but never by more than this (emulated ns) or two
# frames, whichever is longer: beyond that it restarts the schedule from now
# (``Schedule`` counts the reset and the debt it dropped).
_MAX_CATCHUP_NS = 20_000_000
#: What made a row of the rate trace (its ``event`` column).
TRACE_EVENTS = ("send", "cnp", "timer", "echo")
TRACE_SEND, TRACE_CNP, TRACE_TIMER, TRACE_ECHO = range(len(TRACE_EVENTS))
_RX_BUDGET = 64                         # frames per ring per turn: due sends interleave
_EARLY_NS = 20_000                      # the shortest turn: deadlines this close share a wake-up
# Busy periods shorter than this many full frames at the NIC's rate have no rate to
# speak of: their timing is the wake-up lag, which the lag checks judge against a
# full frame's time. Judged by their "rate", a 1 ms wake-up on a 33 us 8-byte frame
# would fail a run whose latencies it moves by 2 %.
_RATE_PERIOD_FRAMES = 4
_IDLE_WAKE_NS = 50_000_000              # the longest sleep: stop and parent checks
# A worker's turn, in full frame times of its fastest NIC. A wake-up costs ~25 us of
# CPU on a VM, about half the engine's CPU per frame, and the slots of a worker's
# NICs and its rings' frames rarely coincide, so one wake-up serves what falls
# within a turn:
# * a ring that becomes ready at most a turn before a due deadline waits for that
#   deadline's wake-up. Frames keep their kernel receive stamps (latency is exact);
#   an ACK, CNP or completion leaves at most a turn late;
# * every deadline due within a turn of the wake-up is served in it: a frame may be
#   handed over up to a turn before its slot. Schedules stay anchored to the slots,
#   so rates are exact, and frames are stamped when they really leave.
# A quarter frame (21 ns real at 400G) is far below any latency the fabric models,
# and long enough that one wake-up serves most of a ring's coincident deadlines
# (wake-ups and CPU per frame: docs/validation.md).
_TURN_FRAMES = 0.25


# ----------------------------------------------------------------------------- state

class _Nic:
    __slots__ = ("host", "ifname", "sock", "rate_bps", "rate_emu_bps", "ns_per_bit", "sched", "qps",
                 "backlog", "bits_sent", "period_start", "period_first_out", "ideal_end", "actual_end",
                 "rate_period_ns", "slot", "fwd_ns",
                 "dropped", "period_dropped", "busy_ns", "ideal_ns", "c", "c_addr", "active")

    def __init__(self, plan: NicPlan, sock: socket.socket, scale: Scale, slot: int):
        self.slot = slot                # its index in RxState.blocked
        self.fwd_ns = 0                 # how far its clock runs behind the wall clock
        self.host = plan.host
        self.ifname = plan.ifname
        self.sock = sock
        self.rate_bps = plan.rate_bps
        self.rate_emu_bps = scale.rate_emu_bps(plan.rate_bps)
        self.ns_per_bit = 1e9 / self.rate_emu_bps
        self.rate_period_ns = _RATE_PERIOD_FRAMES * 8 * WIRE_FRAME_BYTES * self.ns_per_bit
        self.sched = Schedule(_MAX_CATCHUP_NS)
        self.qps: list[_SendQp] = []    # QPs with something to send now
        self.backlog: list[bytes] = []  # frames the qdisc pushed back, sent first
        self.bits_sent = 0
        # Busy periods: from the first due slot to the end of the last frame, as it
        # happened (actual) and as the schedules allotted it (ideal).
        self.period_start = -1
        self.period_first_out = 0
        self.ideal_end = 0
        self.actual_end = 0
        self.dropped = 0                # schedule debt dropped by resets, all periods
        self.period_dropped = 0
        self.busy_ns = 0
        self.ideal_ns = 0
        # The compiled sender's view (None: this NIC is served by _service in Python).
        self.c: TxNic | None = None
        self.c_addr = 0
        self.active: Any = None         # its busy QPs' slots, in ``qps`` order


class _CcTimer:
    """The deadline key of a QP's congestion-control timer (``next_timer_s``)."""

    __slots__ = ("qp",)

    def __init__(self, qp: _SendQp):
        self.qp = qp


class _DelayLine:
    """A QP's delay lines (module docstring, "Fixed delays"), a deadline key of its own.

    ``frames``: (release_ns, shape, psn, count, lag_ns, step_ns, solicit) of decided bursts
    whose path delay exceeds their NIC clock's; ``ctrl``: (release_ns, kind, psn,
    syndrome, int_block) of received ACKs (kind EV_ACK_IN) and CNPs (EV_CNP_IN).
    Release times are wall times. Each FIFO's delay is constant, so its head is its
    earliest.
    """

    __slots__ = ("qp", "frames", "ctrl")

    def __init__(self, qp: _SendQp):
        self.qp = qp
        self.frames: deque[tuple[int, Any, int, int, int, int, bool]] = deque()
        self.ctrl: deque[tuple[int, int, int, int, bytes]] = deque()

    def next_ns(self) -> int | None:
        heads = [q[0][0] for q in (self.frames, self.ctrl) if q]
        return min(heads) if heads else None


class _SendQp:
    __slots__ = ("plan", "tmpl", "first", "middle", "last", "n", "gbn", "cc", "nic",
                 "sched", "idle", "start_ns", "acked_ns", "first_tx_ns", "last_tx_ns",
                 "bytes_sent", "next_trace_ns", "mid_bits", "bits", "tx_ns", "timer", "echoes",
                 "delay", "line_ns", "post_ns", "c", "slot")

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
        # Wire bits: the frame and Ethernet's preamble, FCS and gap, which the
        # fabric's shapers charge too (a NIC paced on frame bits alone would outrun
        # its own port by 0.6 %).
        self.bits = [(len(s.buf) + WIRE_OVERHEAD_BYTES) * 8
                     for s in (self.first, self.middle, self.last)]
        self.mid_bits = self.bits[1]
        self.gbn: gbn.GbnSender | None = None
        self.cc: Any = None
        self.nic: _Nic | None = None
        self.sched = Schedule(_MAX_CATCHUP_NS)
        self.idle = True
        self.start_ns = -1
        self.acked_ns = -1
        self.first_tx_ns = -1
        self.last_tx_ns = -1
        self.bytes_sent = 0
        self.next_trace_ns = 0
        self.tx_ns = array("q")         # latest send time of every packet (RTT samples)
        self.timer = _CcTimer(self)
        self.echoes = 0                 # ACKs and NAKs received with the ECN echo
        self.delay = (_DelayLine(self) if plan.fwd_delay_emu_ns or plan.back_delay_emu_ns
                      else None)
        self.line_ns = 0                # path delay beyond its NIC clock's: a frame's wait
        # When the message is posted (NIC time): its start time, or the completion of its
        # last dependency if later (the receive stamp of that message's last frame).
        self.post_ns = -1
        self.c: TxQp | None = None      # the compiled sender's view of it, if any
        self.slot = -1


class _RecvQp:
    __slots__ = ("plan", "gbn", "resp", "nic", "done_ns", "bytes", "ce", "cnps", "seen",
                 "first_rx_ns")

    def __init__(self, plan: MsgPlan, n_packets: int, ack_coalesce: int, ce_ack: bool, nic: _Nic):
        self.plan = plan
        self.gbn = gbn.GbnReceiver(n_packets, ack_coalesce, ce_ack=ce_ack)
        self.resp = ResponderTemplate(plan.reply_flow)
        self.nic = nic
        self.done_ns = -1
        self.bytes = 0
        self.ce = 0
        self.cnps = 0
        self.seen = 0
        self.first_rx_ns = -1


class _Host:
    __slots__ = ("name", "sock", "mm", "offsets", "idx", "rx_qps", "tx_qps", "np", "rx_count",
                 "ring")

    def __init__(self, name: str, sock: socket.socket, ring: RingSpec, cnp_interval_s: float):
        self.name = name
        self.sock = sock
        self.mm = map_ring(sock, ring)
        self.offsets = slot_offsets(ring)
        self.ring: RxRing | None = None     # the compiled receive loop's view
        self.idx = 0
        self.rx_qps: dict[int, _RecvQp] = {}
        self.tx_qps: dict[int, _SendQp] = {}
        self.np = NotificationPoint(cnp_interval_s)
        self.rx_count = 0


# ----------------------------------------------------------------------------- process

def runqueue_wait_ns() -> int:
    """ns this thread has waited on a run queue while runnable (/proc schedstat, field 2;
    0 where the kernel does not keep it)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class _Stop(Exception):
    """SIGTERM inside a worker."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Stop()


def _setup_process(cpu: int | None) -> bool:
    """Prepare a forked worker; True if it runs under the real-time scheduler."""
    libc = ctypes.CDLL(None, use_errno=True)
    # Die with the engine process, even if it is SIGKILLed: no orphans.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The timerfd fires within ~1 us of the deadline instead of the default 50 us slack.
    libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent coordinates Ctrl-C
    signal.signal(signal.SIGTERM, _on_sigterm)
    if cpu is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})
    # The lowest real-time priority: a worker whose timer fires takes its CPU at once
    # instead of waiting for the running task's slice to end (under the fair scheduler a
    # runnable worker can wait milliseconds behind the engine's own sampler and kworkers,
    # many frame times at any S; docs/validation.md). Workers sleep between deadlines, and the kernel's
    # real-time throttling (95 % by default) keeps the machine responsive regardless.
    # Without the privilege the worker stays a normal task (the run says so).
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        return False
    return True


def worker_main(plan: WorkerPlan, shared: Shared, conn: Any,
                rx_socks: dict[str, socket.socket], tx_socks: dict[tuple[str, str], socket.socket],
                ring: RingSpec, burst: Burst, rx_lib: RxLib, parent_pid: int) -> None:
    """Entry point of a forked worker: run the NIC models, send the results on ``conn``."""
    realtime = _setup_process(plan.cpu)
    w = plan.worker
    loop: _WorkerLoop | None = None
    try:
        loop = _WorkerLoop(plan, shared, rx_socks, tx_socks, ring, burst, rx_lib, parent_pid)
        loop.realtime = realtime
        shared.status[w] = READY
        loop.run()
        conn.send(loop.results())
        shared.status[w] = FINISHED
    except BaseException as e:  # report anything, also SIGTERM, then leave
        shared.status[w] = FAILED
        shared.stop.value = 1
        with contextlib.suppress(OSError):
            for fd in shared.wake_fds:
                os.eventfd_write(fd, 1)
        reason = "terminated" if isinstance(e, _Stop) else traceback.format_exc(limit=8)
        stuck_s = STUCK_S if shared.stuck[w] else None  # the parent's watchdog stopped it
        if stuck_s is not None:
            here = [f for f in traceback.extract_tb(e.__traceback__) if f.name != "_on_sigterm"]
            reason = f"no progress for {stuck_s:g} s" + (
                f", stopped in {here[-1].name} ({here[-1].filename}, line {here[-1].lineno})"
                if here else "")
        report = WorkerStats.failed(w, f"worker {w}: {reason}")
        # A plain stop (SIGTERM at the end) may find the worker in a user's class too.
        if loop is not None and isinstance(e, Exception) and (stuck_s or not isinstance(e, _Stop)):
            with contextlib.suppress(Exception):  # the report goes out whatever this does
                report.cc_fault = run_fault(plan.cc, [q.cc for q in loop.senders if q.cc], e,
                                               stuck_s)
        with contextlib.suppress(Exception):
            conn.send(report)
    finally:
        conn.close()


# ----------------------------------------------------------------------------- loop

class _WorkerLoop:
    def __init__(self, plan: WorkerPlan, shared: Shared, rx_socks: dict[str, socket.socket],
                 tx_socks: dict[tuple[str, str], socket.socket], ring: RingSpec, burst: Burst,
                 rx_lib: RxLib, parent_pid: int):
        self.plan = plan
        self.burst = burst
        self.shared = shared
        self.parent_pid = parent_pid
        self.scale = plan.scale
        self.scale_ns = plan.scale.emu_ns_per_real_s
        self.ack_delay_ns = None if plan.ack_delay_s is None \
            else int(plan.ack_delay_s * self.scale_ns)
        self.overhead_ns = plan.scale.emu_ns(plan.nic_overhead_s)
        self.nics = {(n.host, n.ifname): _Nic(n, tx_socks[(n.host, n.ifname)], plan.scale, k)
                     for k, n in enumerate(plan.nics)}
        self.turn_ns = max(_EARLY_NS, int(
            _TURN_FRAMES * 8 * WIRE_FRAME_BYTES
            * min((n.ns_per_bit for n in self.nics.values()), default=0)))
        self.hosts = {h: _Host(h, rx_socks[h], ring, plan.cnp_interval_s) for h in plan.hosts}
        self.senders = [_SendQp(m, plan.payload_bytes) for m in plan.sends]
        for qp in self.senders:
            for shape in {id(s): s for s in (qp.first, qp.middle, qp.last)}.values():
                burst.prepare(shape)
        self.by_index = {qp.plan.index: qp for qp in self.senders}
        for qp in self.senders:
            qp.nic = self.nics[(qp.plan.src, qp.plan.ifname)]
            self.hosts[qp.plan.src].tx_qps[qp.plan.reply_flow.dqpn] = qp
        for nic in self.nics.values():
            nic.fwd_ns = min((qp.plan.fwd_delay_emu_ns for qp in self.senders
                              if qp.nic is nic), default=0)
        for qp in self.senders:
            qp.line_ns = qp.plan.fwd_delay_emu_ns - qp.nic.fwd_ns
        for m in plan.receives:
            n_packets = -(-m.size_bytes // plan.payload_bytes)
            rq = _RecvQp(m, n_packets, plan.ack_coalesce or n_packets, plan.ce_ack,
                         self.nics[(m.dst, m.reply_ifname)])
            self.hosts[m.dst].rx_qps[m.flow.dqpn] = rq
        self.rx: RxState | None = None
        if rx_lib.available:
            self.rx = RxState(rx_lib, plan.n_messages, _RX_BUDGET, len(self.nics),
                              self.scale_ns, plan.cnp_interval_s)
            for host_id, h in enumerate(self.hosts.values()):
                h.ring = RxRing(h.mm, h.offsets, host_id)
                self.rx.add_qps(host_id, [
                    RxQpSpec(qpn, rq.gbn.total_packets, rq.gbn.ack_coalesce,
                             rq.nic.sock.fileno(), rq.nic.slot, bytes(rq.resp.ack.buf),
                             rq.resp.cnp)
                    for qpn, rq in h.rx_qps.items()], plan.ce_ack,
                    ack_timer=plan.ack_delay_s is not None)
            self._receive = self._receive_compiled  # type: ignore[method-assign]
        self.tx: TxLib | None = None
        self.tx_call: TxCall | None = None
        if burst.compiled:
            try:
                self.tx = TxLib()
            except (CapabilityError, OSError):
                self.tx = None  # the Python sender serves every NIC
            else:
                self._compile_sender(burst)
        self.deps = DepCounter({qp.plan.index: qp.plan.deps for qp in self.senders})
        self.deadlines = Deadlines()
        self.wake_fd = shared.wake_fds[plan.worker]
        # Completion rings this worker reads: (count slot, offset, cursor) per writer.
        n = plan.n_workers
        self.inbound = [[wr * n + plan.worker, off, 0]
                        for (wr, rd), (off, _) in sorted(plan.ring_slices.items())
                        if rd == plan.worker]
        self.outbound = {rd: [plan.worker * n + rd, off, 0]
                         for (wr, rd), (off, _) in plan.ring_slices.items() if wr == plan.worker}
        self.acked_here = 0
        self.t0_ns = 0
        self.all_acked = False
        # Results.
        self.lat = array("q")          # (index, rx_ns, one_way_ns, ce) flattened
        self.rates: list[tuple[int, int, float, float, float]] = []
        self.lags = array("q")
        self.lag_total_ns = 0
        self.rx_lags = array("q")      # (lag_ns, frames) per ring read, flattened
        self.packets_sent = 0
        self.data_sent = 0
        self.ctrl_sent = 0
        self.packets_received = 0
        self.push_backs = 0
        self.unknown_frames = 0
        self.wakeups = 0
        self.cpu0 = 0.0
        self.times0: os.times_result | None = None
        self.cpu_wait0_ns = 0
        self.realtime = False
        self.wall_ns = 0
        self.drops = {h: 0 for h in self.hosts}
        self.stop_reason: str | None = None

    def _compile_sender(self, burst: Burst) -> None:
        """Give every NIC to roce_tx.c's pacing loop."""
        qps = (TxQp * max(1, len(self.senders)))()
        self.tx_qps = qps
        by_nic: dict[int, list[_SendQp]] = {}
        for slot, qp in enumerate(self.senders):
            qp.slot = slot
            by_nic.setdefault(id(qp.nic), []).append(qp)
        for nic in self.nics.values():
            mine = by_nic.get(id(nic), [])
            if not mine:
                continue
            c = TxNic(fd=nic.sock.fileno(), fwd_ns=nic.fwd_ns, ns_per_bit=nic.ns_per_bit,
                      period_start=-1)
            c.sched.max_catchup_ns = _MAX_CATCHUP_NS
            nic.active = (ctypes.c_int32 * len(mine))()
            c.active = ctypes.cast(nic.active, ctypes.POINTER(ctypes.c_int32))
            nic.c, nic.c_addr, nic.sched = c, ctypes.addressof(c), c.sched
            for qp in mine:
                q = qp.c = qps[qp.slot]
                q.sched.max_catchup_ns = _MAX_CATCHUP_NS
                qp.sched = q.sched
                for k, shape in enumerate((qp.first, qp.middle, qp.last)):
                    q.shape[k] = ctypes.pointer(burst.c_shape(shape))
                    q.bits[k] = qp.bits[k]
                q.first_tx_ns = q.last_tx_ns = -1
                q.line_ns = qp.line_ns
        self.tx_lags = (ctypes.c_int64 * (16 * MAX_BURST))()
        self.tx_call = TxCall(qps=ctypes.cast(qps, ctypes.POINTER(TxQp)),
                              buf=burst.buffer_address,
                              lags=ctypes.cast(self.tx_lags, ctypes.POINTER(ctypes.c_int64)),
                              lags_cap=len(self.tx_lags), scale_ns=self.scale_ns,
                              payload_bytes=self.plan.payload_bytes,
                              max_catchup_ns=_MAX_CATCHUP_NS)
        self.tx_call_addr = ctypes.addressof(self.tx_call)

    def _sync_cc(self, qp: _SendQp) -> None:
        """Give the compiled sender what the algorithm now says (after any of its events)."""
        c = qp.c
        if c is None:
            return
        rate, window = self._pace_of(qp.cc)
        c.rate_bps = rate
        c.window_bytes = -1.0 if window is None else window

    def _pace_of(self, cc: Any) -> tuple[float, float | None]:
        """The rate and window ``cc`` paces with, checked: a ParameterError naming what
        a user's class got wrong, instead of a failure in the pacing arithmetic."""
        rate = cc.rate_bps
        window = cc.window_bytes
        if not 0.0 < rate < math.inf or window is not None and not 0.0 < window < math.inf:
            check_read_back(self.plan.cc.spec, cc, "during the run")  # says why
        return rate, window

    def _drain_lags(self) -> None:
        call = self.tx_call
        if call is not None and call.n_lags:
            self.lags.extend(self.tx_lags[:call.n_lags])
            call.n_lags = 0

    # -- time ------------------------------------------------------------------------
    def real_s(self, now_ns: int) -> float:
        return (now_ns - self.t0_ns) / self.scale_ns

    # -- main loop -------------------------------------------------------------------
    def run(self) -> None:
        shared = self.shared
        while not shared.t0_ns.value:
            if shared.stop.value:
                self.stop_reason = "stopped before start"
                return
            time.sleep(0.0005)
        self.t0_ns = t0 = shared.t0_ns.value
        if self.tx_call is not None:
            self.tx_call.t0 = t0
        for h in self.hosts.values():
            self.drops[h.name] += ring_drops(h.sock)  # frames before t0 are not ours to judge
        # The Scapy templates are hundreds of thousands of long-lived objects: out of
        # the collector's sight, a collection during the run costs microseconds.
        gc.freeze()
        timer = TimerFd()
        eps = select.epoll(), select.epoll(), select.epoll()
        try:
            self._loop(t0, timer, *eps)
        finally:
            for e in eps:
                e.close()
            timer.close()

    def _loop(self, t0: int, timer: TimerFd, ep: select.epoll, ep_due: select.epoll,
              ep_rx: select.epoll) -> None:
        """``ep`` waits for everything, ``ep_due`` for the timer and the eventfd, ``ep_rx``
        for the rings: when a deadline is at most a turn away the worker sleeps
        on ``ep_due`` and, awake, asks ``ep_rx`` (without sleeping) which rings became
        ready meanwhile, instead of waking once more for them."""
        shared = self.shared
        mono = time.monotonic_ns
        by_fd = {h.sock.fileno(): h for h in self.hosts.values()}
        for fd in by_fd:
            ep.register(fd, select.EPOLLIN)
            ep_rx.register(fd, select.EPOLLIN)
        for e in (ep, ep_due):
            e.register(timer.fd, select.EPOLLIN)
            e.register(self.wake_fd, select.EPOLLIN)
        turn_ns = self.turn_ns
        for index in self.deps.ready():
            qp = self.by_index[index]
            qp.post_ns = t0 + qp.plan.start_emu_ns
            self.deadlines.arm(qp, qp.post_ns + qp.nic.fwd_ns)
        timer.arm(t0)
        while mono() < t0:  # every worker starts on the same clock reading
            ep.poll(0.05)
            timer.clear()
            timer.arm(t0)
        self.cpu0 = time.process_time()
        self.times0 = os.times()
        self.cpu_wait0_ns = runqueue_wait_ns()
        deadlines = self.deadlines
        timer_fd = timer.fd
        wake_fd = self.wake_fd
        total = self.plan.n_messages
        acked = shared.acked
        turns = shared.turns
        w = self.plan.worker
        next_house = 0
        while True:
            now = mono()
            due = deadlines.next_ns()
            wake = now + _IDLE_WAKE_NS
            if due is not None and due < wake:
                wake = due
            timer.arm(wake)
            if wake - now <= turn_ns:
                events = ep_due.poll()
                events += ep_rx.poll(0)
            else:
                events = ep.poll()
            self.wakeups += 1
            turns[w] = self.wakeups
            for fd, _ in events:
                if fd == timer_fd:
                    timer.fired()  # re-armed below before the next sleep
                elif fd == wake_fd:
                    os.eventfd_read(wake_fd)
                    self._drain_completions()
                else:
                    self._receive(by_fd[fd])
            now = mono()
            for key in deadlines.pop_due(now + turn_ns):
                self._fire(key, now)
            if self.all_acked or now >= next_house:
                next_house = now + _IDLE_WAKE_NS
                if sum(acked) >= total:
                    break
                if shared.stop.value:
                    self.stop_reason = "stopped"
                    break
                if os.getppid() != self.parent_pid:
                    self.stop_reason = "engine process died"
                    break
        turns[w] = -1  # the results take a while; the watchdog leaves them be
        self.wall_ns = mono() - t0

    def _fire(self, key: Any, now: int) -> None:
        """Act on deadline ``key`` at wall time ``now`` (a sender's on its NIC clock)."""
        if isinstance(key, _Nic):
            self._service(key, now - key.fwd_ns)
            return
        if isinstance(key, _CcTimer):
            self._on_cc_timer(key.qp, now - key.qp.nic.fwd_ns)
            return
        if isinstance(key, _RecvQp):
            self._delayed_ack(key)
            return
        if isinstance(key, _DelayLine):
            self._release(key, now)
            return
        qp: _SendQp = key
        now -= qp.nic.fwd_ns
        if qp.gbn is None:
            self._start(qp, now)
            return
        g = qp.gbn
        if g.done:
            return
        g.advance(self.real_s(now))
        if g.next_index < g.total_packets:
            self._wake(qp, now)
        else:
            self._arm_rto(qp)

    # -- dependencies --------------------------------------------------------------------
    def _completed(self, index: int, done_ns: int, now: int) -> None:
        """Message ``index`` was fully received at ``done_ns``: post what waited for it
        then. A worker that learns of it late (a stall, a wake-up) starts the message
        late against that post time, and its frames' lag says so. ``now`` is wall time."""
        for child in self.deps.complete(index):
            qp = self.by_index[child]
            qp.post_ns = max(done_ns + qp.plan.gap_emu_ns, self.t0_ns + qp.plan.start_emu_ns)
            fwd = qp.nic.fwd_ns
            if qp.post_ns <= now - fwd:
                self._start(qp, now - fwd)
            else:
                self.deadlines.arm(qp, qp.post_ns + fwd)

    def _announce(self, index: int, done_ns: int) -> None:
        """Tell the workers that send dependents of ``index`` (completion ring + eventfd)."""
        shared = self.shared
        for reader in self.plan.notify.get(index, ()):
            slot = self.outbound[reader]
            shared.ring[slot[1] + slot[2]] = index
            shared.ring_done_ns[slot[1] + slot[2]] = done_ns
            slot[2] += 1
            shared.ring_count[slot[0]] = slot[2]  # published after the entry
            os.eventfd_write(shared.wake_fds[reader], 1)

    def _drain_completions(self) -> None:
        shared = self.shared
        ring = shared.ring
        done = shared.ring_done_ns
        count = shared.ring_count
        now = time.monotonic_ns()
        for slot in self.inbound:
            c = count[slot[0]]
            for k in range(slot[2], c):
                self._completed(ring[slot[1] + k], done[slot[1] + k], now)
            slot[2] = c
        if not self.all_acked and sum(shared.acked) >= self.plan.n_messages:
            self.all_acked = True

    # -- starting messages ---------------------------------------------------------------
    def _start(self, qp: _SendQp, now: int) -> None:
        p = self.plan
        nic = qp.nic
        assert nic is not None
        qp.gbn = gbn.GbnSender(qp.n, timeout_s=p.rto_s)
        # The real line rate and path round trip: CC never sees S.
        qp.cc = p.cc(nic.rate_bps, self.real_s(now), qp.plan.base_rtt_s, qp.plan.hops)
        qp.tx_ns = array("q", bytes(8 * qp.n))
        c = qp.c
        if c is not None:  # the compiled sender keeps the go-back-N state
            c.gbn = TxGbn.of(qp.gbn)
            qp.gbn = c.gbn
            c.tx_ns = ctypes.cast(qp.tx_ns.buffer_info()[0], ctypes.POINTER(ctypes.c_int64))
            c.calls_on_send = calls_on_send(qp.cc)
            c.next_trace_ns = now
            self._sync_cc(qp)
        # A message counts from when it was posted, whether it is served up to a turn
        # early or late (then its first frames' lag is booked, as any stall's).
        post = qp.post_ns
        qp.start_ns = post
        qp.next_trace_ns = now
        self._arm_cc_timer(qp)
        self._wake(qp, now, post + self.overhead_ns)  # the NIC's per-message overhead

    def _wake(self, qp: _SendQp, now: int, due_ns: int | None = None) -> None:
        """``qp`` has frames to send from ``due_ns`` (default ``now``: an idle QP owed
        nothing; both NIC time): put it on its NIC and serve the NIC now."""
        if not qp.idle:
            return
        qp.idle = False
        self.deadlines.disarm(qp)
        due = now if due_ns is None else due_ns
        qp.sched.restart(due)
        nic = qp.nic
        if not nic.qps:
            nic.sched.restart(due)
        nic.qps.append(qp)
        if nic.c is not None:
            nic.active[nic.c.n_active] = qp.slot
            nic.c.n_active += 1
        wall = now + nic.fwd_ns
        armed = self.deadlines.armed(nic)
        if armed is None or armed > wall:
            self.deadlines.arm(nic, wall)

    def _arm_rto(self, qp: _SendQp) -> None:
        deadline = qp.gbn.deadline_s
        if deadline is not None:
            self.deadlines.arm(qp, self.t0_ns + int(deadline * self.scale_ns) + qp.nic.fwd_ns)

    def _arm_cc_timer(self, qp: _SendQp) -> None:
        """Arm (or disarm) ``qp``'s CC timer at its ``next_timer_s`` (read after its events)."""
        t_s = qp.cc.next_timer_s
        if t_s != t_s:  # NaN: neither a time nor "no timer"
            check_read_back(self.plan.cc.spec, qp.cc, "during the run")
        if t_s < math.inf and qp.acked_ns < 0:
            self.deadlines.arm(qp.timer, self.t0_ns + int(t_s * self.scale_ns) + qp.nic.fwd_ns)
        else:
            self.deadlines.disarm(qp.timer)

    def _on_cc_timer(self, qp: _SendQp, now: int) -> None:
        if qp.acked_ns >= 0:
            return
        qp.cc.on_timer(self.real_s(now))
        self._sync_cc(qp)
        self._trace(qp, now, TRACE_TIMER)
        self._arm_cc_timer(qp)
        if qp.idle and qp.gbn.next_index < qp.gbn.total_packets:
            self._wake(qp, now)  # its window may have opened

    # -- sending -----------------------------------------------------------------------
    def _service(self, nic: _Nic, now: int) -> None:
        """Send every frame of ``nic`` due within a turn of ``now`` (NIC time); re-arm
        its deadline."""
        fwd = nic.fwd_ns
        if nic.backlog and not self._flush_backlog(nic):
            self.deadlines.arm(nic, now + fwd + int(nic.ns_per_bit * 8 * 1500))
            return
        if nic.c is not None:
            self._service_compiled(nic, now)
            return
        scale_ns = self.scale_ns
        t0 = self.t0_ns
        qps = nic.qps
        horizon = now + self.turn_ns
        while qps:
            best = qps[0]
            for qp in qps:
                if qp.sched.next_ns < best.sched.next_ns:
                    best = qp
            sched = best.sched.next_ns if best.sched.next_ns > nic.sched.next_ns \
                else nic.sched.next_ns
            if sched > horizon:
                self.deadlines.arm(nic, sched + fwd)
                return
            lag = now - sched
            g = best.gbn
            cc = best.cc
            t_real = (now - t0) / scale_ns
            # The timer first: a timeout goes back to una, and the frame's shape (first,
            # middle, last) and send-time slot follow the index sent.
            g.advance(t_real)
            index = g.next_index  # start PSN 0 and < 2**24 packets: the PSN is the index
            last_index = best.n - 1
            if 0 < index < last_index:
                shape, bits, limit = best.middle, best.mid_bits, last_index - index
            elif index == 0:
                shape, bits, limit = best.first, best.bits[0], 1
            else:
                shape, bits, limit = best.last, best.bits[2], 1
            rate, window = self._pace_of(cc)
            interval = int(bits * scale_ns / rate)
            line = int(bits * nic.ns_per_bit)
            step = interval if interval > line else line
            # A late sender alone on its NIC catches up in one burst (the port's
            # shaper bucket absorbs it); no burst reaches past the next slot: the
            # bucket would let its frames onto the wire early.
            due = 1 + lag // step if len(qps) == 1 and 0 < lag < _MAX_CATCHUP_NS else 1
            allowed = 0
            if window is not None:  # payload bytes in flight; one frame at least
                allowed = max(1, int(window // self.plan.payload_bytes))
                due = min(due, allowed - g.in_flight)
            run = g.take(t_real, min(due, limit, MAX_BURST)) if due > 0 else None
            if run is None:  # window full or everything sent: wait for ACKs or the RTO
                best.idle = True
                qps.remove(best)
                self._arm_rto(best)
                continue
            psn, n = run
            # The frame that fills the window asks for an ACK (AckReq): coalesced
            # ACKs would otherwise hold it shut until the retransmission timer.
            solicit = window is not None and g.in_flight >= allowed
            if not best.line_ns:  # on the fabric now: its slot plus the NIC clock's delay
                self._book_lags(lag, n, step)
                sent = self._hand_over(nic, shape, psn, n, now + fwd, now, solicit)
            else:  # the lags are booked when the line hands the burst over
                delay = best.delay
                self._hold(delay, delay.frames,
                           (now + best.plan.fwd_delay_emu_ns, shape, psn, n, lag, step, solicit))
                sent = n
            best.tx_ns[index:index + n] = array("q", [now]) * n
            dropped = best.sched.dropped_ns + nic.sched.dropped_ns
            # Both schedules are judged from the frame's actual slot: the one that was
            # not binding (a NIC under a slower CC pace, a QP waiting for its NIC) did
            # not fall behind, it had nothing to send.
            best.sched.restart(sched)
            nic.sched.restart(sched)
            best.sched.sent(now, n, interval)
            nic.sched.sent(now, n, line)
            dropped = best.sched.dropped_ns + nic.sched.dropped_ns - dropped
            if nic.period_start < 0:
                # A busy period starts: its first frame's wait (and any debt dropped
                # for it) is wake-up lag, judged by the lag checks, not the rate.
                nic.period_start = sched
                nic.period_first_out = now
                nic.period_dropped = 0
            else:
                nic.period_dropped += dropped
            end = sched + n * step
            if end > nic.ideal_end:
                nic.ideal_end = end
            end = now + n * line if now + n * line > end else end
            if end > nic.actual_end:
                nic.actual_end = end
            sent_bytes = n * ((bits >> 3) - WIRE_OVERHEAD_BYTES)
            cc.on_send(sent_bytes, t_real)
            best.bytes_sent += sent_bytes
            nic.bits_sent += n * bits
            if best.first_tx_ns < 0:
                best.first_tx_ns = now
            best.last_tx_ns = now
            self.data_sent += n
            if now >= best.next_trace_ns:
                self._trace(best, now)
            if sent < n:  # the NIC queue is full: _hand_over kept the rest
                return
        self._end_period(nic)

    def _service_compiled(self, nic: _Nic, now: int) -> None:
        """``_service`` through roce_tx.c: Python acts only on what it returns."""
        call = self.tx_call
        assert call is not None and self.tx is not None
        call.nic = nic.c_addr
        call.now = now
        call.horizon = now + self.turn_ns
        service = self.tx.service
        addr = self.tx_call_addr
        while True:
            event = service(addr)
            if event == TX_ARM:
                self.deadlines.arm(nic, call.arm_ns)
                return
            if event == TX_EMPTY:
                self._end_period(nic)
                return
            if event == TX_LAGS:
                self._drain_lags()
                continue
            if event not in (TX_IDLE, TX_AFTER):  # TX_ERROR
                raise OSError(call.err, f"sendmmsg: {os.strerror(call.err)}")
            qp = self.senders[call.qp]
            if event == TX_IDLE:  # window full or everything sent: wait for ACKs or the RTO
                qp.idle = True
                nic.qps.remove(qp)
                self._arm_rto(qp)
                continue
            if call.hold:  # decided and booked; the delay line hands it over
                shape = (qp.first, qp.middle, qp.last)[call.which]
                self._hold(qp.delay, qp.delay.frames,
                           (now + qp.plan.fwd_delay_emu_ns, shape, call.psn, call.count,
                            call.lag, call.step, bool(call.solicit)))
            if qp.c.calls_on_send:
                qp.cc.on_send(call.sent_bytes, call.t_real)
                self._sync_cc(qp)
            if now >= qp.c.next_trace_ns:
                self._trace(qp, now)
            if call.sent < call.count:  # the NIC queue is full: keep the rest, retry
                self.burst.wrote(call.count, call.frame_len)
                self._push_back(nic, [self.burst.frame(i) for i in range(call.sent, call.count)],
                                counted=False)
                retry = now + nic.fwd_ns + int(nic.ns_per_bit * 8 * 1500)
                armed = self.deadlines.armed(nic)
                if armed is None or armed > retry:
                    self.deadlines.arm(nic, retry)
                return

    def _deactivate(self, qp: _SendQp) -> None:
        """``qp`` leaves its NIC's busy QPs."""
        nic = qp.nic
        k = nic.qps.index(qp)
        del nic.qps[k]
        if nic.c is not None:
            n = nic.c.n_active
            nic.active[k:n - 1] = nic.active[k + 1:n]
            nic.c.n_active = n - 1

    def _book_lags(self, lag: int, n: int, step: int) -> None:
        """Lateness of ``n`` frames handed to the fabric together, the first ``lag`` ns
        behind its slot and each next one a ``step`` later."""
        if n == 1:
            self.lags.append(lag)
            if lag > 0:
                self.lag_total_ns += lag
        else:
            late = range(lag, lag - n * step, -step)
            self.lags.extend(late)
            self.lag_total_ns += sum(x for x in late if x > 0)

    def _hand_over(self, nic: _Nic, shape: Any, psn: int, n: int, now: int, ts_ns: int,
                   solicit: bool = False) -> int:
        """Give a burst stamped ``ts_ns`` to the NIC's socket at wall time ``now``, behind
        the frames the qdisc pushed back; what it refuses joins them, retried shortly.
        Returns frames taken. ``solicit`` sets AckReq on the burst's last frame."""
        burst = self.burst
        blocked = bool(nic.backlog) and not self._flush_backlog(nic)
        sent = 0 if blocked else burst.send(nic.sock, shape, psn, n, ts_ns, solicit)
        if blocked:  # built only: it waits behind the backlog
            burst.send(None, shape, psn, n, ts_ns, solicit)
        self.packets_sent += sent
        if sent < n:
            self._push_back(nic, [burst.frame(i) for i in range(sent, n)], counted=blocked)
            retry = now + int(nic.ns_per_bit * 8 * 1500)
            armed = self.deadlines.armed(nic)
            if armed is None or armed > retry:
                self.deadlines.arm(nic, retry)
        return sent

    # -- fixed delays ---------------------------------------------------------------------
    def _hold(self, delay: _DelayLine, fifo: deque, entry: tuple) -> None:
        """Append ``entry`` (release time first) to one of ``delay``'s FIFOs."""
        fifo.append(entry)
        if len(fifo) == 1:
            armed = self.deadlines.armed(delay)
            if armed is None or entry[0] < armed:
                self.deadlines.arm(delay, entry[0])

    def _release(self, delay: _DelayLine, now: int) -> None:
        """Hand over the bursts and act on the ACKs/CNPs whose delay is up."""
        qp = delay.qp
        horizon = now + self.turn_ns
        frames = delay.frames
        while frames and frames[0][0] <= horizon:
            release, shape, psn, n, lag, step, solicit = frames.popleft()
            self._book_lags(lag + now - release, n, step)
            self._hand_over(qp.nic, shape, psn, n, now, now - qp.plan.fwd_delay_emu_ns, solicit)
        ctrl = delay.ctrl
        while ctrl and ctrl[0][0] <= horizon:
            release, kind, psn, arg, int_block = ctrl.popleft()
            self._act(qp, kind, psn, arg, release - qp.nic.fwd_ns, int_block)
        due = delay.next_ns()
        if due is not None:
            self.deadlines.arm(delay, due)

    def _ctrl_in(self, qp: _SendQp, kind: int, psn: int, arg: int, rx_ns: int,
                 int_block: bytes = b"") -> None:
        """An ACK (``EV_ACK_IN``, ``arg``: AETH syndrome | ARG_BECN for the ECN echo,
        ``int_block`` the INT it echoes) or CNP (``EV_CNP_IN``) for ``qp`` arrived at
        ``rx_ns`` (wall): acted on now, or at its arrival plus the ACK path's delay on
        the NIC's clock (wall time plus both delays)."""
        delay = qp.delay
        if delay is None:
            self._act(qp, kind, psn, arg, rx_ns, int_block)
        else:
            self._hold(delay, delay.ctrl, (rx_ns + qp.plan.back_delay_emu_ns + qp.nic.fwd_ns,
                                           kind, psn, arg, int_block))

    def _act(self, qp: _SendQp, kind: int, psn: int, arg: int, t_ns: int,
             int_block: bytes) -> None:
        """The requester acts on an ACK or CNP at ``t_ns``, NIC time."""
        if kind == EV_ACK_IN:
            self._on_ack(qp, psn, arg & 0xFF, t_ns, bool(arg & ARG_BECN), int_block)
        else:
            qp.cc.on_cnp(self.real_s(t_ns))
            self._sync_cc(qp)
            self._trace(qp, t_ns, TRACE_CNP)
            self._arm_cc_timer(qp)

    def _end_period(self, nic: _Nic) -> None:
        """``nic`` has nothing left to send: close its busy period."""
        books: Any = nic if nic.c is None else nic.c  # the compiled sender keeps them there
        if books.period_start < 0:
            return
        ideal = books.ideal_end - books.period_dropped - books.period_start
        if ideal >= nic.rate_period_ns:
            nic.busy_ns += books.actual_end - books.period_first_out
            nic.ideal_ns += ideal
        nic.dropped += books.period_dropped
        books.period_start = -1

    def _trace(self, qp: _SendQp, now: int, event: int = TRACE_SEND) -> None:
        """A row of the rate trace: periodic while sending, and at each CNP, CC timer
        and ECN-echo ACK (``event``, an index into TRACE_EVENTS), with the window of
        a window-based algorithm (NaN without one)."""
        rate, target, alpha = qp.cc.trace()
        window = qp.cc.window_bytes
        self.rates.append((qp.plan.index, now - self.t0_ns, rate, target, alpha, event,
                           math.nan if window is None else float(window)))
        pace = self.shared.pace
        pace[2 * qp.plan.index] = rate
        pace[2 * qp.plan.index + 1] = -1.0 if window is None else window
        qp.next_trace_ns = now + int(self.plan.rate_trace_interval_s * self.scale_ns)
        if qp.c is not None:
            qp.c.next_trace_ns = qp.next_trace_ns

    def _send_ctrl(self, nic: _Nic, frame: bytes | bytearray, int_block: bytes = b"") -> None:
        """Send an ACK, NAK or CNP (an ACK echoing ``int_block``, if any); one the qdisc
        pushes back is kept and sent first."""
        if int_block:
            frame = ack_with_int(frame, int_block)
        if nic.backlog:
            self._push_back(nic, [bytes(frame)], counted=True)
            return
        try:
            nic.sock.send(frame)
        except OSError as e:
            if not (isinstance(e, BlockingIOError) or e.errno == errno.ENOBUFS):
                raise
            self._push_back(nic, [bytes(frame)], counted=False)
            self.deadlines.arm(nic, time.monotonic_ns() + int(nic.ns_per_bit * 8 * 1500))
            return
        self.packets_sent += 1
        self.ctrl_sent += 1

    def _push_back(self, nic: _Nic, frames: list[bytes], counted: bool) -> None:
        """Queue ``frames`` behind the NIC's backlog; ``counted``: the push-back was already.

        ENOBUFS means the qdisc refused a frame, EAGAIN that the socket's share of
        the queue is full: the frame is kept and sent before anything else.
        """
        if not counted:
            self.push_backs += 1
        nic.backlog.extend(frames)
        if self.rx is not None:  # the C loop's replies wait too
            self.rx.blocked[nic.slot] = 1

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
        if self.rx is not None:
            self.rx.blocked[nic.slot] = 0
        return True

    # -- receiving ----------------------------------------------------------------------
    def _receive_compiled(self, h: _Host) -> None:
        """A batch from ``h``'s ring through roce_rx.c; act on the events it returns."""
        rx = self.rx
        assert rx is not None and h.ring is not None
        now = time.monotonic_ns()
        n = rx.read(h.ring, self.plan.rt_offset_ns, self.t0_ns, self.plan.latency_sample_every)
        if n:
            self.packets_received += n
            # What arrived before the run's start waited for the start, not for a read.
            self.rx_lags.extend((now - max(rx.oldest_ns.value, self.t0_ns), n))
        if rx.n_latency.value:
            self.lat.extend(rx.latency[:rx.n_latency.value])
        events = rx.events
        for k in range(rx.n_events.value):
            e = events[k]
            kind = e.kind
            if kind in (EV_ACK, EV_NAK):
                rq = h.rx_qps[e.qpn]
                syndrome = AETH_ACK if kind == EV_ACK else AETH_NAK_PSN_SEQ
                self._send_ctrl(rq.nic, rq.resp.write_ack(e.psn, e.arg & ARG_COMPLETE, syndrome,
                                                          bool(e.arg & ARG_ECHO)),
                                rx.int_block(k))
            elif kind == EV_PENDING:
                self._arm_delayed_ack(h.rx_qps[e.qpn], e.rx_ns)
            elif kind == EV_CNP:  # decided (and counted) in C, sent here
                rq = h.rx_qps[e.qpn]
                self._send_ctrl(rq.nic, rq.resp.cnp)
            elif kind == EV_DONE:
                rq = h.rx_qps[e.qpn]
                rq.done_ns = e.rx_ns
                self._finished(h, rq)
            elif kind == EV_ACK_IN:
                qp = h.tx_qps.get(e.qpn)
                if qp is None or qp.gbn is None:
                    self.unknown_frames += 1
                else:
                    self._ctrl_in(qp, EV_ACK_IN, e.psn, e.arg, e.rx_ns, rx.int_block(k))
            elif kind == EV_CNP_IN:
                qp = h.tx_qps.get(e.qpn)
                if qp is None or qp.cc is None:
                    self.unknown_frames += 1
                else:
                    self._ctrl_in(qp, EV_CNP_IN, e.psn, 0, e.rx_ns)
            else:
                self.unknown_frames += 1

    def _finished(self, h: _Host, rq: _RecvQp) -> None:
        """``rq`` was fully received: announce it and start what waited for it."""
        index = rq.plan.index
        h.np.forget(index)
        self.shared.received[index] = 1
        self._announce(index, rq.done_ns)
        self._completed(index, rq.done_ns, time.monotonic_ns())

    def _receive(self, h: _Host) -> None:
        mm = h.mm
        offsets = h.offsets
        n_slots = len(offsets)
        idx = h.idx
        tp2 = TPACKET2_HDR.unpack_from
        roce = _ROCE.unpack_from
        set_status = _TP_STATUS.pack_into
        rt_offset = self.plan.rt_offset_ns
        rx_qps = h.rx_qps
        now = time.monotonic_ns()
        oldest_ns = got = 0
        for _ in range(_RX_BUDGET):
            off = offsets[idx]
            status, _len, snap, mac, _net, sec, nsec = tp2(mm, off)
            if not status & TP_STATUS_USER:
                break
            f = off + mac
            tos, ip_len, opcode, flags, qp_word, psn_word = roce(mm, f)
            rx_ns = sec * 1_000_000_000 + nsec - rt_offset
            if not got:
                oldest_ns = rx_ns
            qpn = qp_word & 0xFFFFFF
            psn = psn_word & 0xFFFFFF
            if opcode in DATA_OPCODES:
                rq = rx_qps.get(qpn)
                if rq is None:
                    self.unknown_frames += 1
                else:
                    reth = opcode in RETH_OPCODES
                    ts = _U64.unpack_from(mm, f + (OFF_TS_RETH if reth else OFF_TS))[0]
                    payload = ip_len - _IP_OVERHEAD_BYTES - (RETH_BYTES if reth else 0) - (flags >> 4 & 3)
                    self._on_data(h, rq, psn, tos & 3 == ECN_CE, psn_word >> 31, payload, ts,
                                  rx_ns, block_at(mm, f, OFF_INT_RETH if reth else OFF_INT,
                                                    snap, payload - TS_BYTES))
            elif opcode == ACKNOWLEDGE:
                qp = h.tx_qps.get(qpn)
                if qp is None or qp.gbn is None:
                    self.unknown_frames += 1
                else:  # the AETH syndrome; BTH BECN is the ECN echo
                    self._ctrl_in(qp, EV_ACK_IN, psn,
                                  _U32.unpack_from(mm, f + OFF_TS)[0] >> 24
                                  | (ARG_BECN if qp_word >> 30 & 1 else 0), rx_ns,
                                  block_at(mm, f, OFF_ACK_INT, snap,
                                             ip_len + ETH_BYTES - ACK_FRAME_BYTES))
            elif opcode == CNP:
                qp = h.tx_qps.get(qpn)
                if qp is None or qp.cc is None:
                    self.unknown_frames += 1
                else:
                    self._ctrl_in(qp, EV_CNP_IN, psn, 0, rx_ns)
            else:
                self.unknown_frames += 1
            set_status(mm, off, 0)
            got += 1
            idx += 1
            if idx == n_slots:
                idx = 0
        h.idx = idx
        if got:
            self.packets_received += got
            self.rx_lags.extend((now - max(oldest_ns, self.t0_ns), got))

    def _on_data(self, h: _Host, rq: _RecvQp, psn: int, ce: bool, ackreq: int, payload: int,
                 ts_ns: int, rx_ns: int, int_block: bytes) -> None:
        action = rq.gbn.on_packet(psn, ce, bool(ackreq))
        if action.flush:  # the CE state changed: ACK the frames before with theirs
            self._send_ctrl(rq.nic, rq.resp.write_ack((psn - 1) & gbn.PSN_MASK, 0, AETH_ACK,
                                                      not ce))
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
            self._send_ctrl(rq.nic, rq.resp.write_ack(action.psn, int(complete), syndrome,
                                                      action.echo), int_block)
        elif action.deliver and rq.gbn.unacknowledged == 1:
            self._arm_delayed_ack(rq, rx_ns)
        if rq.done_ns < 0 and rq.gbn.complete:
            rq.done_ns = rx_ns
            self._finished(h, rq)

    def _arm_delayed_ack(self, rq: _RecvQp, rx_ns: int) -> None:
        """The first frame left waiting for its ACK arrived at ``rx_ns``."""
        if self.ack_delay_ns is not None:
            self.deadlines.arm(rq, rx_ns + self.ack_delay_ns)

    def _delayed_ack(self, rq: _RecvQp) -> None:
        """ACK what ``rq`` delivered and has not acknowledged yet, if anything."""
        if self.rx is not None:
            pending = self.rx.ack_pending(rq.plan.flow.dqpn)
        else:
            action = rq.gbn.ack_pending()
            pending = None if action is None else (action.psn, action.echo)
        if pending is not None:
            self._send_ctrl(rq.nic, rq.resp.write_ack(pending[0], 0, AETH_ACK, pending[1]))

    def _on_ack(self, qp: _SendQp, psn: int, syndrome: int, rx_ns: int, echo: bool,
                int_block: bytes) -> None:
        g = qp.gbn
        qp.echoes += echo
        t = self.real_s(rx_ns)
        una = g.acked_packets
        progress = g.on_nak(psn, t) if syndrome & 96 == AETH_NAK_PSN_SEQ else g.on_ack(psn, t)
        if not progress:
            return
        acked = g.acked_packets
        if acked > una:
            payload = self.plan.payload_bytes
            size = qp.plan.size_bytes
            newest = acked - 1
            qp.cc.on_ack(min(acked * payload, size) - min(una * payload, size),
                         (rx_ns - qp.tx_ns[newest]) / self.scale_ns, echo,
                         decode_block(int_block) if int_block else (), t)
            self._sync_cc(qp)
            self._arm_cc_timer(qp)
            if echo:
                self._trace(qp, rx_ns, TRACE_ECHO)
        if g.done:
            if qp.acked_ns < 0:
                qp.acked_ns = rx_ns
                self.deadlines.disarm(qp)
                self.deadlines.disarm(qp.timer)
                if not qp.idle:
                    qp.idle = True
                    self._deactivate(qp)
                self.acked_here += 1
                self.shared.acked[self.plan.worker] = self.acked_here
                if self.acked_here == len(self.senders):
                    for fd in self.shared.wake_fds:  # everyone re-checks "all acknowledged"
                        os.eventfd_write(fd, 1)
            return
        if qp.idle:
            if g.next_index < g.total_packets:
                self._wake(qp, time.monotonic_ns() - qp.nic.fwd_ns)
            else:
                self._arm_rto(qp)

    # -- results ------------------------------------------------------------------------
    def results(self) -> WorkerStats:
        """Counters and samples; times in emulated ns after t0 (-1: never happened)."""
        def rel(t_ns: int) -> int:
            return t_ns - self.t0_ns if t_ns >= 0 else -1

        for h in self.hosts.values():
            self.drops[h.name] += ring_drops(h.sock)
        for n in self.nics.values():
            self._end_period(n)
        self._drain_lags()
        if self.tx_call is not None:  # what the compiled sender counted
            self.data_sent += self.tx_call.data_sent
            self.packets_sent += self.tx_call.packets_sent
            self.lag_total_ns += self.tx_call.lag_total_ns
            for q in self.senders:
                if q.c is not None:
                    q.bytes_sent, q.first_tx_ns, q.last_tx_ns = \
                        q.c.bytes_sent, q.c.first_tx_ns, q.c.last_tx_ns
            for n in self.nics.values():
                if n.c is not None:
                    n.bits_sent = n.c.bits_sent
        if self.rx is not None:  # the compiled loop kept the responders' counters
            for h in self.hosts.values():
                for qpn, rq in h.rx_qps.items():
                    c = self.rx.qp(qpn)
                    rq.bytes, rq.ce, rq.seen = c.bytes, c.ce, c.seen
                    rq.first_rx_ns = c.first_rx_ns
                    rq.gbn.duplicates, rq.gbn.out_of_order = c.duplicates, c.out_of_order
                    rq.cnps = c.cnps
            self.packets_sent += self.rx.ctrl_sent.value  # the replies it sent
            self.ctrl_sent += self.rx.ctrl_sent.value
            self.rx.ctrl_sent.value = 0
        sends = [SendRecord(
            index=q.plan.index, start_ns=rel(q.start_ns), acked_ns=rel(q.acked_ns),
            first_tx_ns=rel(q.first_tx_ns), last_tx_ns=rel(q.last_tx_ns),
            packets=q.n, bytes_sent=q.bytes_sent,
            packets_sent=q.gbn.packets_sent if q.gbn else 0,
            retransmitted=q.gbn.retransmitted if q.gbn else 0,
            naks=q.gbn.naks if q.gbn else 0,
            timeouts=q.gbn.timeouts if q.gbn else 0,
            cnps_received=q.cc.cnps_received if q.cc else 0,
            ecn_echoes=q.echoes,
        ) for q in self.senders]
        receives = [ReceiveRecord(
            index=rq.plan.index, received_ns=rel(rq.done_ns),
            first_rx_ns=rel(rq.first_rx_ns),
            bytes_received=rq.bytes, ce_marked=rq.ce, cnps_sent=rq.cnps,
            data_packets_received=rq.seen, duplicates=rq.gbn.duplicates,
            out_of_order=rq.gbn.out_of_order,
        ) for h in self.hosts.values() for rq in h.rx_qps.values()]
        nics = [NicRecord(
            host=n.host, ifname=n.ifname, bits_sent=n.bits_sent,
            busy_emu_ns=n.busy_ns, scheduled_emu_ns=n.ideal_ns, dropped_emu_ns=n.dropped,
        ) for n in self.nics.values()]
        scheds = [q.sched for q in self.senders] + [n.sched for n in self.nics.values()]
        counters = WorkerCounters(
            worker=self.plan.worker, error=None, stop_reason=self.stop_reason,
            hosts=list(self.hosts),
            lag_total_ns=self.lag_total_ns,
            pacing_resets=sum(s.resets for s in scheds),
            pacing_dropped_ns=sum(s.dropped_ns for s in scheds),
            packets_sent=self.packets_sent, data_packets_sent=self.data_sent,
            ctrl_packets_sent=self.ctrl_sent, packets_received=self.packets_received,
            push_backs=self.push_backs, unknown_frames=self.unknown_frames,
            ring_drops=sum(self.drops.values()), wakeups=self.wakeups,
            cpu_s=time.process_time() - self.cpu0 if self.cpu0 else 0.0,
            # The kernel's share: sends carry frames through the shapers and switches.
            sys_s=os.times().system - self.times0.system if self.times0 else 0.0,
            # Runnable but not running (another task had the CPU): what stalls a worker.
            cpu_wait_s=(runqueue_wait_ns() - self.cpu_wait0_ns) / 1e9 if self.times0 else 0.0,
            realtime=self.realtime,
            wall_s=self.wall_ns / 1e9,
        )
        return WorkerStats(counters, sends=sends, receives=receives, nics=nics,
                           latency=self.lat, rates=self.rates, lags=self.lags,
                           rx_lags=self.rx_lags)
