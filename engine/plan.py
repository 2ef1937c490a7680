"""What the engine hands each worker (picklable plans) and the state they share.

Cross-worker completions. A message completes at its receiver's worker; the
workers that send messages depending on it learn it through a **completion ring**
per (writer, reader) pair of workers: a slice of one shared int array that only
the writer appends to (with the completion's time, the receive stamp of the
message's last frame, in a parallel array), plus a count the writer publishes
after the entry, then an eventfd write that wakes the reader. Each message completes once, so a slice
sized to the messages the writer must announce to that reader never wraps and
no entry is ever overwritten. ``completion_layout`` computes the slices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.scaling import Scale
from traffic.ccload import CcFactory
from traffic.roce import Flow
from traffic.selective_repeat import REORDER_PACKETS
from traffic.transport import TRANSPORTS

#: Worker state codes in the shared ``status`` array.
STARTING, READY, FINISHED, FAILED = 0, 1, 2, 3
#: A worker's loop turns at least every 50 ms (its idle wake-up); one that has not
#: turned for this long (wall seconds) is stuck, in a user's algorithm or a bug, and
#: the parent stops it instead of waiting for the run's timeout.
STUCK_S = 5.0


@dataclass(frozen=True)
class MsgPlan:
    """One message as a worker needs it (picklable, built by the engine)."""

    index: int              # position in the workload = shared-array slot = QPN - FIRST_QPN
    msg_id: int
    src: str
    dst: str
    size_bytes: int
    deps: tuple[int, ...]   # indices
    start_emu_ns: int       # earliest start after t0 (a message without deps: its gap too)
    flow: Flow              # data direction
    reply_flow: Flow        # ACK/CNP direction
    reply_ifname: str
    ifname: str
    #: Compute between the last dependency's completion and the post (``Message.gap_s``,
    #: dilated by S).
    gap_emu_ns: int = 0
    #: The real fabric's fixed delay on the data path (a frame of this QP) and on the
    #: ACK path, dilated: held at the sender (engine/worker.py, "Fixed delays").
    fwd_delay_emu_ns: int = 0
    back_delay_emu_ns: int = 0
    #: The real fabric's unloaded round trip of a full frame and its ACK (real s), for
    #: congestion control that is configured with one (``CcFactory``'s base_rtt_s).
    base_rtt_s: float | None = None
    #: The switches on the path, for congestion control configured with their count
    #: (``CcFactory``'s hops: Swift's topology scaling).
    hops: int | None = None


@dataclass(frozen=True)
class NicPlan:
    host: str
    ifname: str
    rate_bps: float          # real line rate of the host port


#: Time a worker is given before ``t0`` to start each message posted at ``t0``
#: (``Requester.post_ready``): about 30 us each measured, 50 for a slower machine.
PRESTART_NS = 50_000


def starts_at_t0(m: MsgPlan) -> bool:
    """Whether a worker starts ``m`` before ``t0``: no dependency, no delay."""
    return not m.deps and m.start_emu_ns == 0


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
    scale: Scale
    cc: CcFactory           # builds each sending QP's algorithm at its NIC's real line rate
    payload_bytes: int
    ack_coalesce: int       # frames per ACK; 0: one per message
    ce_ack: bool            # ACK at once on a CE state change (exact ECN echo)
    ack_delay_s: float | None  # delayed ACK after this long (real s); None: never
    rto_s: float
    cnp_interval_s: float
    nic_overhead_s: float    # real, before a message's first frame
    latency_sample_every: int
    rate_trace_interval_s: float
    rt_offset_ns: int
    #: message index -> other workers to tell when this worker fully received it
    notify: dict[int, tuple[int, ...]]
    #: (writer, reader) -> (offset, length) of the completion ring in ``Shared.ring``
    ring_slices: dict[tuple[int, int], tuple[int, int]]
    #: The QPs' reliable transport (``traffic.transport``): 'gbn' or 'sr'.
    transport: str = TRANSPORTS[0]
    #: Selective repeat's reordering tolerance (``selective_repeat.SrReceiver``).
    reorder_packets: int = REORDER_PACKETS
    #: Its sender's reordering window in time, real s (``sr_sender.SrSender``;
    #: None: its default).
    reorder_s: float | None = None
    #: The most frames a QP may have unacknowledged (``traffic.window``; None: the
    #: transport's largest).
    window: int | None = None


@dataclass
class Shared:
    """Cross-process state, all lock-free: every slot has a single writer."""

    received: Any      # RawArray('b', n): message fully received
    acked: Any         # RawArray('q', workers): messages acknowledged, per sending worker
    status: Any        # RawArray('b', workers): STARTING/READY/FINISHED/FAILED
    t0_ns: Any         # RawValue('q'): 0 until the parent starts the clock
    stop: Any          # RawValue('b'): the parent asks every worker to stop
    ring: Any          # RawArray('i'): completion rings, sliced per (writer, reader)
    ring_done_ns: Any  # RawArray('q'), parallel to ``ring``: when each message completed
    ring_count: Any    # RawArray('q', workers**2): entries published per (writer, reader)
    turns: Any         # RawArray('q', workers): loop turns so far (-1: loop over), the watchdog's
    stuck: Any         # RawArray('b', workers): the parent stops a worker whose turns stopped
    wake_fds: list[int]  # one eventfd per worker: completions, stop, all acknowledged
    #: RawArray('d', 2 n): each message's QP at its last rate trace: rate (real bit/s),
    #: window (payload bytes; -1: none). Read live (experiments.exporter), never waited on.
    pace: Any


def completion_layout(msgs: Sequence[MsgPlan], host_worker: dict[str, int]
                      ) -> tuple[dict[int, tuple[int, ...]], dict[tuple[int, int], tuple[int, int]]]:
    """Who must hear of each completion, and the ring slice of every (writer, reader).

    Returns ``notify`` (message index -> reader workers other than its receiver's)
    and ``slices`` ((writer, reader) -> (offset, length)); lengths are exact.
    """
    senders_of_children: dict[int, set[int]] = {}
    for m in msgs:
        for d in m.deps:
            senders_of_children.setdefault(d, set()).add(host_worker[m.src])
    notify: dict[int, tuple[int, ...]] = {}
    counts: dict[tuple[int, int], int] = {}
    for m in msgs:
        writer = host_worker[m.dst]
        readers = tuple(sorted(senders_of_children.get(m.index, set()) - {writer}))
        if readers:
            notify[m.index] = readers
            for r in readers:
                counts[(writer, r)] = counts.get((writer, r), 0) + 1
    slices: dict[tuple[int, int], tuple[int, int]] = {}
    offset = 0
    for key in sorted(counts):
        slices[key] = (offset, counts[key])
        offset += counts[key]
    return notify, slices
