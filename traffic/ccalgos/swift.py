"""Swift: window AIMD on a delay target scaled by flow and topology.

Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in
the Datacenter", SIGCOMM 2020, Algorithm 1 and section 3.5 (cwnd in packets)::

    target = base_target + hops h + flow_scaling(cwnd)
    flow_scaling(cwnd) = clamp(a / sqrt(cwnd) + b, 0, fs_range)
        a = fs_range / (1/sqrt(fs_min_cwnd) - 1/sqrt(fs_max_cwnd)),  b = -a / sqrt(fs_max_cwnd)
    on ACK of num_acked packets with delay d:
        if d < target:   cwnd += ai num_acked / cwnd     (cwnd >= 1)
                         cwnd += ai num_acked            (cwnd < 1)
        elif now - t_last_decrease >= d:                 (at most one decrease per RTT)
                         cwnd *= max(1 - beta (d - target) / d, 1 - max_mdf)
        cwnd = clamp(cwnd, min_cwnd, max_cwnd)

The delay is the ACK's RTT sample (the paper subtracts host delays it can
measure, which this engine does not separate). ``hops`` is the number of INT
records on the ACK when the fabric writes them, else the ``hops`` parameter (the
engine passes the switches on the QP's path).
``num_acked`` is ``bytes_acked / mtu_bytes`` (fractional packets).

Read back: ``window_bytes = max(cwnd, 1) mtu`` (payload bytes in flight); the rate
is the line rate while cwnd >= 1 packet and ``cwnd mtu / rtt`` below one packet
(the paper's pacing delay rtt / cwnd between packets). No timers; CNPs are
counted and ignored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.errors import ParameterError
from core.frame import MTU_PAYLOAD_BYTES
from traffic.cc import CongestionControl
from traffic.ccalgos.common import fraction, integer, nonnegative, positive

__all__ = ["Swift"]


class Swift(CongestionControl):
    """One QP's Swift sender state (see the module doc).

    Defaults, real units:

    * ``ai_packets = 1``, ``beta = 0.8``, ``max_mdf = 0.5``, ``fs_min_cwnd = 0.1``
      and ``fs_max_cwnd = 100`` packets, ``min_cwnd = 0.001`` packets: the values
      public reimplementations of the paper use for its Algorithm 1 parameters;
    * ``base_target_s = 5 us``, ``hop_scale_s = 2 us``, ``hops = 5``: chosen for this
      project's 3-tier fat tree (a 5-switch path has a 10 us base RTT, i.e. 2 us per
      switch hop), so the target is 15 us across the core, 7 us under one leaf;
    * ``fs_range_s = 10 us``: chosen here (twice the base target);
    * ``initial_cwnd_packets``: one bandwidth-delay product at ``base_rtt_s = 10 us``
      (line-rate start); ``max_cwnd_packets``: four of them.
    """

    next_timer_s = math.inf

    def __init__(self, line_rate_bps: float, start_s: float = 0.0, *,
                 mtu_bytes: int = MTU_PAYLOAD_BYTES, base_rtt_s: float = 10e-6,
                 base_target_s: float = 5e-6, hop_scale_s: float = 2e-6, hops: int = 5,
                 fs_range_s: float = 10e-6, fs_min_cwnd: float = 0.1, fs_max_cwnd: float = 100.0,
                 ai_packets: float = 1.0, beta: float = 0.8, max_mdf: float = 0.5,
                 min_cwnd: float = 0.001, max_cwnd_packets: float | None = None,
                 initial_cwnd_packets: float | None = None):
        self.line_rate_bps = positive("line_rate_bps", line_rate_bps)
        self.mtu_bytes = positive("mtu_bytes", mtu_bytes)
        self.base_rtt_s = positive("base_rtt_s", base_rtt_s)
        self.base_target_s = positive("base_target_s", base_target_s)
        self.hop_scale_s = nonnegative("hop_scale_s", hop_scale_s)
        self.hops = integer("hops", hops, 0)
        self.fs_range_s = positive("fs_range_s", fs_range_s)
        self.fs_min_cwnd = positive("fs_min_cwnd", fs_min_cwnd)
        self.fs_max_cwnd = positive("fs_max_cwnd", fs_max_cwnd)
        if self.fs_max_cwnd <= self.fs_min_cwnd:
            raise ParameterError("fs_max_cwnd", fs_max_cwnd,
                                 f"must be > fs_min_cwnd ({fs_min_cwnd!r})")
        self.ai_packets = positive("ai_packets", ai_packets)
        self.beta = fraction("beta", beta)
        self.max_mdf = fraction("max_mdf", max_mdf)
        self.min_cwnd = positive("min_cwnd", min_cwnd)
        bdp = self.line_rate_bps * self.base_rtt_s / 8 / self.mtu_bytes
        self.max_cwnd = positive("max_cwnd_packets",
                                 4 * bdp if max_cwnd_packets is None else max_cwnd_packets)
        if self.max_cwnd < self.min_cwnd:
            raise ParameterError("max_cwnd_packets", max_cwnd_packets,
                                 f"must be >= min_cwnd ({min_cwnd!r})")
        self.cwnd = min(self.max_cwnd, max(self.min_cwnd, positive(
            "initial_cwnd_packets", bdp if initial_cwnd_packets is None else initial_cwnd_packets)))
        self.fs_a = self.fs_range_s / (1 / math.sqrt(self.fs_min_cwnd)
                                       - 1 / math.sqrt(self.fs_max_cwnd))
        self.fs_b = -self.fs_a / math.sqrt(self.fs_max_cwnd)
        self.t_last_decrease_s = -math.inf
        self.delay_s = self.base_rtt_s
        self.target_delay_s = self.target_for(self.cwnd, self.hops)
        self.cnps_received = 0

    def target_for(self, cwnd: float, hops: int) -> float:
        """The delay target (s) for a window of ``cwnd`` packets over ``hops`` switches."""
        fs = min(max(self.fs_a / math.sqrt(cwnd) + self.fs_b, 0.0), self.fs_range_s)
        return self.base_target_s + hops * self.hop_scale_s + fs

    @property
    def rate_bps(self) -> float:
        if self.cwnd >= 1:
            return self.line_rate_bps
        return min(self.line_rate_bps, self.cwnd * self.mtu_bytes * 8 / self.delay_s)

    @property
    def window_bytes(self) -> float:
        return max(self.cwnd, 1.0) * self.mtu_bytes

    def on_ack(self, bytes_acked: int, rtt_s: float, ecn_echo: bool,
               int_records: Sequence[object], now_s: float) -> None:
        if not 0.0 < rtt_s < math.inf:
            return
        self.delay_s = delay = rtt_s
        cwnd = self.cwnd
        target = self.target_for(cwnd, len(int_records) if int_records else self.hops)
        self.target_delay_s = target
        if delay < target:
            acked = bytes_acked / self.mtu_bytes
            cwnd += self.ai_packets * acked / cwnd if cwnd >= 1 else self.ai_packets * acked
        elif now_s - self.t_last_decrease_s >= delay:
            cwnd *= max(1 - self.beta * (delay - target) / delay, 1 - self.max_mdf)
            self.t_last_decrease_s = now_s
        self.cwnd = min(self.max_cwnd, max(self.min_cwnd, cwnd))

    def on_cnp(self, now_s: float) -> None:
        self.cnps_received += 1

    def trace(self) -> tuple[float, float, float]:
        """(sending rate, window over the target delay, delay / target), rates capped."""
        w_bits = self.cwnd * self.mtu_bytes * 8
        rate = min(self.rate_bps, w_bits / self.delay_s)
        return (rate, min(self.line_rate_bps, w_bits / self.target_delay_s),
                self.delay_s / self.target_delay_s)
