"""Run a Workload on a live Fabric: worker processes, raw sockets, results in real units.

```python
result = run_workload(fab, workload, EngineConfig(cc="paper"))
result.messages   # one row per message (times in REAL seconds from t0)
result.latency    # one row per sampled data packet: one-way delay (REAL s), CE
result.rates      # congestion-control trace per QP: rate, target, alpha (REAL units)
                  # and what made the row: send (periodic), cnp, timer, echo (ECN-echo ACK)
result.stats      # EngineStats (engine/stats.py): per-worker counters, pacing lag,
                  # CPU, completed/error
```

Processes. The engine process opens every socket inside the hosts' namespaces
(``emu.netns.in_netns``: one TPACKET_V2 receive ring per host, one send socket
per host interface), then forks as few workers as the workload's frame rates
need (``auto_workers``), at most one per usable core; each worker
inherits the sockets of *its* hosts only (a host belongs to exactly one worker)
and is pinned to its own core. ``engine/worker.py`` is the worker loop (event-driven: epoll, a timerfd at the
earliest deadline, dependency counters), ``engine/rawsock.py`` the socket
plumbing, ``engine/plan.py`` what workers are handed and share.

Machine CPU. The engine reads /proc/stat when the clock starts and when the run
ends: ``machine_busy`` is the fraction of every CPU of the machine that was not
idle meanwhile (softirq, the kernel's forwarding, other processes included), the
headroom the fidelity gate checks; ``steal_s`` the CPU time the hypervisor took
from the machine's virtual CPUs, and each worker's ``cpu_wait_s`` the time it was
runnable but waited for its CPU (/proc schedstat): the gate names them when a
worker fell behind.

Dependencies. A message may start once every dependency is **fully received**
(its last byte delivered in order at the destination, as an RDMA WRITE's data
is usable by the receiver) plus its compute gap ``gap_s``, and not before ``t0 +
start_s`` (real seconds, dilated by S); a message without dependencies counts its
gap from ``t0``. Completions cross workers through the completion rings and
eventfds of ``engine.plan``; the start clock ``t0`` is set by the engine once
every worker is ready. ``end_s`` of a message is that receive time;
``acked_s`` when the sender saw the final ACK. A dependent message is posted at
its last dependency's receive stamp, not when its worker learns of it: a worker
that learns late (a stall, a wake-up) sends the first frames late against that
post time, and they count as pacing lag, which the gate judges.

Shutdown. The run ends when every message is acknowledged, at ``timeout_s`` of
wall-clock time (result incomplete, with the reason), on an error in any worker,
or on Ctrl-C / SIGTERM of the engine process: the engine raises a shared stop
flag, collects what the workers report, and terminates (then kills) any worker
still alive; then it raises KeyboardInterrupt (for SIGTERM, its subclass
``_Terminated``), so every caller unwinds as on Ctrl-C. Workers also carry PR_SET_PDEATHSIG, so even a SIGKILLed engine
leaves no orphan behind. A worker stopped by a signal the engine did not send (someone's
kill, the OOM killer, a crash) stops the run the same way, then raises ``WorkerKilled``
naming the worker, its pid and the signal. A worker's loop turns at least every 50 ms; one that has
not turned for ``plan.STUCK_S`` (a user's algorithm that never returns, a bug) is
sent SIGTERM and reports where it was. A failure the congestion control caused
(``traffic.ccload.run_fault``) is raised as a ParameterError naming it, since no
measurement is left to judge.

Fixed delays. The emulated fabric (veths into HTB shapers) adds none of the real
fabric's fixed delays: a frame is not stored and forwarded at every hop, no switch
pipeline delays it, propagation exists only where netem delays the links. With
``EngineConfig.fixed_delays`` the engine adds them per QP, dilated by S
(``traffic.fixeddelay`` prices the routed path; engine/worker.py, "Fixed delays", holds the frames):
the data path's delay for the QP's first, largest frame, the ACK path's for an ACK,
and the NIC overhead before a message's first frame. docs/design.md, "Fixed delays",
says why a constant per-path delay at the sender stands in for per-hop delays.

Units. Workers work in emulated nanoseconds; everything reported is converted
here with the fabric's Scale (times / S, rates x S), except the pacing lag, which
is an engine property and is reported in emulated seconds.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import threading
import time
from array import array
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from operator import attrgetter
from typing import Any, Protocol

import numpy as np
import pandas as pd

from core.errors import FabricEmuError, ParameterError
from core.frame import (
    ACK_FRAME_BYTES,
    FIRST_QPN,
    HEADER_BYTES,
    MAX_QPS,
    MTU_PAYLOAD_BYTES,
    RETH_BYTES,
    WIRE_FRAME_BYTES,
    WIRE_OVERHEAD_BYTES,
)
from core.gcpause import collector_paused
from core.machinecpu import cpu_ticks, machine_busy, steal_s, steal_share
from core.messages import Workload
from core.scaling import Scale
from emu.fabric import Egress, HostEndpoint
from emu.netns import in_netns, wait_for_quiet_kernel
from emu.ports import Port
from engine import plan, rawsock, workerproc
from engine.books import TRACE_EVENTS
from engine.burst import Burst
from engine.rx import RxLib
from engine.speedprobe import SpeedProbe
from engine.stats import (
    EngineStats,
    FixedDelaySettings,
    NicBusy,
    ReceiveRecord,
    SendRecord,
    WorkerStats,
)
from topologies.base import FabricTopo
from topologies.routing import Routes, topo_graph
from traffic.ccload import CcFactory, validate_cc
from traffic.fixeddelay import (
    FORWARDING,
    NIC_OVERHEAD,
    PROPAGATION,
    SERIALIZATION,
    SWITCH_LATENCY,
    PathDelay,
    check_forwarding,
    hops,
    mean_delay,
    path_delay,
    round_trip_s,
)
from traffic.reorder_bound import reorder_tolerance_packets, reorder_window_s
from traffic.roce import ECN_CODES, Flow
from traffic.selective_repeat import REORDER_PACKETS, WINDOW_PACKETS
from traffic.transport import TRANSPORTS, check_transport
from traffic.window import bdp_window_packets, check_window


class LiveFabric(Protocol):
    """What the engine needs from a built fabric (`emu.fabric.Fabric` is one); the
    topology, routes and link delays only with ``EngineConfig.fixed_delays``."""

    hosts: list[str]
    scale: Scale
    topo: FabricTopo
    routes: Routes
    delay_emulated: bool
    #: node -> the CPU its receive work runs on (``emu.rxorder``; empty: not pinned)
    receive_cpu: dict[str, int]
    #: ``emu.pfc_controller.PfcController`` while PFC's lossless mode is on, else None
    pfc: Any
    #: ``topologies.loadbalance`` mode and flowlet gap (real s): selective repeat's
    #: reorder tolerance is derived from them (``traffic.reorder_bound``)
    routing: str
    flowlet_gap_s: float

    def ports(self) -> list[Port]: ...

    def egress(self, src_host: str, dst_host: str) -> Egress: ...

    def endpoint(self, host: str) -> HostEndpoint: ...

    def link_delay_s(self, a: str, b: str) -> float: ...

    def enable_int(self) -> int: ...

    def disable_int(self) -> None: ...


#: Real-time CNP interval used by receivers when the senders do not run DCQCN.
_DEFAULT_CNP_INTERVAL_S = 50e-6
#: ``EngineConfig.ack_coalesce`` for one ACK per message (plus solicited ones).
ACK_PER_MESSAGE = "message"
#: Frames per ACK of every algorithm but those reading in-band telemetry.
DEFAULT_ACKS_EVERY = 16
#: The delayed-ACK timer of ACK-clocked algorithms (real s): 3 frame times at 100G,
#: so a flow at line rate is ACKed by coalescing, a stalled or slow one within 1 µs.
DEFAULT_ACK_DELAY_S = 1e-6
_READY_TIMEOUT_S = 120.0     # building the Scapy templates of a big DAG takes a while
_STOP_GRACE_S = 3.0
_QUIET_TIMEOUT_S = 30.0      # the teardown of a fattree,8 takes a few seconds
#: ``auto_timeout_s``: never less than this (set-up, a short run on a loaded machine) ...
TIMEOUT_FLOOR_S = 300.0
#: ... and this many times the busiest host's dilated serial time: ECMP collisions with
#: drops measured 16x that on fattree,8, and a hung run should still end.
TIMEOUT_BUSIEST_HOST_FACTOR = 50
#: With receive steering, hosts follow their node's CPU unless a worker would then
#: carry more than this times the mean load.
_ALIGNED_IMBALANCE = 1.25
_START_DELAY_NS = 2_000_000  # t0 a little after "all ready", so every worker is waiting
#: A real RDMA NIC's per-message overhead, post to first frame on the wire (~1 us, the
#: value the RoCE literature measures; the model keeps its own constant).
DEFAULT_NIC_OVERHEAD_S = 1e-6


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a workload (times are REAL-fabric seconds unless noted).

    ``cc``: any setting ``traffic.ccload`` resolves (docs/congestion-control.md): a
    built-in name ('off', 'dcqcn' = 'paper', 'nic', 'dctcp', 'timely', 'swift', 'hpcc'), a
    user's class as 'path/to/file.py:Class', a DcqcnParams, a ``CcFactory`` (with
    constructor parameters) or None (off: every QP at line rate). It is validated
    here (``validate_cc``), before any socket or process exists; 'hpcc' makes the
    fabric's switch ports write in-band telemetry (``enable_int``, eBPF marking
    needed), which the ACKs echo. Each QP gets its own instance, built at the
    NIC's real line rate. Receivers send CNPs whatever the senders run (at DCQCN's
    CNP interval, the paper's 50 us when the senders do not run DCQCN).
    ``ack_coalesce``: the responder ACKs every that many in-order frames (None: 16,
    or every frame for HPCC), or only a message's last frame with 'message'; also at once for a frame with AckReq,
    which the sender sets on the frame that fills its congestion window.
    ``ack_on_ce_change``: the responder ACKs at once when the CE state of arriving
    frames changes (DCTCP's receiver), so each ACK's ECN echo (the BECN bit)
    covers all of its frames exactly. ``ack_delay_s``: the longest a delivered
    frame waits for its ACK (real s, the delayed-ACK timer; ``math.inf``: no
    timer), so a sender whose window closed between two coalesced ACKs never
    waits for its retransmission timer. None (both): on, with a 1 µs delay,
    unless ``cc`` is DCQCN or off, which read CNPs only and keep the ACKs they
    always had (every ``ack_coalesce`` frames, at the last, on AckReq).
    ``rto_s``: retransmission timeout; None derives it from the fabric
    (three times the longest time a full port buffer takes to drain, so that a
    full queue never causes a spurious timeout).
    ``transport``: the QPs' reliable transport (``traffic.transport``): 'gbn',
    RoCE's go-back-N, or 'sr', selective repeat, which tolerates reordering
    (packet spraying, adaptive routing); ``reorder_packets``: how far (PSNs) a frame
    may be overtaken before selective repeat's receiver deems it lost; None derives it
    from the fabric's paths, buffers and routing mode (``traffic.reorder_bound``).
    ``window``: the most frames a QP may have unacknowledged (``traffic.window``):
    None, the transport's largest; 'bdp', IRN's BDP-FC (the longest unloaded round
    trip at line rate, plus the ACK coalescing); or a frame count.
    ``timeout_s``: wall-clock limit of the whole run; None derives it from the
    workload and the fabric's S (``auto_timeout_s``).
    ``latency_sample_every``: keep one latency sample per that many data packets
    received per host. ``rate_trace_interval_s``: DCQCN rate samples per QP (real).
    ``ring_bytes``: receive ring per host. ``workers``: worker processes, one per CPU
    at most (None: as few as the workload's frame rates need, ``auto_workers``).
    ``send_path``: 'compiled' (engine/csrc/roce_burst.c, sendmmsg bursts, and
    engine/csrc/roce_rx.c, batched receive with the responder's go-back-N in C),
    'python' (Shape.write + send per frame, receive parsed in Python) or 'auto'
    (compiled if clang works).
    ``fixed_delays``: add the real fabric's per-hop serialization, switch latency and
    the link propagation netem does not emulate to every QP's data and ACK paths
    (module docstring), and ``nic_overhead_s`` before every message's first frame;
    ``forwarding``: 'store-and-forward' (a full frame's serialization at every hop)
    or 'cut-through' (once, at the path's slowest hop).
    """

    cc: object = "paper"
    payload_bytes: int = MTU_PAYLOAD_BYTES
    ecn: str = "ect0"
    workers: int | None = None
    ack_coalesce: int | str | None = None
    ack_on_ce_change: bool | None = None
    ack_delay_s: float | None = None
    rto_s: float | None = None
    timeout_s: float | None = None
    latency_sample_every: int = 1
    rate_trace_interval_s: float = 5e-6
    ring_bytes: int = 4 << 20
    send_path: str = "auto"
    fixed_delays: bool = True
    nic_overhead_s: float = DEFAULT_NIC_OVERHEAD_S
    forwarding: str = FORWARDING[0]
    transport: str = TRANSPORTS[0]
    reorder_packets: int | None = None
    window: int | str | None = None
    #: The validated ``cc`` (set in __post_init__).
    cc_factory: CcFactory = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cc_factory", validate_cc(self.cc))
        if not 8 <= self.payload_bytes <= 8192:
            raise ParameterError("payload_bytes", self.payload_bytes, "expected 8..8192")
        if self.ecn not in ECN_CODES:
            raise ParameterError("ecn", self.ecn, f"expected one of {sorted(ECN_CODES)}")
        if self.workers is not None and self.workers < 1:
            raise ParameterError("workers", self.workers, "must be >= 1 (or None)")
        if self.send_path not in ("auto", "compiled", "python"):
            raise ParameterError("send_path", self.send_path, "expected auto, compiled or python")
        if self.ack_coalesce is not None and self.ack_coalesce != ACK_PER_MESSAGE and (
                isinstance(self.ack_coalesce, bool) or not isinstance(self.ack_coalesce, int)
                or self.ack_coalesce < 1):
            raise ParameterError("ack_coalesce", self.ack_coalesce,
                                 f"expected a frame count >= 1 or {ACK_PER_MESSAGE!r}")
        if self.ack_delay_s is not None and not self.ack_delay_s > 0:
            raise ParameterError("ack_delay_s", self.ack_delay_s,
                                 "must be positive (math.inf: no timer; None: by the cc)")
        if self.ack_on_ce_change not in (None, True, False):
            raise ParameterError("ack_on_ce_change", self.ack_on_ce_change,
                                 "expected True, False or None (by the cc)")
        if self.rto_s is not None and not self.rto_s > 0:
            raise ParameterError("rto_s", self.rto_s, "must be positive (or None)")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ParameterError("timeout_s", self.timeout_s, "must be positive (or None)")
        if self.latency_sample_every < 1:
            raise ParameterError("latency_sample_every", self.latency_sample_every, "must be >= 1")
        if not self.rate_trace_interval_s > 0:
            raise ParameterError("rate_trace_interval_s", self.rate_trace_interval_s,
                                 "must be positive")
        if not 0 <= self.nic_overhead_s < 1:
            raise ParameterError("nic_overhead_s", self.nic_overhead_s, "expected 0 <= s < 1")
        check_forwarding(self.forwarding)
        check_transport(self.transport)
        if self.reorder_packets is not None and (
                isinstance(self.reorder_packets, bool) or not isinstance(self.reorder_packets, int)
                or not 1 <= self.reorder_packets < WINDOW_PACKETS):
            raise ParameterError("reorder_packets", self.reorder_packets,
                                 f"expected an integer in [1, {WINDOW_PACKETS}) or None")
        object.__setattr__(self, "window", check_window(self.window))

    def emulated_fixed_delays(self, netem_propagation: bool) -> dict[str, str]:
        """{fixed-delay name: how} of what this engine adds (``traffic.fixeddelay``
        names); propagation only where netem does not delay the links."""
        if not self.fixed_delays:
            return {}
        at_sender = ("a constant per path at the sender (data frames held before the "
                     "fabric, ACKs and CNPs before the requester acts), dilated by S")
        ser = ("a full frame's serialization at every hop" if self.forwarding == FORWARDING[0]
               else "a frame's serialization once, at the path's slowest hop")
        out = {SERIALIZATION: f"engine, {self.forwarding}: {ser}, {at_sender}",
               SWITCH_LATENCY: f"engine: every switch's pipeline latency on the path, {at_sender}"}
        if not netem_propagation:
            out[PROPAGATION] = f"engine (no netem): the links' propagation, {at_sender}"
        if self.nic_overhead_s > 0:
            out[NIC_OVERHEAD] = (f"engine: {self.nic_overhead_s * 1e6:g} us from a message's "
                                 "post to its first frame, dilated by S")
        return out

    @property
    def acks_every(self) -> int:
        """Frames per ACK (0: one per message): ``ack_coalesce``, else 16, or 1 for an
        algorithm that reads in-band telemetry (HPCC ACKs every frame, as its paper)."""
        if self.ack_coalesce is None:
            return 1 if self.cc_factory.needs_int else DEFAULT_ACKS_EVERY
        return 0 if self.ack_coalesce == ACK_PER_MESSAGE else int(self.ack_coalesce)

    def frames_per_ack(self, rate_bps: float, n_frames: int) -> float:
        """Data frames per ACK of an ``n_frames`` message at ``rate_bps`` line rate: the
        coalescing, or what arrives before the delayed-ACK timer fires."""
        k = self.acks_every or n_frames
        timer_s = self.ack_timer_s
        if timer_s is not None:
            frame_bits = 8 * (self.payload_bytes + HEADER_BYTES + WIRE_OVERHEAD_BYTES)
            k = min(k, 1 + int(timer_s * rate_bps / frame_bits))
        return max(1, k)

    @property
    def ack_timer_s(self) -> float | None:
        """The delayed-ACK timer (real s), None for none (see ``ack_delay_s``)."""
        if self.ack_delay_s is None:
            return None if self.cc_factory.cnp_driven else DEFAULT_ACK_DELAY_S
        return self.ack_delay_s if math.isfinite(self.ack_delay_s) else None

    @property
    def ce_ack(self) -> bool:
        """Whether responders ACK at once on a CE state change (see ``ack_on_ce_change``)."""
        if self.ack_on_ce_change is None:
            return not self.cc_factory.cnp_driven
        return self.ack_on_ce_change


