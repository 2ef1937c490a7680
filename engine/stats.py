"""The engine's statistics, typed: what one worker reports (``WorkerStats``) and what a
run reports (``EngineStats``, ``engine.run.EngineResult.stats``), which the fidelity gate
(``experiments.fidelity``) reads as it is.

A worker counts in emulated nanoseconds after the start clock t0 (-1: never happened);
``engine.run`` converts its per-message records to real seconds (``Scale``), while the
engine's own properties (pacing lag, NIC busy time) stay emulated (``_emu_`` in their
names).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from core.scaling import Scale

# ----------------------------------------------------------------------------- one worker


@dataclass
class SendRecord:
    """One QP as requester (one message); times in emulated ns after t0, -1: never."""

    index: int
    start_ns: int = -1
    acked_ns: int = -1
    first_tx_ns: int = -1
    last_tx_ns: int = -1
    packets: int = 0
    bytes_sent: int = 0
    packets_sent: int = 0
    retransmitted: int = 0
    naks: int = 0
    timeouts: int = 0
    rack_losses: int = 0   # frames selective repeat's time-based detector declared lost
    probes: int = 0        # selective repeat's tail-loss probes
    cnps_received: int = 0
    ecn_echoes: int = 0


@dataclass
class ReceiveRecord:
    """One QP as responder (one message); times in emulated ns after t0, -1: never."""

    index: int
    received_ns: int = -1
    first_rx_ns: int = -1
    bytes_received: int = 0
    ce_marked: int = 0
    cnps_sent: int = 0
    data_packets_received: int = 0
    duplicates: int = 0
    out_of_order: int = 0


@dataclass
class NicRecord:
    """One host NIC of a worker: bits it sent, its busy periods (first frame out to last
    frame out) against the time its schedules allotted the same frames (emulated ns)."""

    host: str
    ifname: str
    bits_sent: int
    busy_emu_ns: int
    scheduled_emu_ns: int
    dropped_emu_ns: int


@dataclass
class WorkerCounters:
    """One worker's counters, CPU and wall time (all zero for a worker that failed)."""

    worker: int
    error: str | None = None
    stop_reason: str | None = None
    hosts: list[str] = field(default_factory=list)
    packets_sent: int = 0
    data_packets_sent: int = 0
    ctrl_packets_sent: int = 0
    packets_received: int = 0
    push_backs: int = 0
    ring_drops: int = 0
    unknown_frames: int = 0
    wakeups: int = 0                # sleeps in epoll (a pass that found work ready does not sleep)
    lag_total_ns: int = 0           # every frame's lateness behind its due time, summed
    pacing_resets: int = 0          # schedules restarted after a stall
    pacing_dropped_ns: int = 0      # the debt those restarts dropped
    cpu_s: float = 0.0
    sys_s: float = 0.0              # the kernel's share: it carries frames through the fabric
    #: Runnable but not running (another task had the CPU); None: not known.
    cpu_wait_s: float | None = 0.0
    wall_s: float = 0.0
    realtime: bool = False          # under SCHED_FIFO

    @property
    def pps(self) -> float:
        return self.packets_sent / self.wall_s if self.wall_s else 0.0

    @property
    def pps_per_cpu_s(self) -> float:
        return self.packets_sent / self.cpu_s if self.cpu_s else 0.0


@dataclass
class WorkerStats:
    """What one worker reports to the engine at the end of a run (or of its failure:
    ``reported`` False, only ``counters.worker``, ``counters.error`` and ``cc_fault``)."""

    counters: WorkerCounters
    reported: bool = True
    sends: list[SendRecord] = field(default_factory=list)
    receives: list[ReceiveRecord] = field(default_factory=list)
    nics: list[NicRecord] = field(default_factory=list)
    #: (message index, rx ns, one-way ns, CE) per latency sample, flattened
    latency: array = field(default_factory=lambda: array("q"))
    #: (message index, t ns, rate bps, target rate bps, alpha, event) per trace row
    rates: list[tuple] = field(default_factory=list)
    lags: array = field(default_factory=lambda: array("q"))     # ns per data frame
    rx_lags: array = field(default_factory=lambda: array("q"))  # (lag ns, frames) per read
    start_lags: array = field(default_factory=lambda: array("q"))  # ns per message started
    #: What a user's congestion control did to break the run (``traffic.ccload.run_fault``)
    cc_fault: str | None = None
    #: The signal that stopped the worker from outside the run (not the engine's own
    #: stop nor its watchdog's): someone's kill, the OOM killer, a crash
    killed_by: int | None = None

    @classmethod
    def failed(cls, worker: int, error: str, cc_fault: str | None = None,
               killed_by: int | None = None) -> WorkerStats:
        return cls(WorkerCounters(worker, error=error), reported=False, cc_fault=cc_fault,
                   killed_by=killed_by)

    @property
    def worker(self) -> int:
        return self.counters.worker

    @property
    def error(self) -> str | None:
        return self.counters.error


