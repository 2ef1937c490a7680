"""Lab 1: DCTCP on RoCE, the reference solution.

Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010:

    per window of data:   alpha <- (1 - g) alpha + g F     F = marked / acked bytes
    on a marked ACK:      W <- W (1 - alpha / 2)           at most once per round trip
    per unmarked ACK:     W <- W + MTU * acked / W          one MTU per window of data

Times are real-fabric seconds, sizes bytes (docs/congestion-control.md).
"""

from __future__ import annotations

from traffic.cc import CongestionControl


class LabDctcp(CongestionControl):
    def __init__(self, line_rate_bps: float, start_s: float = 0.0, *, g: float = 1 / 16,
                 mtu_bytes: int = 4096, base_rtt_s: float = 10e-6):
        self.rate_bps = line_rate_bps      # DCTCP limits the window, not the rate
        self.base_rtt_s = base_rtt_s
        self.g = g
        self.mtu_bytes = mtu_bytes
        self.alpha = 1.0                   # the first marks halve the window
        self.window_bytes = max(mtu_bytes, line_rate_bps * base_rtt_s / 8)   # one BDP
        self.min_window_bytes = mtu_bytes
        self.last_rtt_s = base_rtt_s
        # The observation window: bytes acknowledged and marked since it started.
        self.window_start_s = start_s
        self.acked_bytes = 0.0
        self.marked_bytes = 0.0
        # When the last cut happened, until an ACK covers a frame sent after it.
        self.cut_at_s: float | None = None

    def on_ack(self, bytes_acked, rtt_s, ecn_echo, int_records, now_s):
        sent_s = now_s - rtt_s             # when the newest acknowledged frame left
        self.last_rtt_s = rtt_s
        self.acked_bytes += bytes_acked
        if self.cut_at_s is not None and sent_s >= self.cut_at_s:
            self.cut_at_s = None           # this ACK covers data sent after the cut
        if ecn_echo:
            self.marked_bytes += bytes_acked
            if self.cut_at_s is None:
                self.window_bytes = max(self.min_window_bytes,
                                        self.window_bytes * (1 - self.alpha / 2))
                self.cut_at_s = now_s
        elif self.cut_at_s is None:
            self.window_bytes += self.mtu_bytes * bytes_acked / self.window_bytes
        if sent_s >= self.window_start_s:  # a window of data has been acknowledged
            fraction = self.marked_bytes / self.acked_bytes if self.acked_bytes else 0.0
            self.alpha = (1 - self.g) * self.alpha + self.g * min(1.0, fraction)
            self.window_start_s = now_s
            self.acked_bytes = self.marked_bytes = 0.0

    def trace(self):
        """(sending rate, window / base RTT, alpha): the grader reads alpha here."""
        return (min(self.rate_bps, self.window_bytes * 8 / self.last_rtt_s),
                min(self.rate_bps, self.window_bytes * 8 / self.base_rtt_s), self.alpha)
