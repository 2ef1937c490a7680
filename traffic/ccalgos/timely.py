"""TIMELY: rate control from the RTT gradient.

Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter",
SIGCOMM 2015, Algorithm 1, run once per completion event (each ACK here)::

    new_rtt_diff <- rtt - prev_rtt;  prev_rtt <- rtt
    rtt_diff     <- (1 - alpha) rtt_diff + alpha new_rtt_diff        (EWMA)
    gradient     <- rtt_diff / min_rtt                                (normalised)
    if rtt < T_low:        rate <- rate + delta
    elif rtt > T_high:     rate <- rate (1 - beta (1 - T_high / rtt))
    elif gradient <= 0:    rate <- rate + N delta     N = hai_factor after hai_threshold
                                                      consecutive gradient <= 0 events, else 1
    else:                  rate <- rate (1 - beta gradient)

The consecutive-event count follows the gradient of every event (the T_low and
T_high branches included) and resets on a positive gradient. The first sample
has no predecessor: its difference is 0. ``min_rtt`` is the smallest RTT seen
unless ``min_rtt_s`` fixes it. The rate is clamped to [min_rate, line rate].

Rate only, no window, no timers; CNPs are counted and ignored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.errors import ParameterError
from traffic.cc import CongestionControl
from traffic.ccalgos.common import fraction, integer, nonnegative, positive

__all__ = ["Timely"]


class Timely(CongestionControl):
    """One QP's TIMELY sender state (see the module doc).

    Defaults, real units:

    * ``t_low_s = 50 us``, ``t_high_s = 500 us``, ``beta = 0.8``: the HPCC ns-3
      simulator's TIMELY defaults, taken from the paper's evaluation settings;
    * HAI after ``hai_threshold = 5`` events with ``hai_factor`` N = 5: Algorithm 1;
    * ``additive_step_bps``: the paper's 10 Mb/s for a 10 Gb/s NIC, scaled with the
      line rate (line / 1000, so 400 Mb/s at 400G) to keep the same number of
      steps from zero to line rate;
    * ``ewma_alpha = 0.875``: the HPCC ns-3 simulator's default (the authors'
      published code snippet recommends 0.02 for noisier per-packet samples);
    * ``min_rate_bps``: line / 1000 (400 Mb/s at 400G), the HPCC ns-3 simulator's
      100 Mb/s floor at 100G (the paper leaves it open); lower floors make the
      recovery after an incast very slow, one additive step per completion;
    * ``initial_rate_bps``: line rate.
    """

    window_bytes = None
    next_timer_s = math.inf

    def __init__(self, line_rate_bps: float, start_s: float = 0.0, *,
                 ewma_alpha: float = 0.875, beta: float = 0.8,
                 t_low_s: float = 50e-6, t_high_s: float = 500e-6,
                 additive_step_bps: float | None = None, hai_threshold: int = 5,
                 hai_factor: int = 5, min_rtt_s: float | None = None,
                 min_rate_bps: float | None = None, initial_rate_bps: float | None = None):
        self.line_rate_bps = positive("line_rate_bps", line_rate_bps)
        line = self.line_rate_bps
        self.ewma_alpha = fraction("ewma_alpha", ewma_alpha)
        self.beta = fraction("beta", beta)
        self.t_low_s = nonnegative("t_low_s", t_low_s)
        self.t_high_s = positive("t_high_s", t_high_s)
        if self.t_high_s < self.t_low_s:
            raise ParameterError("t_high_s", t_high_s, f"must be >= t_low_s ({t_low_s!r})")
        self.additive_step_bps = positive(
            "additive_step_bps", line / 1000 if additive_step_bps is None else additive_step_bps)
        self.hai_threshold = integer("hai_threshold", hai_threshold, 1)
        self.hai_factor = integer("hai_factor", hai_factor, 1)
        self.fixed_min_rtt = min_rtt_s is not None
        self.min_rtt_s = positive("min_rtt_s", min_rtt_s) if min_rtt_s is not None else math.inf
        self.min_rate_bps = positive("min_rate_bps",
                                     line / 1000 if min_rate_bps is None else min_rate_bps)
        self.rate = min(line, positive(
            "initial_rate_bps", line if initial_rate_bps is None else initial_rate_bps))
        if self.min_rate_bps > line:
            raise ParameterError("min_rate_bps", min_rate_bps, f"must be <= line rate ({line!r})")
        self.prev_rtt_s: float | None = None
        self.rtt_diff_s = 0.0
        self.gradient = 0.0
        self.negative_gradients = 0
        self.cnps_received = 0

    @property
    def rate_bps(self) -> float:
        return self.rate

    def on_ack(self, bytes_acked: int, rtt_s: float, ecn_echo: bool,
               int_records: Sequence[object], now_s: float) -> None:
        if not 0.0 < rtt_s < math.inf:
            return
        if not self.fixed_min_rtt and rtt_s < self.min_rtt_s:
            self.min_rtt_s = rtt_s
        prev = rtt_s if self.prev_rtt_s is None else self.prev_rtt_s
        self.prev_rtt_s = rtt_s
        a = self.ewma_alpha
        self.rtt_diff_s = (1 - a) * self.rtt_diff_s + a * (rtt_s - prev)
        self.gradient = self.rtt_diff_s / self.min_rtt_s
        self.negative_gradients = self.negative_gradients + 1 if self.gradient <= 0 else 0
        rate = self.rate
        if rtt_s < self.t_low_s:
            rate += self.additive_step_bps
        elif rtt_s > self.t_high_s:
            rate *= 1 - self.beta * (1 - self.t_high_s / rtt_s)
        elif self.gradient <= 0:
            n = self.hai_factor if self.negative_gradients >= self.hai_threshold else 1
            rate += n * self.additive_step_bps
        else:
            rate *= 1 - self.beta * self.gradient
        self.rate = min(self.line_rate_bps, max(self.min_rate_bps, rate))

    def on_cnp(self, now_s: float) -> None:
        self.cnps_received += 1

    def trace(self) -> tuple[float, float, float]:
        """(rate, rate, normalised RTT gradient): TIMELY has no separate target."""
        return self.rate, self.rate, self.gradient