# ----------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class NicBusy:
    """One host NIC over the run: busy time against the time its schedules allotted the
    same frames, and what stalls dropped (emulated s)."""

    host: str
    ifname: str
    bits_sent: int
    busy_emu_s: float
    scheduled_emu_s: float
    dropped_emu_s: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.host}:{self.ifname}"


@dataclass(frozen=True)
class FixedDelaySettings:
    """The engine's fixed-delay settings (``engine.run.EngineConfig``)."""

    enabled: bool
    forwarding: str
    nic_overhead_s: float


@dataclass
class EngineStats:
    """What the engine reports of one run: its outcome, the workers' counters, pacing
    and receive lag (emulated s), the machine's CPU, and its configuration."""

    completed: bool
    error: str | None
    scale: Scale
    wall_s: float                   # the whole engine run, start-up included
    run_wall_s: float               # the longest worker's loop
    workers: list[WorkerCounters]
    n_workers: int
    packets_sent: int = 0
    packets_received: int = 0
    data_packets_sent: int = 0
    pps: float = 0.0                # data frames per wall second of the run
    pacing_lag_p50_emu_s: float = 0.0
    pacing_lag_p99_emu_s: float = 0.0
    #: How long received frames waited in the rings for the worker (bounded above by each
    #: read's oldest frame): a late read sends its ACKs and CNPs late.
    receive_lag_p99_emu_s: float = 0.0
    #: How far behind its post time (its dependencies' completion, or its start time)
    #: the p99 message started; None: none started. A worker busy with other messages'
    #: completions and starts starts the next late, and its frames' send lag counts
    #: from the post time, so this tells a late start from a late pacing slot.
    start_lag_p99_emu_s: float | None = None
    #: Lag as it accumulated (sum of every frame's lateness) and the schedule debt that
    #: stalls dropped (resets): nothing a stall costs disappears.
    pacing_lag_total_emu_s: float = 0.0
    pacing_resets: int = 0
    pacing_dropped_emu_s: float = 0.0
    ring_drops: int = 0
    retransmitted: int = 0
    timeouts: int = 0
    #: Frames the responders received ahead of a missing one (ConnectX's name).
    out_of_sequence: int = 0
    nics: list[NicBusy] = field(default_factory=list)
    rto_s: float | None = None
    cnp_interval_s: float | None = None
    cc: str = ""
    transport: str = ""             # 'gbn' or 'sr' (traffic.transport)
    reorder_packets: int | None = None  # selective repeat's tolerance in force (PSNs)
    reorder_s: float | None = None  # and its sender's reordering window (real s)
    window: int | None = None       # frames a QP may have unacknowledged (None: the transport's largest)
    payload_bytes: int = 0
    fixed_delays: FixedDelaySettings | None = None
    #: What the engine added of the real fabric's fixed delays ({name: how}):
    #: experiments.rundir.emulated_fixed_delays merges it with the fabric's own.
    emulated_fixed_delays: dict[str, str] = field(default_factory=dict)
    machine_busy: float | None = None   # fraction of all CPU time busy during the run
    steal_s: float | None = None        # CPU time the hypervisor took meanwhile
    steal_share: float | None = None    # and as a share of all CPU time
    #: Wall time during which every CPU ran at under 1/4 of its speed, steal or not
    #: (engine.speedprobe), and its share of the run; None: the probe did not run.
    throttled_s: float | None = None
    throttled_share: float | None = None
    quiet_wait_s: float = 0.0           # waiting for the kernel to finish a teardown
    #: From the engine's call to its clock's start: plans, sockets, and the workers
    #: building their QPs (frame templates, compiled views); 0 if the clock never started.
    start_wall_s: float = 0.0
    #: Of start_wall_s: from forking the workers to all of them ready (their QPs' frame
    #: templates and compiled views built).
    setup_wall_s: float = 0.0
    send_path: str = ""
    receive_path: str = ""
    #: Every time in the result is relative to this clock reading (CLOCK_MONOTONIC,
    #: emulated ns): other samplers (queues) convert with it to the same time base.
    t0_monotonic_ns: int = 0

    @property
    def cpu_s(self) -> list[float]:
        """CPU seconds per worker."""
        return [w.cpu_s for w in self.workers]

    @property
    def cpu_wait_s(self) -> list[float | None]:
        """Seconds per worker runnable but waiting for a CPU."""
        return [w.cpu_wait_s for w in self.workers]

    @property
    def cpu_s_total(self) -> float:
        return float(sum(self.cpu_s))

    @property
    def cpu_wait_s_total(self) -> float | None:
        """Every worker's wait for a CPU, summed; None if a worker did not know its own."""
        waits = self.cpu_wait_s
        return None if any(w is None for w in waits) else float(sum(waits))  # type: ignore[arg-type]

    @property
    def workers_realtime(self) -> bool:
        """Every worker ran under SCHED_FIFO (False where the privilege is missing)."""
        return bool(self.workers) and all(w.realtime for w in self.workers)
