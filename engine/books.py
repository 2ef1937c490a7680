"""What every part of a worker shares: its plan and clocks, the deadline heap, and the
counters and samples it reports (engine.worker's ``results``).

Times: ``t0_ns`` is the run's start on CLOCK_MONOTONIC; ``real_s`` converts a worker
time to the real fabric's seconds after it, which is what go-back-N and congestion
control see.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

from core.frame import WIRE_FRAME_BYTES
from engine.plan import Shared, WorkerPlan
from engine.sources import Nic, SendQp
from traffic.ccload import check_read_back
from traffic.pacing import Deadlines

#: What made a row of the rate trace (its ``event`` column).
TRACE_EVENTS = ("send", "cnp", "timer", "echo")
TRACE_SEND, TRACE_CNP, TRACE_TIMER, TRACE_ECHO = range(len(TRACE_EVENTS))
_EARLY_NS = 20_000                      # the shortest turn: deadlines this close share a wake-up
# A worker's turn, in full frame times of its fastest NIC. A wake-up costs ~25 us of
# CPU on a VM, about half the engine's CPU per frame, and the slots of a worker's
# NICs rarely coincide, so a pass of the loop serves every deadline due within a
# turn of it (engine.worker's docstring, "Event loop"): a frame may be handed over
# up to a turn before its slot. Schedules stay anchored to the slots, so rates are
# exact, and frames are stamped when they really leave. A quarter frame (21 ns real
# at 400G) is far below any latency the fabric models, and long enough that one
# wake-up serves most of a ring's coincident deadlines (wake-ups and CPU per frame:
# docs/validation.md).
TURN_FRAMES = 0.25
# How close a deadline must be for the worker to sleep until it on the clock alone,
# in full frame times of its fastest NIC: frames that reach its rings meanwhile wait
# for that wake-up (at most this long, against the gate's 2 packet times of receive
# lag) instead of each waking the worker. On fattree,4 at S = 2000 two thirds of the
# compiled loop's wake-ups were one arriving frame each (docs/design.md).
BATCH_FRAMES = 0.5
NEVER_NS = 2**63 - 1                    # a NIC slot not armed, in the compiled loop's table


def take(samples: array, buf: Any, n: int) -> None:
    """Append the first ``n`` int64 of the C buffer ``buf`` to ``samples`` as bytes: a
    full latency buffer (16,384 values) cost 0.7-1.9 ms as a list of ints, time in
    which the worker read no ring."""
    samples.frombytes(memoryview(buf).cast("B")[:n * 8])


class Books:
    """A worker's shared state: ``plan``, ``shared``, clocks, ``deadlines``, counters."""

    def __init__(self, plan: WorkerPlan, shared: Shared, min_ns_per_bit: float):
        self.plan = plan
        self.shared = shared
        self.scale_ns = plan.scale.emu_ns_per_real_s
        self.t0_ns = 0
        frame_ns = 8 * WIRE_FRAME_BYTES * min_ns_per_bit
        self.turn_ns = max(_EARLY_NS, int(TURN_FRAMES * frame_ns))
        self.batch_ns = max(self.turn_ns, int(BATCH_FRAMES * frame_ns))
        self.trace_ns = int(plan.rate_trace_interval_s * self.scale_ns)  # the rate trace's period
        self.deadlines = Deadlines()
        # The NICs' pacing slots by NIC slot (wall ns, NEVER_NS: none) where the
        # compiled loop (engine.cloop) keeps them; None: in ``deadlines``.
        self.nic_due: Any = None
        self.lat = array("q")          # (index, rx_ns, one_way_ns, ce) flattened
        self.rates: list[tuple[int, int, float, float, float, int, float]] = []
        self.lags = array("q")
        self.lag_total_ns = 0
        self.rx_lags = array("q")      # (lag_ns, frames) per ring read, flattened
        # Per message started: how far behind its post time (ns; < 0: up to a turn early)
        self.start_lags = array("q")
        self.packets_sent = 0
        self.data_sent = 0
        self.ctrl_sent = 0
        self.packets_received = 0
        self.push_backs = 0
        self.unknown_frames = 0

    def real_s(self, now_ns: int) -> float:
        return (now_ns - self.t0_ns) / self.scale_ns

    def book_lags(self, lag: int, n: int, step: int) -> None:
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

    def pace_of(self, cc: Any) -> tuple[float, float | None]:
        """The rate and window ``cc`` paces with, checked: a ParameterError naming what
        a user's class got wrong, instead of a failure in the pacing arithmetic."""
        rate = cc.rate_bps
        window = cc.window_bytes
        if not 0.0 < rate < math.inf or window is not None and not 0.0 < window < math.inf:
            check_read_back(self.plan.cc.spec, cc, "during the run")  # says why
        return rate, window

    def arm_nic(self, nic: Nic, t_ns: int) -> None:
        """``nic``'s pacing slot is due at wall time ``t_ns`` (replaces the last one)."""
        if self.nic_due is None:
            self.deadlines.arm(nic, t_ns)
        else:
            self.nic_due[nic.slot] = t_ns

    def nic_armed(self, nic: Nic) -> int | None:
        """When ``nic``'s pacing slot is due (wall ns), or None."""
        if self.nic_due is None:
            return self.deadlines.armed(nic)
        t_ns = self.nic_due[nic.slot]
        return None if t_ns == NEVER_NS else t_ns

    def arm_rto(self, qp: SendQp) -> None:
        deadline = qp.gbn.deadline_s
        if deadline is not None:
            self.deadlines.arm(qp, self.t0_ns + int(deadline * self.scale_ns) + qp.nic.fwd_ns)

    def trace(self, qp: SendQp, now: int, event: int = TRACE_SEND) -> None:
        """A row of the rate trace (``trace_row``), and the next periodic one due a
        trace interval after it."""
        self.trace_row(qp, now, event)
        qp.next_trace_ns = now + self.trace_ns
        if qp.c is not None:
            qp.c.next_trace_ns = qp.next_trace_ns

    def trace_row(self, qp: SendQp, now: int, event: int = TRACE_SEND,
                  values: tuple[float, float, float] | None = None) -> None:
        """A row of the rate trace: at a QP's start, periodic while sending, and at
        each CNP, CC timer and ECN-echo ACK (``event``, an index into TRACE_EVENTS),
        with the window of a window-based algorithm (NaN without one). ``values``:
        the algorithm's ``trace()`` as it was at ``now`` (default: read it now)."""
        rate, target, alpha = qp.cc.trace() if values is None else values
        window = qp.cc.window_bytes
        self.rates.append((qp.plan.index, now - self.t0_ns, rate, target, alpha, event,
                           math.nan if window is None else float(window)))
        pace = self.shared.pace
        pace[2 * qp.plan.index] = rate
        pace[2 * qp.plan.index + 1] = -1.0 if window is None else window
