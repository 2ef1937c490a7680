"""DCTCP-style window control from the fraction of ECN-marked data.

Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010, section 3.1::

    per window of data:   alpha <- (1 - g) alpha + g F      F = marked / acked bytes
    on marked feedback:   W <- W (1 - alpha / 2)            at most once per round trip
    per unmarked ACK:     W <- W + MTU * acked / W           TCP's additive increase

A window of data ends at the first ACK whose newest frame was sent after the
window began (TCP's "snd_una passed the snd_nxt of the window start"; see
``common.sent_after``). The cut uses the alpha of the moment the first mark
arrives; alpha itself is updated when the window ends. After a cut no mark cuts
again, and the window does not grow, until an ACK covers a frame sent after the
cut (TCP's congestion window reduced state, which ends when snd_una passes the
snd_nxt of the cut): the marks of frames already in flight at the cut tell of the
congestion it answered. The increase is TCP's congestion avoidance, one MTU per
window of data spread over its ACKs, so that it does not depend on how the
receiver coalesces ACKs: adding an MTU at each window's end grew the window once
per round trip plus the wait for the next ACK, half as fast with an ACK per 16
frames, which doubled the queue's oscillation period (``emu run cc``).

Congestion feedback for RoCE comes either as ``ecn_echo`` on ACKs (all
``bytes_acked`` of that ACK count as marked; exact when the receiver ACKs at
every change of the CE state, as the engine's does for this algorithm) or as
CNPs: each CNP counts as ``mtu_bytes`` of marked data, exact when the receiver
sends one CNP per CE-marked frame (CNP interval 0) and an under-estimate of F
otherwise. ``feedback`` chooses one ("ecn_echo", the default, or "cnp"); the
other is ignored (CNPs are still counted), so that a fabric that delivers both
does not count a mark twice. F is capped at 1.

Window only: the rate stays at line rate and ``window_bytes`` (payload bytes in
flight, the unit of ``bytes_acked``) limits the sender. No timers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.errors import ParameterError
from core.frame import MTU_PAYLOAD_BYTES
from traffic.cc import CongestionControl
from traffic.ccalgos.common import fraction, positive, sent_after

__all__ = ["Dctcp"]


class Dctcp(CongestionControl):
    """One QP's DCTCP sender state (see the module doc).

    Defaults, real units:

    * ``g = 1/16``: the paper's recommended estimation gain (section 3.4);
    * ``alpha_initial = 1``: Linux's ``dctcp_alpha_on_init`` default (the paper
      leaves it open), so the first marks halve the window;
    * ``mtu_bytes = 4096``: the engine's default payload per frame (additive step);
    * ``base_rtt_s = 10 us``: the round trip of this project's 3-tier fat tree
      (2 x 0.5 us host links + 4 x 1 us fabric links each way); the engine should
      pass the topology's value. It sizes the initial window only;
    * ``initial_window_bytes``: one bandwidth-delay product (line rate x base RTT),
      RDMA-style line-rate start instead of TCP slow start;
    * ``min_window_bytes = mtu_bytes``;
    * ``feedback = "ecn_echo"``: marks from the ACKs' ECN echo (DCTCP's own signal);
      "cnp" takes them from CNPs instead.
    """

    FEEDBACK = ("ecn_echo", "cnp")

    window_bytes: float
    next_timer_s = math.inf
    #: The DCTCP paper's analysis of the queue's sawtooth at a step threshold K.
    oscillation_model = "model.dctcp_oscillation.dctcp_oscillation"

    def __init__(self, line_rate_bps: float, start_s: float = 0.0, *,
                 g: float = 1 / 16, alpha_initial: float = 1.0, mtu_bytes: int = MTU_PAYLOAD_BYTES,
                 base_rtt_s: float = 10e-6, initial_window_bytes: float | None = None,
                 min_window_bytes: float | None = None, feedback: str = "ecn_echo"):
        if feedback not in self.FEEDBACK:
            raise ParameterError("feedback", feedback, f"expected one of {self.FEEDBACK}")
        self.from_cnps = feedback == "cnp"
        self.line_rate_bps = positive("line_rate_bps", line_rate_bps)
        self.g = fraction("g", g)
        self.alpha = fraction("alpha_initial", alpha_initial, closed_low=True)
        self.mtu_bytes = positive("mtu_bytes", mtu_bytes)
        self.base_rtt_s = positive("base_rtt_s", base_rtt_s)
        bdp_bytes = self.line_rate_bps * self.base_rtt_s / 8
        self.min_window_bytes = positive(
            "min_window_bytes", self.mtu_bytes if min_window_bytes is None else min_window_bytes)
        self.window_bytes = max(self.min_window_bytes, positive(
            "initial_window_bytes", bdp_bytes if initial_window_bytes is None
            else initial_window_bytes))
        self.cnps_received = 0
        self.last_rtt_s = self.base_rtt_s
        self._window_start_s = float(start_s)
        self._acked_bytes = 0.0
        self._marked_bytes = 0.0
        self._cut_at_s: float | None = None   # the last cut, until an ACK passes it

    @property
    def rate_bps(self) -> float:
        return self.line_rate_bps

    def _marked(self, n_bytes: float, now_s: float) -> None:
        self._marked_bytes += n_bytes
        if self._cut_at_s is None:
            self._cut_at_s = now_s
            self.window_bytes = max(self.min_window_bytes, self.window_bytes * (1 - self.alpha / 2))

    def on_ack(self, bytes_acked: int, rtt_s: float, ecn_echo: bool,
               int_records: Sequence[object], now_s: float) -> None:
        self._acked_bytes += bytes_acked
        if self._cut_at_s is not None and sent_after(self._cut_at_s, rtt_s, now_s):
            self._cut_at_s = None
        if ecn_echo and not self.from_cnps:
            self._marked(bytes_acked, now_s)
        elif self._cut_at_s is None:
            self.window_bytes += self.mtu_bytes * bytes_acked / self.window_bytes
        if rtt_s > 0:
            self.last_rtt_s = rtt_s
        if not sent_after(self._window_start_s, rtt_s, now_s):
            return
        acked = self._acked_bytes
        f = min(1.0, self._marked_bytes / acked) if acked > 0 else 0.0
        self.alpha = (1 - self.g) * self.alpha + self.g * f
        self._window_start_s = now_s
        self._acked_bytes = 0.0
        self._marked_bytes = 0.0

    def on_cnp(self, now_s: float) -> None:
        self.cnps_received += 1
        if self.from_cnps:
            self._marked(self.mtu_bytes, now_s)

    def trace(self) -> tuple[float, float, float]:
        """(window / last RTT, window / base RTT, alpha), rates capped at line rate."""
        w_bits = self.window_bytes * 8
        return (min(self.line_rate_bps, w_bits / self.last_rtt_s),
                min(self.line_rate_bps, w_bits / self.base_rtt_s), self.alpha)
