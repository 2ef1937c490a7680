"""A user-written congestion control: AIMD on the sending rate.

Run it with    emu run <experiment> --set cc=examples/cc/my_aimd.py:MyAimd
Times are real-fabric seconds, rates bit/s (see docs/congestion-control.md).
"""

import math


class MyAimd:
    """Halve the rate on congestion (at most once per ``cut_gap_s``); otherwise add
    ``step`` of the line rate for every ``step_s`` elapsed, up to the line rate."""

    window_bytes = None      # rate only: no limit on bytes in flight
    next_timer_s = math.inf  # no timer: increases are applied as ACKs arrive

    def __init__(self, line_rate_bps: float, start_s: float = 0.0,
                 step: float = 0.01, step_s: float = 10e-6, cut_gap_s: float = 50e-6):
        self.line_rate_bps = self.rate_bps = line_rate_bps  # start at line rate
        self.step_bps, self.step_s, self.cut_gap_s = step * line_rate_bps, step_s, cut_gap_s
        self.cnps_received = 0
        self.last_cut_s, self.last_step_s = -math.inf, start_s

    def on_send(self, n_bytes: int, now_s: float) -> None:
        pass

    def on_ack(self, bytes_acked: int, rtt_s: float, ecn_echo: bool, int_records: tuple,
               now_s: float) -> None:
        if ecn_echo:
            return self._cut(now_s)
        steps = math.floor((now_s - self.last_step_s) / self.step_s)
        if steps > 0:  # additive increase: one step per step_s since the last one
            self.rate_bps = min(self.line_rate_bps, self.rate_bps + steps * self.step_bps)
            self.last_step_s += steps * self.step_s

    def on_cnp(self, now_s: float) -> None:
        self.cnps_received += 1
        self._cut(now_s)

    def _cut(self, now_s: float) -> None:
        if now_s - self.last_cut_s >= self.cut_gap_s:  # multiplicative decrease
            self.rate_bps = max(self.rate_bps / 2, 1e6)
            self.last_cut_s = self.last_step_s = now_s

    def on_timer(self, now_s: float) -> None:
        pass

    def trace(self) -> tuple[float, float, float]:  # (rate, target rate, alpha)
        return self.rate_bps, self.line_rate_bps, 0.0