@dataclass
class EngineResult:
    messages: pd.DataFrame
    latency: pd.DataFrame
    rates: pd.DataFrame
    stats: EngineStats

    @property
    def completed(self) -> bool:
        return self.stats.completed


# ----------------------------------------------------------------------------- planning

def _check_workload(fab: LiveFabric, workload: Workload) -> dict[int, int]:
    """Validate the DAG; return msg_id -> index."""
    hosts = set(fab.hosts)
    index: dict[int, int] = {}
    for i, m in enumerate(workload.messages):
        if m.msg_id in index:
            raise ParameterError("msg_id", m.msg_id, "message ids must be unique")
        index[m.msg_id] = i
        for host in (m.src, m.dst):
            if host not in hosts:
                raise ParameterError("host", host, "not a host of this fabric")
        if m.src == m.dst:
            raise ParameterError("dst", m.dst, f"message {m.msg_id} is sent to its own source")
        if m.size_bytes <= 0:
            raise ParameterError("size_bytes", m.size_bytes, f"message {m.msg_id} is empty")
        if not m.start_s >= 0:
            raise ParameterError("start_s", m.start_s, "must be >= 0")
        if not 0 <= m.gap_s < math.inf:
            raise ParameterError("gap_s", m.gap_s, f"message {m.msg_id}: must be >= 0 "
                                 "and finite")
    if len(index) > MAX_QPS:
        raise ParameterError("messages", len(index), f"at most {MAX_QPS} (one QPN each)")
    for m in workload.messages:
        for d in m.deps:
            if d not in index:
                raise ParameterError("deps", d, f"message {m.msg_id} depends on an unknown id")
    # Kahn's algorithm: a cycle would otherwise only show up as a timeout.
    indeg = {m.msg_id: len(m.deps) for m in workload.messages}
    children = defaultdict(list)
    for m in workload.messages:
        for d in m.deps:
            children[d].append(m.msg_id)
    ready = [k for k, v in indeg.items() if v == 0]
    seen = 0
    while ready:
        k = ready.pop()
        seen += 1
        for c in children[k]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if seen != len(indeg):
        raise ParameterError("deps", workload.name, "the dependency graph has a cycle")
    return index


def _port_of(fab: LiveFabric, host: str, ifname: str) -> Port:
    for port in fab.ports():
        if port.node == host and port.ifname == ifname:
            return port
    raise ParameterError("host", host, f"no shaped port {ifname}")


def _auto_rto_s(fab: LiveFabric) -> float:
    """Three times the longest a frame can wait at a port (a full buffer drained at the
    port's rate). With PFC a frame is held, not dropped, behind a full buffer at every
    hop of its path, so three times that wait at each hop of the longest path: a
    lossless run must not retransmit because its frames were paused. Plus a bound on
    the longest unloaded round trip's propagation (the longest path's hops, there and
    back, at the longest link delay): on a fabric with a long link (two data centres,
    `topologies.twodc`) the round trip alone exceeds the queueing wait, and a timer
    shorter than it would fire before the first ACK could arrive."""
    drain_s = max(p.buffer_bytes * 8 / p.rate_bps for p in fab.ports())
    hops = max((max(fab.routes.distances_to(h).values(), default=1) for h in fab.hosts),
               default=1)
    longest_delay_s = max((info["delay_s"] for *_, info in fab.topo.fabric_links()),
                          default=0.0)
    return 3 * drain_s * (hops if fab.pfc is not None else 1) + 2 * hops * longest_delay_s


def auto_timeout_s(fab: LiveFabric, workload: Workload) -> float:
    """The wall-clock limit of a run with ``timeout_s=None``. A fixed limit would cut
    legitimate runs at a large S (a fattree,8 all-to-all at S = 2,000,000 needs more
    than 300 s) or let a hung small one spin for minutes. So: TIMEOUT_BUSIEST_HOST_FACTOR
    times the dilated time the busiest host (the most bytes sent or received) needs at its
    slowest NIC, plus every compute gap and the latest start, never below
    TIMEOUT_FLOOR_S."""
    load: dict[tuple[str, str], int] = defaultdict(int)  # (host, "tx" | "rx") -> bytes
    for m in workload.messages:
        load[(m.src, "tx")] += m.size_bytes
        load[(m.dst, "rx")] += m.size_bytes
    hosts = set(fab.hosts)
    nic_bps = min((p.rate_bps for p in fab.ports() if p.node in hosts), default=0.0)
    if not load or not nic_bps > 0:
        return TIMEOUT_FLOOR_S
    busiest_s = max(load.values()) * 8 / nic_bps
    compute_s = (max((m.start_s for m in workload.messages), default=0.0)
                 + sum(m.gap_s for m in workload.messages))
    return max(TIMEOUT_FLOOR_S,
               TIMEOUT_BUSIEST_HOST_FACTOR * fab.scale.time_emu_s(busiest_s + compute_s))


def first_frame_bytes(size_bytes: int, payload_bytes: int) -> int:
    """A message's first frame, its largest: the only one to carry the RETH."""
    return min(size_bytes, payload_bytes) + HEADER_BYTES + RETH_BYTES


class FixedDelays:
    """The fixed delay the engine adds from one host to another, per frame size: the
    real path delay of ``traffic.fixeddelay`` (mean over the ECMP paths, equal in a
    Clos) less the propagation netem already emulates on the path's links."""

    def __init__(self, fab: LiveFabric, forwarding: str) -> None:
        self.fab = fab
        self.graph = topo_graph(fab.topo)
        self.forwarding = forwarding
        self._cache: dict[tuple[str, str, int], PathDelay] = {}
        self._rtt: dict[tuple[str, str], float] = {}
        self._switches: dict[tuple[str, str], int] = {}

    def __call__(self, src: str, dst: str, frame_bytes: int) -> PathDelay:
        key = (src, dst, frame_bytes)
        if key not in self._cache:
            fab = self.fab
            self._cache[key] = mean_delay([
                path_delay(self.graph, p, frame_bytes, self.forwarding)
                .less_propagation(sum(fab.link_delay_s(u, v) for u, v in hops(p)))
                for p in fab.routes.paths(src, dst)])
        return self._cache[key]

    def switches(self, src: str, dst: str) -> int:
        """Switches a frame from ``src`` to ``dst`` crosses (the mean over the ECMP
        paths, rounded: equal in a Clos)."""
        key = (src, dst)
        if key not in self._switches:
            paths = self.fab.routes.paths(src, dst)
            self._switches[key] = round(sum(len(p) - 2 for p in paths) / len(paths))
        return self._switches[key]

    def base_rtt_s(self, src: str, dst: str) -> float:
        """The real fabric's unloaded round trip: a full frame there, its ACK back."""
        key = (src, dst)
        if key not in self._rtt:
            self._rtt[key] = round_trip_s(self.graph, self.fab.routes.paths, src, dst,
                                          self.forwarding)
        return self._rtt[key]


def _assign(loads: dict[str, int], cpus: list[int], receive_cpu: dict[str, int]
            ) -> list[list[str]]:
    """Hosts to workers (worker w runs on ``cpus[w]``). Where the fabric pins each
    host's receive work to one of ``cpus`` (``receive_cpu``), a host goes to the worker
    on its CPU: its frames enter the fabric, and its ACKs and CNPs reach its ring,
    without crossing CPUs; unless that leaves one worker more than _ALIGNED_IMBALANCE
    times the mean load (an incast inside one pod). Otherwise heaviest first onto the
    least-loaded worker."""
    bins: list[list[str]] = [[] for _ in cpus]
    if cpus and all(receive_cpu.get(h) in cpus for h in loads):
        totals = [0] * len(cpus)
        for host in sorted(loads):
            w = cpus.index(receive_cpu[host])
            bins[w].append(host)
            totals[w] += loads[host]
        if max(totals) <= _ALIGNED_IMBALANCE * sum(totals) / len(cpus):
            return bins
        bins = [[] for _ in cpus]
    totals = [0] * len(cpus)
    for host in sorted(loads, key=lambda h: (-loads[h], h)):
        w = totals.index(min(totals))
        bins[w].append(host)
        totals[w] += loads[host]
    return bins


#: A worker keeps up with its sending NICs all due at once while their line-rate
#: frames, dilated by S, number at most this many per second: at the engine's budget
#: of 50 us of CPU per frame they fill its CPU, and a burst of all of them is served
#: within a frame time. Fewer workers serve more NICs' pacing slots in each wake-up,
#: and a wake-up costs tens of us on a VM (docs/design.md, "How many workers").
WORKER_PEAK_FRAMES_PER_S = 20_000
#: ... and sustains at most this many links crossed per second by its frames on
#: average: the kernel's share of a frame's CPU grows with the links it crosses (each a
#: veth, a shaper and a marker), about 9 us each here.
WORKER_MEAN_LINK_FRAMES_PER_S = 50_000


def ack_weight(frames_per_ack: float) -> float:
    """What a data frame counts for in the rates above, its ACKs included: the
    thresholds hold with one ACK per DEFAULT_ACKS_EVERY frames, and each ACK beyond
    those counts as a frame: an ACK costs the engine about as much CPU as a data frame
    (docs/validation.md)."""
    return 1.0 + max(0.0, 1.0 / frames_per_ack - 1.0 / DEFAULT_ACKS_EVERY)


@dataclass(frozen=True)
class FrameRates:
    """What a workload asks of the engine, in frames per wall second at S (ACKs beyond
    one per DEFAULT_ACKS_EVERY frames counted as frames)."""

    peak: float        # every sending NIC at its line rate at once
    mean: float        # its frames over its duration on an ideal fabric (below)
    mean_links: float  # the same, each frame counted once per link of its path


def frame_rates(msgs: list[plan.MsgPlan], nic_rate_bps: dict[tuple[str, str], float],
                payload_bytes: int, scale: Scale, links: list[int],
                frames_per_ack: Callable[[float, int], float] | None = None) -> FrameRates:
    """The workload on an ideal fabric: each message leaves at its NIC's line rate from
    its start or its last dependency's end, and ends its fixed path delay later; a
    NIC's messages queue one after another. Congestion only lengthens the duration,
    so ``mean`` bounds the frame rate the engine sustains from above. ``links[i]``:
    the links message i's path crosses. ``frames_per_ack(rate_bps, n_frames)``
    (``EngineConfig.frames_per_ack``; default DEFAULT_ACKS_EVERY): ACKs beyond the
    default's count as frames (``ack_weight``)."""
    def weight(rate_bps: float, n_frames: int) -> float:
        return 1.0 if frames_per_ack is None else ack_weight(frames_per_ack(rate_bps, n_frames))

    frame_bits = 8 * (payload_bytes + HEADER_BYTES + WIRE_OVERHEAD_BYTES)
    nics = {(p.src, p.ifname) for p in msgs}
    longest = max((-(-p.size_bytes // payload_bytes) for p in msgs), default=1)
    peak = scale.per_emu_s(sum(nic_rate_bps[n] * weight(nic_rate_bps[n], longest)
                               for n in nics)) / frame_bits
    end_ns: dict[int, float] = {}
    busy_ns: dict[tuple[str, str], float] = defaultdict(float)
    frames = link_frames = 0
    for p in msgs:  # iterative depth-first: a dependency's end before its dependents'
        stack = [p.index]
        while stack:
            i = stack[-1]
            m = msgs[i]
            todo = [d for d in m.deps if d not in end_ns]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if i in end_ns:
                continue
            n = -(-m.size_bytes // payload_bytes)
            rate_bps = nic_rate_bps[(m.src, m.ifname)]
            tx_ns = scale.time_emu_s(n * frame_bits / rate_bps) * 1e9
            start = max([m.start_emu_ns, *(end_ns[d] + m.gap_emu_ns for d in m.deps)])
            end_ns[i] = start + m.fwd_delay_emu_ns + tx_ns
            busy_ns[(m.src, m.ifname)] += tx_ns
            counted = n * weight(rate_bps, n)
            frames += counted
            link_frames += counted * links[i]
    duration_ns = max([*end_ns.values(), *busy_ns.values(), 1.0])
    return FrameRates(peak, frames / duration_ns * 1e9, link_frames / duration_ns * 1e9)


def auto_workers(rates: FrameRates, n_cpus: int) -> int:
    """Workers for ``EngineConfig(workers=None)``: enough for the burst
    (WORKER_PEAK_FRAMES_PER_S) and for the mean (WORKER_MEAN_LINK_FRAMES_PER_S), at
    least one, at most one per CPU."""
    need = max(rates.peak / WORKER_PEAK_FRAMES_PER_S,
               rates.mean_links / WORKER_MEAN_LINK_FRAMES_PER_S)
    return max(1, min(n_cpus, math.ceil(need)))


@collector_paused()
def _plans(fab: LiveFabric, workload: Workload, config: EngineConfig, index: dict[int, int],
           rt_offset_ns: int) -> list[plan.WorkerPlan]:
    scale = fab.scale
    msgs: list[plan.MsgPlan] = []
    loads: dict[str, int] = defaultdict(int)
    nic_keys: dict[str, set[str]] = defaultdict(set)
    delays = FixedDelays(fab, config.forwarding)
    fixed = delays if config.fixed_delays else None
    egress = cache(fab.egress)  # per host pair: a ring has 254 messages a pair on fattree,8
    for i, m in enumerate(workload.messages):
        eg = egress(m.src, m.dst)
        back = egress(m.dst, m.src)
        sport = 0xC000 | (i & 0x3FFF)  # per-QP ECMP entropy
        flow = Flow(eg.src_mac, eg.dst_mac, eg.src_ip, eg.dst_ip, sport, FIRST_QPN + i,
                    ecn=config.ecn)
        reply = Flow(back.src_mac, back.dst_mac, back.src_ip, back.dst_ip, sport, FIRST_QPN + i,
                     ecn="not-ect")
        msgs.append(plan.MsgPlan(
            index=i, msg_id=m.msg_id, src=m.src, dst=m.dst, size_bytes=int(m.size_bytes),
            deps=tuple(index[d] for d in m.deps),
            # Without dependencies the gap counts from t0: it is an earliest start.
            start_emu_ns=scale.emu_ns(m.start_s if m.deps else max(m.start_s, m.gap_s)),
            gap_emu_ns=scale.emu_ns(m.gap_s),
            flow=flow, reply_flow=reply, reply_ifname=back.ifname, ifname=eg.ifname,
            fwd_delay_emu_ns=scale.emu_ns(fixed(
                m.src, m.dst, first_frame_bytes(int(m.size_bytes), config.payload_bytes)).total_s)
            if fixed else 0,
            back_delay_emu_ns=scale.emu_ns(fixed(m.dst, m.src, ACK_FRAME_BYTES).total_s)
            if fixed else 0,
            base_rtt_s=delays.base_rtt_s(m.src, m.dst) if config.cc_factory.takes_base_rtt
            else None,
            hops=delays.switches(m.src, m.dst) if config.cc_factory.takes_hops else None))
        n_packets = -(-m.size_bytes // config.payload_bytes)
        loads[m.src] += n_packets
        loads[m.dst] += n_packets
        nic_keys[m.src].add(eg.ifname)
        nic_keys[m.dst].add(back.ifname)
    cpus = sorted(os.sched_getaffinity(0))
    if config.workers is None:
        nics = {(p.src, p.ifname) for p in msgs}
        rates = frame_rates(msgs, {n: _port_of(fab, *n).rate_bps for n in nics},
                            config.payload_bytes, scale,
                            [delays.switches(p.src, p.dst) + 1 for p in msgs],
                            config.frames_per_ack)
        n_workers = min(auto_workers(rates, len(cpus)), len(loads))
    else:
        n_workers = min(config.workers, len(cpus), len(loads))
    params = config.cc_factory.dcqcn_params
    cnp_interval_s = params.cnp_interval_s if params is not None else _DEFAULT_CNP_INTERVAL_S
    rto_s = config.rto_s if config.rto_s is not None else _auto_rto_s(fab)
    reorder = config.reorder_packets
    pairs = {(m.src, m.dst) for m in msgs}
    if reorder is None:
        reorder = (reorder_tolerance_packets(topo_graph(fab.topo), fab.routes, pairs,
                                             fab.routing, fab.flowlet_gap_s)
                   if config.transport == "sr" else REORDER_PACKETS)
    reorder_s = _reorder_s(fab, pairs, config, rto_s) if config.transport == "sr" else None
    window = (bdp_window_packets(delays.graph, fab.routes, pairs, fab.routing,
                                 config.acks_every, config.forwarding)
              if config.window == "bdp" else config.window)
    plans = []
    assignment = _assign(loads, cpus[:n_workers], fab.receive_cpu)
    host_worker = {h: w for w, hosts in enumerate(assignment) for h in hosts}
    notify, slices = plan.completion_layout(msgs, host_worker)
    for w, hosts in enumerate(assignment):
        mine = set(hosts)
        receives = [p for p in msgs if p.dst in mine]
        plans.append(plan.WorkerPlan(
            worker=w, cpu=cpus[w], hosts=sorted(mine),
            nics=[plan.NicPlan(h, ifn, _port_of(fab, h, ifn).rate_bps)
                  for h in sorted(mine) for ifn in sorted(nic_keys[h])],
            sends=[p for p in msgs if p.src in mine],
            receives=receives,
            n_messages=len(msgs), n_workers=n_workers, scale=scale,
            cc=config.cc_factory, payload_bytes=config.payload_bytes,
            ack_coalesce=config.acks_every,
            ce_ack=config.ce_ack, ack_delay_s=config.ack_timer_s,
            rto_s=rto_s, cnp_interval_s=cnp_interval_s,
            nic_overhead_s=config.nic_overhead_s if config.fixed_delays else 0.0,
            latency_sample_every=config.latency_sample_every,
            rate_trace_interval_s=config.rate_trace_interval_s, rt_offset_ns=rt_offset_ns,
            notify={p.index: notify[p.index] for p in receives if p.index in notify},
            ring_slices=slices, transport=config.transport,
            reorder_packets=reorder, reorder_s=reorder_s, window=window))
    return plans


def _reorder_s(fab: LiveFabric, pairs: set[tuple[str, str]], config: EngineConfig,
               rto_s: float) -> float:
    """Selective repeat's sender's reordering window in time: the fabric's
    (`reorder_window_s`) plus how long the responder may hold an ACK back (its
    delayed-ACK timer, else its coalescing at the slowest NIC's line rate), at most
    the timeout."""
    graph = topo_graph(fab.topo)
    window_s = reorder_window_s(graph, fab.routes, pairs, fab.routing, fab.flowlet_gap_s)
    hold_s = config.ack_timer_s
    if hold_s is None:
        nic_bps = min(max(graph.edges[src, peer]["rate_bps"] for peer in graph[src])
                      for src, _ in pairs)
        hold_s = config.acks_every * 8 * WIRE_FRAME_BYTES / nic_bps if config.acks_every \
            else rto_s
    if window_s is None:
        return rto_s
    return min(rto_s, window_s + hold_s)


# ----------------------------------------------------------------------------- sockets

def _open_sockets(fab: LiveFabric, plans: list[plan.WorkerPlan], ring: rawsock.RingSpec
                  ) -> tuple[dict[str, socket.socket], dict[tuple[str, str], socket.socket]]:
    """Every host's receive ring and its NICs' send sockets, opened in parallel threads
    (`rawsock.SOCKET_THREADS`: each open waits out a kernel grace period)."""
    ifnames = {(wp.worker, h): [n.ifname for n in wp.nics if n.host == h]
               for wp in plans for h in wp.hosts}

    def open_host(key: tuple[int, str]) -> list[socket.socket]:
        host = key[1]
        socks: list[socket.socket] = []
        try:
            with in_netns(fab.endpoint(host).netns_path):
                socks.append(rawsock.open_rx_ring(ring))
                socks.extend(rawsock.open_tx_socket(ifname) for ifname in ifnames[key])
        except BaseException:
            rawsock.close_all(socks)
            raise
        return socks

    opened = rawsock.in_threads(open_host, list(ifnames))
    rx: dict[str, socket.socket] = {}
    tx: dict[tuple[str, str], socket.socket] = {}
    for key, got in zip(ifnames, opened, strict=True):
        if not isinstance(got, BaseException):
            rx[key[1]] = got[0]
            tx.update(((key[1], ifname), s) for ifname, s in zip(ifnames[key], got[1:],
                                                                 strict=True))
    failed = next((got for got in opened if isinstance(got, BaseException)), None)
    if failed is not None:
        rawsock.close_all([*rx.values(), *tx.values()])
        raise failed
    return rx, tx


# ----------------------------------------------------------------------------- processes

class _Terminated(KeyboardInterrupt):
    """SIGTERM delivered to the engine process: it unwinds as Ctrl-C does (the CLI then
    says "interrupted", exit 130, not an internal error)."""


def run_workload(fab: LiveFabric, workload: Workload, config: EngineConfig | None = None,
                 live: Callable[[plan.Shared | None], None] | None = None) -> EngineResult:
    """Send every message of ``workload`` through ``fab``; see the module docstring.
    ``live`` is told the cross-process state once the workers may start writing it,
    and None when it is gone (a live monitor reads it meanwhile)."""
    called = time.perf_counter()
    config = config or EngineConfig()
    index = _check_workload(fab, workload)
    # The kernel may still be tearing down an earlier fabric's namespaces: its stalls
    # would count as this run's pacing lag.
    quiet_wait_s = wait_for_quiet_kernel(_QUIET_TIMEOUT_S)
    plans = _plans(fab, workload, config, index, rawsock.realtime_offset_ns())
    timeout_s = (config.timeout_s if config.timeout_s is not None
                 else auto_timeout_s(fab, workload))
    needs_int = config.cc_factory.needs_int
    if needs_int:  # HPCC: the switches write per-hop records, the rings keep them
        fab.enable_int()
    ring = rawsock.RingSpec.for_headers(
        config.ring_bytes, rawsock.SNAP_INT_BYTES if needs_int else rawsock.SNAP_BYTES)
    burst = Burst(config.send_path)
    rx_lib = RxLib(config.send_path)
    ctx = multiprocessing.get_context("fork")
    n_workers = len(plans)
    ring_len = sum(n for _, n in plans[0].ring_slices.values()) if plans else 0
    shared = plan.Shared(
        received=ctx.RawArray("b", max(1, len(index))),
        acked=ctx.RawArray("q", n_workers),
        status=ctx.RawArray("b", n_workers),
        t0_ns=ctx.RawValue("q", 0),
        stop=ctx.RawValue("b", 0),
        ring=ctx.RawArray("i", max(1, ring_len)),
        ring_done_ns=ctx.RawArray("q", max(1, ring_len)),
        ring_count=ctx.RawArray("q", max(1, n_workers * n_workers)),
        turns=ctx.RawArray("q", n_workers),
        stuck=ctx.RawArray("b", n_workers),
        wake_fds=[],
        pace=ctx.RawArray("d", 2 * max(1, len(index))),
    )
    cpu_marks: list[tuple[int, int, int]] = []
    probe, probed = SpeedProbe(), None
    main_thread = threading.current_thread() is threading.main_thread()
    terminated: list[int] = []

    def on_sigterm(signum: int, _frame: object) -> None:
        # Stop the workers and raise once they are collected: an exception raised at
        # whatever the main thread was doing can be swallowed (seen inside logging's
        # lock release), and the run would go on.
        terminated.append(signum)
        _request_stop(shared)

    old_term = signal.signal(signal.SIGTERM, on_sigterm) if main_thread else None
    procs: list[Any] = []
    conns: list[Any] = []
    reports: dict[int, WorkerStats] = {}
    error: str | None = None
    started_s = setup_s = 0.0
    rx: dict[str, socket.socket] = {}
    tx: dict[tuple[str, str], socket.socket] = {}
    channels: list[socket.socket] = []
    wall0 = time.perf_counter()
    try:
        shared.wake_fds.extend(os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                               for _ in range(n_workers))
        # Before the fork: after it, each page this walk touches is copied (the workers
        # hold the plans too), while the workers build on every CPU (1 s on fattree,8).
        start_delay_ns = _START_DELAY_NS + plan.PRESTART_NS * max(
            (sum(map(plan.starts_at_t0, wp.sends)) for wp in plans), default=0)
        forked = time.perf_counter()
        for wp in plans:
            reader, writer = ctx.Pipe(duplex=False)
            give, take = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            channels.append(give)
            proc = ctx.Process(target=workerproc.worker_main, name=f"fabricemu-engine-{wp.worker}",
                               args=(wp, shared, writer, take, ring, burst, rx_lib,
                                     os.getpid()), daemon=True)
            proc.start()
            writer.close()
            take.close()
            procs.append(proc)
            conns.append(reader)
        # The workers build their QPs' frames while the sockets open: an open mostly
        # waits out a kernel grace period, the CPUs are the workers'. Kept open here
        # until the workers are gone, then closed in parallel: a worker's exit only
        # drops its references instead of closing them one by one.
        rx, tx = _open_sockets(fab, plans, ring)
        for wp, give in zip(plans, channels, strict=True):
            # A worker that already stopped (it failed, or SIGTERM) has hung up: what it
            # reports, or the signal, is the cause, which `_start_clock` finds.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                rawsock.hand_over(give, workerproc.sockets_in_order(wp, rx, tx))
        if live is not None:
            live(shared)
        error = _start_clock(shared, procs, conns, reports, start_delay_ns)
        if error is None:
            started_s = time.perf_counter() - called
            setup_s = time.perf_counter() - forked
            cpu_marks.append(cpu_ticks())
            probe.start()
            try:
                error = _collect(shared, procs, conns, reports, wall0 + timeout_s, timeout_s)
            finally:
                probed = probe.stop()
            cpu_marks.append(cpu_ticks())
    except BaseException:
        _request_stop(shared)
        with contextlib.suppress(BaseException):
            _collect(shared, procs, conns, reports, time.perf_counter() + _STOP_GRACE_S, None)
        raise
    finally:
        _reap(procs)
        rawsock.close_all([*rx.values(), *tx.values()])
        if live is not None:  # after the workers ended: the values are their last
            live(None)
        for c in [*conns, *channels]:
            c.close()
        for fd in shared.wake_fds:
            os.close(fd)
        if main_thread:
            signal.signal(signal.SIGTERM, old_term)
        if needs_int:  # only this run's frames carry records
            fab.disable_int()
    if terminated:
        raise _Terminated()
    if killed := _killed(reports, procs):
        raise killed
    fault = next((r.cc_fault for r in reports.values() if r.cc_fault), None)
    if fault is not None:  # the user's algorithm broke the run: no measurement to judge
        raise ParameterError("cc", config.cc_factory.name, fault)
    result = _result(fab, workload, config, plans, reports, error, time.perf_counter() - wall0)
    st = result.stats
    st.machine_busy = machine_busy(*cpu_marks) if len(cpu_marks) == 2 else None
    st.steal_s = steal_s(*cpu_marks) if len(cpu_marks) == 2 else None
    st.steal_share = steal_share(*cpu_marks) if len(cpu_marks) == 2 else None
    if probed is not None:
        st.throttled_s, st.throttled_share = probed.throttled_ns / 1e9, probed.throttled_share
    st.quiet_wait_s = quiet_wait_s
    st.start_wall_s = started_s
    st.setup_wall_s = setup_s
    st.send_path = burst.detail
    st.receive_path = rx_lib.detail
    # Every time in the result is relative to this clock reading (CLOCK_MONOTONIC,
    # emulated ns): other samplers (queues) convert with it to the same time base.
    st.t0_monotonic_ns = int(shared.t0_ns.value)
    return result


def _request_stop(shared: plan.Shared) -> None:
    """Raise the stop flag and wake every worker to see it."""
    shared.stop.value = 1
    for fd in shared.wake_fds:
        with contextlib.suppress(OSError):
            os.eventfd_write(fd, 1)


def _start_clock(shared: plan.Shared, procs: list[Any], conns: list[Any],
                 reports: dict[int, WorkerStats], start_delay_ns: int) -> str | None:
    """Wait for every worker to be ready, then set the common ``t0``, ``start_delay_ns``
    ahead: every worker is waiting for it, its first messages started."""
    deadline = time.perf_counter() + _READY_TIMEOUT_S
    while True:
        states = list(shared.status)
        if all(s == plan.READY for s in states):
            shared.t0_ns.value = time.monotonic_ns() + start_delay_ns
            return None
        # A worker that failed raised the stop flag too: its error is the cause.
        if plan.FAILED in states or any(not p.is_alive() for p in procs):
            _request_stop(shared)
            _collect(shared, procs, conns, reports, time.perf_counter() + _STOP_GRACE_S, None)
            return _first_error(reports) or "a worker died while starting"
        if shared.stop.value:  # SIGTERM: workers still building need not be waited for
            return "stopped before the start"
        if time.perf_counter() > deadline:
            _request_stop(shared)
            return f"workers not ready after {_READY_TIMEOUT_S:.0f} s"
        time.sleep(0.005)


def _collect(shared: plan.Shared, procs: list[Any], conns: list[Any],
             reports: dict[int, WorkerStats], deadline: float, timeout_s: float | None) -> str | None:
    """Read every worker's report; stop them all at ``deadline`` or on the first error."""
    open_conns = {c: w for w, c in enumerate(conns) if w not in reports}
    sentinels = {p.sentinel: w for w, p in enumerate(procs)}
    error = None
    stop_deadline = None
    watchdog = _Watchdog(shared, procs, time.perf_counter())
    while open_conns:
        now = time.perf_counter()
        if timeout_s is not None and stop_deadline is None:  # the run proper: a watchdog
            watchdog.check(now)
        if stop_deadline is None and (now > deadline or shared.stop.value):
            if now > deadline and timeout_s is not None and error is None:
                error = f"timeout: the run did not complete within {timeout_s:g} s"
            _request_stop(shared)
            stop_deadline = now + _STOP_GRACE_S
        if stop_deadline is not None and now > stop_deadline:
            break
        ready = multiprocessing.connection.wait([*open_conns, *sentinels], timeout=0.05)
        for obj in ready:
            if obj in open_conns:
                w = open_conns.pop(obj)
                try:
                    reports[w] = obj.recv()
                except EOFError:  # its end closed: it died (seen before its sentinel)
                    reports[w] = _died(w, procs[w])
                if reports[w].error and error is None:
                    error = reports[w].error
                    _request_stop(shared)
            elif obj in sentinels:
                w = sentinels.pop(obj)
                conn = conns[w]
                if conn in open_conns and not conn.poll():
                    open_conns.pop(conn)
                    reports[w] = _died(w, procs[w])
                    error = error or reports[w].error
                    _request_stop(shared)
    for w in open_conns.values():
        reports[w] = WorkerStats.failed(w, f"worker {w} did not stop")
        error = error or reports[w].error
    return error


def _died(w: int, proc: Any) -> WorkerStats:
    """The report of worker ``w``, which ended without sending one."""
    # Its sentinel may be seen before the kernel lets its exit status be read.
    proc.join(timeout=_STOP_GRACE_S)
    code = proc.exitcode
    if code is not None and code < 0:
        return WorkerStats.failed(w, f"worker {w} was killed by {_signal_name(-code)}",
                                  killed_by=-code)
    return WorkerStats.failed(w, f"worker {w} exited without a report (exit code {code})")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class WorkerKilled(FabricEmuError):
    """A worker was stopped by a signal the engine did not send (someone's kill, the
    OOM killer, a crash): the run stops, as nothing it measured can be judged."""

    def __init__(self, worker: int, pid: int | None, signum: int):
        self.worker, self.pid, self.signum = worker, pid, signum
        super().__init__(f"engine worker {worker} (pid {pid}) was killed by "
                         f"{_signal_name(signum)} while the traffic ran; the run stopped")


def _killed(reports: dict[int, WorkerStats], procs: list[Any]) -> WorkerKilled | None:
    r = next((r for _, r in sorted(reports.items()) if r.killed_by is not None), None)
    return None if r is None else WorkerKilled(r.worker, procs[r.worker].pid, r.killed_by)


class _Watchdog:
    """Stops (SIGTERM) a worker whose loop has not turned for ``plan.STUCK_S``; the
    worker then reports where it was."""

    #: A longer gap between two checks means the parent did not run either (the whole
    #: VM was paused): every worker gets a fresh STUCK_S instead of being blamed.
    MAX_GAP_S = 1.0

    def __init__(self, shared: plan.Shared, procs: list[Any], now: float):
        self.shared = shared
        self.procs = procs
        self.turns = list(shared.turns)
        self.turned = [now] * len(self.turns)  # when each worker's count last changed
        self.checked = now

    def check(self, now: float) -> None:
        shared = self.shared
        paused = now - self.checked > self.MAX_GAP_S
        self.checked = now
        for w, count in enumerate(shared.turns):
            if paused or count != self.turns[w] or count < 0 or shared.status[w] != plan.READY:
                self.turns[w], self.turned[w] = count, now
            elif now - self.turned[w] > plan.STUCK_S and not shared.stuck[w]:
                shared.stuck[w] = 1
                with contextlib.suppress(OSError):
                    os.kill(self.procs[w].pid, signal.SIGTERM)


def _first_error(reports: dict[int, WorkerStats]) -> str | None:
    return next((r.error for r in reports.values() if r.error), None)


def _reap(procs: list[Any]) -> None:
    deadline = time.perf_counter() + _STOP_GRACE_S  # one grace for all, not one each
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.perf_counter()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(timeout=1.0)
        if p.is_alive():
            p.kill()
            p.join()


# ----------------------------------------------------------------------------- results

_MESSAGE_COLUMNS = ["msg_id", "src", "dst", "size_bytes", "start_s", "end_s", "fct_s",
                    "acked_s", "first_tx_s", "last_tx_s", "packets", "packets_sent", "retransmitted", "naks", "timeouts",
                    "rack_losses", "probes",
                    "cnps_sent", "cnps_received", "ecn_echoes", "ce_marked", "bytes_received",
                    "out_of_sequence", "duplicate_request", "completed", "path_delay_s",
                    "ack_path_delay_s", "step", "tag"]


@collector_paused()
def _result(fab: LiveFabric, workload: Workload, config: EngineConfig,
            plans: list[plan.WorkerPlan], reports: dict[int, WorkerStats], error: str | None,
            wall_s: float) -> EngineResult:
    """The workers' reports as one result in real units (``Scale``), in workload order."""
    scale = fab.scale
    ordered = [reports[w] for w in sorted(reports)]
    reported = [r for r in ordered if r.reported]
    msg_ids = np.array([m.msg_id for m in workload.messages], dtype=np.int64)
    messages = _messages(scale, workload, plans, reported)
    latency = _latency(scale, msg_ids, reported)
    rates = _rates(scale, msg_ids, reported)
    completed = error is None and bool(messages["completed"].all())
    if error is None and not completed:
        error = "incomplete: some messages were not acknowledged"
    stats = _engine_stats(fab, config, plans, ordered, messages, completed, error, wall_s)
    return EngineResult(messages, latency, rates, stats)


def _messages(scale: Scale, workload: Workload, plans: list[plan.WorkerPlan],
              reported: list[WorkerStats]) -> pd.DataFrame:
    """One row per message of the workload (a message no worker reported: never sent);
    times in real seconds after t0, NaN for what never happened. Column by column: a
    fattree,8 ring's 32,512 rows took half a second as dicts."""
    sends = {d.index: d for r in reported for d in r.sends}
    receives = {d.index: d for r in reported for d in r.receives}
    msg_plans = {p.index: p for wp in plans for p in wp.sends}
    msgs = workload.messages
    n = len(msgs)
    sd = [sends.get(i) or SendRecord(i) for i in range(n)]
    rd = [receives.get(i) or ReceiveRecord(i) for i in range(n)]
    mp = [msg_plans[i] for i in range(n)]

    def ints(records: list[Any], name: str) -> np.ndarray:
        return np.fromiter(map(attrgetter(name), records), dtype=np.int64, count=n)

    def real_s(ns: np.ndarray) -> np.ndarray:
        return np.where(ns >= 0, scale.real_s_of_emu_ns(ns.astype(np.float64)), np.nan)

    start, end, acked = ints(sd, "start_ns"), ints(rd, "received_ns"), ints(sd, "acked_ns")
    columns: dict[str, Any] = {
        "msg_id": [m.msg_id for m in msgs], "src": [m.src for m in msgs],
        "dst": [m.dst for m in msgs], "size_bytes": [m.size_bytes for m in msgs],
        "start_s": real_s(start), "end_s": real_s(end),
        "fct_s": real_s(np.where((start >= 0) & (end >= 0), end - start, -1)),
        "acked_s": real_s(acked), "first_tx_s": real_s(ints(sd, "first_tx_ns")),
        "last_tx_s": real_s(ints(sd, "last_tx_ns")),
        **{name: ints(sd, name) for name in ("packets", "packets_sent", "retransmitted",
                                             "naks", "timeouts", "rack_losses", "probes")},
        "cnps_sent": ints(rd, "cnps_sent"), "cnps_received": ints(sd, "cnps_received"),
        "ecn_echoes": ints(sd, "ecn_echoes"), "ce_marked": ints(rd, "ce_marked"),
        "bytes_received": ints(rd, "bytes_received"),
        # The responder's mlx5 counters of the same name (docs/counters.md).
        "out_of_sequence": ints(rd, "out_of_order"), "duplicate_request": ints(rd, "duplicates"),
        "completed": (acked >= 0) & (end >= 0),
        "path_delay_s": real_s(ints(mp, "fwd_delay_emu_ns")),
        "ack_path_delay_s": real_s(ints(mp, "back_delay_emu_ns")),
        "step": [m.step for m in msgs], "tag": [m.tag for m in msgs],
    }
    return pd.DataFrame(columns, columns=_MESSAGE_COLUMNS)


def _latency(scale: Scale, msg_ids: np.ndarray, reported: list[WorkerStats]) -> pd.DataFrame:
    """One row per sampled data frame: one-way delay and CE, in time order."""
    parts = [np.frombuffer(r.latency, dtype=np.int64).reshape(-1, 4)
             for r in reported if len(r.latency)]
    if not parts:
        return pd.DataFrame(columns=["msg_id", "t_s", "one_way_s", "ce"])
    lat = np.concatenate(parts)
    latency = pd.DataFrame({"msg_id": msg_ids[lat[:, 0]], "t_s": scale.real_s_of_emu_ns(lat[:, 1]),
                            "one_way_s": scale.real_s_of_emu_ns(lat[:, 2]), "ce": lat[:, 3] != 0})
    return latency.sort_values("t_s", ignore_index=True)


def _rates(scale: Scale, msg_ids: np.ndarray, reported: list[WorkerStats]) -> pd.DataFrame:
    """The congestion-control trace of every QP, in time order."""
    rows = [row for r in reported for row in r.rates]
    rates = pd.DataFrame(rows, columns=["index", "t_ns", "rate_bps", "target_rate_bps",
                                        "alpha", "event", "window_bytes"])
    rates["event"] = np.asarray(TRACE_EVENTS, dtype=object)[
        rates["event"].to_numpy(dtype=np.int64)] if len(rates) else pd.Series(dtype=object)
    rates.insert(0, "t_s", scale.real_s_of_emu_ns(rates.pop("t_ns")))
    rates.insert(1, "msg_id", msg_ids[rates.pop("index").to_numpy(dtype=np.int64)]
                 if len(rates) else pd.Series(dtype=np.int64))
    return rates.sort_values(["t_s", "msg_id"], ignore_index=True)


def _percentile_emu_s(lags_ns: np.ndarray, q: float) -> float:
    """The ``q``th percentile of emulated ns, in emulated s (0 without samples)."""
    return float(np.percentile(lags_ns, q)) * 1e-9 if len(lags_ns) else 0.0


def _joined(arrays: list[array]) -> np.ndarray:
    """The workers' int64 samples, one array."""
    parts = [np.frombuffer(a, dtype=np.int64) for a in arrays if len(a)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _lag_stats(reported: list[WorkerStats]) -> dict[str, float | None]:
    """Pacing lag (per data frame), receive lag (per frame, as long as its read's
    oldest frame: an upper bound) and start lag (per message) percentiles, emulated s."""
    all_lags = _joined([r.lags for r in reported])
    starts = _joined([r.start_lags for r in reported])
    reads = _joined([r.rx_lags for r in reported]).reshape(-1, 2)
    frame_rx_lags_ns = np.repeat(reads[:, 0], reads[:, 1])
    return {"pacing_lag_p50_emu_s": _percentile_emu_s(all_lags, 50),
            "pacing_lag_p99_emu_s": _percentile_emu_s(all_lags, 99),
            "receive_lag_p99_emu_s": _percentile_emu_s(frame_rx_lags_ns, 99),
            "start_lag_p99_emu_s": _percentile_emu_s(starts, 99) if len(starts) else None}


def _nic_busy(reported: list[WorkerStats]) -> list[NicBusy]:
    """Per host NIC: busy time against the time its schedules allotted (emulated s)."""
    return [NicBusy(n.host, n.ifname, n.bits_sent, busy_emu_s=n.busy_emu_ns * 1e-9,
                    scheduled_emu_s=n.scheduled_emu_ns * 1e-9,
                    dropped_emu_s=n.dropped_emu_ns * 1e-9)
            for r in reported for n in r.nics]


def _engine_stats(fab: LiveFabric, config: EngineConfig, plans: list[plan.WorkerPlan],
                  ordered: list[WorkerStats], messages: pd.DataFrame, completed: bool,
                  error: str | None, wall_s: float) -> EngineStats:
    """The run's counters: the workers' summed, the lags, the configuration."""
    workers = [r.counters for r in ordered]
    reported = [r for r in ordered if r.reported]
    data_sent = sum(w.data_packets_sent for w in workers)
    run_wall_s = max((w.wall_s for w in workers), default=0.0)
    return EngineStats(
        completed=completed, error=error, scale=fab.scale, wall_s=wall_s,
        run_wall_s=run_wall_s, workers=workers, n_workers=len(plans),
        packets_sent=sum(w.packets_sent for w in workers),
        packets_received=sum(w.packets_received for w in workers),
        data_packets_sent=data_sent,
        pps=data_sent / run_wall_s if run_wall_s else 0.0,
        **_lag_stats(reported),
        pacing_lag_total_emu_s=sum(w.lag_total_ns for w in workers) * 1e-9,
        pacing_resets=sum(w.pacing_resets for w in workers),
        pacing_dropped_emu_s=sum(w.pacing_dropped_ns for w in workers) * 1e-9,
        ring_drops=sum(w.ring_drops for w in workers),
        retransmitted=int(messages["retransmitted"].sum()),
        timeouts=int(messages["timeouts"].sum()),
        out_of_sequence=int(messages["out_of_sequence"].sum()),
        nics=_nic_busy(reported),
        rto_s=plans[0].rto_s if plans else None,
        cnp_interval_s=plans[0].cnp_interval_s if plans else None,
        cc=config.cc_factory.name,
        transport=config.transport,
        reorder_packets=plans[0].reorder_packets if plans and config.transport == "sr" else None,
        reorder_s=plans[0].reorder_s if plans else None,
        window=plans[0].window if plans else None,
        payload_bytes=config.payload_bytes,
        fixed_delays=FixedDelaySettings(config.fixed_delays, config.forwarding,
                                        config.nic_overhead_s),
        emulated_fixed_delays=config.emulated_fixed_delays(fab.delay_emulated),
    )
